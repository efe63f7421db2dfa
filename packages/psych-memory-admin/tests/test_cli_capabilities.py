"""psych-memory against stores that lack a capability, or fail: refused or unavailable.

The stores come from small backends installed as distributions of their own
(a module and its ``.dist-info`` in a folder on ``sys.path``), exactly as a
third party's backend would be seen.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.admin._format import parse_export, render_export
from psych_runtime.memory.admin._pages import PAGE_SIZE
from psych_runtime.memory.port import (
    MAX_CREATED_AT,
    MIN_CREATED_AT,
    Memory,
    MemoryKey,
    RestoresFacts,
    validate_content,
)

# Stores on the four methods alone, as a third party might write them.
BACKEND = """
from contextlib import asynccontextmanager
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    MemoryStore, StalePageError, StoreUnavailableError, validate_page
)

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
    # An agent erases u0 here just after the migration read it to copy it:
    # its third read (the first is the import that seeds it, the second the
    # migration's check, which counts the facts).
    reads = 0
    changed_at = 3
    async def recall(self, scope, end_user_id, *, limit=None):
        facts = await self._inner.recall(scope, end_user_id, limit=limit)
        if end_user_id == "u0":
            self.reads += 1
            if self.reads == self.changed_at:
                await self.changed(scope, end_user_id)
        return facts
    async def changed(self, scope, end_user_id):
        await self._inner.erase(scope, end_user_id)

class CountingErasedWhileCopied(ErasedWhileCopied, Counting):
    # Counted, u0 is not read by the check: the copy is the second read.
    changed_at = 2

class GrowsWhileCopied(CountingErasedWhileCopied):
    # An agent remembers one more fact for u0 instead.
    async def changed(self, scope, end_user_id):
        await self._inner.remember(scope, end_user_id, "a fact that came later")

class Paged(Counting):
    # Reads a key a page at a time only: a whole-key recall fails, as it
    # does for an end user too big to recall in one call.
    async def recall(self, scope, end_user_id, *, limit=None):
        raise StoreUnavailableError(
            "recall", "this end user is too big to recall whole", may_have_taken_effect=False
        )
    async def recall_page(self, scope, end_user_id, *, after=None, size):
        after, size = validate_page(after, size)
        facts = await self._inner.recall(scope, end_user_id)
        ids = [fact.id for fact in facts]
        if after is not None and after not in ids:
            raise StalePageError()
        start = 0 if after is None else ids.index(after) + 1
        return facts[start : start + size]

class ForgetsBetweenPages(Paged):
    # An agent forgets the last fact of a first page just after it was read, once.
    forgot = False
    async def recall_page(self, scope, end_user_id, *, after=None, size):
        page = await super().recall_page(scope, end_user_id, after=after, size=size)
        if not self.forgot and after is None and len(page) == size:
            self.forgot = True
            await self._inner.forget(scope, end_user_id, page[-1].id)
        return page

class AlwaysForgets(ForgetsBetweenPages):
    # Forgets the last fact of every first page: every read goes stale.
    async def recall_page(self, scope, end_user_id, *, after=None, size):
        self.forgot = False
        return await super().recall_page(scope, end_user_id, after=after, size=size)

class PagesFail(Paged):
    # Lists and counts, but the connection is gone when its facts are read.
    async def recall_page(self, scope, end_user_id, *, after=None, size):
        raise StoreUnavailableError(
            "recall_page", "the server went away", may_have_taken_effect=False
        )

class FailsSecondWrite(Counting):
    # The connection drops during the second write of facts, once.
    writes = 0
    async def restore_many(self, memories):
        self.writes += 1
        if self.writes == 2:
            raise StoreUnavailableError(
                "restore_many", "the server went away", may_have_taken_effect=False
            )
        return await super().restore_many(memories)

class ExpiresOnly(FourMethods):
    # Expires facts, but cannot list its tenants.
    async def count_expired(self, scope, *, before):
        return await self._inner.count_expired(scope, before=before)
    async def expire(self, scope, *, before):
        return await self._inner.expire(scope, before=before)

class ExpiresSecondTenantFails(ExpiresOnly):
    # Lists its tenants; the connection drops while the second is expired.
    async def tenants(self):
        return await self._inner.tenants()
    async def end_users(self, scope):
        return await self._inner.end_users(scope)
    async def expire(self, scope, *, before):
        if scope != "acme":
            raise StoreUnavailableError(
                "expire", "the server went away", may_have_taken_effect=False
            )
        return await super().expire(scope, before=before)

