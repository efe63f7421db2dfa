"""The rules adapters share: scopes, new ids, SQL limits, seconds and restore plans."""

from __future__ import annotations

import math
import os
import re
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    RestorePlan,
    bounded_limit,
    memory_key,
    new_memory_id,
    validate_scope,
    validate_seconds,
)

_MAX_SQL = 2**63 - 1
_TAKEN = "is already the id of a different fact in this store"


@dataclass(frozen=True)
class _Scope:
    tenant: object


def _outcome(call: object) -> tuple[object, ...]:
    try:
        return ("ok", call())  # type: ignore[operator]
    except (TypeError, InvalidKeyError) as exc:
        extra = exc.argument if isinstance(exc, InvalidKeyError) else None
        return (type(exc), str(exc), extra)


scopes = st.one_of(
    st.text(max_size=300),
    st.builds(_Scope, st.one_of(st.text(max_size=20), st.integers(), st.none())),
    st.integers(),
    st.none(),
)


@given(scopes)
def test_a_scope_is_read_and_refused_exactly_as_memory_key_reads_it(scope: object) -> None:
    tenant = _outcome(lambda: validate_scope(scope))  # type: ignore[arg-type]
    key = _outcome(lambda: memory_key(scope, "user").tenant)  # type: ignore[arg-type]
    assert tenant == key


def test_a_scope_is_named_in_its_errors() -> None:
    assert validate_scope("acme") == "acme"
    assert validate_scope(_Scope("acme")) == "acme"  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError) as plain:
        validate_scope("")
    assert plain.value.argument == "scope"
    with pytest.raises(InvalidKeyError) as held:
        validate_scope(_Scope(" acme"))  # type: ignore[arg-type]
    assert held.value.argument == "scope.tenant"
    with pytest.raises(TypeError, match="scope must be a str or an object"):
        validate_scope(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"scope\.tenant must be a str"):
        validate_scope(_Scope(42))  # type: ignore[arg-type]


def test_new_ids_are_128_random_bits_in_lowercase_hex_and_never_repeat() -> None:
    ids = [new_memory_id() for _ in range(5000)]
    assert all(re.fullmatch("[0-9a-f]{32}", memory_id) for memory_id in ids)
    assert len(set(ids)) == len(ids)
    # Every digit position varies: the bits are random, not a counter.
    for position in range(32):
        assert len({memory_id[position] for memory_id in ids}) == 16


def test_threads_sharing_new_ids_never_get_the_same_one() -> None:
    got: list[list[str]] = [[] for _ in range(8)]
    failures: list[BaseException] = []
    start = threading.Barrier(len(got))

    def draw(into: list[str]) -> None:
        start.wait()
        try:
            into.extend(new_memory_id() for _ in range(3000))
        except BaseException as exc:  # noqa: BLE001 - a failed draw is the finding.
            failures.append(exc)

    # Threads switched as often as the interpreter allows: other threads then
    # empty the shared ids between one thread's refill and its own draw.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=draw, args=(into,)) for into in got]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    every = [memory_id for into in got for memory_id in into]
    assert len(set(every)) == len(every) == 24_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    new_memory_id()  # ids are read ahead now
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(reader)
        os.write(writer, "".join(new_memory_id() for _ in range(4)).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        theirs = pipe.read()
    os.waitpid(child, 0)
    ours = "".join(new_memory_id() for _ in range(4))
    assert len(theirs) == 128
    assert {theirs[at : at + 32] for at in range(0, 128, 32)}.isdisjoint(
        {ours[at : at + 32] for at in range(0, 128, 32)}
    )


@given(st.one_of(st.none(), st.integers(min_value=0, max_value=2**80)))
def test_a_limit_becomes_a_64_bit_bound_that_changes_no_answer(limit: int | None) -> None:
    bound = bounded_limit(limit)
    assert 0 <= bound <= _MAX_SQL
    if limit is None or limit >= _MAX_SQL:
        assert bound == _MAX_SQL
    else:
        assert bound == limit


def test_the_bound_is_exactly_the_largest_signed_64_bit_integer() -> None:
    assert bounded_limit(None) == bounded_limit(2**63) == 2**63 - 1
    assert bounded_limit(2**63 - 1) == 2**63 - 1
    assert bounded_limit(0) == 0


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True)))
def test_seconds_are_positive_and_finite(value: float) -> None:
    if value > 0 and value < 2**1024 and math.isfinite(value):
        seconds = validate_seconds(value, "pool_timeout")
        assert type(seconds) is float
        assert seconds == float(value)
    else:
        with pytest.raises(
            ValueError, match=r"^pool_timeout must be a positive, finite number of seconds$"
        ):
            validate_seconds(value, "pool_timeout")


@pytest.mark.parametrize("value", [True, False, "5", None, [1]])
def test_seconds_of_another_type_are_a_type_error_naming_the_argument(value: object) -> None:
    with pytest.raises(TypeError, match=r"^lock_timeout must be a number of seconds, not "):
        validate_seconds(value, "lock_timeout")


