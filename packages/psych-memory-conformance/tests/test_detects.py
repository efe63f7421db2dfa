"""Single checks, called directly against small faulty stores, name the broken rule.

The full proof (every rule, a pytest process of its own, the report read back)
lives in ``tests-integration/conformance``; these run in this process and
show how each kind of fault is worded. The faulty stores both use are in
``_broken_adapters.py``; those only these checks need are here.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

import anyio
import anyio.lowlevel
import pytest

from psych_runtime.memory.conformance import MemoryStoreContract, RuleViolationError
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    MAX_PAGE_SIZE,
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    MemoryStore,
    MemoryStoreError,
    Scope,
    StalePageError,
    StoreClosedError,
    StoreUnavailableError,
    memory_key,
    validate_content,
    validate_cutoff,
    validate_max_facts,
    validate_memory_id,
    validate_page,
)

pytestmark = pytest.mark.anyio


def _load_beside(name: str) -> ModuleType:
    """The module ``name`` of this folder, which importlib mode keeps off the path."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered under its name, so that its errors unpickle to the same classes.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import _broken_adapters as broken
else:
    broken = sys.modules.get("_broken_adapters") or _load_beside("_broken_adapters")


class Against(MemoryStoreContract):
    """The kit against one store class; called by hand, never collected."""

    store_class: ClassVar[type[InProcessMemory]] = InProcessMemory
    max_examples = 20

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        yield self.store_class()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, InProcessMemory)
        return len(store._facts.get(key, {}))


def prepared(
    store_class: type[InProcessMemory], tmp_path: Path, backend: str, **budget: int
) -> Against:
    contract: Against = type("Contract", (Against,), {"store_class": store_class, **budget})()
    contract._prepare(tmp_path, backend)
    return contract


class WrongErrorType(InProcessMemory):
    __slots__ = ()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        if not content.strip():
            raise ValueError("content is empty")
        return await super().remember(scope, end_user_id, content)


class EchoesTheValue(InProcessMemory):
    __slots__ = ()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        try:
            return await super().remember(scope, end_user_id, content)
        except InvalidContentError:
            raise InvalidContentError("content", f"is not allowed: {content!r}") from None


class ForgetsTheArgumentName(InProcessMemory):
    __slots__ = ()

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        try:
            memory_key(scope, end_user_id)
        except InvalidKeyError:
            raise InvalidKeyError("key", "is invalid") from None
        return await super().erase(scope, end_user_id)


class IgnoresNegativeLimit(InProcessMemory):
    __slots__ = ()

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        if isinstance(limit, int) and not isinstance(limit, bool) and limit < 0:
            limit = None
        return await super().recall(scope, end_user_id, limit=limit)


class ForgetAnswersInt(InProcessMemory):
    __slots__ = ()

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return int(await super().forget(scope, end_user_id, memory_id))  # type: ignore[return-value]


class EraseCountsNothing(InProcessMemory):
    __slots__ = ()

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        await super().erase(scope, end_user_id)
        return 0


