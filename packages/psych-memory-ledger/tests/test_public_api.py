"""The distribution's public surface, and the layout rules it depends on."""

from __future__ import annotations

import importlib.metadata

from packaging.requirements import Requirement

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import ledger


def test_version() -> None:
    assert ledger.__version__ == "0.1.0"


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(ledger.__all__) == [
        "DeletionLedger",
        "KEY_VARIABLE",
        "LedgerEntry",
        "LedgerError",
        "LedgerKey",
        "LedgerKeyMismatchError",
        "LedgerNotFoundError",
        "LedgerUnavailableError",
        "MIN_KEY_LENGTH",
        "Pruned",
        "Reapplied",
        "ledger_key",
        "open_ledger",
        "reapply",
        "with_ledger",
    ]
    for name in ledger.__all__:
        assert hasattr(ledger, name), name


def test_depends_on_the_port_and_anyio_and_psycopg_for_postgresql_only() -> None:
    lines = importlib.metadata.requires("psych-memory-ledger") or []
    required = [Requirement(line) for line in lines]
    assert sorted(r.name for r in required if r.marker is None) == ["anyio", "psych-memory-port"]
    assert [(r.name, str(r.marker)) for r in required if r.marker is not None] == [
        ("psycopg", 'extra == "postgres"')
    ]
