"""The kit refuses to be weakened: no check can be overridden, deleted or skipped."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from psych_runtime.memory.conformance import RULES, MemoryStoreContract, RuleViolationError
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryKey, MemoryStore

A_CHECK = "test_rule3_recall_is_oldest_first"


class Complete(MemoryStoreContract):
    """A well-formed contract class (not collected: no Test prefix)."""

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        yield InProcessMemory()

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        return len(await store.recall(key.tenant, key.end_user_id))


def test_overriding_a_check_is_refused() -> None:
    with pytest.raises(TypeError, match=f"{A_CHECK} is a check of the conformance kit"):

        class Overrides(Complete):
            async def test_rule3_recall_is_oldest_first(self) -> None:
                pass


@pytest.mark.parametrize(
    "check",
    [
        "test_rule7_a_closed_store_stays_closed",
        "test_rule8_errors_survive_pickling",
        "test_rule9_a_cancelled_remember_never_lands_after_erase",
        "test_rule10_listed_keys_are_exactly_those_holding_facts",
        "test_rule11_restored_facts_keep_id_content_time_and_order",
        "test_rule12_counts_are_what_recall_returns_for_each_end_user",
    ],
)
def test_the_checks_of_the_later_rules_are_guarded_too(check: str) -> None:
    # They live in modules of their own, inherited by the contract class.
    with pytest.raises(TypeError, match=f"{check} is a check of the conformance kit"):
        type("Overrides", (Complete,), {check: None})
    type("Marked", (Complete,), {"expected_failures": {check: "known"}})


class Weakening:
    """A mixin, no kit class: the guard never sees its own definition."""

    async def test_rule3_recall_is_oldest_first(self) -> None:
        pass


def test_an_override_in_a_mixin_base_is_refused() -> None:
    # Put before the kit in the bases, the mixin's check is the one pytest runs.
    with pytest.raises(TypeError, match=f"{A_CHECK} is a check of the conformance kit"):

        class Leaf(Weakening, Complete):
            pass


def test_a_mixin_after_the_kit_is_harmless() -> None:
    # The kit's check comes first in the hierarchy; the mixin's is never run.
    class Leaf(Complete, Weakening):
        pass

    assert getattr(Leaf, A_CHECK) is getattr(MemoryStoreContract, A_CHECK)


@pytest.mark.anyio
async def test_an_override_in_an_intermediate_class_is_refused_below_it() -> None:
    # The intermediate class was intact when defined, and changed afterwards:
    # the subclass below it overrides nothing itself, and is refused all the same.
    class Intermediate(Complete):
        pass

    class DefinedBefore(Intermediate):
        pass

    setattr(Intermediate, A_CHECK, None)
    with pytest.raises(TypeError, match=f"{A_CHECK} is a check of the conformance kit"):

        class DefinedAfter(Intermediate):
            pass

    with pytest.raises(AssertionError, match=A_CHECK):
        await DefinedBefore().test_kit_is_intact()


def test_deleting_a_check_by_assignment_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot be overridden or deleted"):

        class Deletes(Complete):
            test_rule4_erase_counts_and_deletes_everything = None  # type: ignore[assignment]


def test_replacing_the_event_loop_fixture_is_refused() -> None:
    # A narrower anyio_backend would silently drop trio.
    with pytest.raises(TypeError, match="anyio_backend"):

        class OneLoop(Complete):
            @pytest.fixture
            def anyio_backend(self) -> str:
                return "asyncio"


@pytest.mark.parametrize("fixture", ["anyio_backend", "_conformance_setup"])
def test_replacing_a_kit_fixture_under_another_attribute_name_is_refused(fixture: str) -> None:
    # pytest finds a fixture by the name it was registered under, so one
    # renamed to the kit's would replace it while every attribute stays.
    @pytest.fixture(name=fixture)
    def only_asyncio() -> str:
        return "asyncio"

    problem = f"only_asyncio is registered as the kit's fixture {fixture}"
    with pytest.raises(TypeError, match=problem):
        type("Renamed", (Complete,), {"only_asyncio": only_asyncio})


def test_a_fixture_of_its_own_under_another_name_is_accepted() -> None:
    @pytest.fixture(name="database_url")
    def url() -> str:
        return "sqlite://"

    # Refused, the class would not exist: the guard raises while it is built.
    own = type("OwnFixture", (Complete,), {"url": url})
    assert issubclass(own, MemoryStoreContract)


def test_replacing_the_setup_fixture_is_refused() -> None:
    # Without it no check would know its directory or its expected failure.
    with pytest.raises(TypeError, match="_conformance_setup"):
        type("NoSetup", (Complete,), {"_conformance_setup": None})


@pytest.mark.parametrize(
    ("failures", "problem"),
    [
        ({"test_nothing_like_this": "reason"}, "which is no check of the kit"),
        ({f"{A_CHECK}[curio]": "reason"}, "which is no check of the kit"),
        ({f"{A_CHECK}[trio": "reason"}, "which is no check of the kit"),
        ({A_CHECK: ""}, "needs a reason"),
        ({A_CHECK: "   "}, "needs a reason"),
        ({A_CHECK: None}, "needs a reason"),
        ([A_CHECK], "must map check names to reasons"),
    ],
)
def test_expected_failures_name_real_checks_with_reasons(failures: object, problem: str) -> None:
    with pytest.raises(TypeError, match=problem):
        type("Marked", (Complete,), {"expected_failures": failures})


def test_an_expected_failure_with_a_reason_is_accepted() -> None:
    class Marked(Complete):
        expected_failures: ClassVar[Mapping[str, str]] = {
            A_CHECK: "known: see issue 12",
            "test_rule2_forget_of_a_gone_id_is_false[trio]": "only on trio",
        }

    assert set(Marked.expected_failures) == {
        A_CHECK,
        "test_rule2_forget_of_a_gone_id_is_false[trio]",
    }


@pytest.mark.parametrize(
    "marks",
    [
        pytest.mark.skip(reason="slow"),
        [pytest.mark.skipif(True, reason="slow")],
    ],
)
def test_skipping_the_whole_class_is_refused(marks: object) -> None:
    with pytest.raises(TypeError, match="cannot be skipped"):
        type("Skipped", (Complete,), {"pytestmark": marks})


class SkippedMixin:
    """A mixin carrying a skip: pytest applies the marks of every base."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.skip(reason="slow")]


