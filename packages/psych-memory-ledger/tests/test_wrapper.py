"""`with_ledger`: the store's behaviour kept, each deletion recorded, or refused unrecorded."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Self

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.ledger import (
    DeletionLedger,
    LedgerKey,
    LedgerUnavailableError,
    open_ledger,
    with_ledger,
)
from psych_runtime.memory.port import (
    CountsFacts,
    ExpiresFacts,
    InvalidInputError,
    InvalidKeyError,
    ListsEndUsers,
    Memory,
    MemoryStore,
    PagesFacts,
    RestoresFacts,
    Scope,
    StoreClosedError,
    StoreUnavailableError,
)
from psych_runtime.memory.sqlite import SqliteMemory

pytestmark = pytest.mark.anyio

CAPABILITIES = (ListsEndUsers, CountsFacts, PagesFacts, RestoresFacts, ExpiresFacts)


class Minimal(MemoryStore):
    """A store with the four methods only, none of the optional capabilities."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = InProcessMemory() if store is None else store

    async def __aenter__(self) -> Self:
        await self.store.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.store.aclose()

    async def aclose(self) -> None:
        await self.store.aclose()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await self.store.remember(scope, end_user_id, content)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        return await self.store.recall(scope, end_user_id, limit=limit)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return await self.store.forget(scope, end_user_id, memory_id)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await self.store.erase(scope, end_user_id)


async def test_capabilities_are_the_stores(ledger: DeletionLedger, tmp_path: Path) -> None:
    for bare in (InProcessMemory(), SqliteMemory(tmp_path / "facts.sqlite3"), Minimal()):
        async with bare:
            store = with_ledger(bare, ledger)
            for capability in CAPABILITIES:
                assert isinstance(store, capability) == isinstance(bare, capability)
            assert hasattr(store, "scrub") == hasattr(bare, "scrub")
            assert hasattr(store, "scrub_pending") == hasattr(bare, "scrub_pending")
    assert repr(with_ledger(Minimal(), ledger)).startswith("with_ledger(")


async def test_the_capabilities_answer_as_the_store(ledger: DeletionLedger, tmp_path: Path) -> None:
    async with SqliteMemory(tmp_path / "facts.sqlite3") as bare:
        store = with_ledger(bare, ledger)
        assert isinstance(store, ListsEndUsers)
        assert isinstance(store, CountsFacts)
        assert isinstance(store, PagesFacts)
        assert isinstance(store, RestoresFacts)
        fact = await store.remember("acme", "user-1", "likes tea")
        assert await store.tenants() == ("acme",)
        assert await store.end_users("acme") == ("user-1",)
        assert dict(await store.fact_counts("acme")) == {"user-1": 1}
        assert await store.recall_page("acme", "user-1", size=5) == (fact,)
        assert await store.forget("acme", "user-1", fact.id) is True
        assert store.scrub_pending is bare.scrub_pending  # type: ignore[attr-defined]
        assert await store.scrub() is True  # type: ignore[attr-defined]
        assert await store.restore(fact) is True
        assert await store.restore_many([fact]) == 0
        assert await store.recall("acme", "user-1") == (fact,)


async def test_the_lifecycle_is_the_stores(ledger: DeletionLedger) -> None:
    bare = InProcessMemory()
    async with with_ledger(bare, ledger) as store:
        await store.remember("acme", "user-1", "x")
    with pytest.raises(StoreClosedError):
        await bare.recall("acme", "user-1")
    store = with_ledger(InProcessMemory(), ledger)
    await store.aclose()
    # A deletion on a closed store: the store's error, and no intent left.
    with pytest.raises(StoreClosedError):
        await store.erase("acme", "user-1")
    assert ledger.entries() == ()


async def test_each_deletion_is_recorded_without_content_or_end_user_id(
    ledger: DeletionLedger, key: LedgerKey
) -> None:
    async with with_ledger(InProcessMemory(), ledger) as store:
        kept = await store.remember("acme", "alice@example.com", "secret content one")
        gone = await store.remember("acme", "alice@example.com", "secret content two")
        assert await store.forget("acme", "alice@example.com", gone.id) is True
        assert await store.forget("acme", "alice@example.com", "no-such-id") is False
        assert await store.erase("acme", "alice@example.com") == 1
        assert await store.erase("acme", "nobody") == 0
    forget, erase, nothing = ledger.entries()
    hashed = key.end_user_hash("acme", "alice@example.com")
    assert (forget.kind, forget.tenant, forget.end_user_hash) == ("forget", "acme", hashed)
    assert (forget.fact_id, forget.deleted) == (gone.id, 1)
    assert (erase.kind, erase.end_user_hash, erase.fact_id, erase.deleted) == (
        "erase",
        hashed,
        None,
        1,
    )
    assert (nothing.end_user_hash, nothing.deleted) == (key.end_user_hash("acme", "nobody"), 0)
    ledger.close()
    raw = b"".join(path.read_bytes() for path in _file(ledger).parent.glob("ledger.sqlite3*"))
    for personal in (b"alice", b"secret content", kept.id.encode(), b"k" * 32):
        assert personal not in raw


async def test_refused_input_is_the_stores_error_and_recorded_nowhere(
    ledger: DeletionLedger,
) -> None:
    async with with_ledger(InProcessMemory(), ledger) as store:
        with pytest.raises(InvalidKeyError):
            await store.erase("", "user-1")
        with pytest.raises(InvalidKeyError):
            await store.forget("acme", "", "id")
        with pytest.raises(TypeError):
            await store.forget("acme", "user-1", 7)  # type: ignore[arg-type]
    assert ledger.entries() == ()


