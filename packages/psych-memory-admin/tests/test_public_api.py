"""The opener's public surface, and the layout rules it depends on."""

from __future__ import annotations

import inspect

import psych_runtime
import psych_runtime.memory
from psych_runtime.memory import admin


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(admin.__all__) == sorted(
        [
            "ENTRY_POINT_GROUP",
            "KEY_OPTIONS",
            "LEDGER_KEY_VARIABLE",
            "LEDGER_VARIABLE",
            "CommandError",
            "ExitCode",
            "StoreBackendError",
            "StoreUrlError",
            "UnknownSchemeError",
            "exit_codes_help",
            "ledger_for_command",
            "main",
            "open_for_command",
            "open_memory",
            "redact_url",
            "store_schemes",
        ]
    )
    for name in admin.__all__:
        assert hasattr(admin, name), name


def test_version() -> None:
    assert admin.__version__ == "0.1.0"


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    assert getattr(psych_runtime, "__file__", None) is None
    assert getattr(psych_runtime.memory, "__file__", None) is None


def test_the_entry_point_group_is_the_shared_one() -> None:
    assert admin.ENTRY_POINT_GROUP == "psych_runtime.memory.stores"


def test_every_public_callable_documents_what_it_raises() -> None:
    for function in (
        admin.open_memory,
        admin.open_for_command,
        admin.redact_url,
        admin.ledger_for_command,
    ):
        assert "Raises:" in (inspect.getdoc(function) or ""), function


def test_the_console_script_is_main() -> None:
    from importlib.metadata import distribution  # noqa: PLC0415

    (script,) = [
        entry
        for entry in distribution("psych-memory-admin").entry_points
        if entry.group == "console_scripts"
    ]
    assert script.name == "psych-memory"
    assert script.value == "psych_runtime.memory.admin._main:run"