class CountingIds(broken.Correct):
    """Correct, with ids "1", "2", ...: the kit does not assume any id format."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        super().__init__()
        self._ids = itertools.count(1)

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        fact = Memory(str(next(self._ids)), key, validate_content(content), datetime.now(UTC))
        self._hold(fact, "remember")
        return fact


# Single calls the kit judges wrong: the store, the check, the rule it blames, its words.
_BROKEN_CALLS = [
    (
        WrongErrorType,
        "test_rule6_invalid_content_is_refused_and_stores_nothing",
        6,
        "raised ValueError; it must raise",
    ),
    (
        EchoesTheValue,
        "test_rule6_invalid_content_is_refused_and_stores_nothing",
        6,
        "repeats the value",
    ),
    (
        ForgetsTheArgumentName,
        "test_rule6_invalid_keys_are_refused_and_change_nothing",
        6,
        "does not name the argument 'scope'",
    ),
    (
        IgnoresNegativeLimit,
        "test_rule6_invalid_limit_is_refused",
        6,
        r"recall with limit -1 was accepted",
    ),
    (
        ForgetAnswersInt,
        "test_rule2_forget_deletes_exactly_that_fact",
        2,
        "forget returned int, not a bool",
    ),
    (
        broken.ForgetRaisesOnMissing,
        "test_rule5_keys_are_compared_exactly",
        2,
        "forget raised LookupError",
    ),
    (
        broken.NewestFirst,
        "test_rule1_many_tasks_remembering_on_one_key_lose_no_fact",
        3,
        "out of order",
    ),
]


async def test_forget_raising_breaks_rule_2(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(broken.ForgetRaisesOnMissing, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="forget raised LookupError") as info:
        await contract.test_rule2_forget_of_an_unknown_id_is_false()
    assert info.value.rule == 2
    assert isinstance(info.value.__cause__, LookupError)


async def test_the_model_check_finds_a_wrong_erase_count(
    tmp_path: Path, anyio_backend: str
) -> None:
    # At the budget a backend author gets: a random search is judged by what it
    # finds there, not in the few examples that keep the other tests here quick.
    contract = prepared(
        EraseCountsNothing,
        tmp_path,
        anyio_backend,
        max_examples=MemoryStoreContract.max_examples,
        max_steps=MemoryStoreContract.max_steps,
    )
    # Raised as itself, not wrapped in an exception group of the kit's threads.
    with pytest.raises(RuleViolationError, match="erase of a key with 1 fact") as info:
        await contract.test_rules_hold_for_random_call_sequences()
    assert info.value.rule == 4


async def test_any_id_format_is_accepted(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(CountingIds, tmp_path, anyio_backend)
    await contract.test_rule2_forget_of_an_unknown_id_is_false()
    await contract.test_rule1_ids_are_never_reused()


async def test_open_store_must_yield_a_store(tmp_path: Path, anyio_backend: str) -> None:
    class YieldsNothing(Against):
        @asynccontextmanager
        async def open_store(self) -> AsyncIterator[MemoryStore]:
            yield None  # type: ignore[misc]

    contract = YieldsNothing()
    contract._prepare(tmp_path, anyio_backend)
    with pytest.raises(TypeError, match="must yield a MemoryStore, not NoneType"):
        await contract.test_rule1_remember_returns_the_stored_fact()


async def test_open_store_must_yield_an_empty_store(tmp_path: Path, anyio_backend: str) -> None:
    shared = InProcessMemory()

    class Reused(Against):
        @asynccontextmanager
        async def open_store(self) -> AsyncIterator[MemoryStore]:
            yield shared

    contract = Reused()
    contract._prepare(tmp_path, anyio_backend)
    await contract.test_rule1_remember_returns_the_stored_fact()
    with pytest.raises(AssertionError, match="must yield an empty store"):
        await contract.test_rule1_remember_returns_the_stored_fact()


class BoundToItsThread(InProcessMemory):
    """Refuses calls from any thread but the one that created it, like a loop-bound pool."""

    __slots__ = ("_owner",)

    def __init__(self) -> None:
        super().__init__()
        self._owner = threading.get_ident()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        if threading.get_ident() != self._owner:
            raise RuntimeError("this store belongs to another event loop")
        return await super().remember(scope, end_user_id, content)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        validate_memory_id(memory_id)
        return await super().forget(scope, end_user_id, memory_id)


class TestAnExpectedFailureIsReportedAsOne(MemoryStoreContract):
    """The kit against a store that only works on its own loop, with that check marked."""

    max_examples = 10
    expected_failures: ClassVar[Mapping[str, str]] = {
        "test_rule1_threads_with_their_own_event_loops_lose_no_fact": (
            "the store serves only the event loop that created it"
        ),
    }

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        yield BoundToItsThread()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, InProcessMemory)
        return len(store._facts.get(key, {}))


# Rules 7-12: lifecycle, failures, cancellation and the capabilities.


class NamesAnotherOperation(InProcessMemory):
    __slots__ = ()

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        if self._closed:
            raise StoreClosedError("query")
        return await super().recall(scope, end_user_id, limit=limit)


class EraseRaisesRuntimeErrorAfterClose(InProcessMemory):
    __slots__ = ()

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        if self._closed:
            raise RuntimeError("cannot operate on a closed database")
        return await super().erase(scope, end_user_id)


class SwallowsErrors(InProcessMemory):
    __slots__ = ()

    async def __aexit__(self, *exc_info: object) -> bool:  # type: ignore[override]
        await self.aclose()
        return True


class ClosedErrorLosesAttribute(InProcessMemory):
    __slots__ = ()

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        if self._closed:
            raise broken.ClosedAtError("forget", "the table")
        return await super().forget(scope, end_user_id, memory_id)


class TwoArgumentsError(MemoryStoreError):
    # Pickling calls the class with the one message it gave its base.
    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(f"{operation} failed: {detail}")


class UnpicklableError(InProcessMemory):
    __slots__ = ()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        if self._closed:
            raise TwoArgumentsError("remember", "the store is closed")
        return await super().remember(scope, end_user_id, content)


class CancellationBecomesUnavailable(InProcessMemory):
    __slots__ = ()

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            raise StoreUnavailableError(
                "forget", "the connection was closed", may_have_taken_effect=True
            ) from None
        return await super().forget(scope, end_user_id, memory_id)


class WithoutCapabilities(InProcessMemory):
    """The in-process store with its optional capabilities withdrawn."""

    __slots__ = ()
    # None withdraws a protocol method, as the typing module's checks agree.
    tenants = end_users = restore = restore_many = fact_counts = recall_page = None  # type: ignore[assignment]
    expire = count_expired = remember_within_limit = None  # type: ignore[assignment]


class RestoresPartOfABatch(broken.Correct):
    """Stores a batch's facts one by one, keeping those before a refused one."""

    __slots__ = ()

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        return sum([await self.restore(memory) for memory in memories])


