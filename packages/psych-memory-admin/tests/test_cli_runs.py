"""The installed ``psych-memory`` command, run as a real process against real stores.

Against a SQLite file and the PostgreSQL server of ``PSYCH_MEMORY_TEST_POSTGRES_DSN``
(skipped without one, failed under ``CI=true``). Each PostgreSQL test uses a
schema of its own. ``PSYCH_MEMORY_TEST_MIGRATE_FACTS`` sets how many facts the
round-trip migration moves (default 3,000, so that the suite stays quick on
every Python; the operator's page reports a run with 100,000).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.admin import ExitCode, open_memory
from psych_runtime.memory.admin._format import parse_export, render_export
from psych_runtime.memory.port import (
    MAX_CREATED_AT,
    MIN_CREATED_AT,
    ListsEndUsers,
    Memory,
    MemoryKey,
    RestoresFacts,
    new_memory_id,
)

Snapshot = dict[tuple[str, str], tuple[Memory, ...]]


def command() -> str:
    """The installed console script, beside this Python or on the PATH."""
    beside = Path(sys.executable).parent / "psych-memory"
    found = str(beside) if beside.exists() else shutil.which("psych-memory")
    if found is None:
        pytest.fail("the console script psych-memory is not installed")
    return found


# Where pytest started: coverage data of the command's processes is written there.
_STARTED_IN = Path.cwd()


def _environment() -> dict[str, str]:
    environment = dict(os.environ)
    if "COVERAGE_PROCESS_START" in environment:
        # Under coverage, the command's processes report beside the test run's
        # own data (and not into the folder whose files a test compares).
        environment["COVERAGE_FILE"] = str(_STARTED_IN / ".coverage")
    return environment


def psych_memory(
    *args: str, cwd: Path, stdin: str | bytes | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the installed command to its end; never through a shell."""
    data = stdin.decode() if isinstance(stdin, bytes) else stdin
    return subprocess.run(
        [command(), *args],
        cwd=cwd,
        input=data if data is not None else "",
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
        env=_environment(),
    )


def seed(url: str, facts: Sequence[tuple[str, str, str]]) -> None:
    """Remember ``(tenant, end_user, content)`` facts in the store at ``url``, in order."""

    async def write() -> None:
        async with open_memory(url) as store:
            for tenant, end_user, content in facts:
                await store.remember(tenant, end_user, content)

    anyio.run(write)


def snapshot(url: str) -> Snapshot:
    """Every key's facts, in order: what a test compares before and after."""

    async def read() -> Snapshot:
        async with open_memory(url) as store:
            assert isinstance(store, ListsEndUsers)
            found: Snapshot = {}
            for tenant in await store.tenants():
                for end_user in await store.end_users(tenant):
                    found[tenant, end_user] = await store.recall(tenant, end_user)
            return found

    return anyio.run(read)


