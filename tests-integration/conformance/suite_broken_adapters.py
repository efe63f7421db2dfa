"""The kit run against the correct adapter and against each deliberately broken one.

This module is not collected by the repository's own test run (its name does
not start with ``test_``): ``test_kit_catches_broken_adapters.py`` runs it in a
separate pytest process and reads the report. The adapters are those of the
conformance distribution's tests (``_broken_adapters.py``), which that run
puts on the import path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import ClassVar

from _broken_adapters import (  # type: ignore[import-not-found]
    CancelledForgetLandsLater,
    CancelledRememberLandsLater,
    Correct,
    CountsEmptiedEndUsers,
    Deduplicating,
    DropsTheTenant,
    EraseLeavesOne,
    ErrorsLoseAttributes,
    ExpireOnlyHides,
    ExpiresAcrossCase,
    ExpiresAtTheCutoff,
    ForgetIgnoresKey,
    ForgetRaisesOnMissing,
    IgnoresClose,
    IgnoresTheLimit,
    LimitCountsEveryFactEverAdded,
    LimitTakesNewest,
    ListsEmptiedKeys,
    LosesConcurrentWrites,
    NewestFirst,
    OrdersByTimestamp,
    PagerIgnoresAStaleAfter,
    PagerRepeatsAtPageBoundaries,
    PagerSkipsAtPageBoundaries,
    RacyLimit,
    RestoreLosesMicroseconds,
    RestoreOverwrites,
    RuntimeErrorAfterClose,
    SoftDelete,
    StoresWhenRefusing,
    StripsContent,
    ValidatesAfterStoring,
)
from hypothesis import Phase, settings

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.port import MemoryKey, MemoryStore

# Finding a failure is the point here, not its smallest form: shrinking every
# failing property check of every broken adapter would only cost time.
settings.register_profile("find-only", phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile("find-only")


class _KitAgainst(MemoryStoreContract):
    """The kit against one adapter class, with a small Hypothesis budget."""

    adapter: ClassVar[type[Correct]] = Correct
    max_examples = 15
    max_steps = 15
    cancelled_calls = 50

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        yield self.adapter()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        assert isinstance(store, Correct)
        rows: int = store.stored_rows(key)
        return rows


class TestCorrect(_KitAgainst):
    adapter = Correct


class TestWronglyExpectedToFail(_KitAgainst):
    """A correct adapter with a check marked as expected to fail: that check must fail."""

    adapter = Correct
    expected_failures: ClassVar[Mapping[str, str]] = {
        "test_rule4_erase_of_an_empty_key_is_zero": "believed broken, but it is not",
        "test_rule3_recall_is_oldest_first[trio]": "believed broken on trio alone",
    }


class TestNewestFirst(_KitAgainst):
    adapter = NewestFirst


class TestLimitTakesNewest(_KitAgainst):
    adapter = LimitTakesNewest


class TestOrdersByTimestamp(_KitAgainst):
    adapter = OrdersByTimestamp


class TestDeduplicating(_KitAgainst):
    adapter = Deduplicating


class TestStripsContent(_KitAgainst):
    adapter = StripsContent


class TestForgetIgnoresKey(_KitAgainst):
    adapter = ForgetIgnoresKey


class TestForgetRaisesOnMissing(_KitAgainst):
    adapter = ForgetRaisesOnMissing


class TestEraseLeavesOne(_KitAgainst):
    adapter = EraseLeavesOne


class TestSoftDelete(_KitAgainst):
    adapter = SoftDelete


class TestDropsTheTenant(_KitAgainst):
    adapter = DropsTheTenant


class TestValidatesAfterStoring(_KitAgainst):
    adapter = ValidatesAfterStoring


class TestLosesConcurrentWrites(_KitAgainst):
    adapter = LosesConcurrentWrites


class TestIgnoresClose(_KitAgainst):
    adapter = IgnoresClose


class TestRuntimeErrorAfterClose(_KitAgainst):
    adapter = RuntimeErrorAfterClose


class TestErrorsLoseAttributes(_KitAgainst):
    adapter = ErrorsLoseAttributes


class TestCancelledRememberLandsLater(_KitAgainst):
    adapter = CancelledRememberLandsLater


class TestCancelledForgetLandsLater(_KitAgainst):
    adapter = CancelledForgetLandsLater


class TestListsEmptiedKeys(_KitAgainst):
    adapter = ListsEmptiedKeys


class TestCountsEmptiedEndUsers(_KitAgainst):
    adapter = CountsEmptiedEndUsers


class TestRestoreOverwrites(_KitAgainst):
    adapter = RestoreOverwrites


class TestPagerSkipsAtPageBoundaries(_KitAgainst):
    adapter = PagerSkipsAtPageBoundaries


class TestPagerRepeatsAtPageBoundaries(_KitAgainst):
    adapter = PagerRepeatsAtPageBoundaries


class TestPagerIgnoresAStaleAfter(_KitAgainst):
    adapter = PagerIgnoresAStaleAfter


class TestRestoreLosesMicroseconds(_KitAgainst):
    adapter = RestoreLosesMicroseconds


class TestExpiresAtTheCutoff(_KitAgainst):
    adapter = ExpiresAtTheCutoff


class TestExpireOnlyHides(_KitAgainst):
    adapter = ExpireOnlyHides


class TestExpiresAcrossCase(_KitAgainst):
    adapter = ExpiresAcrossCase


class TestRacyLimit(_KitAgainst):
    adapter = RacyLimit


class TestIgnoresTheLimit(_KitAgainst):
    adapter = IgnoresTheLimit


class TestStoresWhenRefusing(_KitAgainst):
    adapter = StoresWhenRefusing


class TestLimitCountsEveryFactEverAdded(_KitAgainst):
    adapter = LimitCountsEveryFactEverAdded
