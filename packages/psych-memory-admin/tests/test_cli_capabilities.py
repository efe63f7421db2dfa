"""psych-memory against stores that lack a capability, or fail: refused or unavailable.

The stores come from small backends installed as distributions of their own
(a module and its ``.dist-info`` in a folder on ``sys.path``), exactly as a
third party's backend would be seen.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from psych_runtime.memory.admin import ExitCode, main

# Stores on the four methods alone, as a third party might write them.
BACKEND = """
from contextlib import asynccontextmanager
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryStore, StoreUnavailableError

class FourMethods(MemoryStore):
    def __init__(self):
        self._inner = InProcessMemory()
    async def remember(self, scope, end_user_id, content):
        return await self._inner.remember(scope, end_user_id, content)
    async def forget(self, scope, end_user_id, memory_id):
        return await self._inner.forget(scope, end_user_id, memory_id)
    async def recall(self, scope, end_user_id, *, limit=None):
        return await self._inner.recall(scope, end_user_id, limit=limit)
    async def erase(self, scope, end_user_id):
        return await self._inner.erase(scope, end_user_id)

class Down(FourMethods):
    async def recall(self, scope, end_user_id, *, limit=None):
        raise StoreUnavailableError("recall", "the server went away", may_have_taken_effect=False)

@asynccontextmanager
async def four_methods(url):
    yield FourMethods()

@asynccontextmanager
async def down(url):
    yield Down()
"""


@pytest.fixture
def schemes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Install the schemes ``fourmethods:`` and ``down:``."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    name = f"backend_{uuid.uuid4().hex}"
    (folder / f"{name}.py").write_text(BACKEND, "utf-8")
    info = folder / "cli_test_backends-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: cli-test-backends\nVersion: 1.0\n", "utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[psych_runtime.memory.stores]\nfourmethods = {name}:four_methods\ndown = {name}:down\n",
        "utf-8",
    )
    yield
    sys.modules.pop(name, None)


@pytest.mark.usefixtures("schemes")
@pytest.mark.parametrize(
    ("argv", "argument", "rule"),
    [
        (["users", "fourmethods:", "--tenant", "acme"], "URL", "this store cannot list its users"),
        (["count", "fourmethods:"], "URL", "this store cannot list its users"),
        (["migrate", "fourmethods:", "memory:"], "FROM_URL", "this store cannot list its users"),
        (
            ["migrate", "memory:", "fourmethods:"],
            "TO_URL",
            "this store cannot restore facts as they were",
        ),
    ],
)
def test_a_store_without_the_capability_is_refused(
    argv: list[str], argument: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.REFUSED
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"psych-memory: error: {argument}: {rule}")
    assert captured.err.count("\n") == 1


@pytest.mark.usefixtures("schemes")
def test_counting_one_end_user_needs_only_the_four_methods(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["count", "fourmethods:", "--tenant", "acme", "--user", "u1"]) == 0
    assert capsys.readouterr().out == "0\n"


@pytest.mark.usefixtures("schemes")
def test_a_failing_store_is_unavailable_and_says_whether_anything_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["erase", "down:", "--tenant", "acme", "--user", "u1", "--yes"]
    assert main(argv) == ExitCode.UNAVAILABLE
    assert capsys.readouterr().err == (
        "psych-memory: error: URL: recall failed: the server went away; it changed nothing\n"
    )
