"""Fixtures of the operator's command's tests.

The server and a schema per test come from the repository's root conftest
(``postgres_dsn``, ``postgres_schema``), as does ``unavailable``.
"""

from collections.abc import Callable

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