async def test_a_ledger_that_cannot_be_written_refuses_the_deletion(
    ledger_url: str, key: LedgerKey
) -> None:
    ledger = open_ledger(ledger_url, key, busy_timeout=0)
    async with with_ledger(InProcessMemory(), ledger) as store:
        fact = await store.remember("acme", "user-1", "x")
        # Another writer holds the ledger: the intent cannot be recorded.
        with closing(sqlite3.connect(_file(ledger), isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")
            with pytest.raises(LedgerUnavailableError) as erasing:
                await store.erase("acme", "user-1")
            with pytest.raises(LedgerUnavailableError) as forgetting:
                await store.forget("acme", "user-1", fact.id)
            for info in (erasing, forgetting):
                assert info.value.may_have_taken_effect is False
                assert "OperationalError" in info.value.reason
            other.execute("ROLLBACK")
        assert await store.recall("acme", "user-1") == (fact,)
        ledger.close()
        with pytest.raises(LedgerUnavailableError, match="ledger is closed"):
            await store.erase("acme", "user-1")
        assert await store.recall("acme", "user-1") == (fact,)


class _LocksTheLedgerAfterDeleting(Minimal):
    """Deletes, then another writer takes the ledger before the count is written."""

    def __init__(self, ledger_path: Path) -> None:
        super().__init__()
        self.other = sqlite3.connect(ledger_path, isolation_level=None, check_same_thread=False)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        deleted = await super().erase(scope, end_user_id)
        self.other.execute("BEGIN EXCLUSIVE")
        return deleted


async def test_a_count_that_cannot_be_written_keeps_the_intent_and_the_answer(
    ledger_url: str, key: LedgerKey
) -> None:
    with open_ledger(ledger_url, key, busy_timeout=0) as ledger:
        bare = _LocksTheLedgerAfterDeleting(_file(ledger))
        async with with_ledger(bare, ledger) as store:
            await store.remember("acme", "user-1", "x")
            assert await store.erase("acme", "user-1") == 1
        bare.other.execute("ROLLBACK")
        bare.other.close()
        (entry,) = ledger.entries()
        assert (entry.kind, entry.deleted) == ("erase", None)


class _Fails(Minimal):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        raise self.error


@pytest.mark.parametrize(("taken", "kept"), [(True, 1), (False, 0)])
async def test_a_failed_delete_keeps_its_intent_unless_it_changed_nothing(
    ledger: DeletionLedger, taken: bool, kept: int
) -> None:
    error = StoreUnavailableError("erase", "down", may_have_taken_effect=taken)
    async with with_ledger(_Fails(error), ledger) as store:
        with pytest.raises(StoreUnavailableError) as info:
            await store.erase("acme", "user-1")
    assert info.value is error
    assert len(ledger.entries()) == kept


def _file(ledger: DeletionLedger) -> Path:
    assert ledger.path is not None
    return ledger.path


def test_wrong_arguments_and_the_stores_own_file_are_refused(
    ledger: DeletionLedger, tmp_path: Path, key: LedgerKey
) -> None:
    with pytest.raises(TypeError, match="store must be a MemoryStore, not object"):
        with_ledger(object(), ledger)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ledger must be a DeletionLedger, not str"):
        with_ledger(InProcessMemory(), "sqlite:///x")  # type: ignore[arg-type]
    store_path = tmp_path / "facts.sqlite3"
    with (
        open_ledger(f"sqlite:///{store_path}", key) as inside,
        pytest.raises(InvalidInputError, match="ledger must live outside the store it records"),
    ):
        with_ledger(SqliteMemory(store_path), inside)
    # A store whose file does not exist yet is compared by its resolved path.
    assert with_ledger(SqliteMemory(tmp_path / "not-yet.sqlite3"), ledger) is not None
    with open_ledger(f"sqlite:///{tmp_path / 'sub' / '..' / 'later.sqlite3'}", key) as later:
        (tmp_path / "sub").mkdir()
        with pytest.raises(InvalidInputError, match="must live outside"):
            with_ledger(SqliteMemory(tmp_path / "later.sqlite3"), later)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["remember", "forget", "erase", "recall"]),
        st.sampled_from(["u1", "u2"]),
        st.integers(0, 5),
    ),
    max_size=12,
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_the_wrapper_answers_as_the_store_and_records_each_deletion(
    ops: list[tuple[str, str, int]],
    tmp_path_factory: pytest.TempPathFactory,
    key: LedgerKey,
    backend: str,
) -> None:
    async def run() -> None:
        url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.sqlite3'}"
        with open_ledger(url, key) as ledger:
            async with InProcessMemory() as bare, with_ledger(InProcessMemory(), ledger) as store:
                ids: dict[str, list[tuple[str, str]]] = {"u1": [], "u2": []}
                deletions = 0
                for op, user, n in ops:
                    if op == "remember":
                        a = await bare.remember("t", user, f"c{n}")
                        b = await store.remember("t", user, f"c{n}")
                        ids[user].append((a.id, b.id))
                    elif op == "forget":
                        a_id, b_id = ids[user][n] if n < len(ids[user]) else ("none", "none")
                        deleted = await store.forget("t", user, b_id)
                        assert deleted == await bare.forget("t", user, a_id)
                        deletions += deleted
                    elif op == "erase":
                        assert await store.erase("t", user) == await bare.erase("t", user)
                        deletions += 1
                    else:
                        mine = [m.content for m in await store.recall("t", user)]
                        assert mine == [m.content for m in await bare.recall("t", user)]
                assert len(ledger.entries()) == deletions

    anyio.run(run, backend=backend)
