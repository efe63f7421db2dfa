"""Adapters that each break one rule of the port, and the correct one they build on.

Every adapter is the in-process adapter with exactly one deliberate defect,
written the way such a defect tends to appear in a real backend. The single
checks of this distribution's tests call the kit against some of them;
``tests-integration/conformance`` runs the whole kit against each, in a
pytest process of its own, and names them all.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar, cast
from uuid import uuid4

import anyio
import anyio.lowlevel

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.inproc._facts import Facts
from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    Scope,
    StalePageError,
    StoreClosedError,
    memory_key,
    validate_content,
    validate_cutoff,
    validate_limit,
    validate_max_facts,
    validate_memory_id,
    validate_page,
    validate_restored_id,
    validate_scope,
)

_MICROSECOND = timedelta(microseconds=1)

_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])


def refuses_when_closed(method: _Method) -> _Method:
    """Keep the lifecycle of rule 7 in a method an adapter below overrides.

    Each adapter has exactly one defect; without this, every overridden
    method would also go on working after close, a second defect.
    """

    @functools.wraps(method)
    async def guarded(self: InProcessMemory, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise StoreClosedError(method.__name__)
        return await method(self, *args, **kwargs)

    return cast("_Method", guarded)


class Correct(InProcessMemory):
    """The in-process adapter, with every optional capability: the kit must pass it."""

    __slots__ = ()

    def stored_rows(self, key: MemoryKey) -> int:
        """The backdoor: rows held for ``key``, hidden ones included."""
        return len(self._facts.get(key, {}))

    def _hold(self, fact: Memory, operation: str) -> None:
        """Keep ``fact`` as the adapter keeps a new one: the only write below its checks."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(operation)
            self._add_locked(fact)


class NewestFirst(Correct):
    """Rule 3: recall hands back the newest fact first."""

    __slots__ = ()

    @refuses_when_closed
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        facts = tuple(reversed(await super().recall(scope, end_user_id)))
        limit = validate_limit(limit)
        return facts if limit is None else facts[:limit]


class LimitTakesNewest(Correct):
    """Rule 3: limit=n selects the n newest facts instead of the n oldest."""

    __slots__ = ()

    @refuses_when_closed
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        facts = await super().recall(scope, end_user_id)
        limit = validate_limit(limit)
        if limit is None:
            return facts
        return facts[len(facts) - limit :] if limit else ()


class OrdersByTimestamp(Correct):
    """Rule 3: orders by timestamp, then by id as text, as a naive SQL query would.

    Every fact gets the same timestamp, as with a database's transaction time,
    and ids count up ("1", "2", ...), so "10" sorts before "9". Deterministic,
    so a property check that finds it finds it again.
    """

    __slots__ = ("_ids", "_now")

    def __init__(self) -> None:
        super().__init__()
        self._ids = itertools.count(1)
        self._now = datetime.now(UTC)

    @refuses_when_closed
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        fact = Memory(str(next(self._ids)), key, validate_content(content), self._now)
        self._hold(fact, "remember")
        return fact

    @refuses_when_closed
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        facts = sorted(await super().recall(scope, end_user_id), key=lambda m: (m.created_at, m.id))
        limit = validate_limit(limit)
        return tuple(facts if limit is None else facts[:limit])


class Deduplicating(Correct):
    """Rule 1: remembering content already stored returns the stored fact."""

    __slots__ = ()

    @refuses_when_closed
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        for fact in await self.recall(scope, end_user_id):
            if fact.content == validate_content(content):
                return fact
        return await super().remember(scope, end_user_id, content)


class StripsContent(Correct):
    """Rule 1: content is trimmed before it is stored."""

    __slots__ = ()

    @refuses_when_closed
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await super().remember(scope, end_user_id, validate_content(content).strip())


class ForgetIgnoresKey(Correct):
    """Rule 2: forget deletes a fact by id alone, whoever it belongs to."""

    __slots__ = ()

    @refuses_when_closed
    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        with self._lock:
            for facts in self._facts.values():
                if facts.discard(memory_id):
                    return True
        return False


