"""Benchmark the psych-memory command beside the drivers doing the same job raw.

Run with ``hatch run bench:admin`` (``--quick`` for a short smoke run). It
needs the SQLite and PostgreSQL adapters installed and a PostgreSQL server at
``$PSYCH_MEMORY_TEST_POSTGRES_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
every run works in fresh schemas of its own and drops them.

Part 1, migration: a SQLite file of ``--facts`` facts over ``--end-users``
keys is copied to PostgreSQL by ``psych-memory migrate`` (run in-process
through `main`: the same code as the console script, without the process
start), and by a raw copy with the drivers alone: ``sqlite3`` reading every
row in key order, psycopg ``COPY`` writing them to a plain table of the same
columns. Figure of merit: migrate's time / the raw copy's time (target: 2).
A third line copies the same way into the PostgreSQL adapter's own table,
whose three indexes (key order, ids per tenant, ids store-wide) the plain
table lacks: the least any copy into that adapter can cost.

Part 2, export: one end user with ``--export-facts`` facts in a SQLite file,
written to a file by ``psych-memory export -o`` and by a raw ``SELECT`` whose
rows are dumped as JSON. Figure of merit: the ratio of times (target: 2).

Part 3, sizes: one end user of ``--big-facts`` facts (1,000,000 by default)
goes through the installed console script, each command a process of its own
whose peak memory (``ru_maxrss``, from ``os.wait4``) is reported: an import
of a JSON Lines file into SQLite and into PostgreSQL at the defaults, an
export of that end user from each, and a count of its facts. The baseline,
in the same run, is the same command on an end user of one fact: the
process's own size (Python, the drivers, the store opened). ``--skip-big``
leaves this part out.

Each part alternates the two sides for ``--rounds`` rounds; the best round of
each counts. Figures go to stdout; copy them to docs/operators.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import psycopg
from psycopg import sql

from psych_runtime.memory.admin import main, open_memory
from psych_runtime.memory.admin._format import export_fact, export_head
from psych_runtime.memory.port import Memory, MemoryKey
from psych_runtime.memory.postgres import PostgresMemory

DSN = os.environ.get("PSYCH_MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def seed(url: str, facts: int, end_users: int) -> None:
    async def write() -> None:
        async with open_memory(url) as store:
            for n in range(facts):
                await store.remember("tenant", f"user-{n % end_users:06d}", f"fact number {n}")

    anyio.run(write)


@contextlib.contextmanager
def fresh_schema() -> Iterator[str]:
    name = f"psych_bench_admin_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def pg_url(schema: str) -> str:
    return f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}"


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def quiet(argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"psych-memory {argv[0]} failed with exit code {code}")


def raw_copy(source: Path, schema: str) -> int:
    with (
        contextlib.closing(sqlite3.connect(source)) as reader,
        psycopg.connect(DSN, autocommit=True) as conn,
    ):
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        table = sql.Identifier(schema, "facts")
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (tenant text, end_user_id text, seq bigint, id text PRIMARY KEY,"
                " content text, created_at timestamptz)"
            ).format(table)
        )
        rows = reader.execute(
            "SELECT tenant, end_user_id, seq, id, content, created_at FROM psych_memory_fact"
            " ORDER BY tenant, end_user_id, seq"
        )
        copied = 0
        with conn.transaction(), conn.cursor() as cursor:
            copy_sql = sql.SQL(
                "COPY {} (tenant, end_user_id, seq, id, content, created_at) FROM STDIN"
            ).format(table)
            with cursor.copy(copy_sql) as copy:
                for tenant, end_user, seq, fact_id, content, micros in rows:
                    copy.write_row(
                        (
                            tenant,
                            end_user,
                            seq,
                            fact_id,
                            content,
                            EPOCH + timedelta(microseconds=micros),
                        )
                    )
                    copied += 1
        return copied


def raw_copy_into_store_table(source: Path, schema: str) -> None:
    with (
        contextlib.closing(sqlite3.connect(source)) as reader,
        psycopg.connect(DSN, autocommit=True) as conn,
    ):
        rows = reader.execute(
            "SELECT tenant, end_user_id, id, content, created_at FROM psych_memory_fact"
            " ORDER BY tenant, end_user_id, seq"
        )
        copy_sql = sql.SQL(
            "COPY {} (tenant, end_user_id, id, content, created_at) FROM STDIN"
        ).format(sql.Identifier(schema, "memories"))
        with conn.transaction(), conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            for tenant, end_user, fact_id, content, micros in rows:
                copy.write_row((tenant, end_user, fact_id, content, _moment(micros)))


async def _set_up(schema: str) -> None:
    async with PostgresMemory.connect(DSN, schema=schema) as store:
        await store.setup()


def _moment(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def raw_export(source: Path, target: Path) -> None:
    with contextlib.closing(sqlite3.connect(source)) as reader:
        rows = reader.execute(
            "SELECT id, content, created_at FROM psych_memory_fact"
            " WHERE tenant = ? AND end_user_id = ? ORDER BY seq",
            ("tenant", "user-000000"),
        ).fetchall()
    facts = [
        {
            "id": fact_id,
            "content": content,
            "created_at": (EPOCH + timedelta(microseconds=micros)).isoformat(),
        }
        for fact_id, content, micros in rows
    ]
    target.write_text(json.dumps({"facts": facts}, ensure_ascii=False, indent=2), encoding="utf-8")


def part_migration(folder: Path, facts: int, end_users: int, rounds: int, jobs: int) -> None:
    source = folder / "source.sqlite3"
    started = time.perf_counter()
    seed(f"sqlite:///{source}?durability=normal", facts, end_users)
    print(
        f"seeded {facts:,} facts over {end_users:,} end users "
        f"in {time.perf_counter() - started:.1f} s"
    )
    best_cli = best_raw = best_floor = float("inf")
    for _ in range(rounds):
        with fresh_schema() as schema:
            best_raw = min(best_raw, timed(lambda: raw_copy(source, schema)))
        with fresh_schema() as schema:
            # The tables exist before the clock starts: only the copy counts.
            anyio.run(_set_up, schema)
            best_floor = min(
                best_floor,
                timed(lambda: raw_copy_into_store_table(source, schema)),
            )
        with fresh_schema() as schema:
            argv = ["migrate", f"sqlite:///{source}", pg_url(schema), "--jobs", str(jobs)]
            best_cli = min(best_cli, timed(lambda: quiet(argv)))  # noqa: B023
    print(f"Part 1, migration SQLite -> PostgreSQL, --jobs {jobs} (best of {rounds} rounds)")
    for label, best in (
        ("raw copy (sqlite3 + COPY)", best_raw),
        ("the same into the store's table", best_floor),
        ("psych-memory migrate", best_cli),
    ):
        print(f"  {label + ':':33} {best:8.2f} s  {facts / best:10,.0f} facts/s")
    print(f"  {'ratio migrate / raw:':33} {best_cli / best_raw:8.1f}x   (target 2x)")
    print(f"  {'ratio store table / raw:':33} {best_floor / best_raw:8.1f}x")


def part_export(folder: Path, facts: int, rounds: int) -> None:
    source = folder / "export.sqlite3"
    seed(f"sqlite:///{source}?durability=normal", facts, 1)
    best_cli = best_raw = float("inf")
    for round_number in range(rounds):
        raw_target = folder / f"raw-{round_number}.json"
        cli_target = folder / f"cli-{round_number}.json"
        best_raw = min(best_raw, timed(lambda: raw_export(source, raw_target)))  # noqa: B023
        argv = ["export", f"sqlite:///{source}", "--tenant", "tenant", "--user", "user-000000"]
        best_cli = min(best_cli, timed(lambda: quiet([*argv, "-o", str(cli_target)])))  # noqa: B023
    print(f"Part 2, export of one end user with {facts:,} facts (best of {rounds} rounds)")
    print(f"  raw SELECT to a JSON file: {best_raw * 1000:8.1f} ms")
    print(f"  psych-memory export -o:    {best_cli * 1000:8.1f} ms")
    print(f"  ratio export / raw:        {best_cli / best_raw:8.1f}x   (target 2x)")


def write_export(path: Path, end_user: str, facts: int) -> None:
    """A JSON Lines export of ``facts`` facts, written a fact at a time."""
    key = MemoryKey("tenant", end_user)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with path.open("w", encoding="utf-8") as stream:
        stream.write(export_head(key, datetime.now(UTC), "jsonl", facts))
        for n in range(facts):
            fact = Memory(
                f"{end_user}-{n:09d}",
                key,
                f"fact number {n} of a large end user, with a few words more",
                start + timedelta(microseconds=n),
            )
            stream.write(export_fact(fact, "jsonl", first=not n))


def measured(argv: list[str], cwd: Path) -> tuple[float, float, str]:
    """Run the console script; its time (s), peak memory (MB) and output's first line."""
    script = shutil.which("psych-memory") or str(Path(sys.executable).parent / "psych-memory")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen([script, *argv], cwd=cwd, stdout=out, stderr=err)  # noqa: S603
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode:
            raise SystemExit(f"psych-memory {argv[0]} failed: {err.read().decode()}")
        shown = out.read(300).decode(errors="replace").splitlines()
    # ru_maxrss is in kilobytes on Linux.
    return elapsed, usage.ru_maxrss / 1024, shown[0] if shown else ""