class ListsCaseInsensitively(broken.Correct):
    __slots__ = ()

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return tuple(sorted(await super().end_users(scope), key=str.casefold))


class RestoreAnswersTrueAgain(broken.Correct):
    __slots__ = ()

    async def restore(self, memory: Memory) -> bool:
        await super().restore(memory)
        return True


class CountsAcrossCase(InProcessMemory):
    """Compares tenants case-insensitively, as a case-insensitive collation would."""

    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        tenant = memory_key(scope, "-").tenant.casefold()
        counts: dict[str, int] = {}
        with self._lock:
            for key, facts in self._facts.items():
                if key.tenant.casefold() == tenant:
                    counts[key.end_user_id] = counts.get(key.end_user_id, 0) + len(facts)
        return dict(sorted(counts.items()))


class CountsInCaseInsensitiveOrder(InProcessMemory):
    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        counts = await super().fact_counts(scope)
        return dict(sorted(counts.items(), key=lambda item: item[0].casefold()))


class CountsTrueForOneFact(InProcessMemory):
    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        counts = await super().fact_counts(scope)
        return {user: True if count == 1 else count for user, count in counts.items()}


class CountsAnInvalidTenantAsEmpty(InProcessMemory):
    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        try:
            return await super().fact_counts(scope)
        except InvalidKeyError:
            return {}


class HandsOutItsOwnCounts(InProcessMemory):
    """Keeps one mapping per tenant and refreshes it in place: the caller's changes stay."""

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        super().__init__()
        self._answers: dict[str, dict[str, int]] = {}

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        answer = self._answers.setdefault(memory_key(scope, "-").tenant, {})
        answer.update(await super().fact_counts(scope))
        return answer


@dataclass(frozen=True)
class _Asked:
    """One call of `recall_page`, as the caller made it."""

    scope: Scope
    end_user_id: str
    after: str | None
    size: int


class _AlteredPages(InProcessMemory):
    """The adapter's own pages, with one defect a subclass writes into `_read` or `_refused`."""

    __slots__ = ()

    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        asked = _Asked(scope, end_user_id, after, size)
        try:
            return await self._read(asked)
        except InvalidInputError as refusal:
            return await self._refused(asked, refusal)

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        """The page the adapter itself answers."""
        return await super().recall_page(
            asked.scope, asked.end_user_id, after=asked.after, size=asked.size
        )

    async def _refused(self, asked: _Asked, refusal: InvalidInputError) -> tuple[Memory, ...]:
        """What becomes of a refused page: the adapter's refusal."""
        raise refusal


class PagesAsLists(_AlteredPages):
    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        return list(await super()._read(asked))  # type: ignore[return-value]


class PagesPastTheSize(_AlteredPages):
    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        return await super()._read(replace(asked, size=asked.size + 1))


class PagesNeverEnd(_AlteredPages):
    """Answers a page after the last fact with the last fact again, forever."""

    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        page = await super()._read(asked)
        if page or asked.after is None:
            return page
        return (await self.recall(asked.scope, asked.end_user_id))[-1:]


class PagesStaleAfterTheFirst(_AlteredPages):
    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        if asked.after is not None:
            raise StalePageError
        return await super()._read(asked)


class PagesAnyKeysFact(_AlteredPages):
    """Takes 'after' from any key, as a query on the id alone would."""

    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        after = asked.after
        if after is not None and not any(after in facts for facts in self._facts.values()):
            raise StalePageError
        facts = await self.recall(asked.scope, asked.end_user_id)
        start = next((n + 1 for n, fact in enumerate(facts) if fact.id == after), 0)
        return facts[start : start + validate_page(after, asked.size)[1]]