class ExpiresScrubPending(ExpiresOnly):
    # Wipes deleted bytes afterwards, and cannot do it now.
    scrub_pending = True
    async def scrub(self):
        return False

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
paged = shared(Paged)
forgetting = shared(ForgetsBetweenPages)
failing_write = shared(FailsSecondWrite)
pages_fail = shared(PagesFail)
always_forgets = shared(AlwaysForgets)
expires_only = shared(ExpiresOnly)
expires_failing = shared(ExpiresSecondTenantFails)
expires_pending = shared(ExpiresScrubPending)

@asynccontextmanager
async def four_methods(url):
    yield FourMethods()

@asynccontextmanager
async def down(url):
    yield Down()
"""


class Terminal(io.StringIO):
    """Text that says it is a terminal, as a console's streams do."""

    def isatty(self) -> bool:
        return True


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
        f"countingerasing = {name}:counting_erasing\ngrowing = {name}:growing\n"
        f"paged = {name}:paged\nforgetting = {name}:forgetting\n"
        f"failswrite = {name}:failing_write\npagesfail = {name}:pages_fail\n"
        f"alwaysforgets = {name}:always_forgets\nexpiresonly = {name}:expires_only\n"
        f"expiresfailing = {name}:expires_failing\nexpirespending = {name}:expires_pending\n",
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
@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (
            ["expire", "fourmethods:", "--tenant", "acme", "--older-than", "30d"],
            "this store cannot expire facts by age (its backend does not provide ExpiresFacts)",
        ),
        (
            ["expire", "expiresonly:", "--all-tenants", "--older-than", "30d", "--dry-run"],
            "this store cannot list its users (its backend does not provide ListsEndUsers)",
        ),
    ],
)
def test_expire_on_a_store_without_the_capability_is_bad_usage_and_deletes_nothing(
    argv: list[str], rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"psych-memory: error: URL: {rule}; nothing was deleted\n"


@pytest.mark.usefixtures("schemes")
def test_expire_of_one_tenant_needs_no_listing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["expire", "expiresonly:", "--tenant", "acme", "--older-than", "1h"]) == 0
    assert "facts deleted:  0" in capsys.readouterr().out


