"""psych-memory expire: retention by age, with a receipt, run in-process on SQLite files."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.memory.admin import ExitCode, main, open_memory
from psych_runtime.memory.port import Memory, MemoryKey

DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _here(
    require_schemes: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_schemes("sqlite")
    monkeypatch.chdir(tmp_path)


def restore(url: str, facts: Sequence[tuple[str, str, str, datetime]]) -> list[Memory]:
    memories = [
        Memory(f"fact-{index}", MemoryKey(tenant, user), content, made)
        for index, (tenant, user, content, made) in enumerate(facts)
    ]

    async def write() -> None:
        async with open_memory(url) as store:
            await store.restore_many(memories)  # type: ignore[attr-defined]

    anyio.run(write)
    return memories


def held(url: str, tenant: str, user: str) -> tuple[Memory, ...]:
    async def read() -> tuple[Memory, ...]:
        async with open_memory(url) as store:
            return await store.recall(tenant, user)

    return anyio.run(read)


def aged(url: str) -> list[Memory]:
    """Facts 500 and 100 days old in tenants acme and globex."""
    now = datetime.now(UTC)
    return restore(
        url,
        [
            ("acme", "u1", "OLD-acme-u1 moved last year", now - 500 * DAY),
            ("acme", "u1", "kept acme u1", now - 100 * DAY),
            ("acme", "u2", "OLD-acme-u2 from long ago", now - 401 * DAY),
            ("globex", "u1", "OLD-globex from long ago", now - 500 * DAY),
        ],
    )


def test_expire_deletes_one_tenants_old_facts_and_prints_a_receipt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    facts = aged("sqlite:///a.db")
    before = datetime.now(UTC)
    argv = ["expire", "sqlite:///a.db", "--tenant", "acme", "--older-than", "400d"]
    assert main(argv) == ExitCode.DONE
    receipt = capsys.readouterr().out.splitlines()
    assert receipt[0] == "Expiry receipt"
    assert receipt[1].startswith("cutoff:         facts created before ")
    assert receipt[1].endswith("Z (UTC) (older than 400d)")
    assert "tenant:         acme: 2 fact(s) deleted" in receipt
    assert "facts deleted:  2" in receipt
    assert receipt[-1].startswith("deleted bytes:  scrubbed")
    assert "OLD" not in "\n".join(receipt)
    assert held("sqlite:///a.db", "acme", "u1") == (facts[1],)
    assert held("sqlite:///a.db", "acme", "u2") == ()
    assert held("sqlite:///a.db", "globex", "u1") == (facts[3],)
    cutoff = datetime.fromisoformat(receipt[1].split()[4])
    assert before - 400 * DAY <= cutoff <= datetime.now(UTC) - 400 * DAY


def test_expire_of_every_tenant_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    aged("sqlite:///a.db")
    argv = ["expire", "sqlite:///a.db", "--all-tenants", "--older-than", "9600h", "--json"]
    assert main(argv) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["receipt"] == "psych-memory-expiry-receipt"
    assert receipt["version"] == 1
    assert receipt["dry_run"] is False
    assert receipt["older_than"] == "9600h"
    assert receipt["cutoff"].endswith("Z")
    assert receipt["tenants"] == [
        {"tenant": "acme", "facts_deleted": 2},
        {"tenant": "globex", "facts_deleted": 1},
    ]
    assert receipt["facts_deleted"] == 3
    assert receipt["store"] == "sqlite:///a.db"
    assert receipt["scrub"] == "scrubbed"
    assert receipt["deletion_durability"] is None
    assert held("sqlite:///a.db", "globex", "u1") == ()


def test_a_dry_run_counts_and_deletes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    facts = aged("sqlite:///a.db")
    argv = ["expire", "sqlite:///a.db", "--all-tenants", "--older-than", "400d", "--dry-run"]
    assert main(argv) == ExitCode.DONE
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "Expiry dry run: nothing was deleted"
    assert "tenant:         acme: 2 fact(s) to delete" in text
    assert "facts to delete:3" in text
    assert not any(line.startswith("deleted bytes") for line in text)
    assert main([*argv, "--json"]) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["dry_run"] is True
    assert receipt["facts_to_delete"] == 3
    assert receipt["scrub"] is None
    assert held("sqlite:///a.db", "acme", "u1") == tuple(facts[:2])


def test_an_empty_store_and_a_second_run_delete_nothing_and_succeed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    anyio.run(_create, "sqlite:///a.db")
    argv = ["expire", "sqlite:///a.db", "--all-tenants", "--older-than", "1d"]
    assert main(argv) == ExitCode.DONE
    assert "tenants:        none: the store holds no facts" in capsys.readouterr().out
    aged("sqlite:///a.db")
    assert main([*argv, "--json"]) == ExitCode.DONE
    assert json.loads(capsys.readouterr().out)["facts_deleted"] == 4
    assert main([*argv, "--json"]) == ExitCode.DONE
    again = json.loads(capsys.readouterr().out)
    assert again["facts_deleted"] == 0
    # Nothing deleted, nothing to wipe or to make durable.
    assert again["scrub"] is None


async def _create(url: str) -> None:
    async with open_memory(url):
        pass


def test_before_names_an_instant_in_any_zone(capsys: pytest.CaptureFixture[str]) -> None:
    facts = aged("sqlite:///a.db")
    instant = (datetime.now(UTC) - 450 * DAY).astimezone().isoformat()
    argv = ["expire", "sqlite:///a.db", "--tenant", "acme", "--before", instant, "--json"]
    assert main(argv) == ExitCode.DONE
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["facts_deleted"] == 1
    assert receipt["older_than"] is None
    assert held("sqlite:///a.db", "acme", "u2") == (facts[2],)


_FUTURE = (datetime.now(UTC) + DAY).isoformat()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--tenant", "acme"], "--older-than: or --before is needed, and only one of them"),
        (
            ["--tenant", "acme", "--older-than", "1d", "--before", "2001-01-01T00:00:00Z"],
            "--older-than: or --before is needed, and only one of them",
        ),
        (["--older-than", "1d"], "--tenant: or --all-tenants is needed"),
        (
            ["--tenant", "acme", "--all-tenants", "--older-than", "1d"],
            "--tenant: and --all-tenants cannot be given together",
        ),
        (["--tenant", " acme", "--older-than", "1d"], "--tenant: must not start or end with"),
        (["--tenant", "acme", "--before", _FUTURE], "--before: must not be in the future"),
        (
            ["--tenant", "acme", "--before", "2001-01-01T00:00:00"],
            "--before: must be an instant in ISO 8601 with its offset",
        ),
        (["--tenant", "acme", "--before", "last year"], "--before: must be an instant in ISO 8601"),
        (
            ["--tenant", "acme", "--older-than", "999999999d"],
            "--older-than: reaches back before the year 1",
        ),
    ],
)
def test_bad_options_are_one_line_exit_2_and_delete_nothing(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = aged("sqlite:///a.db")
    assert main(["expire", "sqlite:///a.db", *options]) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"psych-memory: error: {message}")
    assert captured.err.count("\n") == 1
    assert held("sqlite:///a.db", "acme", "u1") == tuple(facts[:2])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(age=st.text(max_size=12).filter(lambda text: not _is_age(text)))
def test_any_age_but_days_or_hours_is_refused(age: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The store need not exist: the age is judged before anything is opened.
    assert main(["expire", "sqlite:///none.db", "--tenant", "acme", "--older-than", age]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--older-than" in err
    assert not Path("none.db").exists()


def _is_age(text: str) -> bool:
    return (
        len(text) >= 2
        and text[-1] in "dh"
        and text[:-1].isascii()
        and text[:-1].isdigit()
        and len(text) <= 10
        and int(text[:-1]) > 0
    )


# Up to some 1,900 years back: far past any retention period, short of the year 1.
@given(number=st.integers(min_value=1, max_value=700_000), unit=st.sampled_from("dh"))
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_every_age_in_days_or_hours_is_taken_back_from_now(
    number: int, unit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if not Path("a.db").exists():
        anyio.run(_create, "sqlite:///a.db")
    argv = ["expire", "sqlite:///a.db", "--tenant", "acme", "--older-than", f"{number}{unit}"]
    started = datetime.now(UTC)
    assert main([*argv, "--dry-run", "--json"]) == ExitCode.DONE
    cutoff = datetime.fromisoformat(json.loads(capsys.readouterr().out)["cutoff"])
    age = number * (DAY if unit == "d" else timedelta(hours=1))
    assert started - age <= cutoff <= datetime.now(UTC) - age


def test_expire_on_postgres_says_where_the_deletion_is_durable(
    require_schemes: Callable[..., None],
    postgres_dsn: str,
    postgres_schema: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    require_schemes("postgresql")
    separator = "&" if "?" in postgres_dsn else "?"
    url = f"{postgres_dsn}{separator}schema={postgres_schema}"
    aged(url)
    assert main(["expire", url, "--all-tenants", "--older-than", "400d"]) == ExitCode.DONE
    text = capsys.readouterr().out.splitlines()
    assert "facts deleted:  3" in text
    assert "durability:     on a server with no replication" in text
    assert not any(line.startswith("deleted bytes") for line in text)
