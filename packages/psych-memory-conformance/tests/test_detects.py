"""Single checks, called directly against small faulty stores, name the broken rule.

The full proof (every rule, a pytest process of its own, the report read back)
lives in ``tests-integration/conformance``; these run in this process and
show how each kind of fault is worded.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import pytest

from psych_runtime.memory.conformance import MemoryStoreContract, RuleViolationError
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    InvalidContentError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
)

pytestmark = pytest.mark.anyio


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


def prepared(store_class: type[InProcessMemory], tmp_path: Path, backend: str) -> Against:
    contract: Against = type("Contract", (Against,), {"store_class": store_class})()
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


class ForgetRaises(InProcessMemory):
    __slots__ = ()

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        if not await super().forget(scope, end_user_id, memory_id):
            raise LookupError("no such fact")
        return True


class ForgetAnswersInt(InProcessMemory):
    __slots__ = ()

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return int(await super().forget(scope, end_user_id, memory_id))  # type: ignore[return-value]


class NewestFirst(InProcessMemory):
    __slots__ = ()

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        facts = tuple(reversed(await super().recall(scope, end_user_id)))
        limit = validate_limit(limit)
        return facts if limit is None else facts[:limit]


class EraseCountsNothing(InProcessMemory):
    __slots__ = ()

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        await super().erase(scope, end_user_id)
        return 0


class CountingIds(InProcessMemory):
    """Correct, with ids "1", "2", ...: the kit does not assume any id format."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        super().__init__()
        self._ids = itertools.count(1)

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        fact = Memory(str(next(self._ids)), key, validate_content(content), datetime.now(UTC))
        with self._lock:
            self._facts.setdefault(key, {})[fact.id] = fact
        return fact


async def test_a_wrong_exception_type_breaks_rule_6(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(WrongErrorType, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="raised ValueError; it must raise") as info:
        await contract.test_rule6_invalid_content_is_refused_and_stores_nothing()
    assert info.value.rule == 6


async def test_repeating_the_value_breaks_rule_6(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(EchoesTheValue, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="repeats the value") as info:
        await contract.test_rule6_invalid_content_is_refused_and_stores_nothing()
    assert info.value.rule == 6


async def test_not_naming_the_argument_breaks_rule_6(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(ForgetsTheArgumentName, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="does not name the argument 'scope'"):
        await contract.test_rule6_invalid_keys_are_refused_and_change_nothing()


async def test_accepting_a_negative_limit_breaks_rule_6(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(IgnoresNegativeLimit, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match=r"recall with limit -1 was accepted"):
        await contract.test_rule6_invalid_limit_is_refused()


async def test_forget_raising_breaks_rule_2(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(ForgetRaises, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="forget raised LookupError") as info:
        await contract.test_rule2_forget_of_an_unknown_id_is_false()
    assert info.value.rule == 2
    assert isinstance(info.value.__cause__, LookupError)


async def test_forget_answering_an_int_breaks_rule_2(tmp_path: Path, anyio_backend: str) -> None:
    contract = prepared(ForgetAnswersInt, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="forget returned int, not a bool"):
        await contract.test_rule2_forget_deletes_exactly_that_fact()


async def test_forget_raising_inside_a_property_check_breaks_rule_2(
    tmp_path: Path, anyio_backend: str
) -> None:
    contract = prepared(ForgetRaises, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="forget raised LookupError") as info:
        await contract.test_rule5_keys_are_compared_exactly()
    assert info.value.rule == 2


async def test_order_lost_under_concurrency_breaks_rule_3(
    tmp_path: Path, anyio_backend: str
) -> None:
    contract = prepared(NewestFirst, tmp_path, anyio_backend)
    with pytest.raises(RuleViolationError, match="out of order") as info:
        await contract.test_rule1_many_tasks_remembering_on_one_key_lose_no_fact()
    assert info.value.rule == 3


async def test_the_model_check_finds_a_wrong_erase_count(
    tmp_path: Path, anyio_backend: str
) -> None:
    contract = prepared(EraseCountsNothing, tmp_path, anyio_backend)
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