def one_error_line(stderr: str, *names: str) -> str:
    """The single error line of a failed run, naming ``names``."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    (line,) = lines
    assert line.startswith("psych-memory: error: "), line
    for name in names:
        assert name in line, (name, line)
    return line


MIGRATE_FACTS = int(os.environ.get("PSYCH_MEMORY_TEST_MIGRATE_FACTS", "3000"))
SECRET = "Zq8-s3cret"  # noqa: S105 - made up, to look for in what is shown
ERASED_TEXT = "lives at Kastanienallee 77, door code 4711"


@pytest.fixture(autouse=True)
def _sqlite_here(
    require_schemes: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Relative sqlite: URLs name the same file here and in the command.
    require_schemes("sqlite")
    monkeypatch.chdir(tmp_path)


def pg_url(dsn: str, schema: str, **options: str) -> str:
    query = "&".join(f"{name}={value}" for name, value in {"schema": schema, **options}.items())
    return f"{dsn}{'&' if '?' in dsn else '?'}{query}"


def assert_same_facts(one: Snapshot, other: Snapshot) -> None:
    """Every key, every fact: the same ids, contents, times, in the same order."""
    assert one.keys() == other.keys()
    for key, facts in one.items():
        copies = other[key]
        assert [(f.id, f.content, f.created_at) for f in facts] == [
            (f.id, f.content, f.created_at) for f in copies
        ], key


MIXED = [
    ("acme", "u1", "ships to Berlin"),
    ("acme", "u1", "two lines\nand a\ttab, ünïcødé ✓"),
    ("acme", "u2", "pays by invoice"),
    ("acme", "u1", "prefers email"),
    ("globex", "u1", "another tenant's fact"),
]


# Export and import.


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_export_then_import_round_trips_exactly(tmp_path: Path, layout: str) -> None:
    seed("sqlite:///source.db", MIXED)
    exported = psych_memory(
        "export", "sqlite:///source.db", "--tenant", "acme", "--user", "u1",
        "--format", layout, "-o", "u1.export", cwd=tmp_path,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == ""
    assert (tmp_path / "u1.export").stat().st_mode & 0o077 == 0
    imported = psych_memory("import", "sqlite:///copy.db", "u1.export", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert "imported 3 fact(s)" in imported.stdout
    source = snapshot(f"sqlite:///{tmp_path / 'source.db'}")
    copy = snapshot(f"sqlite:///{tmp_path / 'copy.db'}")
    assert_same_facts({("acme", "u1"): source["acme", "u1"]}, copy)
    # Exported again from the copy: the same document, but for the time of export.
    again = psych_memory(
        "export", "sqlite:///copy.db", "--tenant", "acme", "--user", "u1", "--format", layout,
        cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    first = (tmp_path / "u1.export").read_text(encoding="utf-8")
    assert _without_export_time(again.stdout, layout) == _without_export_time(first, layout)
    # Importing twice writes nothing more.
    twice = psych_memory("import", "sqlite:///copy.db", "u1.export", cwd=tmp_path)
    assert twice.returncode == 0, twice.stderr
    assert "imported 0 fact(s) in 0 batch(es)" in twice.stdout
    assert "3 of the 3 were there already" in twice.stdout
    assert_same_facts(copy, snapshot(f"sqlite:///{tmp_path / 'copy.db'}"))


def _without_export_time(text: str, layout: str) -> list[dict[str, object]]:
    lines = [text] if layout == "json" else text.splitlines()
    documents: list[dict[str, object]] = [json.loads(line) for line in lines]
    for document in documents:
        document.pop("exported_at", None)
    return documents


def test_export_to_postgres_and_back_round_trips(
    require_schemes: Callable[..., None], tmp_path: Path, postgres_dsn: str, postgres_schema: str
) -> None:
    require_schemes("postgresql")
    seed("sqlite:///source.db", MIXED)
    exported = psych_memory(
        "export", "sqlite:///source.db", "--tenant", "acme", "--user", "u1", cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert [fact["content"] for fact in document["facts"]] == [
        "ships to Berlin", "two lines\nand a\ttab, ünïcødé ✓", "prefers email"
    ]  # fmt: skip
    url = pg_url(postgres_dsn, postgres_schema)
    imported = psych_memory("import", url, "-", cwd=tmp_path, stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    source = snapshot(f"sqlite:///{tmp_path / 'source.db'}")
    assert_same_facts({("acme", "u1"): source["acme", "u1"]}, snapshot(url))


def test_an_import_too_big_for_one_statement_goes_in_batches_at_the_defaults(
    require_schemes: Callable[..., None], tmp_path: Path, postgres_dsn: str, postgres_schema: str
) -> None:
    # 30,000 facts take about 1.5 s in one call here, a batch of 2,000 about
    # 0.1 s: with a 0.5 s statement timeout the file goes through only in
    # batches, the path a million facts take under the default 5 s.
    require_schemes("postgresql")
    key = MemoryKey("acme", "big")
    facts = [
        Memory(f"f-{n:06d}", key, f"fact number {n}", datetime(2026, 1, 1, tzinfo=UTC))
        for n in range(30_000)
    ]
    (tmp_path / "big.jsonl").write_text(
        render_export(key, facts, datetime.now(UTC), "jsonl"), encoding="utf-8"
    )
    url = pg_url(postgres_dsn, postgres_schema, statement_timeout="0.5")
    imported = psych_memory("import", url, "big.jsonl", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("imported 30000 fact(s) in 15 batch(es) of up to 2,000")
    counted = psych_memory("count", url, "--tenant", "acme", "--user", "big", cwd=tmp_path)
    assert (counted.returncode, counted.stdout) == (0, "30000\n"), counted.stderr


@pytest.mark.parametrize("scheme", ["sqlite", "postgresql"])
def test_facts_at_the_ends_of_the_time_range_and_with_line_separators_round_trip(
    require_schemes: Callable[..., None],
    tmp_path: Path,
    scheme: str,
    request: pytest.FixtureRequest,
) -> None:
    require_schemes(scheme)
    source, copy = (
        (f"sqlite:///{tmp_path}/ends.db", f"sqlite:///{tmp_path}/ends-copy.db")
        if scheme == "sqlite"
        else request.getfixturevalue("two_schemas")
    )
    key = MemoryKey("acme", "u\u2028\u2029v")
    facts = (
        Memory("at-max", key, "the latest\u2028time", MAX_CREATED_AT),
        Memory("at-min", key, "the earliest\u2029time", MIN_CREATED_AT),
        Memory("between", key, "2300, a microsecond in", datetime(2300, 1, 1, 0, 0, 0, 1, UTC)),
    )
    anyio.run(_restore, source, facts)
    for layout in ("json", "jsonl"):
        exported = psych_memory(
            "export", source, "--tenant", key.tenant, "--user", key.end_user_id,
            "--format", layout, "-o", f"ends.{layout}", cwd=tmp_path,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        imported = psych_memory("import", copy, f"ends.{layout}", cwd=tmp_path)
        assert imported.returncode == 0, imported.stderr
    assert snapshot(copy)[key.tenant, key.end_user_id] == facts


@pytest.fixture
def two_schemas(postgres_dsn: str, postgres_schema: str) -> Iterator[tuple[str, str]]:
    """The URLs of two fresh schemas of the server, both dropped after the test."""
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need the driver
    from psycopg import sql  # noqa: PLC0415

    other = f"{postgres_schema}_2"
    yield pg_url(postgres_dsn, postgres_schema), pg_url(postgres_dsn, other)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other)))


async def _restore(url: str, facts: Sequence[Memory]) -> None:
    async with open_memory(url) as store:
        assert isinstance(store, RestoresFacts)
        await store.restore_many(facts)


# An export's file: complete under its name, or absent, however the command ends.

EXPORT_FACTS = 5_000  # enough pages and bytes that the kills land in every phase
KILLS = 5


def started_export(tmp_path: Path, target: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [command(), "export", "sqlite:///facts.db", "--tenant", "acme", "--user", "big",
         "-o", target],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        encoding="utf-8", env=_environment(),
    )  # fmt: skip


def complete_export(path: Path) -> None:
    """The file is a whole, valid export of every fact of "big"."""
    export = parse_export(path.read_text(encoding="utf-8"))
    assert (export.key, len(export.facts)) == (MemoryKey("acme", "big"), EXPORT_FACTS)


def wait_for_output(process: subprocess.Popen[str], target: Path) -> None:
    """Look, without pause, until the export's file appears.

    The export may also finish between a look that finds no file and the
    look at the process (a busy machine can hold this process that long):
    an export that ended must have written its file first.
    """
    while not target.exists():
        if process.poll() is not None:
            assert target.exists(), process.communicate()
            return


def files_beside(tmp_path: Path) -> list[str]:
    """Every file in the folder but the store's own."""
    return sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith("facts.db"))