class ForgetRaisesOnMissing(Correct):
    """Rule 2: forget of an id that is not there raises instead of answering False."""

    __slots__ = ()

    @refuses_when_closed
    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        if not await super().forget(scope, end_user_id, memory_id):
            raise LookupError("no such fact")
        return True


class EraseLeavesOne(Correct):
    """Rule 4: erase deletes every fact but the newest."""

    __slots__ = ()

    @refuses_when_closed
    async def erase(self, scope: Scope, end_user_id: str) -> int:
        facts = await self.recall(scope, end_user_id)
        for fact in facts[:-1]:
            await self.forget(scope, end_user_id, fact.id)
        return max(len(facts) - 1, 0)


class SoftDelete(Correct):
    """Rules 2 and 4: forget only hides a fact, and erase still counts hidden ones."""

    __slots__ = ("_hidden",)

    def __init__(self) -> None:
        super().__init__()
        self._hidden: set[str] = set()

    @refuses_when_closed
    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        with self._lock:
            if memory_id in self._hidden or memory_id not in self._facts.get(key, {}):
                return False
            self._hidden.add(memory_id)
            return True

    @refuses_when_closed
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        visible = [m for m in await super().recall(scope, end_user_id) if m.id not in self._hidden]
        limit = validate_limit(limit)
        return tuple(visible if limit is None else visible[:limit])


class DropsTheTenant(Correct):
    """Rule 5: facts are filed under the end user alone, so tenants share them."""

    __slots__ = ()

    @staticmethod
    def _shared(scope: Scope, end_user_id: str) -> tuple[str, str]:
        return ("shared", memory_key(scope, end_user_id).end_user_id)

    @refuses_when_closed
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        fact = await super().remember(*self._shared(scope, end_user_id), content)
        # The returned fact still shows the caller's key, which hides the bug.
        return Memory(fact.id, memory_key(scope, end_user_id), fact.content, fact.created_at)

    @refuses_when_closed
    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return await super().forget(*self._shared(scope, end_user_id), memory_id)

    @refuses_when_closed
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        key = memory_key(scope, end_user_id)
        facts = await super().recall(*self._shared(scope, end_user_id), limit=limit)
        return tuple(Memory(m.id, key, m.content, m.created_at) for m in facts)

    @refuses_when_closed
    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await super().erase(*self._shared(scope, end_user_id))

    def stored_rows(self, key: MemoryKey) -> int:
        return len(self._facts.get(MemoryKey("shared", key.end_user_id), {}))


class ValidatesAfterStoring(Correct):
    """Rule 6: the fact is written first and its content validated afterwards."""

    __slots__ = ()

    @refuses_when_closed
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        fact = Memory(uuid4().hex, key, content, datetime.now(UTC))
        self._hold(fact, "remember")
        validate_content(content)
        return fact


class LosesConcurrentWrites(Correct):
    """Rule 1: remember copies the key's facts, yields, then writes the copy back."""

    __slots__ = ()

    @refuses_when_closed
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        facts = Facts()
        for held in self._facts.get(key, {}).values():
            facts.add(held)
        # A round trip to a database would yield here too; a concurrent
        # remember lands in between and is overwritten below.
        await anyio.lowlevel.checkpoint()
        fact = Memory(uuid4().hex, key, content, datetime.now(UTC))
        facts.add(fact)
        self._facts[key] = facts
        return fact


class IgnoresClose(Correct):
    """Rule 7: aclose() does nothing, so a closed store goes on working."""

    __slots__ = ()

    async def aclose(self) -> None:
        pass


class RuntimeErrorAfterClose(Correct):
    """Rule 8: a closed store raises RuntimeError, as a bare driver would."""

    __slots__ = ()

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise RuntimeError("cannot operate on a closed database")

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        self._refuse_if_closed()
        return await super().remember(scope, end_user_id, content)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        self._refuse_if_closed()
        return await super().forget(scope, end_user_id, memory_id)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        self._refuse_if_closed()
        return await super().recall(scope, end_user_id, limit=limit)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        self._refuse_if_closed()
        return await super().erase(scope, end_user_id)