@pytest.mark.usefixtures("schemes")
def test_an_expiry_failing_after_a_tenant_was_expired_says_it_may_have_taken_effect(
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = datetime(2001, 1, 1, tzinfo=UTC)

    async def fill() -> None:
        async with open_memory("expiresfailing:") as store:
            # The backend's own table: it restores nothing through the port.
            inner = store._inner  # type: ignore[attr-defined]
            for tenant in ("acme", "globex"):
                await inner.restore(Memory(f"old-{tenant}", MemoryKey(tenant, "u1"), "old", old))

    anyio.run(fill)
    argv = ["expire", "expiresfailing:", "--all-tenants", "--older-than", "30d"]
    assert main(argv) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert "after facts of earlier tenants were deleted for good" in err
    assert "it may have taken effect" in err
    assert err.count("\n") == 1


@pytest.mark.usefixtures("schemes")
def test_an_expiry_failing_before_deleting_anything_says_it_changed_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["expire", "expiresfailing:", "--tenant", "globex", "--older-than", "30d"]
    assert main(argv) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err == (
        "psych-memory: error: URL: expire failed: the server went away; it changed nothing\n"
    )


@pytest.mark.usefixtures("schemes")
def test_an_expiry_whose_wipe_waits_says_pending(capsys: pytest.CaptureFixture[str]) -> None:
    old = datetime(2001, 1, 1, tzinfo=UTC)

    async def fill() -> None:
        async with open_memory("expirespending:") as store:
            inner = store._inner  # type: ignore[attr-defined]
            await inner.restore(Memory("old", MemoryKey("acme", "u1"), "old", old))

    anyio.run(fill)
    assert main(["expire", "expirespending:", "--tenant", "acme", "--older-than", "30d"]) == 0
    out = capsys.readouterr().out
    assert "facts deleted:  1" in out
    assert out.splitlines()[-1].startswith("deleted bytes:  pending")


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
    argv = ["count", "down:", "--tenant", "acme", "--user", "u1"]
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
            "exported_at": "2026-02-01T00:00:00.000000Z",
            "facts": [
                {
                    "id": f"fact-{n}-{i}",
                    "content": f"fact {i} of u{n}",
                    "created_at": f"2026-01-0{1 + i}T00:00:00.000000Z",
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


# End users too big to recall in one call: read a page at a time.

BIG = 2_500
"""Facts of the big end user: more than one page of the command's reads."""


def _big_export(tmp_path: Path, facts: int, name: str) -> Path:
    key = MemoryKey("acme", "big")
    path = tmp_path / name
    path.write_text(
        render_export(
            key,
            (
                Memory(f"fact-{n:05d}", key, f"fact {n}", datetime(2026, 1, 1, tzinfo=UTC))
                for n in range(facts)
            ),
            datetime(2026, 2, 1, tzinfo=UTC),
            "jsonl",
        ),
        encoding="utf-8",
    )
    return path


def _import(url: str, path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", url, str(path)]) == ExitCode.DONE
    capsys.readouterr()


def _exported_ids(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    target = tmp_path / f"export-{uuid.uuid4().hex}.json"
    argv = ["export", url, "--tenant", "acme", "--user", "big", "-o", str(target)]
    assert main(argv) == ExitCode.DONE, capsys.readouterr().err
    return [fact.id for fact in parse_export(target.read_text(encoding="utf-8")).facts]


@pytest.mark.usefixtures("schemes")
def test_export_count_and_erase_read_an_end_user_a_page_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store fails any recall of the whole end user: only pages work.
    _import("paged:s", _big_export(tmp_path, BIG, "big.jsonl"), capsys)
    assert _exported_ids("paged:s", tmp_path, capsys) == [f"fact-{n:05d}" for n in range(BIG)]
    assert main(["count", "paged:s", "--tenant", "acme", "--user", "big"]) == ExitCode.DONE
    assert capsys.readouterr().out == f"{BIG}\n"
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert main(["erase", "paged:s", "--tenant", "acme", "--user", "big"]) == ExitCode.DONE
    shown = capsys.readouterr()
    assert f"Erase all {BIG} fact(s)" in shown.err
    assert f"facts deleted:  {BIG}" in shown.out


@pytest.mark.usefixtures("schemes")
def test_a_fact_forgotten_between_two_pages_starts_the_export_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import("forgetting:s", _big_export(tmp_path, BIG, "big.jsonl"), capsys)
    # The last fact of the first page went while it was read: the export
    # starts again and holds every other fact once.
    forgotten = f"fact-{PAGE_SIZE - 1:05d}"
    assert _exported_ids("forgetting:s", tmp_path, capsys) == [
        f"fact-{n:05d}" for n in range(BIG) if f"fact-{n:05d}" != forgotten
    ]


@pytest.mark.usefixtures("schemes")
def test_migrate_copies_an_end_user_too_big_to_recall_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import("paged:source", _big_export(tmp_path, BIG, "big.jsonl"), capsys)
    # An earlier run stopped after copying the first 2,100 facts.
    _import("paged:destination", _big_export(tmp_path, 2_100, "part.jsonl"), capsys)
    assert main(["migrate", "paged:source", "paged:destination"]) == ExitCode.DONE
    assert capsys.readouterr().out == (
        f"copied {BIG - 2_100} fact(s); {BIG} fact(s) of 1 end user(s) are now in both "
        "stores, counts checked\n"
    )
    assert _exported_ids("paged:destination", tmp_path, capsys) == _exported_ids(
        "paged:source", tmp_path, capsys
    )
    assert main(["migrate", "paged:source", "paged:destination"]) == ExitCode.DONE
    assert capsys.readouterr().out.startswith(
        f"copied nothing: the destination already held all {BIG}"
    )


@pytest.mark.usefixtures("schemes")
def test_an_import_stopped_part_way_keeps_whole_batches_and_finishes_when_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _big_export(tmp_path, BIG, "big.jsonl")
    assert main(["import", "failswrite:", str(path)]) == ExitCode.UNAVAILABLE
    assert capsys.readouterr().err == (
        "psych-memory: error: URL: restore_many failed: the server went away; it changed "
        "nothing; the first 2000 fact(s) of the file are stored (whole batches only); run the "
        "same import again to finish\n"
    )
    assert main(["count", "failswrite:", "--tenant", "acme", "--user", "big"]) == ExitCode.DONE
    assert capsys.readouterr().out == "2000\n"
    assert main(["import", "failswrite:", str(path)]) == ExitCode.DONE
    assert capsys.readouterr().out == (
        f"imported {BIG - 2000} fact(s) in 1 batch(es) of up to 2,000, each whole or not at "
        f"all; 2000 of the {BIG} were there already\n"
    )
    assert _exported_ids("failswrite:", tmp_path, capsys) == [f"fact-{n:05d}" for n in range(BIG)]


# Export, then import: exactly the same facts, whatever they hold.

_key_part = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]) | st.sampled_from("\u2028\u2029"),
    min_size=1,
    max_size=12,
).filter(lambda text: text == text.strip())
_content = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]) | st.sampled_from("\u2028\u2029\n"),
    min_size=1,
    max_size=60,
).filter(lambda text: text.strip() != "" and _valid_content(text))
_moment = st.sampled_from([MIN_CREATED_AT, MAX_CREATED_AT]) | st.datetimes(timezones=st.just(UTC))
_ids = st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True), unique=True, max_size=6)