class _StaleRefusedAs(_AlteredPages):
    """A stale page refused with an error of its own: `_instead`, its class and words."""

    __slots__ = ()
    _instead: ClassVar[tuple[type[Exception], str]]

    async def _refused(self, asked: _Asked, refusal: InvalidInputError) -> tuple[Memory, ...]:
        if isinstance(refusal, StalePageError):
            error, words = self._instead
            raise error(words) from None
        raise refusal


class PagesRefuseGarbageWrongly(_StaleRefusedAs):
    """Raises a KeyError of its own for an id it never held."""

    __slots__ = ()
    _instead = (KeyError, "no such row")


class PagesEncodeAfterUnchecked(_AlteredPages):
    """Hands 'after' to a driver that needs UTF-8, as SQLite's would."""

    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        if asked.after is not None:
            asked.after.encode()
        return await super()._read(asked)


class PagesStaleNamingAnotherArgument(_StaleRefusedAs):
    __slots__ = ()
    _instead = (StalePageError, "cursor")


class PagesAcceptAnySize(_AlteredPages):
    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        size: object = asked.size
        fitting = isinstance(size, int) and 1 <= asked.size <= MAX_PAGE_SIZE
        return await super()._read(asked if fitting else replace(asked, size=1))


class _PagesRefuseSizeZeroWith(_AlteredPages):
    """A page of size 0 raises `_error`, before the adapter judges it."""

    __slots__ = ()
    _error: ClassVar[type[Exception]]

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        if asked.size == 0:
            raise self._error("size")
        return await super()._read(asked)


class PagesStaleForASizeTooSmall(_PagesRefuseSizeZeroWith):
    __slots__ = ()
    _error = StalePageError


class PagesRaiseValueErrorForBadSizes(_PagesRefuseSizeZeroWith):
    __slots__ = ()
    _error = ValueError


class PagesForgetTheirFirstFact(_AlteredPages):
    """A stale page 'cleans up' by forgetting the key's first fact."""

    __slots__ = ()

    async def _refused(self, asked: _Asked, refusal: InvalidInputError) -> tuple[Memory, ...]:
        held = await self.recall(asked.scope, asked.end_user_id, limit=1)
        if held:
            await self.forget(asked.scope, asked.end_user_id, held[0].id)
        raise refusal


class RestoresTooEarlyTimesNot(InProcessMemory):
    __slots__ = ()

    async def restore(self, memory: Memory) -> bool:
        if memory.created_at.year < 1000:
            raise OverflowError("date value out of range")
        return await super().restore(memory)


class ReadsTooEarlyTimesNot(_AlteredPages):
    __slots__ = ()

    async def _read(self, asked: _Asked) -> tuple[Memory, ...]:
        page = await super()._read(asked)
        if any(fact.created_at.year < 1000 for fact in page):
            raise OverflowError("date value out of range")
        return page


_PAGES = "test_rule13_pages_of_every_size_join_into_recall"
_RESUMES = "test_rule13_a_page_resumes_after_any_fact_the_key_holds"
_STALE = "test_rule13_an_after_the_key_does_not_hold_is_stale"
_INVALID = "test_rule13_invalid_arguments_are_refused_and_change_nothing"
_EDGES = "test_rule11_times_at_the_ends_of_the_range_read_back_exactly"


# Pagers and times the kit judges wrong, in the same columns.
_BROKEN_PAGERS_AND_TIMES = [
    (PagesAsLists, _PAGES, 13, "returned a list, not a tuple"),
    (PagesPastTheSize, _PAGES, 13, "returned 2 facts, more than size=1"),
    (PagesNeverEnd, _PAGES, 13, "went on past the 67 facts recall returned"),
    (PagesStaleAfterTheFirst, _RESUMES, 13, "raised StalePageError although the key holds"),
    (PagesAnyKeysFact, _STALE, 13, "after the id of another end user's fact returned"),
    (PagesRefuseGarbageWrongly, _STALE, 13, "raised KeyError; it must raise StalePageError"),
    (PagesStaleNamingAnotherArgument, _STALE, 13, "naming 'cursor', not 'after'"),
    (PagesEncodeAfterUnchecked, _STALE, 13, "raised UnicodeEncodeError; it must raise Stale"),
    (PagesForgetTheirFirstFact, _STALE, 13, "a page refused as stale changed stored facts"),
    (PagesAcceptAnySize, _INVALID, 13, "a page with size=0 answered"),
    (PagesStaleForASizeTooSmall, _INVALID, 13, "size=0 raised StalePageError, not a refusal"),
    (PagesRaiseValueErrorForBadSizes, _INVALID, 13, "size=0 raised ValueError; it must"),
    (
        PagesForgetTheirFirstFact,
        _INVALID,
        13,
        "a refused page changed stored facts",
    ),
    (
        broken.RestoreLosesMicroseconds,
        _EDGES,
        11,
        "restored at 0001-01-01T00:00:00.000001.* back with",
    ),
    (RestoresTooEarlyTimesNot, _EDGES, 11, "raised OverflowError"),
    (ReadsTooEarlyTimesNot, _EDGES, 11, "recall_page of facts restored at the ends"),
]