def timed_export(tmp_path: Path) -> float:
    """Seed "big", export it once to its end, and return how long that took."""
    seed_one_end_user("sqlite:///facts.db", "big", EXPORT_FACTS)
    started = time.monotonic()
    process = started_export(tmp_path, "whole.json")
    _, err = process.communicate(timeout=300)
    took = time.monotonic() - started
    assert process.returncode == 0, err
    assert err == f"psych-memory: wrote {EXPORT_FACTS} fact(s) to the --output file\n"
    complete_export(tmp_path / "whole.json")
    (tmp_path / "whole.json").unlink()
    return took


def timed_start(tmp_path: Path) -> float:
    """How long the command takes to start, import its own modules and stop."""
    started = time.monotonic()
    shown = psych_memory("--version", cwd=tmp_path)
    took = time.monotonic() - started
    assert shown.returncode == 0, shown.stderr
    return took


def test_an_export_killed_as_soon_as_its_file_appears_left_it_complete(tmp_path: Path) -> None:
    seed_one_end_user("sqlite:///facts.db", "big", EXPORT_FACTS)
    target = tmp_path / "out.json"
    for _ in range(KILLS):
        process = started_export(tmp_path, "out.json")
        # Polled without pause: the kill must land as close to the file's
        # appearance as this process can see it.
        wait_for_output(process, target)
        process.kill()
        process.communicate(timeout=60)
        complete_export(target)
        assert files_beside(tmp_path) == ["out.json"]
        target.unlink()


def test_an_export_killed_at_random_points_leaves_its_file_complete_or_absent(
    tmp_path: Path,
) -> None:
    took = timed_export(tmp_path)
    target = tmp_path / "out.json"
    chosen = random.Random(2026)
    for _ in range(KILLS):
        process = started_export(tmp_path, "out.json")
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=chosen.uniform(0, 1.2 * took))
        process.kill()
        process.communicate(timeout=60)
        if target.exists():
            complete_export(target)
            target.unlink()
        assert files_beside(tmp_path) == []


def test_ctrl_c_at_random_points_of_an_export_says_written_exactly_when_it_was(
    tmp_path: Path,
) -> None:
    took = timed_export(tmp_path)
    # Not before the command runs: a Ctrl-C landing in Python's own start
    # can be lost there (see LOST_INTERRUPT), before the command can see it.
    earliest = min(max(0.3 * took, 1.5 * timed_start(tmp_path)), took)
    target = tmp_path / "out.json"
    chosen = random.Random(2027)
    for round_ in range(3 * KILLS):
        process = started_export(tmp_path, "out.json")
        if round_ < KILLS:
            # As soon as the name appears: the export is written, and must say so.
            wait_for_output(process, target)
        else:
            # Late in the run more often than not: the final write and link.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=chosen.uniform(earliest, 1.1 * took))
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert out == ""
        written = f"psych-memory: wrote {EXPORT_FACTS} fact(s) to the --output file\n"
        if target.exists():
            complete_export(target)
            assert (process.returncode, err) == (ExitCode.DONE, written)
            target.unlink()
        else:
            assert "wrote" not in err
            assert process.returncode != ExitCode.DONE, err
            if process.returncode == ExitCode.CANCELLED:
                assert err.endswith("psych-memory: error: cancelled: nothing more was done\n")
            # Else interrupted while Python itself was starting: not the command's to word.
        assert files_beside(tmp_path) == []


# What the console script runs, with one Ctrl-C lost as Python loses one that
# lands at the end of an import: raised in a weak reference's callback, which
# Python reports as an exception it ignored and goes on. Here it lands as the
# command's own modules are imported, and a ValueError is lost the same way.
LOST_INTERRUPT = """
import sys, weakref

from psych_runtime.memory.admin._main import run

class Doomed:
    pass

def interrupted(_):
    raise KeyboardInterrupt

def failed(_):
    raise ValueError("a finaliser's own failure")

held = [Doomed(), Doomed()]
watched = [weakref.ref(held[0], interrupted), weakref.ref(held[1], failed)]

def on_import(event, args):
    if event == "import" and args[0] == "psych_runtime.memory.admin._cli":
        held.clear()

sys.addaudithook(on_import)
sys.argv[0] = "psych-memory"
run()
"""


