"""The kit's public surface."""

from __future__ import annotations

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import conformance
from psych_runtime.memory.conformance import RULES, MemoryStoreContract, RuleViolationError


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(conformance.__all__) == ["MemoryStoreContract", "RULES", "RuleViolationError"]
    for name in conformance.__all__:
        assert hasattr(conformance, name), name


def test_version() -> None:
    assert conformance.__version__ == "0.1.0"


def test_namespace_levels_stay_namespaces() -> None:
    assert vars(psych_runtime).get("__file__") is None
    assert vars(psych_runtime.memory).get("__file__") is None


def test_the_rules_are_numbered_one_to_fifteen() -> None:
    # 1-6 the four methods, 7-9 lifecycle, failures and cancellation, 10-15 capabilities.
    assert sorted(RULES) == list(range(1, 16))
    assert all(text == text.strip() and text for text in RULES.values())


def test_a_violation_names_its_rule_first() -> None:
    error = RuleViolationError(3, "recall returned the newest fact first")
    assert isinstance(error, AssertionError)
    assert str(error) == f"rule 3: {RULES[3]} -- recall returned the newest fact first"
    assert (error.rule, error.detail) == (3, "recall returned the newest fact first")


def test_the_contract_class_is_not_collected_by_itself() -> None:
    # Only the author's Test* subclass is collected, never the kit's base.
    assert not MemoryStoreContract.__name__.startswith("Test")