class ExpireCountsNothing(InProcessMemory):
    __slots__ = ()

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        await super().expire(scope, before=before)
        return 0


class ExpireAcceptsNaiveCutoffs(InProcessMemory):
    """Reads a naive cutoff as UTC, as a driver that drops time zones would."""

    __slots__ = ()

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        if before.tzinfo is None:
            before = before.replace(tzinfo=UTC)
        return await super().expire(scope, before=before)


class ExpireSkipsRestoredTimes(broken.Correct):
    """Judges facts by when they were written here, as an 'inserted_at' column would."""

    __slots__ = ()

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        if validate_cutoff(before) < datetime.now(UTC) - timedelta(days=1):
            return 0
        return await super().expire(scope, before=before)


class ExpireRefusesWhileWritten(broken.Correct):
    """Works in steps and gives up, deleting nothing, when the store was written meanwhile."""

    __slots__ = ("_writes",)

    def __init__(self) -> None:
        super().__init__()
        self._writes = 0

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        self._writes += 1
        return await super().remember(scope, end_user_id, content)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        seen = self._writes
        for _ in range(100):
            # One step of work each, as batches would be.
            await anyio.lowlevel.checkpoint()
        if self._writes != seen:
            raise StoreUnavailableError("expire", "busy", may_have_taken_effect=False)
        return await super().expire(scope, before=before)


class ExpireRaisesValueErrorForNaiveCutoffs(InProcessMemory):
    __slots__ = ()

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        if before.tzinfo is None:
            raise ValueError("naive datetime")
        return await super().expire(scope, before=before)


class RememberRefusedDuringExpire(broken.Correct):
    """Refuses writes while an expiry works through its steps, as a table lock would."""

    __slots__ = ("_expiring",)

    def __init__(self) -> None:
        super().__init__()
        self._expiring = 0

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        if self._expiring:
            raise StoreUnavailableError("remember", "table locked", may_have_taken_effect=False)
        return await super().remember(scope, end_user_id, content)

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        self._expiring += 1
        try:
            for _ in range(100):
                await anyio.lowlevel.checkpoint()
            return await super().expire(scope, before=before)
        finally:
            self._expiring -= 1


class ExpiresWithoutRestoring(InProcessMemory):
    __slots__ = ()
    restore = restore_many = None  # type: ignore[assignment]


_EXACT = "test_rule14_expire_deletes_exactly_the_tenants_older_facts"
_CUTOFF = "test_rule14_the_cutoff_is_exact_to_the_microsecond"
_RESTORED = "test_rule14_restored_facts_are_judged_by_their_own_time"
_REFUSED = "test_rule14_invalid_cutoffs_and_tenants_are_refused_and_change_nothing"
_MEANWHILE = "test_rule14_calls_made_meanwhile_keep_working"

# Retention the kit judges wrong, in the same columns.
_BROKEN_EXPIRERS = [
    (broken.ExpiresAtTheCutoff, _CUTOFF, 14, "at a fact's created_at deleted it"),
    (broken.ExpiresAtTheCutoff, _EXACT, 14, "count_expired counted"),
    (broken.ExpireOnlyHides, _EXACT, 14, "rows stored"),
    (broken.ExpireOnlyHides, _CUTOFF, 14, "still stored"),
    (broken.ExpiresAcrossCase, _EXACT, 14, "expire returned"),
    (ExpireCountsNothing, _EXACT, 14, "expire returned 0"),
    (ExpireAcceptsNaiveCutoffs, _REFUSED, 14, "expire with a naive cutoff answered"),
    (ExpireSkipsRestoredTimes, _RESTORED, 14, "restored facts were older than the cutoff"),
    (ExpireRefusesWhileWritten, _MEANWHILE, 14, "raised StoreUnavailableError"),
    (
        ExpireRaisesValueErrorForNaiveCutoffs,
        _REFUSED,
        14,
        "expire with a naive cutoff raised ValueError; it must raise InvalidInputError",
    ),
    (
        RememberRefusedDuringExpire,
        _MEANWHILE,
        14,
        "a call made during expire raised StoreUnavailableError",
    ),
]