class ClosedAtError(StoreClosedError):
    """An adapter's own closed error, with an attribute the port's pickling does not know."""

    def __init__(self, operation: str, where: str) -> None:
        super().__init__(operation)
        self.where = where


class ErrorsLoseAttributes(Correct):
    """Rule 8: the closed error adds an attribute, and unpickles with it wrong."""

    __slots__ = ()

    def _refuse_if_closed(self, operation: str) -> None:
        if self._closed:
            raise ClosedAtError(operation, where="in-process table")

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        self._refuse_if_closed("remember")
        return await super().remember(scope, end_user_id, content)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        self._refuse_if_closed("forget")
        return await super().forget(scope, end_user_id, memory_id)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        self._refuse_if_closed("recall")
        return await super().recall(scope, end_user_id, limit=limit)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        self._refuse_if_closed("erase")
        return await super().erase(scope, end_user_id)


class _LandsLater(Correct):
    """A statement sent before a cancellation arrived takes effect at the next call.

    As with a driver that stops waiting for the server when cancelled while
    the server goes on to commit: the effect lands after later calls, even
    after a later erase of the same key.
    """

    __slots__ = ("_in_flight",)

    def __init__(self) -> None:
        super().__init__()
        self._in_flight: list[Callable[[], object]] = []

    async def _send(self, statement: Callable[[], object]) -> None:
        try:
            # The round trip, which the cancellation interrupts.
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            self._in_flight.append(statement)
            raise
        statement()

    def _land(self) -> None:
        landing = self._in_flight.copy()
        self._in_flight.clear()
        for statement in landing:
            statement()

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        try:
            return await super().recall(scope, end_user_id, limit=limit)
        finally:
            self._land()

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        try:
            return await super().erase(scope, end_user_id)
        finally:
            self._land()


class CancelledRememberLandsLater(_LandsLater):
    """Rule 9: a cancelled remember stores its fact later, after a later erase returned."""

    __slots__ = ()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        fact = Memory(uuid4().hex, key, validate_content(content), datetime.now(UTC))

        def insert() -> None:
            self._hold(fact, "remember")

        await self._send(insert)
        return fact


class CancelledForgetLandsLater(_LandsLater):
    """Rule 9: a cancelled forget deletes its fact later, after a later recall returned."""

    __slots__ = ()

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        deleted: list[bool] = []

        def delete() -> None:
            with self._lock:
                if self._closed:
                    raise StoreClosedError("forget")
                facts = self._facts.get(key)
                deleted.append(facts is not None and facts.discard(memory_id))
                if facts is not None and not facts:
                    del self._facts[key]

        await self._send(delete)
        return deleted[0]