def test_a_ctrl_c_python_discards_still_cancels_the_export(tmp_path: Path) -> None:
    seed_one_end_user("sqlite:///facts.db", "big", 10)
    lost = subprocess.run(
        [sys.executable, "-c", LOST_INTERRUPT, "export", "sqlite:///facts.db",
         "--tenant", "acme", "--user", "big", "-o", "out.json"],
        cwd=tmp_path, capture_output=True, text=True, encoding="utf-8", timeout=300,
        check=False, env=_environment(),
    )  # fmt: skip
    assert (lost.returncode, lost.stdout) == (ExitCode.CANCELLED, ""), lost.stderr
    assert lost.stderr.endswith("psych-memory: error: cancelled: nothing more was done\n")
    # The lost Ctrl-C is not reported as a failure of its own; anything else still is.
    assert "KeyboardInterrupt" not in lost.stderr
    assert "ValueError: a finaliser's own failure" in lost.stderr
    assert files_beside(tmp_path) == []


# Erase.


def test_erase_leaves_none_of_the_erased_text_in_the_sqlite_files(tmp_path: Path) -> None:
    seed("sqlite:///facts.db", [("acme", "u1", ERASED_TEXT), *MIXED])
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    erased = psych_memory(
        "erase", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1", "--yes", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert erased.returncode == 0, erased.stderr
    receipt = json.loads(erased.stdout)
    assert receipt["receipt"] == "psych-memory-erasure-receipt"
    assert receipt["version"] == 1
    assert (receipt["tenant"], receipt["end_user_id"]) == ("acme", "u1")
    assert receipt["facts_deleted"] == 4
    assert receipt["store"] == "sqlite:///facts.db"
    assert receipt["scrub"] == "scrubbed"
    erased_at = datetime.fromisoformat(receipt["erased_at"])
    assert erased_at.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - erased_at) < timedelta(minutes=5)
    for path in tmp_path.glob("facts.db*"):
        data = path.read_bytes()
        for text in (ERASED_TEXT, "ships to Berlin", "prefers email"):
            assert text.encode() not in data, (path.name, text)
    after = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    del before["acme", "u1"]
    assert_same_facts(before, after)


def test_erase_receipt_as_text_shows_no_password_and_no_fact(
    require_schemes: Callable[..., None], tmp_path: Path, postgres_dsn: str, postgres_schema: str
) -> None:
    require_schemes("postgresql")
    url = pg_url(postgres_dsn, postgres_schema)
    seed(url, MIXED)
    head, _, rest = url.partition("://")
    user_info, at, host = rest.rpartition("@")
    with_password = (
        f"{head}://{user_info.partition(':')[0] or 'postgres'}:{SECRET}@{host if at else rest}"
    )
    erased = psych_memory(
        "erase", with_password, "--tenant", "acme", "--user", "u1", "--yes", cwd=tmp_path
    )
    assert erased.returncode == 0, erased.stderr
    lines = erased.stdout.splitlines()
    assert lines[0] == "Erasure receipt"
    assert "facts deleted:  3" in lines
    assert any(line.startswith("store:") and ":***@" in line for line in lines)
    assert SECRET not in erased.stdout + erased.stderr
    assert "ships to Berlin" not in erased.stdout
    assert not any(line.startswith("deleted bytes:") for line in lines)  # PostgreSQL: no scrub
    # Read from the server: the test server streams to no standby.
    assert "durability:     on a server with no replication" in lines
    assert ("acme", "u1") not in snapshot(url)


def test_erase_off_a_terminal_needs_yes_and_changes_nothing(tmp_path: Path) -> None:
    seed("sqlite:///facts.db", MIXED)
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    refused = psych_memory(
        "erase", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1", cwd=tmp_path, stdin="y\n"
    )
    assert refused.returncode == 2
    one_error_line(refused.stderr, "--yes")
    assert_same_facts(before, snapshot(f"sqlite:///{tmp_path / 'facts.db'}"))