class LimitCountedBeforeValidating(broken.Correct):
    """Compares the count with max_facts before checking max_facts: a full key answers None."""

    __slots__ = ()

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        if len(await self.recall(scope, end_user_id)) >= max_facts:
            return None
        return await super().remember_within_limit(scope, end_user_id, content, max_facts=max_facts)


class LimitChecksMaxFactsFirst(broken.Correct):
    """Checks max_facts before the key and the content: the wrong argument is named."""

    __slots__ = ()

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        validate_max_facts(max_facts)
        return await super().remember_within_limit(scope, end_user_id, content, max_facts=max_facts)


class LimitAnswersTrue(broken.Correct):
    __slots__ = ()

    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        fact = await super().remember_within_limit(scope, end_user_id, content, max_facts=max_facts)
        return True if fact is not None else None  # type: ignore[return-value]


_BELOW_AND_AT = "test_rule15_below_the_limit_it_adds_as_remember_does_and_at_it_adds_nothing"
_PLAIN = "test_rule15_facts_remembered_plainly_count_toward_the_limit"
_LIMIT_REFUSED = "test_rule15_invalid_input_is_refused_and_stores_nothing"
_TASKS = "test_rule15_many_tasks_at_once_never_pass_the_limit"
_OWN_LOOPS = "test_rule15_threads_with_their_own_event_loops_never_pass_the_limit"
_LIMIT_CHECKS = (_BELOW_AND_AT, _PLAIN, _LIMIT_REFUSED, _TASKS, _OWN_LOOPS)

# Limits the kit judges wrong, in the same columns.
_BROKEN_LIMITS = [
    (broken.RacyLimit, _TASKS, 15, r"20 remember_within_limit calls .* left 20 fact\(s\)"),
    (broken.RacyLimit, _OWN_LOOPS, 15, r"24 remember_within_limit calls .* left \d+ fact"),
    (broken.IgnoresTheLimit, _BELOW_AND_AT, 15, "max_facts=0 returned a fact"),
    (broken.IgnoresTheLimit, _PLAIN, 15, "returned a fact; it must return None"),
    (broken.IgnoresTheLimit, _TASKS, 15, "left 20 fact"),
    (broken.IgnoresTheLimit, _OWN_LOOPS, 15, "left 24 fact"),
    (broken.StoresWhenRefusing, _BELOW_AND_AT, 15, "returned None but changed the key's facts"),
    (broken.StoresWhenRefusing, _PLAIN, 15, "returned None but changed the key's facts"),
    (broken.StoresWhenRefusing, _TASKS, 15, "left 20 fact"),
    (
        broken.LimitCountsEveryFactEverAdded,
        _BELOW_AND_AT,
        15,
        "holding 3 of max_facts=4 returned None; it must add the fact",
    ),
    (
        LimitCountedBeforeValidating,
        _LIMIT_REFUSED,
        15,
        r"max_facts -1 on key \('acme', 'user-2'\) was accepted; it must raise InvalidInputError",
    ),
    (
        LimitChecksMaxFactsFirst,
        _LIMIT_REFUSED,
        15,
        (
            "a bad end_user_id, content and max_facts raised InvalidInputError; it must raise "
            "InvalidKeyError"
        ),
    ),
    (LimitAnswersTrue, _BELOW_AND_AT, 15, "returned a bool, neither a Memory nor None"),
]


