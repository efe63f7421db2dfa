"""Beside the runtime 0.1's own ``psych_runtime/tools/builtins.py``, the import fails clearly.

The real combination (the released runtime and this wheel in one virtual
environment) is tested in tests-integration/runtime01; these tests pin the
detection and the message, and the refusal on import in a layout of the same
shape: a module ``psych_runtime/tools/builtins.py`` in another folder of
the namespace.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psych_runtime.tools
from psych_runtime.tools.builtins import _beside


def _runtime_module(folder: Path) -> Path:
    tools = folder / "psych_runtime" / "tools"
    tools.mkdir(parents=True)
    module = tools / "builtins.py"
    module.write_text("ASK_QUESTION = 'ask_question'\n", "utf-8")
    return module


def test_this_layout_hides_no_module() -> None:
    assert _beside.hidden_runtime_module(psych_runtime.tools.__path__) is None


def test_a_builtins_module_in_any_folder_of_the_namespace_is_found(tmp_path: Path) -> None:
    module = _runtime_module(tmp_path / "site")
    empty = tmp_path / "empty"
    empty.mkdir()

    assert _beside.hidden_runtime_module([str(empty), str(module.parent)]) == module


def test_a_package_named_builtins_is_not_the_runtime_module(tmp_path: Path) -> None:
    (tmp_path / "builtins.py").mkdir()
    (tmp_path / "builtins").mkdir()

    assert _beside.hidden_runtime_module([str(tmp_path)]) is None


def test_the_message_names_both_distributions_and_the_way_out(tmp_path: Path) -> None:
    module = _runtime_module(tmp_path)

    message = _beside.refusal_beside(module)

    # psych-runtime is not installed here, so no version is named.
    assert message.startswith(
        "psych-runtime-tools cannot be used beside psych-runtime: that distribution ships "
        "its own module psych_runtime.tools.builtins (builtins.py in "
    )
    assert "`pip uninstall psych-runtime-tools psych-runtime-tools-mcp`" in message
    assert "Coming from psych-runtime 0.1" in message


def test_importing_this_package_beside_such_a_module_raises_the_message(tmp_path: Path) -> None:
    _runtime_module(tmp_path)
    # Appended, so that this package comes first in the namespace and hides
    # the module, as it does in one folder of site-packages.
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.append({str(tmp_path)!r})
        try:
            import psych_runtime.tools.builtins
        except ImportError as error:
            print(error.name)
            print(error)
        """
    )

    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    name, message = result.stdout.splitlines()
    assert name == "psych_runtime.tools.builtins"
    assert message == _beside.refusal_beside(tmp_path / "psych_runtime" / "tools" / "builtins.py")
