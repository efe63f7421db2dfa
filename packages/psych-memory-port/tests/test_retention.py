"""Retention: the `ExpiresFacts` capability and the check of its cutoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.port import (
    MIN_CREATED_AT,
    ExpiresFacts,
    InvalidInputError,
    Scope,
    validate_cutoff,
)

_NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


class _Expires:
    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return 0

    async def expire(self, scope: Scope, *, before: datetime) -> int:
        return 0


class _CountsOnly:
    async def count_expired(self, scope: Scope, *, before: datetime) -> int:
        return 0


def test_a_store_expires_facts_by_having_both_methods() -> None:
    assert isinstance(_Expires(), ExpiresFacts)
    assert not isinstance(_CountsOnly(), ExpiresFacts)


def test_a_cutoff_in_utc_is_returned_as_it_is() -> None:
    cutoff = _NOW - timedelta(days=400)
    assert validate_cutoff(cutoff, now=_NOW) is cutoff


@given(
    st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 1, 1),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=12, minutes=30))]
        ),
    )
)
def test_an_aware_cutoff_comes_back_as_the_same_instant_in_utc(before: datetime) -> None:
    now = max(before, _NOW)
    cutoff = validate_cutoff(before, now=now)
    assert cutoff == before
    assert cutoff.tzinfo is UTC


def test_the_present_itself_is_a_valid_cutoff() -> None:
    assert validate_cutoff(_NOW, now=_NOW) == _NOW


@given(st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=10**6)))
def test_a_cutoff_in_the_future_is_refused(ahead: timedelta) -> None:
    with pytest.raises(InvalidInputError, match="in the future") as info:
        validate_cutoff(_NOW + ahead, now=_NOW)
    assert info.value.argument == "before"


def test_the_clock_is_the_present_by_default() -> None:
    with pytest.raises(InvalidInputError, match="in the future"):
        validate_cutoff(datetime.now(UTC) + timedelta(minutes=5))
    assert validate_cutoff(datetime.now(UTC) - timedelta(days=1)) < datetime.now(UTC)


@given(st.datetimes())
def test_a_naive_cutoff_is_refused_whatever_it_is(before: datetime) -> None:
    with pytest.raises(InvalidInputError, match="timezone-aware") as info:
        validate_cutoff(before, now=_NOW)
    assert info.value.argument == "before"


@pytest.mark.parametrize("before", [None, "2026-01-01T00:00:00Z", 1_700_000_000, _NOW.date()])
def test_a_cutoff_that_is_not_a_datetime_is_a_type_error(before: object) -> None:
    with pytest.raises(TypeError, match="before must be a timezone-aware datetime"):
        validate_cutoff(before, now=_NOW)


def test_the_ends_of_the_range_neither_overflow_nor_pass() -> None:
    east = timezone(timedelta(hours=5))
    west = timezone(-timedelta(hours=5))
    # Before year 1 in UTC: no fact is older, as with the earliest instant itself.
    assert validate_cutoff(datetime.min.replace(tzinfo=east), now=_NOW) == MIN_CREATED_AT
    with pytest.raises(InvalidInputError, match="in the future"):
        validate_cutoff(datetime.max.replace(tzinfo=west), now=_NOW)