@pytest.mark.parametrize(
    ("store_class", "check", "rule", "words"),
    [
        *_BROKEN_CALLS,
        *_BROKEN_PAGERS_AND_TIMES,
        *_BROKEN_EXPIRERS,
        *_BROKEN_LIMITS,
        (
            broken.IgnoresClose,
            "test_rule7_every_call_after_close_raises_and_changes_nothing",
            7,
            "remember on a closed store returned",
        ),
        (
            broken.IgnoresClose,
            "test_rule7_async_with_returns_the_store_and_closes_it",
            7,
            "remember on a closed store returned",
        ),
        (
            NamesAnotherOperation,
            "test_rule7_a_closed_store_stays_closed",
            7,
            "naming the operation 'query'",
        ),
        (
            SwallowsErrors,
            "test_rule7_leaving_async_with_by_an_error_closes_the_store",
            7,
            "swallowed the error",
        ),
        (
            EraseRaisesRuntimeErrorAfterClose,
            "test_rule8_no_foreign_exception_escapes_a_closed_store",
            8,
            "erase with valid input on a closed store raised RuntimeError",
        ),
        (
            EraseRaisesRuntimeErrorAfterClose,
            "test_rule7_every_call_after_close_raises_and_changes_nothing",
            8,
            "erase on a closed store raised RuntimeError",
        ),
        (
            ClosedErrorLosesAttribute,
            "test_rule8_errors_survive_pickling",
            8,
            (
                r"the ClosedAtError of forget on a closed store lost or changed "
                r"attribute\(s\) \['where'\]"
            ),
        ),
        (
            UnpicklableError,
            "test_rule8_errors_survive_pickling",
            8,
            (
                r"the TwoArgumentsError of remember on a closed store cannot be pickled and "
                r"unpickled \(TypeError\)"
            ),
        ),
        (
            broken.CancelledRememberLandsLater,
            "test_rule9_a_cancelled_remember_never_lands_after_erase",
            9,
            "right after erase returned",
        ),
        (
            broken.CancelledRememberLandsLater,
            "test_rule9_writers_cancelled_mid_way_leave_nothing_after_erase",
            9,
            "right after erase returned",
        ),
        (
            CancellationBecomesUnavailable,
            "test_rule9_a_cancelled_forget_is_decided_when_the_caller_sees_it",
            9,
            "raised StoreUnavailableError instead of letting the cancellation through",
        ),
        (
            ListsCaseInsensitively,
            "test_rule10_listed_keys_are_exactly_those_holding_facts",
            10,
            r"end_users\('acme'\) returned",
        ),
        (
            RestoreAnswersTrueAgain,
            "test_rule11_restoring_again_changes_nothing_and_a_taken_id_is_refused",
            11,
            "restore of the same fact again returned True, not False",
        ),
        (
            RestoresPartOfABatch,
            "test_rule11_restore_many_refuses_a_batch_whole",
            11,
            "a refused restore_many of a batch with a taken id at its end stored some",
        ),
        (
            broken.CountsEmptiedEndUsers,
            "test_rule12_counts_are_what_recall_returns_for_each_end_user",
            12,
            r"erasing a third key, fact_counts\('ac_e'\) returned \{'user-4': 0\}, not \{\}",
        ),
        (
            CountsAcrossCase,
            "test_rule12_counts_are_what_recall_returns_for_each_end_user",
            12,
            r"after remembering 1 to 3 facts on each key, fact_counts\('Acme'\) returned",
        ),
        (
            CountsInCaseInsensitiveOrder,
            "test_rule12_counts_are_what_recall_returns_for_each_end_user",
            12,
            r"fact_counts\('acme'\) gave the end users in the order .*, not in code-point order",
        ),
        (
            CountsTrueForOneFact,
            "test_rule12_counts_are_what_recall_returns_for_each_end_user",
            12,
            "returned entries of str: bool, not str: int",
        ),
        (
            CountsAnInvalidTenantAsEmpty,
            "test_rule12_fact_counts_refuses_an_invalid_scope",
            12,
            "fact_counts of an empty tenant answered; it must raise InvalidKeyError",
        ),
        (
            HandsOutItsOwnCounts,
            "test_rule12_the_counts_are_the_callers_own",
            12,
            r"after the caller changed the mapping .* returned \{'intruder': 7, 'user-1': 3\}",
        ),
    ],
)
async def test_a_broken_store_is_named_with_its_rule(  # noqa: PLR0917 - parametrized.
    tmp_path: Path,
    anyio_backend: str,
    store_class: type[InProcessMemory],
    check: str,
    rule: int,
    words: str,
) -> None:
    contract = prepared(store_class, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match=words) as info:
        await getattr(contract, check)()
    assert info.value.rule == rule


_CAPABILITY_CHECKS = (
    "test_rule10_listed_keys_are_exactly_those_holding_facts",
    "test_rule10_end_users_refuses_an_invalid_scope",
    "test_rule11_restored_facts_keep_id_content_time_and_order",
    "test_rule11_restoring_again_changes_nothing_and_a_taken_id_is_refused",
    "test_rule11_restore_many_keeps_order_and_skips_held_facts",
    "test_rule11_restore_many_refuses_a_batch_whole",
    "test_rule12_counts_are_what_recall_returns_for_each_end_user",
    "test_rule12_fact_counts_refuses_an_invalid_scope",
    "test_rule12_the_counts_are_the_callers_own",
    "test_rule11_times_at_the_ends_of_the_range_read_back_exactly",
    "test_rule13_pages_of_every_size_join_into_recall",
    "test_rule13_a_page_resumes_after_any_fact_the_key_holds",
    "test_rule13_an_after_the_key_does_not_hold_is_stale",
    "test_rule13_invalid_arguments_are_refused_and_change_nothing",
    "test_rule13_pages_touch_only_their_own_key",
    *_LIMIT_CHECKS,
)


