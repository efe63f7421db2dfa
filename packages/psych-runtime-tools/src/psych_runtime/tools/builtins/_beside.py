"""The one combination that cannot work: this package beside the runtime 0.1's module.

The released runtime, ``psych-runtime`` 0.1.x, ships a module
``psych_runtime/tools/builtins.py`` holding all of its built-in tools
(``ask_question``, ``update_tasks``, ``show_component`` ...). This package has
the same import path, and Python imports a package before a module of the same
name in the same folder: installed together, the runtime's module is hidden,
the runtime's own ``import psych_runtime`` fails, and so does every
``psych_runtime`` import with it. pip cannot refuse the combination, since the
two wheels share no file, so the refusal is made here, on the first import,
in one message that names both distributions and the way out.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["hidden_runtime_module", "refusal_beside"]

RUNTIME_DISTRIBUTION: Final = "psych-runtime"
THIS_DISTRIBUTION: Final = "psych-runtime-tools"


def hidden_runtime_module(folders: Iterable[str]) -> Path | None:
    """Return the runtime's ``builtins.py`` in one of ``folders``, if there is one.

    Args:
        folders: The folders of ``psych_runtime.tools`` (its ``__path__``).
    """
    for folder in folders:
        module = Path(folder, "builtins.py")
        if module.is_file():
            return module
    return None


def refusal_beside(module: Path) -> str:
    """Return the message that refuses this package beside ``module``."""
    try:
        runtime = f"{RUNTIME_DISTRIBUTION} {importlib.metadata.version(RUNTIME_DISTRIBUTION)}"
    except importlib.metadata.PackageNotFoundError:
        runtime = RUNTIME_DISTRIBUTION
    return (
        f"{THIS_DISTRIBUTION} cannot be used beside {runtime}: that distribution ships its own "
        f"module psych_runtime.tools.builtins ({module.name} in {module.parent}), with "
        f"the runtime's built-in tools, and this package of the same name hides it, "
        f"so no psych_runtime import can work. Uninstall ours: "
        f"`pip uninstall {THIS_DISTRIBUTION} psych-runtime-tools-mcp` (the MCP server needs it). "
        f"The memory adapters (psych-memory-sqlite, psych-memory-postgres, "
        f"psych-memory-inproc) work beside {RUNTIME_DISTRIBUTION} 0.1 as its memory=, and its own "
        f"remember and forget tools use them; see 'Coming from psych-runtime 0.1' in "
        f"the docs."
    )


# On the first import, before anything else of this package: the runtime's
# own import of its module arrives here, and this message is what it reports.
_HIDDEN_RUNTIME_MODULE: Final = hidden_runtime_module(
    importlib.import_module("psych_runtime.tools").__path__
)
if _HIDDEN_RUNTIME_MODULE is not None:
    raise ImportError(refusal_beside(_HIDDEN_RUNTIME_MODULE), name="psych_runtime.tools.builtins")
