"""Reading a key in pages (`PagesFacts`), its stale page, and the range of a restored time."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    MAX_CREATED_AT,
    MAX_PAGE_SIZE,
    MIN_CREATED_AT,
    InvalidInputError,
    Memory,
    MemoryKey,
    PagesFacts,
    RestoresFacts,
    Scope,
    StalePageError,
    validate_page,
    validate_restored,
    validate_restored_many,
)

KEY = MemoryKey("acme", "u1")
MARKER = "Private-Marker"


class _Pages:
    async def recall_page(
        self, scope: Scope, end_user_id: str, *, after: str | None = None, size: int
    ) -> tuple[Memory, ...]:
        return ()


def test_a_store_pages_facts_by_having_recall_page() -> None:
    assert isinstance(_Pages(), PagesFacts)
    assert not isinstance(_Pages(), RestoresFacts)
    assert not isinstance(object(), PagesFacts)


# validate_page


@pytest.mark.parametrize("after", [None, "", "an-id", MARKER * 100])
@pytest.mark.parametrize("size", [1, 2, MAX_PAGE_SIZE])
def test_valid_page_arguments_come_back_as_they_are(after: str | None, size: int) -> None:
    assert validate_page(after, size) == (after, size)


def test_subclasses_of_str_and_int_come_back_as_plain_values() -> None:
    class Id(str):
        __slots__ = ()

    class Size(int):
        pass

    after, size = validate_page(Id("an-id"), Size(3))
    assert (type(after), type(size)) == (str, int)
    assert (after, size) == ("an-id", 3)


@pytest.mark.parametrize("size", [0, -1, MAX_PAGE_SIZE + 1, -(2**63), 2**64])
def test_a_size_out_of_range_is_refused_naming_the_range(size: int) -> None:
    with pytest.raises(InvalidInputError) as refused:
        validate_page(None, size)
    assert type(refused.value) is InvalidInputError
    assert refused.value.argument == "size"
    assert str(refused.value) == f"size must be between 1 and {MAX_PAGE_SIZE}"


@pytest.mark.parametrize(
    ("after", "size", "message"),
    [
        (None, True, "size must be an int, not bool"),
        (None, 2.0, "size must be an int, not float"),
        (None, "2", "size must be an int, not str"),
        (None, None, "size must be an int, not NoneType"),
        (MARKER.encode(), 2, "after must be None or a str, not bytes"),
        (7, 2, "after must be None or a str, not int"),
        # A wrong after is reported before a wrong size.
        (7, 0, "after must be None or a str, not int"),
    ],
)
def test_a_wrong_type_is_a_type_error_that_repeats_no_value(
    after: object, size: object, message: str
) -> None:
    with pytest.raises(TypeError) as refused:
        validate_page(after, size)
    assert str(refused.value) == message
    assert MARKER not in str(refused.value)


# StalePageError


def test_a_stale_page_is_a_refusal_of_the_argument_after() -> None:
    stale = StalePageError()
    assert isinstance(stale, InvalidInputError)
    assert isinstance(stale, ValueError)
    assert stale.argument == "after"
    assert str(stale).startswith("after is not the id of a fact this end user holds")
    assert "after=None" in str(stale)


def test_a_stale_page_error_may_name_another_argument_and_rule() -> None:
    stale = StalePageError("cursor", "was read before the key was erased")
    assert (stale.argument, stale.rule) == ("cursor", "was read before the key was erased")
    assert str(stale) == "cursor was read before the key was erased"


@pytest.mark.parametrize("stale", [StalePageError(), StalePageError("cursor", "is stale")])
def test_a_stale_page_error_pickles_with_its_attributes(stale: StalePageError) -> None:
    copy = pickle.loads(pickle.dumps(stale))
    assert type(copy) is StalePageError
    assert str(copy) == str(stale)
    assert vars(copy) == vars(stale)


# The range of a restored created_at.


def restored_at(when: datetime) -> Memory:
    return Memory("an-id", KEY, "fact", when)


def test_the_range_is_every_instant_a_datetime_holds_in_utc() -> None:
    assert MIN_CREATED_AT.isoformat() == "0001-01-01T00:00:00+00:00"
    assert MAX_CREATED_AT.isoformat() == "9999-12-31T23:59:59.999999+00:00"
    assert MIN_CREATED_AT.tzinfo is UTC
    assert MAX_CREATED_AT.tzinfo is UTC


@pytest.mark.parametrize(
    "when",
    [
        MIN_CREATED_AT,
        MAX_CREATED_AT,
        datetime(1600, 1, 1, 0, 0, 0, 123457, tzinfo=UTC),
        datetime(2300, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        # The ends themselves, written in another zone.
        datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1))),
        datetime(9999, 12, 31, 22, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-1))),
    ],
)
def test_the_ends_of_the_range_are_accepted_exactly(when: datetime) -> None:
    kept = validate_restored(restored_at(when))
    assert kept.created_at == when
    assert kept.created_at.tzinfo is UTC
    assert validate_restored_many([restored_at(when)]) == (kept,)


def _outside(offset: timedelta, naive: datetime) -> bool:
    # Whether the instant naive-minus-offset falls outside the range, worked
    # out with plain arithmetic on microseconds rather than with datetime.
    micros = (naive - datetime.min) // timedelta(microseconds=1)
    utc = micros - offset // timedelta(microseconds=1)
    return not 0 <= utc <= (datetime.max - datetime.min) // timedelta(microseconds=1)


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda minutes: timedelta(minutes=minutes))
seconds = st.integers(0, 10**6).map(lambda micros: timedelta(microseconds=micros))
near_the_start = seconds.map(lambda delta: datetime.min + delta * 100)
near_the_end = seconds.map(lambda delta: datetime.max - delta * 100)


@given(offset=offsets, naive=st.one_of(near_the_start, near_the_end))
def test_a_time_whose_utc_instant_falls_outside_is_refused(
    offset: timedelta, naive: datetime
) -> None:
    when = naive.replace(tzinfo=timezone(offset))
    if _outside(offset, naive):
        for argument, check in (
            ("memory.created_at", lambda: validate_restored(restored_at(when))),
            ("memories[0].created_at", lambda: validate_restored_many([restored_at(when)])),
        ):
            with pytest.raises(InvalidInputError) as refused:
                check()
            assert type(refused.value) is InvalidInputError
            assert refused.value.argument == argument
            assert "9999-12-31T23:59:59.999999Z" in str(refused.value)
    else:
        kept = validate_restored(restored_at(when)).created_at
        assert kept == when
        assert kept.tzinfo is UTC