def _valid_content(text: str) -> bool:
    try:
        validate_content(text)
    except ValueError:
        return False
    return True


@pytest.mark.usefixtures("schemes")
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.builds(MemoryKey, _key_part, _key_part),
    ids=_ids,
    data=st.data(),
    layout=st.sampled_from(["json", "jsonl"]),
)
def test_an_export_imports_back_exactly(
    key: MemoryKey, ids: list[str], data: st.DataObject, layout: str, tmp_path: Path
) -> None:
    # Times in any order: a store keeps the order facts were added in.
    facts = [Memory(fact_id, key, data.draw(_content), data.draw(_moment)) for fact_id in ids]
    source, destination = f"counting:{uuid.uuid4().hex}", f"counting:{uuid.uuid4().hex}"
    anyio.run(_restored, source, facts)
    path = tmp_path / f"{uuid.uuid4().hex}.{layout}"
    argv = ["export", source, "--tenant", key.tenant, "--user", key.end_user_id, "--format", layout]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*argv, "-o", str(path)]) == (ExitCode.DONE if facts else ExitCode.NOT_FOUND)
        if not facts:
            return
        assert main(["import", destination, str(path)]) == ExitCode.DONE
    if layout == "jsonl":
        # One line per fact, for readers that split lines as str.splitlines does, too.
        assert len(path.read_text(encoding="utf-8").splitlines()) == len(facts) + 1
    assert anyio.run(_recalled, destination, key) == tuple(facts)


async def _restored(url: str, facts: list[Memory]) -> None:
    async with open_memory(url) as store:
        assert isinstance(store, RestoresFacts)
        await store.restore_many(facts)


async def _recalled(url: str, key: MemoryKey) -> tuple[Memory, ...]:
    async with open_memory(url) as store:
        return await store.recall(key.tenant, key.end_user_id)


@pytest.mark.usefixtures("schemes")
def test_migrate_names_the_source_when_the_source_fails(capsys: pytest.CaptureFixture[str]) -> None:
    key = MemoryKey("acme", "u1")
    anyio.run(_restored, "pagesfail:source", [Memory("a1", key, "x", MIN_CREATED_AT)])
    assert main(["migrate", "pagesfail:source", "counting:destination"]) == ExitCode.UNAVAILABLE
    assert capsys.readouterr().err == (
        "psych-memory: error: FROM_URL: recall_page failed: the server went away; "
        "it changed nothing\n"
    )


@pytest.mark.usefixtures("schemes")
def test_an_export_whose_pages_keep_going_stale_stops_after_three_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import("alwaysforgets:s", _big_export(tmp_path, BIG, "big.jsonl"), capsys)
    target = tmp_path / "out.json"
    argv = ["export", "alwaysforgets:s", "--tenant", "acme", "--user", "big", "-o", str(target)]
    assert main(argv) == ExitCode.REFUSED
    assert capsys.readouterr().err == (
        "psych-memory: error: URL: facts of this end user were forgotten or erased while they "
        "were being exported (is the store being written to?); run the command again\n"
    )
    assert not target.exists()


@pytest.mark.usefixtures("schemes")
def test_migrate_stops_when_a_fact_is_forgotten_in_the_source_while_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import("forgetting:source", _big_export(tmp_path, BIG, "big.jsonl"), capsys)
    assert main(["migrate", "forgetting:source", "counting:copy"]) == ExitCode.REFUSED
    assert capsys.readouterr().err == (
        "psych-memory: error: FROM_URL: a fact of an end user was forgotten there while its "
        "facts were being copied (stop the writers first); the facts copied so far stay in "
        "TO_URL\n"
    )