@pytest.mark.parametrize(("answer", "code"), [("n", 6), ("y", 0)])
def test_erase_on_a_terminal_asks_first(tmp_path: Path, answer: str, code: int) -> None:
    seed("sqlite:///facts.db", MIXED)
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    controller, terminal = os.openpty()
    try:
        # The answer waits in the terminal's buffer until the prompt reads it.
        os.write(controller, f"{answer}\n".encode())
        asked = subprocess.run(
            [command(), "erase", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1"],
            cwd=tmp_path, stdin=terminal, capture_output=True, text=True, timeout=300, check=False,
            env=_environment(),
        )  # fmt: skip
    finally:
        os.close(terminal)
        os.close(controller)
    assert asked.returncode == code, asked.stderr
    # The question goes to standard error; the receipt alone to standard output.
    question, _, rest = asked.stderr.partition("[y/N]: ")
    assert question.startswith("Erase all 3 fact(s) of this end user from sqlite:///facts.db?")
    assert "Erase all" not in asked.stdout
    after = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    if answer == "n":
        one_error_line(rest, "cancelled")
        assert_same_facts(before, after)
    else:
        assert "Erasure receipt" in asked.stdout
        assert ("acme", "u1") not in after


# Users and count.


def test_users_and_count(tmp_path: Path) -> None:
    seed("sqlite:///facts.db", MIXED)
    users = psych_memory("users", "sqlite:///facts.db", "--tenant", "acme", cwd=tmp_path)
    assert (users.returncode, users.stdout) == (0, "u1\nu2\n")
    for args, expected in [
        ((), "5"),
        (("--tenant", "acme"), "4"),
        (("--tenant", "acme", "--user", "u1"), "3"),
        (("--tenant", "nobody"), "0"),
    ]:
        counted = psych_memory("count", "sqlite:///facts.db", *args, cwd=tmp_path)
        assert (counted.returncode, counted.stdout) == (0, f"{expected}\n"), args


# Migrate.


def seed_many(url: str, facts: int, end_users: int) -> None:
    """``facts`` facts spread over ``end_users`` keys of two tenants, interleaved."""
    seed(
        url,
        [
            (f"tenant-{n % 2}", f"user-{n % end_users:05d}", f"fact number {n} ✓")
            for n in range(facts)
        ],
    )


def test_migrate_sqlite_to_postgres_and_back_keeps_every_id_order_and_time(
    require_schemes: Callable[..., None], tmp_path: Path, postgres_dsn: str, postgres_schema: str
) -> None:
    require_schemes("postgresql")
    source = "sqlite:///source.db?durability=normal"
    seed_many(source, MIGRATE_FACTS, end_users=max(1, MIGRATE_FACTS // 100))
    postgres = pg_url(postgres_dsn, postgres_schema)
    there = psych_memory("migrate", source, postgres, cwd=tmp_path)
    assert there.returncode == 0, there.stderr
    assert there.stdout.startswith(f"copied {MIGRATE_FACTS} fact(s)")
    assert there.stderr == ""  # not a terminal: no progress bar
    back = psych_memory("migrate", postgres, "sqlite:///back.db?durability=normal", cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    original = snapshot(f"sqlite:///{tmp_path / 'source.db'}")
    assert sum(len(facts) for facts in original.values()) == MIGRATE_FACTS
    assert_same_facts(original, snapshot(postgres))
    assert_same_facts(original, snapshot(f"sqlite:///{tmp_path / 'back.db'}"))
    again = psych_memory("migrate", source, postgres, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("copied nothing")


def test_migrate_one_tenant_only(tmp_path: Path) -> None:
    seed("sqlite:///source.db", MIXED)
    moved = psych_memory(
        "migrate", "sqlite:///source.db", "sqlite:///dest.db", "--tenant", "globex", cwd=tmp_path
    )
    assert moved.returncode == 0, moved.stderr
    assert list(snapshot(f"sqlite:///{tmp_path / 'dest.db'}")) == [("globex", "u1")]


def test_migrate_killed_midway_resumes_with_nothing_lost_or_doubled(
    require_schemes: Callable[..., None], tmp_path: Path, postgres_dsn: str, postgres_schema: str
) -> None:
    require_schemes("postgresql")
    source = "sqlite:///source.db?durability=normal"
    # Three calls' worth of facts at --jobs 1, each call a whole number of
    # end users: the kill lands after the first and before the last.
    seed_many(source, 6000, end_users=60)
    postgres = pg_url(postgres_dsn, postgres_schema)
    process = subprocess.Popen(
        [command(), "migrate", source, postgres, "--jobs", "1", "--verbose"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    assert process.stderr is not None
    # Killed once some end users are copied, without warning.
    for _ in range(5):
        assert process.stderr.readline().startswith("end users done:")
    process.kill()
    process.wait()
    process.stderr.close()
    original = snapshot(f"sqlite:///{tmp_path / 'source.db'}")
    partial = snapshot(postgres)
    assert 5 <= len(partial) < len(original)
    resumed = psych_memory("migrate", source, postgres, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    copied = int(resumed.stdout.split()[1])
    assert copied == 6000 - sum(len(facts) for facts in partial.values())
    assert_same_facts(original, snapshot(postgres))


def test_migrate_refuses_a_destination_holding_other_facts_and_copies_nothing(
    tmp_path: Path,
) -> None:
    seed("sqlite:///source.db", MIXED)
    seed("sqlite:///dest.db", [("acme", "u2", "a fact only the destination holds")])
    before = snapshot(f"sqlite:///{tmp_path / 'dest.db'}")
    refused = psych_memory("migrate", "sqlite:///source.db", "sqlite:///dest.db", cwd=tmp_path)
    assert refused.returncode == 5
    line = one_error_line(refused.stderr, "TO_URL", "1 end user(s)")
    assert "destination holds" not in line
    assert_same_facts(before, snapshot(f"sqlite:///{tmp_path / 'dest.db'}"))


# Bad input: a clear message, a non-zero exit, nothing changed.


HEADER = (
    '{"format": "psych-memory-export", "version": 1, "tenant": "acme", "end_user_id": "u9", '
    '"exported_at": "2026-01-01T00:00:00.000000Z"'
)
BAD_JSON = [
    ("not json", "{not json", "FILE", "is not JSON"),
    ("empty", "", "FILE", "is empty"),
    ("a list", "[]", "FILE", "JSON object"),
    ("another version", HEADER.replace('"version": 1', '"version": 2') + ', "facts": []}',
     "FILE", "'version': 1"),
    ("a bad line", HEADER + ', "facts_count": 1}\n{"id": "a1", "content": "x", "crea',
     "FILE", "line 2 is not JSON"),
    ("a bad id", HEADER + ', "facts": [{"id": "no spaces allowed", "content": "x", '
     '"created_at": "2026-01-01T00:00:00.000000Z"}]}', "FILE", "fact 1 (line 1) 'id'"),
    ("a time out of range", HEADER + ', "facts_count": 1}\n{"id": "a1", "content": "x", '
     '"created_at": "10000-01-01T00:00:00.000000Z"}', "FILE",
     "line 2 'created_at' must be between 0001-01-01T00:00:00.000000Z and 9999-12-31T23:59:59"),
    ("a time without microseconds", HEADER + ', "facts_count": 1}\n{"id": "a1", "content": '
     '"x", "created_at": "2026-01-01T00:00:00Z"}', "FILE", "line 2 'created_at' must be a time"),
    ("a huge integer", HEADER + ', "facts_count": 1' + "0" * 5000 + "}", "FILE",
     "the export (line 1) holds an integer of more than 20 digits"),
    ("deep nesting", HEADER + ', "facts": [' + "[" * 100_000 + "]" * 100_000 + "]}", "FILE",
     "fact 1 (line 1) nests JSON too deeply"),
    ("a repeated key", HEADER + ', "facts_count": 1}\n{"id": "a1", "content": "x", "content": '
     '"y", "created_at": "2026-01-01T00:00:00.000000Z"}', "FILE", "line 2 repeats a field"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "argument", "words"), [case[1:] for case in BAD_JSON],
                         ids=[case[0] for case in BAD_JSON])  # fmt: skip
def test_a_bad_import_file_is_refused_and_changes_nothing(
    tmp_path: Path, text: str, argument: str, words: str
) -> None:
    seed("sqlite:///facts.db", MIXED)
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    (tmp_path / "bad.json").write_text(text, encoding="utf-8")
    refused = psych_memory("import", "sqlite:///facts.db", "bad.json", cwd=tmp_path)
    assert refused.returncode == 2
    one_error_line(refused.stderr, argument, words)
    assert_same_facts(before, snapshot(f"sqlite:///{tmp_path / 'facts.db'}"))


@pytest.mark.parametrize(
    ("args", "code", "names"),
    [
        (("export", "nosuchscheme:x", "--tenant", "acme", "--user", "u1"), 2, ("URL", "scheme")),
        (("users", "nosuchscheme:x", "--tenant", "acme"), 2, ("URL", "scheme")),
        (("migrate", "sqlite:///facts.db", "nosuchscheme:x"), 2, ("TO_URL", "scheme")),
        (("export", "sqlite:///facts.db", "--tenant", "acme", "--user", "nobody"), 4, ("--user",)),
        (("erase", "sqlite:///facts.db", "--tenant", "acme", "--user", "nobody", "--yes"), 4,
         ("--user",)),
        (("erase", "sqlite:///facts.db", "--tenant", " acme", "--user", "u1", "--yes"), 2,
         ("--tenant",)),
        (("export", "sqlite:///nothere.db", "--tenant", "acme", "--user", "u1"), 2,
         ("URL", "does not exist")),
        (("export", "sqlite:///facts.db", "--tenant", "acme"), 2, ("--user",)),
        (("import", "sqlite:///facts.db", "missing.json"), 2, ("FILE",)),
        (("import", "sqlite:///facts.db", "."), 2, ("FILE",)),
        (("count", "sqlite:///facts.db", "--user", "u1"), 2, ("--user", "--tenant")),
        (("migrate", "sqlite:///facts.db", "memory:", "--jobs", "0"), 2, ("--jobs",)),
        (("export", "sqlite:///facts.db?colour=blue", "--tenant", "acme", "--user", "u1"), 2,
         ("URL", "option")),
        # The URL's own rules come first, before any question of its file.
        (("count", "sqlite:///nofile.db?colour=blue"), 2, ("URL", "unknown option")),
        (("count", "sqlite://host/facts.db"), 2, ("URL", "must not name a host")),
        # File-system problems: one line naming the argument and the rule.
        (("import", "sqlite:///missing/x.db", "good.jsonl"), 2,
         ("URL", "names a SQLite file in a folder that does not exist")),
        (("migrate", "sqlite:///facts.db", "sqlite:///missing/x.db"), 2,
         ("TO_URL", "in a folder that does not exist")),
        (("import", "sqlite:///afolder", "good.jsonl"), 2,
         ("URL", "names a folder, not a SQLite file")),
        (("count", "sqlite:///afolder"), 2, ("URL", "names a folder, not a SQLite file")),
        (("import", "sqlite:///" + "a" * 300 + ".db", "good.jsonl"), 2,
         ("URL", "cannot be opened (File name too long)")),
        (("import", "sqlite:///facts.db", "nofile.json"), 2,
         ("FILE", "cannot be read (No such file or directory)")),
        (("import", "sqlite:///facts.db", "afolder"), 2, ("FILE", "is a directory")),
        (("export", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1", "-o",
          "missing/out.json"), 2, ("--output", "(No such file or directory)")),
    ],
)  # fmt: skip
def test_bad_input_exits_non_zero_with_one_clear_line_and_changes_nothing(
    tmp_path: Path, args: tuple[str, ...], code: int, names: tuple[str, ...]
) -> None:
    seed("sqlite:///facts.db", MIXED)
    (tmp_path / "afolder").mkdir()
    (tmp_path / "good.jsonl").write_text(
        HEADER + ', "facts_count": 1}\n' + '{"id": "a1", "content": "x", '
        '"created_at": "2026-01-01T00:00:00.000000Z"}\n',
        encoding="utf-8",
    )
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    files = sorted(path.name for path in tmp_path.iterdir())
    refused = psych_memory(*args, cwd=tmp_path)
    assert refused.returncode == code, refused.stderr
    assert refused.stdout == ""
    one_error_line(refused.stderr, *names)
    assert "ships to Berlin" not in refused.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == files
    assert_same_facts(before, snapshot(f"sqlite:///{tmp_path / 'facts.db'}"))


def test_an_unreachable_server_exits_with_store_unavailable(
    require_schemes: Callable[..., None], tmp_path: Path
) -> None:
    require_schemes("postgresql")
    refused = psych_memory(
        "count", f"postgresql://postgres:{SECRET}@127.0.0.1:1/none?pool_timeout=2", cwd=tmp_path
    )
    assert refused.returncode == 3, refused.stderr
    one_error_line(refused.stderr, "URL")
    assert SECRET not in refused.stderr


def test_standard_output_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    seed("sqlite:///facts.db", MIXED)
    with Path("/dev/full").open("w") as full:
        run = subprocess.run(
            [command(), "export", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1"],
            cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
            check=False, env=_environment(),
        )  # fmt: skip
    assert run.returncode == 2
    one_error_line(run.stderr, "standard output: cannot be written (No space left on device)")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("erase", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1"),
         ("--yes", "standard input is not a terminal")),
        (("import", "sqlite:///facts.db", "-"), ("FILE", "standard input is closed")),
    ],
)  # fmt: skip
def test_closed_standard_input_is_bad_usage(
    tmp_path: Path, args: tuple[str, ...], names: tuple[str, ...]
) -> None:
    seed("sqlite:///facts.db", MIXED)
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    # The command starts with file descriptor 0 closed, as after "<&-".
    closing = "import os, sys; os.close(0); os.execv(sys.argv[1], sys.argv[1:])"
    run = subprocess.run(
        [sys.executable, "-c", closing, command(), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env=_environment(),
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    one_error_line(run.stderr, *names)
    assert_same_facts(before, snapshot(f"sqlite:///{tmp_path / 'facts.db'}"))


def test_the_bare_command_prints_its_short_usage(tmp_path: Path) -> None:
    run = psych_memory(cwd=tmp_path)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.splitlines() == [
        "Usage: psych-memory [OPTIONS] COMMAND [ARGS]...",
        "Try 'psych-memory --help' for help.",
        (
            "psych-memory: error: a command is needed: "
            "count, erase, expire, export, import, ledger, migrate, replay-deletions, users"
        ),
    ]


class _Asking:
    """An erase run on a terminal of its own, up to its question."""

    def __init__(self, tmp_path: Path) -> None:
        self.controller, terminal = os.openpty()
        self.process = subprocess.Popen(
            [command(), "erase", "sqlite:///facts.db", "--tenant", "acme", "--user", "u1"],
            cwd=tmp_path, stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=_environment(),
        )  # fmt: skip
        os.close(terminal)
        self.asked = b""
        assert self.process.stderr is not None
        while b"[y/N]: " not in self.asked:
            chunk = os.read(self.process.stderr.fileno(), 4096)
            assert chunk, self.asked  # ended without asking
            self.asked += chunk

    def answer(self, text: str) -> tuple[int, str, str]:
        os.write(self.controller, text.encode())
        return self.ended()

    def ended(self) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out.decode(), (self.asked + err).decode()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.controller)


def test_ctrl_c_at_the_question_ends_at_once_and_erases_nothing(tmp_path: Path) -> None:
    seed("sqlite:///facts.db", MIXED)
    before = snapshot(f"sqlite:///{tmp_path / 'facts.db'}")
    asking = _Asking(tmp_path)
    try:
        asking.process.send_signal(signal.SIGINT)
        code, out, err = asking.ended()
    finally:
        asking.close()
    assert code == 6
    assert out == ""
    assert err.endswith("psych-memory: error: cancelled: nothing more was done\n"), err
    assert_same_facts(before, snapshot(f"sqlite:///{tmp_path / 'facts.db'}"))


def test_the_second_of_two_erasures_at_once_says_someone_else_erased_them(
    tmp_path: Path,
) -> None:
    seed("sqlite:///facts.db", MIXED)
    first, second = _Asking(tmp_path), _Asking(tmp_path)
    try:
        assert b"Erase all 3 fact(s)" in first.asked
        assert b"Erase all 3 fact(s)" in second.asked
        code, out, _ = first.answer("y\n")
        assert (code, "facts deleted:  3" in out) == (0, True), out
        code, out, err = second.answer("y\n")
    finally:
        first.close()
        second.close()
    assert code == 4, err
    assert "facts deleted:  0" in out.splitlines()
    assert (
        "outcome:        already erased: another erasure deleted this end user's facts after "
        "they were counted; this command deleted none"
    ) in out.splitlines()


RACED_FACTS = 3_000  # more than one batch of a large erase


def seed_one_end_user(url: str, end_user: str, count: int) -> None:
    """Give ``end_user`` of tenant "acme" ``count`` facts in one write."""
    key = MemoryKey("acme", end_user)
    start = datetime(2026, 1, 1, tzinfo=UTC)

    async def write() -> None:
        async with open_memory(url) as store:
            assert isinstance(store, RestoresFacts)
            await store.restore_many(
                Memory(new_memory_id(), key, f"fact {index}", start + timedelta(seconds=index))
                for index in range(count)
            )

    anyio.run(write)


@pytest.mark.parametrize("round_", range(3))
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_erasures_started_together_count_the_facts_once(
    require_schemes: Callable[..., None],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
    round_: int,
) -> None:
    if backend == "sqlite":
        url = "sqlite:///facts.db"
    else:
        require_schemes("postgresql")
        postgres_dsn = request.getfixturevalue("postgres_dsn")
        url = pg_url(postgres_dsn, request.getfixturevalue("postgres_schema"))
    seed_one_end_user(url, "victim", RACED_FACTS)
    arguments = [command(), "erase", url, "--tenant", "acme", "--user", "victim", "--yes", "--json"]
    processes = [
        subprocess.Popen(
            arguments,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=_environment(),
        )
        for _ in range(2)
    ]
    ended = sorted(
        (process.returncode, out, err)
        for process in processes
        for out, err in [process.communicate(timeout=300)]
    )
    (won, won_out, won_err), (lost, lost_out, lost_err) = ended
    assert (won, lost) == (ExitCode.DONE, ExitCode.NOT_FOUND), (won_err, lost_err)
    receipt = json.loads(won_out)
    assert (receipt["facts_deleted"], receipt["outcome"]) == (RACED_FACTS, "erased")
    if lost_out:
        # It saw the facts before the other erasure deleted them.
        receipt = json.loads(lost_out)
        assert (receipt["facts_deleted"], receipt["outcome"]) == (0, "already_erased")
        assert lost_err == ""
    else:
        # It started only after the other had ended.
        one_error_line(lost_err, "--user", "holds no facts")
    assert snapshot(url) == {}


@pytest.mark.parametrize(
    "args",
    [
        ("count", "--tenant", "acme"),
        ("count", "--tenant", "acme", "--user", "user-42"),
        ("export", "--tenant", "acme", "--user", "user-42"),
        ("users", "--tenant", "acme"),
        ("erase", "--tenant", "acme", "--user", "user-42", "--yes"),
    ],
    ids=["count", "count-user", "export", "users", "erase"],
)
def test_a_reading_or_deleting_command_on_a_mistyped_schema_creates_nothing(
    tmp_path: Path, postgres_dsn: str, postgres_schema: str, args: tuple[str, ...]
) -> None:
    import psycopg  # noqa: PLC0415

    run = psych_memory(*args, pg_url(postgres_dsn, postgres_schema), cwd=tmp_path)
    assert run.returncode == ExitCode.UNAVAILABLE, run.stderr
    line = one_error_line(run.stderr, "URL")
    assert "does not exist" in line, line
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (postgres_schema,)
        ).fetchone()
    assert found == (0,), "the command created the schema it was only to read"


@pytest.fixture(params=["sqlite", "postgresql"])
def expiry_url(request: pytest.FixtureRequest, require_schemes: Callable[..., None]) -> str:
    """A store URL for the expiry runs: a SQLite file here, or a PostgreSQL schema."""
    if request.param == "sqlite":
        return "sqlite:///facts.db"
    require_schemes("postgresql")
    postgres_dsn: str = request.getfixturevalue("postgres_dsn")
    return pg_url(postgres_dsn, request.getfixturevalue("postgres_schema"))


def test_two_expiries_at_once_delete_each_fact_once(tmp_path: Path, expiry_url: str) -> None:
    # Two processes, as two schedulers firing together would start them.
    old = datetime.now(UTC) - timedelta(days=500)
    facts = [
        Memory(f"old-{index}", MemoryKey("acme", f"u{index % 40}"), f"old {index}", old)
        for index in range(5_000)
    ]
    anyio.run(_restore, expiry_url, facts)
    argv = [command(), "expire", expiry_url, "--tenant", "acme", "--older-than", "400d"]
    runs = [
        subprocess.Popen(
            [*argv, "--json"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outputs]
    receipts = [json.loads(out) for out, _ in outputs]
    assert sum(receipt["facts_deleted"] for receipt in receipts) == len(facts)
    assert snapshot(expiry_url) == {}
    # Each receipt says where its deletion stands, when it deleted any.
    deleting = [receipt for receipt in receipts if receipt["facts_deleted"]]
    if expiry_url.startswith("sqlite"):
        assert {receipt["scrub"] for receipt in deleting} <= {"scrubbed", "pending"}
        assert {receipt["deletion_durability"] for receipt in receipts} == {None}
    else:
        assert {receipt["deletion_durability"] for receipt in deleting} == {"no_replication"}
        assert {receipt["scrub"] for receipt in receipts} == {None}
