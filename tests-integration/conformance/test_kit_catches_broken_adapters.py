"""The kit fails every deliberately broken adapter, naming the broken rule.

``suite_broken_adapters.py`` runs the kit against the in-process adapter and
against one variant per defect (the adapters of the conformance
distribution's tests). It runs here in its own pytest process, as a
backend author would run it, and the JUnit report of that run is read back:
the correct adapter must pass every check on both event loops, and each
broken one must fail a check of its rule with a message that quotes the rule.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from psych_runtime.memory.conformance import RULES

pytestmark = [pytest.mark.nested_pytest, pytest.mark.xdist_group("kit-run")]

SUITE = Path(__file__).with_name("suite_broken_adapters.py")
ROOT = Path(__file__).resolve().parents[2]
# Where the broken adapters live, shared with the single checks of the kit's own tests.
ADAPTERS = ROOT / "packages" / "psych-memory-conformance" / "tests"
_PATH = os.environ.get("PYTHONPATH")

# Each broken adapter, and the rules the kit must report it breaking.
EXPECTED = {
    "TestNewestFirst": {3},
    "TestLimitTakesNewest": {3},
    "TestOrdersByTimestamp": {3},
    "TestDeduplicating": {1},
    "TestStripsContent": {1},
    "TestForgetIgnoresKey": {2},
    "TestForgetRaisesOnMissing": {2},
    "TestEraseLeavesOne": {4},
    "TestSoftDelete": {2, 4},
    "TestDropsTheTenant": {5},
    "TestValidatesAfterStoring": {6},
    "TestLosesConcurrentWrites": {1},
    "TestIgnoresClose": {7},
    "TestRuntimeErrorAfterClose": {8},
    "TestErrorsLoseAttributes": {8},
    "TestCancelledRememberLandsLater": {9},
    "TestCancelledForgetLandsLater": {9},
    "TestListsEmptiedKeys": {10},
    "TestCountsEmptiedEndUsers": {12},
    "TestRestoreOverwrites": {11},
    "TestPagerSkipsAtPageBoundaries": {13},
    "TestPagerRepeatsAtPageBoundaries": {13},
    "TestPagerIgnoresAStaleAfter": {13},
    "TestRestoreLosesMicroseconds": {11},
    "TestExpiresAtTheCutoff": {14},
    "TestExpireOnlyHides": {14},
    "TestExpiresAcrossCase": {14},
    "TestRacyLimit": {15},
    "TestIgnoresTheLimit": {15},
    "TestStoresWhenRefusing": {15},
    "TestLimitCountsEveryFactEverAdded": {15},
}


@dataclass
class Outcome:
    """What the kit reported for one adapter class."""

    passed: set[str] = field(default_factory=set)
    # Check name (with its event loop) -> the failure's message and text.
    failed: dict[str, str] = field(default_factory=dict)
    other: set[str] = field(default_factory=set)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    workdir = tmp_path_factory.mktemp("kit-run")
    report = workdir / "report.xml"
    # Run from a scratch directory so Hypothesis's example database of the
    # broken adapters stays out of the repository; the configuration is the
    # repository's own (warnings are errors, strict markers, importlib).
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(SUITE),
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            "-p",
            "no:cacheprovider",
            "-q",
            "--tb=short",
            f"--junitxml={report}",
        ],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ADAPTERS), _PATH]))},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    # 1: some checks failed, which is what the broken adapters are for.
    assert completed.returncode == 1, completed.stdout[-4000:] + completed.stderr[-4000:]
    results: dict[str, Outcome] = defaultdict(Outcome)
    # The report was just written by our own pytest run, not received from anyone.
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
        outcome = results[case.attrib["classname"].rsplit(".", 1)[-1]]
        name = case.attrib["name"]
        failure = case.find("failure")
        if failure is not None:
            outcome.failed[name] = f"{failure.attrib.get('message', '')}\n{failure.text or ''}"
        elif len(case) and any(child.tag in {"error", "skipped"} for child in case):
            outcome.other.add(name)
        else:
            outcome.passed.add(name)
    return dict(results)


def test_the_correct_adapter_passes_every_check_on_both_loops(
    outcomes: dict[str, Outcome],
) -> None:
    correct = outcomes["TestCorrect"]
    assert not correct.failed, sorted(correct.failed)
    assert not correct.other, sorted(correct.other)
    checks = {name.rsplit("[", 1)[0] for name in correct.passed}
    assert len(checks) >= 30
    assert correct.passed == {
        f"{check}[{loop}]" for check in checks for loop in ("asyncio", "trio")
    }


def test_an_expected_failure_that_passes_fails_the_run(outcomes: dict[str, Outcome]) -> None:
    # Strict: once the backend is fixed, the stale entry cannot linger.
    outcome = outcomes["TestWronglyExpectedToFail"]
    check = "test_rule4_erase_of_an_empty_key_is_zero"
    # Marked on both loops, and one marked on trio alone.
    assert set(outcome.failed) == {
        f"{check}[asyncio]",
        f"{check}[trio]",
        "test_rule3_recall_is_oldest_first[trio]",
    }
    assert all("XPASS(strict)" in text for text in outcome.failed.values())
    assert outcome.passed == outcomes["TestCorrect"].passed - set(outcome.failed)


def test_every_broken_adapter_runs_every_check(outcomes: dict[str, Outcome]) -> None:
    everything = outcomes["TestCorrect"].passed
    for adapter in EXPECTED:
        outcome = outcomes[adapter]
        assert outcome.passed | set(outcome.failed) == everything, adapter
        assert not outcome.other, (adapter, sorted(outcome.other))


@pytest.mark.parametrize("adapter", sorted(EXPECTED))
def test_the_kit_fails_a_broken_adapter_naming_its_rule(
    outcomes: dict[str, Outcome], adapter: str
) -> None:
    failed = outcomes[adapter].failed
    assert failed, f"the kit passed {adapter}"
    for rule in EXPECTED[adapter]:
        quoted = f"rule {rule}: {RULES[rule]}"
        naming = [name for name, text in failed.items() if quoted in text]
        assert naming, f"no failure of {adapter} quotes rule {rule}"
        # A check of that very rule fails, on both event loops.
        own = {name for name in naming if name.startswith(f"test_rule{rule}_")}
        loops = {name.rsplit("[", 1)[-1].rstrip("]") for name in own}
        assert loops == {"asyncio", "trio"}, (adapter, rule, sorted(naming))


_RULE7_CHECKS = {
    "test_rule7_async_with_returns_the_store_and_closes_it",
    "test_rule7_leaving_async_with_by_an_error_closes_the_store",
    "test_rule7_closing_twice_is_harmless",
    "test_rule7_every_call_after_close_raises_and_changes_nothing",
    "test_rule7_a_closed_store_stays_closed",
}
# The adapters breaking the lifecycle, failure, cancellation and capability
# rules, and exactly the checks each must fail: every other check passes.
FAILING_CHECKS = {
    "TestIgnoresClose": _RULE7_CHECKS,
    # A foreign error after close is rule 8's, even where a rule 7 check finds it.
    "TestRuntimeErrorAfterClose": {
        *_RULE7_CHECKS,
        "test_rule8_no_foreign_exception_escapes_a_closed_store",
    },
    "TestErrorsLoseAttributes": {"test_rule8_errors_survive_pickling"},
    "TestCancelledRememberLandsLater": {
        "test_rule9_a_cancelled_remember_never_lands_after_erase",
        "test_rule9_writers_cancelled_mid_way_leave_nothing_after_erase",
    },
    "TestCancelledForgetLandsLater": {
        "test_rule9_a_cancelled_forget_is_decided_when_the_caller_sees_it",
    },
    "TestListsEmptiedKeys": {"test_rule10_listed_keys_are_exactly_those_holding_facts"},
    "TestCountsEmptiedEndUsers": {
        "test_rule12_counts_are_what_recall_returns_for_each_end_user",
        "test_rule12_the_counts_are_the_callers_own",
    },
    "TestRestoreOverwrites": {
        "test_rule11_restoring_again_changes_nothing_and_a_taken_id_is_refused",
    },
    "TestPagerSkipsAtPageBoundaries": {
        # Pages of facts restored with edge times, read back with rule 13's blame.
        "test_rule11_times_at_the_ends_of_the_range_read_back_exactly",
        "test_rule13_pages_of_every_size_join_into_recall",
        "test_rule13_a_page_resumes_after_any_fact_the_key_holds",
        "test_rule13_pages_touch_only_their_own_key",
    },
    "TestPagerRepeatsAtPageBoundaries": {
        # Pages of facts restored with edge times, read back with rule 13's blame.
        "test_rule11_times_at_the_ends_of_the_range_read_back_exactly",
        "test_rule13_pages_of_every_size_join_into_recall",
        "test_rule13_a_page_resumes_after_any_fact_the_key_holds",
        "test_rule13_pages_touch_only_their_own_key",
    },
    "TestPagerIgnoresAStaleAfter": {
        "test_rule13_an_after_the_key_does_not_hold_is_stale",
        "test_rule13_pages_touch_only_their_own_key",
    },
    "TestRestoreLosesMicroseconds": {
        "test_rule11_times_at_the_ends_of_the_range_read_back_exactly",
    },
}


@pytest.mark.parametrize("adapter", sorted(FAILING_CHECKS))
def test_the_kit_blames_a_broken_adapter_for_its_rule_alone(
    outcomes: dict[str, Outcome], adapter: str
) -> None:
    failed = outcomes[adapter].failed
    assert set(failed) == {
        f"{check}[{loop}]" for check in FAILING_CHECKS[adapter] for loop in ("asyncio", "trio")
    }
    quoted = {
        rule
        for text in failed.values()
        for rule, words in RULES.items()
        if f"rule {rule}: {words}" in text
    }
    assert quoted == EXPECTED[adapter], (adapter, sorted(quoted))


def test_failure_messages_name_a_rule(outcomes: dict[str, Outcome]) -> None:
    # Whatever a broken adapter trips over, the report says which rule.
    for adapter in EXPECTED:
        for name, text in outcomes[adapter].failed.items():
            assert re.search(r"rule \d+: ", text), (adapter, name, text[:2000])
