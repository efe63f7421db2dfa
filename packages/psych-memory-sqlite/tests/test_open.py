"""Opening checks the file: bad paths, corrupt files, foreign files and schema versions."""

from __future__ import annotations

import os
import pickle
import sqlite3
from pathlib import Path

import anyio
import pytest

from psych_runtime.memory import port
from psych_runtime.memory.sqlite import (
    SCHEMA_VERSION,
    DatabaseFileError,
    DatabaseUnavailableError,
    SchemaVersionError,
    SqliteMemory,
)

pytestmark = pytest.mark.anyio

OUR_APPLICATION_ID = 0x50734D65


def header(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as raw:
        (application_id,) = raw.execute("PRAGMA application_id").fetchone()
        (version,) = raw.execute("PRAGMA user_version").fetchone()
    raw.close()
    return application_id, version


async def test_missing_directory_fails_at_open_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "memory.sqlite3"
    memory = SqliteMemory(path)
    with pytest.raises(FileNotFoundError, match="directory") as caught:
        await memory.open()
    assert caught.value.filename == os.fspath(path.parent)
    assert not path.parent.exists()


async def test_parent_that_is_a_file_fails_at_open(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a directory")
    with pytest.raises(NotADirectoryError):
        await SqliteMemory(tmp_path / "plain" / "memory.sqlite3").open()


async def test_a_directory_is_not_a_database_file(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        await SqliteMemory(tmp_path).open()


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="file permissions do not bind the superuser",
)
async def test_unreadable_file_fails_at_open(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        await memory.remember("acme", "user-1", "fact")
    await anyio.Path(db_path).chmod(0)
    try:
        with pytest.raises(PermissionError):
            await SqliteMemory(db_path).open()
    finally:
        await anyio.Path(db_path).chmod(0o600)


@pytest.mark.parametrize(
    "content",
    [
        b"this is a text file, not a database\n" * 20,
        bytes(range(256)) * 16,
        b"SQLite format 3\x00" + b"\xff" * 4080,
    ],
    ids=["text", "binary", "forged-header"],
)
async def test_a_file_that_is_not_a_database_fails_at_open_untouched(
    db_path: Path, content: bytes
) -> None:
    await anyio.Path(db_path).write_bytes(content)
    with pytest.raises(DatabaseFileError, match="not a SQLite database"):
        await SqliteMemory(db_path).open()
    assert await anyio.Path(db_path).read_bytes() == content
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


async def test_an_empty_file_becomes_a_database(db_path: Path) -> None:
    await anyio.Path(db_path).touch()
    async with SqliteMemory(db_path) as memory:
        fact = await memory.remember("acme", "user-1", "fact")
        assert await memory.recall("acme", "user-1") == (fact,)
    assert header(db_path) == (OUR_APPLICATION_ID, SCHEMA_VERSION)


async def test_another_applications_database_is_refused_untouched(db_path: Path) -> None:
    with sqlite3.connect(db_path) as raw:
        raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT)")
        raw.execute("INSERT INTO orders (customer) VALUES ('someone')")
    raw.close()
    before = await anyio.Path(db_path).read_bytes()
    with pytest.raises(DatabaseFileError, match="another application"):
        await SqliteMemory(db_path).open()
    assert await anyio.Path(db_path).read_bytes() == before


async def test_a_database_marked_by_another_application_is_refused(db_path: Path) -> None:
    with sqlite3.connect(db_path) as raw:
        raw.execute("PRAGMA application_id = 1234")
    raw.close()
    with pytest.raises(DatabaseFileError, match="another application"):
        await SqliteMemory(db_path).open()


async def test_a_newer_schema_is_refused_untouched(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        await memory.remember("acme", "user-1", "fact")
    with sqlite3.connect(db_path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    before = await anyio.Path(db_path).read_bytes()
    with pytest.raises(SchemaVersionError, match="upgrade") as caught:
        await SqliteMemory(db_path).open()
    assert (caught.value.found, caught.value.expected) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert caught.value.where == str(db_path)
    assert isinstance(caught.value, port.SchemaVersionError)
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is SchemaVersionError
    assert (again.where, again.found, again.expected) == (
        str(db_path),
        SCHEMA_VERSION + 1,
        SCHEMA_VERSION,
    )
    assert await anyio.Path(db_path).read_bytes() == before


async def test_an_older_schema_is_migrated(db_path: Path) -> None:
    # Version 0 is an empty database (as `sqlite3` or another tool creates it).
    with sqlite3.connect(db_path) as raw:
        raw.execute("PRAGMA user_version = 0")
        raw.execute("VACUUM")
    raw.close()
    assert header(db_path) == (0, 0)
    async with SqliteMemory(db_path) as memory:
        fact = await memory.remember("acme", "user-1", "fact")
    assert header(db_path) == (OUR_APPLICATION_ID, SCHEMA_VERSION)
    async with SqliteMemory(db_path) as memory:
        assert await memory.recall("acme", "user-1") == (fact,)


async def test_truncated_file_fails_clearly(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        for i in range(200):
            await memory.remember("acme", f"user-{i % 7}", f"fact number {i} " * 20)
    data = await anyio.Path(db_path).read_bytes()
    await anyio.Path(db_path).write_bytes(data[: len(data) // 3])
    with pytest.raises(DatabaseFileError, match="corrupt"):
        await SqliteMemory(db_path).open()


async def test_corrupt_pages_raise_instead_of_returning_wrong_facts(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        for i in range(200):
            await memory.remember("acme", "user-1", f"fact number {i} " * 20)
    data = bytearray(await anyio.Path(db_path).read_bytes())
    page = 4096
    # Scribble over every page after the schema, keeping the header page.
    for start in range(2 * page, len(data), page):
        data[start : start + 64] = b"\xa5" * 64
    await anyio.Path(db_path).write_bytes(bytes(data))
    with pytest.raises(DatabaseFileError, match="corrupt"):
        async with SqliteMemory(db_path) as memory:
            await memory.recall("acme", "user-1")


async def test_error_messages_never_contain_stored_text(db_path: Path) -> None:
    async with SqliteMemory(db_path) as memory:
        await memory.remember("acme", "user-1", "PRIVATE-77 medical detail")
    with sqlite3.connect(db_path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    raw.close()
    with pytest.raises(SchemaVersionError) as caught:
        await SqliteMemory(db_path).open()
    assert "PRIVATE-77" not in str(caught.value)
    assert "user-1" not in str(caught.value)


async def test_a_file_locked_past_the_busy_timeout_fails_at_open(db_path: Path) -> None:
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(DatabaseUnavailableError, match="locked") as caught:
            await SqliteMemory(db_path, busy_timeout=0).open()
        assert caught.value.operation == "open"
        assert caught.value.may_have_taken_effect is False
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        holder.execute("COMMIT")
    finally:
        holder.close()


async def test_stores_opening_a_new_file_at_once_lay_it_out_once(db_path: Path) -> None:
    stores = [SqliteMemory(db_path) for _ in range(8)]
    try:
        async with anyio.create_task_group() as group:
            for store in stores:
                group.start_soon(store.open)
        facts = [
            await store.remember("acme", "user-1", f"fact {i}") for i, store in enumerate(stores)
        ]
        for store in stores:
            assert await store.recall("acme", "user-1") == tuple(facts)
    finally:
        for store in stores:
            await store.aclose()
    assert header(db_path) == (OUR_APPLICATION_ID, SCHEMA_VERSION)


async def test_opening_a_new_file_waits_while_another_connection_is_writing(
    db_path: Path,
) -> None:
    # A new file starts in rollback mode. Switching it to write-ahead logging
    # reads the file and then asks for the write lock; while another
    # connection holds that lock, SQLite refuses at once instead of waiting
    # (the two could wait for each other), so the store does the waiting, as
    # it does for every other lock.
    writer = sqlite3.connect(db_path, isolation_level=None)
    store = SqliteMemory(db_path, busy_timeout=60)
    opened = anyio.Event()

    async def open_store() -> None:
        await store.open()
        opened.set()

    try:
        writer.execute("BEGIN IMMEDIATE")
        async with anyio.create_task_group() as group:
            group.start_soon(open_store)
            # A bound on how long the writer holds on, not a wait for an
            # event: while it holds the lock, the open can neither succeed
            # nor fail.
            with anyio.move_on_after(0.5):
                await opened.wait()
            assert not opened.is_set()
            writer.execute("COMMIT")
        fact = await store.remember("acme", "user-1", "after the other writer")
        assert await store.recall("acme", "user-1") == (fact,)
    finally:
        writer.close()
        await store.aclose()
    assert header(db_path) == (OUR_APPLICATION_ID, SCHEMA_VERSION)


async def test_opening_a_new_file_gives_up_after_the_busy_timeout_and_lays_out_nothing(
    db_path: Path,
) -> None:
    writer = sqlite3.connect(db_path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        store = SqliteMemory(db_path, busy_timeout=0.05)
        with pytest.raises(DatabaseUnavailableError, match=r"busy timeout of 0\.05 s"):
            await store.open()
        writer.execute("COMMIT")
    finally:
        writer.close()
    assert header(db_path) == (0, 0)
    with pytest.raises(port.StoreClosedError):
        await store.remember("acme", "user-1", "never stored")


async def test_a_first_version_file_is_migrated_and_keeps_its_facts(db_path: Path) -> None:
    # The layout of schema version 1, exactly as version 1 of this adapter wrote it.
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            "CREATE TABLE psych_memory_fact (tenant TEXT NOT NULL, end_user_id TEXT NOT NULL,"
            " seq INTEGER NOT NULL, id TEXT NOT NULL, content TEXT NOT NULL,"
            " created_at INTEGER NOT NULL, PRIMARY KEY (tenant, end_user_id, seq))"
            " STRICT, WITHOUT ROWID"
        )
        raw.execute(
            "INSERT INTO psych_memory_fact VALUES ('acme', 'user-1', 1, ?, 'old fact', 0)",
            ("a" * 32,),
        )
        raw.execute(f"PRAGMA application_id = {OUR_APPLICATION_ID}")
        raw.execute("PRAGMA user_version = 1")
    raw.close()
    async with SqliteMemory(db_path) as memory:
        (old,) = await memory.recall("acme", "user-1")
        assert (old.id, old.content) == ("a" * 32, "old fact")
        assert await memory.forget("acme", "user-1", old.id)
    assert header(db_path) == (OUR_APPLICATION_ID, SCHEMA_VERSION)
    with sqlite3.connect(db_path) as raw:
        indexes = raw.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
    raw.close()
    assert indexes == [("psych_memory_fact_id",)]
