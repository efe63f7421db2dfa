"""The fixtures every check runs under: both event loops, and a fresh per-check state."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Final, cast

import pytest

from ._harness import Harness

__all__ = ["KIT_FIXTURES", "KitFixtures"]

KIT_FIXTURES: Final = ("anyio_backend", "_conformance_setup")
"""The fixtures the guard protects like the checks: replacing one weakens every check."""


class KitFixtures(Harness):
    """The kit's own fixtures, inherited by `MemoryStoreContract`.

    They are part of the kit, not hooks for the author: a narrower
    ``anyio_backend`` would silently drop one event loop, and without
    ``_conformance_setup`` no check would know its directory or its expected
    failure.
    """

    expected_failures: ClassVar[Mapping[str, str]]
    tmp_path: Path
    _paths_handed_out: int

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        """Run every check on asyncio and on trio, both listed explicitly."""
        return cast("str", request.param)

    @pytest.fixture(autouse=True)
    def _conformance_setup(
        self, request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
    ) -> None:
        self._prepare(tmp_path, anyio_backend)
        check_name = request.function.__name__
        # "test_x[trio]" marks the check on one event loop, "test_x" on both.
        reason = self.expected_failures.get(f"{check_name}[{anyio_backend}]")
        if reason is None:
            reason = self.expected_failures.get(check_name)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    def _prepare(self, tmp_path: Path, anyio_backend: str) -> None:
        """Set the state one check starts from: its directory, its loop, no path handed out."""
        self.tmp_path = tmp_path
        self._anyio_backend_name = anyio_backend
        self._paths_handed_out = 0