class _KeepsEveryKey(Correct):
    """Keeps every key that ever held a fact, as a separate users table would."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[MemoryKey] = set()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        fact = await super().remember(scope, end_user_id, content)
        self._seen.add(fact.key)
        return fact

    def _seen_in(self, scope: Scope) -> set[MemoryKey]:
        tenant = memory_key(scope, "anyone").tenant
        return {key for key in self._seen if key.tenant == tenant}


class ListsEmptiedKeys(_KeepsEveryKey):
    """Rule 10: every key that ever held a fact stays listed."""

    __slots__ = ()

    async def tenants(self) -> tuple[str, ...]:
        return tuple(sorted({key.tenant for key in self._seen}))

    async def end_users(self, scope: Scope) -> tuple[str, ...]:
        return tuple(sorted(key.end_user_id for key in self._seen_in(scope)))


class CountsEmptiedEndUsers(_KeepsEveryKey):
    """Rule 12: an end user whose facts are all gone is still counted, with 0."""

    __slots__ = ()

    async def fact_counts(self, scope: Scope) -> dict[str, int]:
        held = await super().fact_counts(scope)
        emptied = {key.end_user_id: 0 for key in self._seen_in(scope)}
        return dict(sorted((emptied | held).items()))


class RestoreOverwrites(Correct):
    """Rule 11: restore writes whatever it is given, over a fact with the same id."""

    __slots__ = ()

    async def restore(self, memory: Memory) -> bool:
        validate_restored_id(memory.id)
        validate_content(memory.content)
        with self._lock:
            for facts in self._facts.values():
                facts.discard(memory.id)
        self._hold(memory, "restore")
        return True


class _PagerByPosition(Correct):
    """Pages cut out of recall by position, starting ``_resume`` places after 'after'."""

    __slots__ = ()
    _resume: ClassVar[int] = 1

    @refuses_when_closed
    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        after, size = validate_page(after, size)
        facts = await self.recall(scope, end_user_id)
        ids = [fact.id for fact in facts]
        if after is not None and after not in ids:
            raise StalePageError
        start = 0 if after is None else ids.index(after) + self._resume
        return facts[start : start + size]


class PagerSkipsAtPageBoundaries(_PagerByPosition):
    """Rule 13: a page resumes one fact too late, as an off-by-one in an offset would."""

    __slots__ = ()
    _resume = 2


class PagerRepeatsAtPageBoundaries(_PagerByPosition):
    """Rule 13: a page starts with the fact 'after' names, as '>=' instead of '>' would."""

    __slots__ = ()
    _resume = 0


class PagerIgnoresAStaleAfter(Correct):
    """Rule 13: an 'after' the key does not hold starts again from the oldest fact."""

    __slots__ = ()

    @refuses_when_closed
    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        try:
            return await super().recall_page(scope, end_user_id, after=after, size=size)
        except StalePageError:
            return await super().recall_page(scope, end_user_id, size=size)


class RestoreLosesMicroseconds(Correct):
    """Rule 11: a time far from 1970 loses its microseconds, as a float of seconds would."""

    __slots__ = ()

    @staticmethod
    def _rounded(memory: Memory) -> Memory:
        when = memory.created_at
        if 1900 <= when.year <= 2200:
            return memory
        return Memory(memory.id, memory.key, memory.content, when.replace(microsecond=0))

    async def restore(self, memory: Memory) -> bool:
        return await super().restore(self._rounded(memory))

    async def restore_many(self, memories: Iterable[Memory]) -> int:
        return await super().restore_many([self._rounded(memory) for memory in memories])


class ExpiresAtTheCutoff(Correct):
    """Rule 14: a fact created at the cutoff is expired too, as '<=' instead of '<' would."""

    __slots__ = ()

    @refuses_when_closed
    async def expire(self, scope: Scope, *, before: datetime) -> int:
        tenant = validate_scope(scope)
        cutoff = validate_cutoff(before)
        deleted = 0
        with self._lock:
            for key in [key for key in self._facts if key.tenant == tenant]:
                old = [m.id for m in self._facts[key].values() if m.created_at <= cutoff]
                deleted += self._expire_locked(key, old, cutoff + _MICROSECOND)
        return deleted

    @refuses_when_closed
    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        tenant = validate_scope(scope)
        cutoff = validate_cutoff(before)
        with self._lock:
            return sum(
                memory.created_at <= cutoff
                for key, facts in self._facts.items()
                if key.tenant == tenant
                for memory in facts.values()
            )


class ExpireOnlyHides(Correct):
    """Rule 14: expired facts are hidden from recall and counted, but their rows stay."""

    __slots__ = ("_hidden",)

    def __init__(self) -> None:
        super().__init__()
        self._hidden: set[str] = set()

    @refuses_when_closed
    async def expire(self, scope: Scope, *, before: datetime) -> int:
        tenant = validate_scope(scope)
        cutoff = validate_cutoff(before)
        with self._lock:
            old = {
                memory.id
                for key, facts in self._facts.items()
                if key.tenant == tenant
                for memory in facts.values()
                if memory.created_at < cutoff and memory.id not in self._hidden
            }
            self._hidden |= old
        return len(old)

    @refuses_when_closed
    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return await super().count_expired(scope, before=before) - len(
            self._hidden_of(validate_scope(scope))
        )

    def _hidden_of(self, tenant: str) -> set[str]:
        with self._lock:
            return {
                memory_id
                for key, facts in self._facts.items()
                if key.tenant == tenant
                for memory_id in facts
                if memory_id in self._hidden
            }

    @refuses_when_closed
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        visible = [m for m in await super().recall(scope, end_user_id) if m.id not in self._hidden]
        limit = validate_limit(limit)
        return tuple(visible if limit is None else visible[:limit])


class ExpiresAcrossCase(Correct):
    """Rule 14: tenants are compared case-insensitively, as a case-insensitive collation would."""

    __slots__ = ()

    @refuses_when_closed
    async def expire(self, scope: Scope, *, before: datetime) -> int:
        tenant = validate_scope(scope).casefold()
        with self._lock:
            tenants = {key.tenant for key in self._facts if key.tenant.casefold() == tenant}
        # A loop, not a comprehension: before Python 3.12 a comprehension is a
        # scope of its own, where super() without arguments fails.
        deleted = 0
        for name in sorted(tenants):
            deleted += await super().expire(name, before=before)
        return deleted


class _LimitOfItsOwn(Correct):
    """Checks the input of remember_within_limit as the port asks, then limits in ``_within``."""

    __slots__ = ()

    @refuses_when_closed
    async def remember_within_limit(
        self, scope: Scope, end_user_id: str, content: str, *, max_facts: int
    ) -> Memory | None:
        memory_key(scope, end_user_id)
        validate_content(content)
        return await self._within(scope, end_user_id, content, validate_max_facts(max_facts))

    async def _within(
        self, scope: Scope, end_user_id: str, content: str, max_facts: int
    ) -> Memory | None:
        raise NotImplementedError


class RacyLimit(_LimitOfItsOwn):
    """Rule 15: counts with recall, yields (a round trip would), then remembers: two steps."""

    __slots__ = ()

    async def _within(
        self, scope: Scope, end_user_id: str, content: str, max_facts: int
    ) -> Memory | None:
        held = len(await self.recall(scope, end_user_id))
        # Another caller counts the same facts here, before this one adds.
        await anyio.lowlevel.checkpoint()
        if held >= max_facts:
            return None
        return await self.remember(scope, end_user_id, content)


class IgnoresTheLimit(_LimitOfItsOwn):
    """Rule 15: max_facts is checked, then never compared: every call adds."""

    __slots__ = ()

    async def _within(
        self, scope: Scope, end_user_id: str, content: str, max_facts: int
    ) -> Memory | None:
        return await self.remember(scope, end_user_id, content)


class StoresWhenRefusing(_LimitOfItsOwn):
    """Rule 15: adds first and counts afterwards: the answer is None, the fact stays stored."""

    __slots__ = ()

    async def _within(
        self, scope: Scope, end_user_id: str, content: str, max_facts: int
    ) -> Memory | None:
        fact = await self.remember(scope, end_user_id, content)
        return None if len(await self.recall(scope, end_user_id)) > max_facts else fact


class LimitCountsEveryFactEverAdded(_LimitOfItsOwn):
    """Rule 15: counts the facts ever added, as a sequence number would: forget frees no place."""

    __slots__ = ("_added",)

    def __init__(self) -> None:
        super().__init__()
        self._added: dict[MemoryKey, int] = {}

    async def _within(
        self, scope: Scope, end_user_id: str, content: str, max_facts: int
    ) -> Memory | None:
        key = memory_key(scope, end_user_id)
        held = max(self._added.get(key, 0), len(await self.recall(scope, end_user_id)))
        if held >= max_facts:
            return None
        self._added[key] = held + 1
        return await self.remember(scope, end_user_id, content)