def test_a_skip_on_a_mixin_base_is_refused() -> None:
    # The nearest pytestmark is the kit's own, yet pytest would skip every check.
    with pytest.raises(TypeError, match="cannot be skipped"):

        class Leaf(Complete, SkippedMixin):
            pass


def test_a_skip_on_an_intermediate_class_is_refused_below_it() -> None:
    # The decorator marks the intermediate class after the guard saw it; the
    # subclass's own marks hide it from attribute lookup, not from pytest.
    @pytest.mark.skip(reason="slow")
    class Intermediate(Complete):
        pass

    with pytest.raises(TypeError, match="cannot be skipped"):

        class Leaf(Intermediate):
            pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.usefixtures("tmp_path")]


def test_expecting_the_whole_class_to_fail_is_refused() -> None:
    with pytest.raises(TypeError, match="expected to fail as a whole"):
        type("Failing", (Complete,), {"pytestmark": [pytest.mark.xfail(reason="slow")]})


@pytest.mark.parametrize(
    "marks",
    [
        [pytest.mark.parametrize("anyio_backend", ["asyncio"])],
        [pytest.mark.parametrize(("anyio_backend", "other"), [("asyncio", 1)])],
        # The names as one string, by keyword, as authors also write them.
        [pytest.mark.parametrize(argnames="other, anyio_backend", argvalues=[(1, "trio")])],  # noqa: PT006
    ],
)
def test_narrowing_the_event_loops_by_parametrization_is_refused(marks: object) -> None:
    # A direct parametrization replaces the kit's fixture and its two loops.
    with pytest.raises(TypeError, match="anyio_backend cannot be parametrized"):
        type("OneLoop", (Complete,), {"pytestmark": marks})


def test_other_marks_on_the_class_are_accepted() -> None:
    marked = pytest.mark.usefixtures("tmp_path")(type("Marked", (Complete,), {}))
    type("Below", (marked,), {"pytestmark": [pytest.mark.parametrize("other", [1])]})


@pytest.mark.parametrize(
    "setting",
    [
        {"max_examples": 0},
        {"max_examples": True},
        {"max_steps": 0},
        {"max_steps": 2.5},
        {"cancelled_calls": 0},
        {"cancelled_calls": "10"},
    ],
)
def test_the_budget_is_a_positive_int(setting: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="must be an int >= 1"):
        type("Cheap", (Complete,), setting)


def test_a_lower_budget_is_accepted() -> None:
    cheap: Any = type(
        "Cheap", (Complete,), {"max_examples": 5, "max_steps": 3, "cancelled_calls": 7}
    )
    assert (cheap.max_examples, cheap.max_steps, cheap.cancelled_calls) == (5, 3, 7)


@pytest.mark.anyio
async def test_tampering_after_definition_fails_the_integrity_check() -> None:
    class Tampered(Complete):
        pass

    await Tampered().test_kit_is_intact()
    setattr(Tampered, A_CHECK, None)
    with pytest.raises(AssertionError, match=A_CHECK):
        await Tampered().test_kit_is_intact()


@pytest.mark.anyio
async def test_a_class_without_its_two_methods_fails_the_integrity_check() -> None:
    class Bare(MemoryStoreContract):
        pass

    with pytest.raises(AssertionError, match=r"must define open_store\(\).*count_stored\(\)"):
        await Bare().test_kit_is_intact()
    with pytest.raises(NotImplementedError, match="open_store"):
        Bare().open_store()
    with pytest.raises(NotImplementedError, match="count_stored"):
        await Bare().count_stored(InProcessMemory(), MemoryKey("acme", "user-1"))


def test_fresh_path_never_repeats_and_stays_in_tmp_path(tmp_path: Path) -> None:
    contract = Complete()
    contract._prepare(tmp_path, "asyncio")
    paths = [contract.fresh_path(".db") for _ in range(5)]
    assert len(set(paths)) == 5
    assert all(path.parent == tmp_path and path.suffix == ".db" for path in paths)
    assert not any(path.exists() for path in paths)


@pytest.mark.parametrize("rule", [5, 9, 11, 12])
def test_a_rule_violation_survives_pickling(rule: int) -> None:
    # pytest-xdist and multiprocessing move exceptions between processes.
    pickled = pickle.dumps(RuleViolationError(rule, "key mixed up"))
    error = pickle.loads(pickled)
    assert isinstance(error, RuleViolationError)
    assert (error.rule, error.detail) == (rule, "key mixed up")
    assert str(error).startswith(f"rule {rule}: {RULES[rule]}")