@pytest.mark.parametrize("check", _CAPABILITY_CHECKS)
async def test_capability_checks_pass_a_capable_store(
    tmp_path: Path, anyio_backend: str, check: str
) -> None:
    await getattr(prepared(broken.Correct, tmp_path, anyio_backend), check)()


_COUNTS = "test_rule12_counts_are_what_recall_returns_for_each_end_user"
_OWN = "test_rule12_the_counts_are_the_callers_own"


@pytest.mark.parametrize(
    ("store_class", "failing"),
    [
        # An emptied end user stays, with 0, in a later answer of either check.
        (broken.CountsEmptiedEndUsers, {_COUNTS, _OWN}),
        (CountsAcrossCase, {_COUNTS}),
        (CountsInCaseInsensitiveOrder, {_COUNTS}),
        (CountsTrueForOneFact, {_COUNTS, _OWN}),
        (CountsAnInvalidTenantAsEmpty, {"test_rule12_fact_counts_refuses_an_invalid_scope"}),
        # Refreshed in place, the mapping also keeps emptied end users.
        (HandsOutItsOwnCounts, {_COUNTS, _OWN}),
    ],
)
async def test_a_miscounting_store_fails_rule_12_alone(
    tmp_path: Path, anyio_backend: str, store_class: type[InProcessMemory], failing: set[str]
) -> None:
    # Every other capability check passes it: the blame lands on rule 12 only.
    contract = prepared(store_class, tmp_path, anyio_backend)
    failed: dict[str, int] = {}
    for check in _CAPABILITY_CHECKS:
        try:
            await getattr(contract, check)()
        except RuleViolationError as error:
            failed[check] = error.rule
    assert failed == dict.fromkeys(failing, 12)


@pytest.mark.parametrize(
    ("check", "capability"),
    [
        ("test_rule10_listed_keys_are_exactly_those_holding_facts", "ListsEndUsers"),
        ("test_rule11_restored_facts_keep_id_content_time_and_order", "RestoresFacts"),
        ("test_rule12_counts_are_what_recall_returns_for_each_end_user", "CountsFacts"),
        ("test_rule12_fact_counts_refuses_an_invalid_scope", "CountsFacts"),
        ("test_rule12_the_counts_are_the_callers_own", "CountsFacts"),
        ("test_rule11_times_at_the_ends_of_the_range_read_back_exactly", "RestoresFacts"),
        ("test_rule13_pages_of_every_size_join_into_recall", "PagesFacts"),
        ("test_rule13_a_page_resumes_after_any_fact_the_key_holds", "PagesFacts"),
        ("test_rule13_an_after_the_key_does_not_hold_is_stale", "PagesFacts"),
        ("test_rule13_invalid_arguments_are_refused_and_change_nothing", "PagesFacts"),
        ("test_rule13_pages_touch_only_their_own_key", "PagesFacts"),
        (_EXACT, "ExpiresFacts"),
        (_CUTOFF, "ExpiresFacts"),
        (_RESTORED, "ExpiresFacts"),
        (_REFUSED, "ExpiresFacts"),
        (_MEANWHILE, "ExpiresFacts"),
        *((check, "RemembersWithinLimit") for check in _LIMIT_CHECKS),
    ],
)
async def test_a_missing_capability_is_reported_as_not_applicable(
    tmp_path: Path, anyio_backend: str, check: str, capability: str
) -> None:
    contract = prepared(WithoutCapabilities, tmp_path, anyio_backend)
    not_applicable = f"not applicable: .* {capability}, an optional"
    with pytest.raises(pytest.skip.Exception, match=not_applicable):
        await getattr(contract, check)()


async def test_a_closed_store_closed_again_by_open_store_is_fine(
    tmp_path: Path, anyio_backend: str
) -> None:
    # The lifecycle checks close the store; open_store closing it again on
    # its way out must not fail the check.
    class ClosesOnExit(Against):
        @asynccontextmanager
        async def open_store(self) -> AsyncIterator[MemoryStore]:
            async with InProcessMemory() as store:
                yield store

    contract = ClosesOnExit()
    contract._prepare(tmp_path, anyio_backend)
    await contract.test_rule7_closing_twice_is_harmless()
    await contract.test_rule8_errors_survive_pickling()


async def test_retention_of_restored_times_needs_restoring(
    tmp_path: Path, anyio_backend: str
) -> None:
    contract = prepared(ExpiresWithoutRestoring, tmp_path, anyio_backend)
    with pytest.raises(pytest.skip.Exception, match=r"not applicable: .* RestoresFacts"):
        await contract.test_rule14_restored_facts_are_judged_by_their_own_time()