def part_sizes(folder: Path, facts: int) -> None:
    big, small = folder / "big.jsonl", folder / "small.jsonl"
    started = time.perf_counter()
    write_export(big, "big", facts)
    write_export(small, "small", 1)
    print(
        f"Part 3, one end user of {facts:,} facts ({big.stat().st_size / 1e6:,.0f} MB as JSON "
        f"Lines, written in {time.perf_counter() - started:.1f} s); each line a process: "
        "time, peak memory (ru_maxrss), and the same for one fact (the baseline)"
    )
    with fresh_schema() as schema:
        stores = {"SQLite": f"sqlite:///{folder / 'big.sqlite3'}", "PostgreSQL": pg_url(schema)}
        for name, url in stores.items():
            rows = [
                ("import, at the defaults", ["import", url, "{file}"]),
                ("export -o, json", ["export", url, "--tenant", "tenant", "--user", "{user}",
                                     "-o", "{out}.json"]),
                ("export -o, jsonl", ["export", url, "--tenant", "tenant", "--user", "{user}",
                                      "--format", "jsonl", "-o", "{out}.jsonl"]),
                ("count --user", ["count", url, "--tenant", "tenant", "--user", "{user}"]),
            ]  # fmt: skip
            for label, template in rows:
                figures = []
                for user, file in (("small", small), ("big", big)):
                    argv = [
                        part.format(file=file, user=user, out=folder / f"{name}-{user}-{label[:6]}")
                        for part in template
                    ]
                    figures.append(measured(argv, folder))
                (base_time, base_peak, _), (big_time, big_peak, shown) = figures
                print(
                    f"  {name:10} {label + ':':26} {big_time:8.1f} s {big_peak:7.0f} MB peak"
                    f"   (1 fact: {base_time:5.2f} s {base_peak:5.0f} MB)"
                    + (f"   {shown}" if label == "count --user" else "")
                )


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=20_000)
    parser.add_argument("--end-users", type=int, default=200)
    parser.add_argument("--export-facts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=8, help="migrate --jobs, and the pool's size")
    parser.add_argument("--big-facts", type=int, default=1_000_000)
    parser.add_argument("--skip-big", action="store_true", help="leave out part 3")
    parser.add_argument("--only-big", action="store_true", help="run part 3 alone")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    options = parser.parse_args()
    if options.quick:
        options.facts, options.end_users, options.export_facts, options.rounds = 1000, 20, 1000, 1
        options.big_facts = 20_000
    print(
        f"Python {sys.version.split()[0]}, psycopg {psycopg.__version__}, "
        f"SQLite {sqlite3.sqlite_version}"
    )
    with tempfile.TemporaryDirectory() as folder:
        if not options.only_big:
            part_migration(
                Path(folder), options.facts, options.end_users, options.rounds, options.jobs
            )
            part_export(Path(folder), options.export_facts, options.rounds)
        if not options.skip_big:
            part_sizes(Path(folder), options.big_facts)


if __name__ == "__main__":
    main_bench()
