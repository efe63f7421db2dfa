"""Fixtures of the operator's command's tests.

The server and a schema per test come from the repository's root conftest
(``postgres_dsn``, ``postgres_schema``), as does ``unavailable``.
"""

from collections.abc import Callable
from pathlib import Path

import pytest

from psych_runtime.memory.admin import store_schemes


@pytest.fixture
def require_schemes(unavailable: Callable[[str], None]) -> Callable[..., None]:
    """Check that installed backends register each scheme; `unavailable` otherwise."""

    def require(*schemes: str) -> None:
        missing = [scheme for scheme in schemes if scheme not in store_schemes()]
        if missing:
            unavailable(
                f"no installed backend registers {', '.join(map(repr, missing))} in the "
                "entry-point group psych_runtime.memory.stores: its adapter's registration "
                "is missing"
            )

    return require


LEDGER_KEY_TEXT = "a ledger key of at least 32 bytes, for the tests"
"""The ledger key the ledger commands' tests give through ``PSYCH_MEMORY_LEDGER_KEY``."""


@pytest.fixture
def ledger_folder(
    require_schemes: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A fresh working folder for the ledger commands: SQLite there, the key set, no ledger named.

    Returns the folder, which is also the working directory, so that
    relative ``sqlite:///`` URLs land in it.
    """
    require_schemes("sqlite")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PSYCH_MEMORY_LEDGER_KEY", LEDGER_KEY_TEXT)
    monkeypatch.delenv("PSYCH_MEMORY_LEDGER", raising=False)
    return tmp_path