def test_seconds_beyond_a_float_are_refused_not_an_overflow() -> None:
    with pytest.raises(ValueError, match="busy_timeout"):
        validate_seconds(10**400, "busy_timeout")
    assert validate_seconds(sys.float_info.max, "t") == sys.float_info.max


_KEY = MemoryKey("acme", "u1")
_AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _fact(memory_id: str, content: str = "likes tea", key: MemoryKey = _KEY) -> Memory:
    return Memory(memory_id, key, content, _AT)


def test_a_plan_keeps_each_distinct_fact_once_in_the_order_given() -> None:
    a, b = _fact("a"), _fact("b")
    plan = RestorePlan((a, b, _fact("a"), b), batch=True)
    assert plan.facts == (a, b)
    assert plan.facts[0] is a
    assert RestorePlan((), batch=True).facts == ()


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (_fact("a", "likes coffee"), "content"),
        (_fact("a", key=MemoryKey("acme", "u2")), "key"),
        (Memory("a", _KEY, "likes tea", _AT + timedelta(microseconds=1)), "created_at"),
    ],
)
def test_an_id_given_twice_to_different_facts_is_refused_naming_the_repeat(
    other: Memory, why: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        RestorePlan((_fact("x"), _fact("a"), _fact("a"), other), batch=True)
    assert caught.value.argument == "memories[3].id", why
    assert caught.value.rule == _TAKEN


def test_the_store_s_facts_decide_what_is_stored() -> None:
    a, b, c = _fact("a"), _fact("b"), _fact("c")
    plan = RestorePlan((a, b, c, b), batch=True)
    assert plan.to_store({}) == (a, b, c)
    # Held exactly: skipped, whatever object the store built for it.
    assert plan.to_store({"b": _fact("b")}) == (a, c)
    assert plan.to_store({"a": a, "b": b, "c": c}) == ()
    assert plan.to_store({"zz": _fact("zz", "other")}) == (a, b, c)


def test_an_id_the_store_gives_to_a_different_fact_is_refused_naming_its_first_place() -> None:
    a, b, c = _fact("a"), _fact("b"), _fact("c")
    plan = RestorePlan((a, b, b, c), batch=True)
    with pytest.raises(InvalidInputError) as caught:
        plan.to_store({"c": _fact("c", "other"), "b": _fact("b", key=MemoryKey("globex", "u1"))})
    assert caught.value.argument == "memories[1].id"
    assert caught.value.rule == _TAKEN
    assert str(caught.value) == f"memories[1].id {_TAKEN}"


def test_a_single_restore_is_named_memory_id() -> None:
    plan = RestorePlan((_fact("a"),), batch=False)
    assert plan.to_store({}) == (_fact("a"),)
    with pytest.raises(InvalidInputError) as caught:
        plan.to_store({"a": _fact("a", "other")})
    assert caught.value.argument == "memory.id"
    with pytest.raises(InvalidInputError) as twice:
        RestorePlan((_fact("a"), _fact("a", "other")), batch=False)
    assert twice.value.argument == "memory.id"


def test_a_chunk_of_the_facts_is_judged_alone_and_named_by_its_place_in_the_call() -> None:
    facts = tuple(_fact(f"f{index}") for index in range(6))
    plan = RestorePlan(facts, batch=True)
    held = {"f1": facts[1], "f4": _fact("f4", "other")}
    assert plan.to_store(held, plan.facts[:3]) == (facts[0], facts[2])
    with pytest.raises(InvalidInputError, match=r"^memories\[4\]\.id "):
        plan.to_store(held, plan.facts[3:])


ids = st.sampled_from(["a", "b", "c", "d"])
contents = st.sampled_from(["one", "two"])
facts = st.builds(_fact, ids, contents)


@given(st.lists(facts, max_size=8), st.dictionaries(ids, contents))
def test_a_plan_follows_the_rule_for_any_call_and_store(
    given_facts: list[Memory], stored: dict[str, str]
) -> None:
    held = {memory_id: _fact(memory_id, content) for memory_id, content in stored.items()}
    memories = tuple(given_facts)
    first: dict[str, int] = {}
    expected_error: str | None = None
    for index, memory in enumerate(memories):
        if memory.id not in first:
            first[memory.id] = index
        elif memories[first[memory.id]] != memory:
            expected_error = f"memories[{index}].id"
            break
    if expected_error is None:
        for memory_id, index in first.items():
            if memory_id in held and held[memory_id] != memories[index]:
                expected_error = f"memories[{index}].id"
                break
    if expected_error is not None:
        with pytest.raises(InvalidInputError) as caught:
            RestorePlan(memories, batch=True).to_store(held)
        assert (caught.value.argument, caught.value.rule) == (expected_error, _TAKEN)
        return
    plan = RestorePlan(memories, batch=True)
    assert plan.facts == tuple(memories[index] for index in first.values())
    assert plan.to_store(held) == tuple(memory for memory in plan.facts if memory.id not in held)
