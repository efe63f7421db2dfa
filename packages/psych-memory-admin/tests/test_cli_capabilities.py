"""psych-memory against stores that lack a capability, or fail: refused or unavailable.

The stores come from small backends installed as distributions of their own
(a module and its ``.dist-info`` in a folder on ``sys.path``), exactly as a
third party's backend would be seen.
"""

from __future__ import annotations

import json
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

class ListsAndRestores(FourMethods):
    # Lists and restores, but cannot count: the command reads every key.
    async def tenants(self):
        return await self._inner.tenants()
    async def end_users(self, scope):
        return await self._inner.end_users(scope)
    async def restore(self, memory):
        return await self._inner.restore(memory)
    async def restore_many(self, memories):
        return await self._inner.restore_many(memories)

class Lossy(ListsAndRestores):
    # Counts, but its restore_many drops the last fact of every batch, silently.
    async def fact_counts(self, scope):
        return await self._inner.fact_counts(scope)
    async def restore_many(self, memories):
        memories = list(memories)
        return await self._inner.restore_many(memories[:-1])

class Counting(ListsAndRestores):
    async def fact_counts(self, scope):
        return await self._inner.fact_counts(scope)

class ErasedWhileCopied(ListsAndRestores):
    # An agent erases u0 here just after the migration read it: its second
    # read (the first is the import that seeds it).
    reads = 0
    async def recall(self, scope, end_user_id, *, limit=None):
        facts = await self._inner.recall(scope, end_user_id, limit=limit)
        if end_user_id == "u0":
            self.reads += 1
            if self.reads == 2:
                await self.changed(scope, end_user_id)
        return facts
    async def changed(self, scope, end_user_id):
        await self._inner.erase(scope, end_user_id)

class CountingErasedWhileCopied(ErasedWhileCopied, Counting):
    pass

class GrowsWhileCopied(CountingErasedWhileCopied):
    # An agent remembers one more fact for u0 instead.
    async def changed(self, scope, end_user_id):
        await self._inner.remember(scope, end_user_id, "a fact that came later")

# One store per URL for the whole test, so that commands share it.
STORES = {}

def shared(kind):
    @asynccontextmanager
    async def opened(url):
        yield STORES.setdefault(url, kind())
    return opened

lists_and_restores = shared(ListsAndRestores)
lossy = shared(Lossy)
counting = shared(Counting)
erasing = shared(ErasedWhileCopied)
counting_erasing = shared(CountingErasedWhileCopied)
growing = shared(GrowsWhileCopied)

@asynccontextmanager
async def four_methods(url):
    yield FourMethods()

@asynccontextmanager
async def down(url):
    yield Down()
"""


@pytest.fixture
def schemes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Install the schemes of the backends above, one per class."""
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
        "[psych_runtime.memory.stores]\n"
        f"fourmethods = {name}:four_methods\ndown = {name}:down\n"
        f"nocount = {name}:lists_and_restores\nlossy = {name}:lossy\n"
        f"counting = {name}:counting\nerasing = {name}:erasing\n"
        f"countingerasing = {name}:counting_erasing\ngrowing = {name}:growing\n",
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


WRITTEN_MEANWHILE = (
    "psych-memory: error: TO_URL: after copying, 1 end user(s) hold other facts than in "
    "FROM_URL (was either store written to meanwhile?); run migrate again to finish\n"
)
"""What migrate says when the stores differ at the end."""


def _seeded(url: str, tmp_path: Path, end_users: int, capsys: pytest.CaptureFixture[str]) -> None:
    # Exports written by hand and imported: the test's stores have no file.
    # What the imports print is dropped.
    for n in range(end_users):
        document = {
            "format": "psych-memory-export",
            "version": 1,
            "tenant": "acme",
            "end_user_id": f"u{n}",
            "exported_at": "2026-02-01T00:00:00Z",
            "facts": [
                {
                    "id": f"fact-{n}-{i}",
                    "content": f"fact {i} of u{n}",
                    "created_at": f"2026-01-0{1 + i}T00:00:00Z",
                }
                for i in range(3)
            ],
        }
        path = tmp_path / f"u{n}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        assert main(["import", url, str(path)]) == ExitCode.DONE
    capsys.readouterr()


@pytest.mark.usefixtures("schemes")
def test_stores_that_cannot_count_are_read_key_by_key_and_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seeded("nocount:source", tmp_path, 3, capsys)
    assert main(["migrate", "nocount:source", "nocount:destination", "--jobs", "2"]) == 0
    assert capsys.readouterr().out == (
        "copied 9 fact(s); 9 fact(s) of 3 end user(s) are now in both stores, counts checked\n"
    )
    assert main(["migrate", "nocount:source", "nocount:destination"]) == 0
    assert capsys.readouterr().out.startswith("copied nothing: the destination already held all 9")
    assert main(["count", "nocount:destination"]) == 0
    assert main(["count", "nocount:destination", "--tenant", "acme"]) == 0
    assert capsys.readouterr().out == "9\n9\n"


@pytest.mark.usefixtures("schemes")
@pytest.mark.parametrize("source", ["nocount:source", "lossy:source"])
def test_a_destination_that_lost_facts_while_copying_is_refused_at_the_count(
    source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The source counts or not; the destination counts, and is short by one
    # fact after the copy.
    _seeded(source, tmp_path, 2, capsys)
    assert main(["migrate", source, "lossy:destination", "--jobs", "1"]) == ExitCode.REFUSED
    assert capsys.readouterr().err == WRITTEN_MEANWHILE


@pytest.mark.usefixtures("schemes")
@pytest.mark.parametrize("source", ["erasing:source", "countingerasing:source"])
@pytest.mark.parametrize("destination", ["nocount:destination", "counting:destination"])
def test_an_end_user_erased_in_the_source_while_copied_is_erased_in_the_destination(
    source: str, destination: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seeded(source, tmp_path, 2, capsys)
    assert main(["migrate", source, destination, "--jobs", "1"]) == ExitCode.DONE
    assert capsys.readouterr().out == (
        "copied 6 fact(s); 3 fact(s) of 1 end user(s) are now in both stores, counts checked\n"
        "erased 1 end user(s) in TO_URL too: FROM_URL erased them while they were being copied\n"
    )
    assert main(["users", destination, "--tenant", "acme"]) == ExitCode.DONE
    assert main(["count", destination]) == ExitCode.DONE
    assert capsys.readouterr().out == "u1\n3\n"
    # A second run finds nothing to copy and nothing erased.
    assert main(["migrate", source, destination]) == ExitCode.DONE
    assert capsys.readouterr().out.startswith("copied nothing: the destination already held all 3")


@pytest.mark.usefixtures("schemes")
def test_facts_written_to_the_source_while_copying_are_refused_at_the_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _seeded("growing:source", tmp_path, 2, capsys)
    assert main(["migrate", "growing:source", "counting:destination"]) == ExitCode.REFUSED
    assert capsys.readouterr().err == WRITTEN_MEANWHILE
    # Run again, it copies the late fact.
    assert main(["migrate", "growing:source", "counting:destination"]) == ExitCode.DONE
    assert capsys.readouterr().out == (
        "copied 1 fact(s); 7 fact(s) of 2 end user(s) are now in both stores, counts checked\n"
    )
