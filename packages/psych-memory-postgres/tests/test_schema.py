"""setup(): idempotent creation and upgrade, and the recorded schema version."""

from __future__ import annotations

import pickle
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from uuid import uuid4

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from psych_runtime.memory.postgres import (
    SCHEMA_VERSION,
    PostgresMemory,
    PostgresMemoryError,
    SchemaVersionError,
)
from psych_runtime.memory.postgres._schema import MIGRATIONS

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio


async def _recorded_version(backdoor: Backdoor) -> list[int]:
    rows = await backdoor.query(
        sql.SQL("SELECT version FROM {}").format(sql.Identifier(backdoor.schema, "schema_version"))
    )
    return [int(row[0]) for row in rows]


async def _set_version(backdoor: Backdoor, version: int) -> None:
    await backdoor.query(
        sql.SQL("UPDATE {} SET version = %s").format(
            sql.Identifier(backdoor.schema, "schema_version")
        ),
        (version,),
    )


async def test_setup_creates_schema_tables_and_records_the_version(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        assert await _recorded_version(backdoor) == [SCHEMA_VERSION]
        tables = await backdoor.query(
            sql.SQL("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1"),
            (schema,),
        )
        assert [row[0] for row in tables] == ["memories", "schema_version"]


async def test_setup_is_idempotent_and_keeps_facts(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        fact = await store.remember("acme", "u1", "survives a second setup")
        await store.setup()
        await store.setup()
        assert await store.recall("acme", "u1") == (fact,)
        assert await _recorded_version(backdoor) == [SCHEMA_VERSION]


async def test_concurrent_setups_take_turns(postgres_dsn: str, schema: str) -> None:
    # Several processes starting at once: without the advisory lock, two
    # CREATE TABLE IF NOT EXISTS race and one fails.
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=8) as store:
        async with anyio.create_task_group() as tasks:
            for _ in range(8):
                tasks.start_soon(store.setup)
        fact = await store.remember("acme", "u1", "after eight setups")
        assert await store.recall("acme", "u1") == (fact,)


async def test_setup_uses_a_schema_prepared_by_a_dba(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    await backdoor.query(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        await store.remember("acme", "u1", "in a prepared schema")
    assert await _recorded_version(backdoor) == [SCHEMA_VERSION]


async def test_a_newer_schema_fails_setup_and_changes_nothing(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        await store.remember("acme", "u1", "written by this version")
    await _set_version(backdoor, SCHEMA_VERSION + 1)
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        with pytest.raises(SchemaVersionError, match="newer") as caught:
            await store.setup()
        assert caught.value.found == SCHEMA_VERSION + 1
        assert caught.value.expected == SCHEMA_VERSION
        assert caught.value.schema == schema
    assert await _recorded_version(backdoor) == [SCHEMA_VERSION + 1]
    assert await backdoor.count("acme", "u1") == 1


@pytest.mark.parametrize("operation", ["remember", "forget", "recall", "erase"])
async def test_a_newer_schema_fails_every_operation_clearly(
    postgres_dsn: str, schema: str, backdoor: Backdoor, operation: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
    await _set_version(backdoor, SCHEMA_VERSION + 1)
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "remember": lambda: store.remember("acme", "u1", "not written"),
            "forget": lambda: store.forget("acme", "u1", str(uuid4())),
            "recall": lambda: store.recall("acme", "u1"),
            "erase": lambda: store.erase("acme", "u1"),
        }
        with pytest.raises(SchemaVersionError, match="upgrade psych-memory-postgres"):
            await calls[operation]()
    assert await backdoor.count("acme", "u1") == 0


async def test_an_older_schema_asks_for_setup(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
    await _set_version(backdoor, SCHEMA_VERSION - 1)
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        with pytest.raises(SchemaVersionError, match=r"older .*call setup\(\)"):
            await store.recall("acme", "u1")


async def test_a_missing_schema_is_named_and_never_created(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        with pytest.raises(SchemaVersionError, match=r"does not exist") as caught:
            await store.remember("acme", "u1", "nowhere to go")
        assert caught.value.found is None
        assert caught.value.schema_exists is False
        with pytest.raises(SchemaVersionError, match=r"does not exist"):
            await store.verify()
    rows = await backdoor.query(
        sql.SQL("SELECT count(*) FROM pg_namespace WHERE nspname = %s"), (schema,)
    )
    assert rows == [(0,)]


async def test_missing_tables_ask_for_setup(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    await backdoor.query(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        with pytest.raises(SchemaVersionError, match=r"has no memory tables") as caught:
            await store.remember("acme", "u1", "nowhere to go")
        assert caught.value.found is None
        assert caught.value.schema_exists is True


async def test_an_empty_version_table_asks_for_setup(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
    await backdoor.query(sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, "schema_version")))
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        with pytest.raises(SchemaVersionError, match="has no memory tables"):
            await store.erase("acme", "u1")


def test_schema_version_error_pickles_and_names_no_value() -> None:
    error = SchemaVersionError("psych_memory", 7, 2)
    again = pickle.loads(pickle.dumps(error))
    assert (again.schema, again.found, again.expected) == ("psych_memory", 7, 2)
    assert str(again) == str(error)
    missing = pickle.loads(pickle.dumps(SchemaVersionError("typo", None, 2, schema_exists=False)))
    assert (missing.schema, missing.found, missing.schema_exists) == ("typo", None, False)
    assert isinstance(again, PostgresMemoryError)


async def test_a_database_not_in_utf8_is_refused(postgres_dsn: str) -> None:
    name = f"psych_test_ascii_{uuid4().hex}"

    def admin(statement: str) -> None:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(sql.Identifier(name)))

    await anyio.to_thread.run_sync(
        admin,
        "CREATE DATABASE {} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
    )
    try:
        async with PostgresMemory.connect(
            make_conninfo(postgres_dsn, dbname=name), schema="psych_memory"
        ) as store:
            with pytest.raises(PostgresMemoryError, match="UTF8, not SQL_ASCII"):
                await store.setup()
    finally:
        await anyio.to_thread.run_sync(admin, "DROP DATABASE {} WITH (FORCE)")


async def _build_version_1(backdoor: Backdoor) -> None:
    # Exactly what setup() wrote before version 2 existed.
    names = {
        "schema": sql.Identifier(backdoor.schema),
        "memories": sql.Identifier(backdoor.schema, "memories"),
        "versions": sql.Identifier(backdoor.schema, "schema_version"),
    }
    await backdoor.query(sql.SQL("CREATE SCHEMA {schema}").format(**names))
    await backdoor.query(
        sql.SQL(
            "CREATE TABLE {versions} (one boolean PRIMARY KEY DEFAULT true CHECK (one),"
            " version integer NOT NULL)"
        ).format(**names)
    )
    for statement in MIGRATIONS[0]:
        await backdoor.query(statement.format(**names))
    await backdoor.query(sql.SQL("INSERT INTO {versions} (version) VALUES (1)").format(**names))


async def test_setup_upgrades_version_1_in_place_and_keeps_every_fact(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    await _build_version_1(backdoor)
    rows = await backdoor.query(
        sql.SQL(
            "INSERT INTO {} (tenant, end_user_id, content)"
            " SELECT 'acme', 'u1', 'fact ' || n FROM generate_series(1, 5) AS n"
            " RETURNING id::text, created_at"
        ).format(backdoor.table)
    )
    old_ids = [row[0] for row in rows]
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        with pytest.raises(SchemaVersionError, match=r"older .*call setup\(\)") as caught:
            await store.recall("acme", "u1")
        assert caught.value.found == 1
        await store.setup()
        assert await _recorded_version(backdoor) == [SCHEMA_VERSION]
        recalled = await store.recall("acme", "u1")
        assert [m.id for m in recalled] == old_ids
        assert [m.content for m in recalled] == [f"fact {n}" for n in range(1, 6)]
        assert [m.created_at for m in recalled] == [row[1] for row in rows]
        # Old ids still name their facts; new ones are 32 hex digits.
        assert await store.forget("acme", "u1", old_ids[0]) is True
        fact = await store.remember("acme", "u1", "after the upgrade")
        assert len(fact.id) == 32
        assert [m.id for m in await store.recall("acme", "u1")] == [*old_ids[1:], fact.id]
    column = await backdoor.query(
        sql.SQL(
            "SELECT data_type, collation_name, column_default FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'memories' AND column_name = 'id'"
        ),
        (schema,),
    )
    assert column == [("text", "C", None)]
    constraints = await backdoor.query(
        sql.SQL(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'u'"
        ),
        (sql.Identifier(schema, "memories").as_string(None),),
    )
    assert constraints == [("memories_tenant_id",)]


async def test_setup_writes_nothing_when_the_schema_is_current(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
    # A setup that wrote would touch the version row; a current one must not.
    before = await backdoor.query(
        sql.SQL("SELECT xmin::text FROM {}").format(sql.Identifier(schema, "schema_version"))
    )
    async with PostgresMemory.connect(postgres_dsn, schema=schema) as store:
        await store.setup()
        await store.setup()
    after = await backdoor.query(
        sql.SQL("SELECT xmin::text FROM {}").format(sql.Identifier(schema, "schema_version"))
    )
    assert after == before


def test_migrations_only_grow() -> None:
    # Versions 1 and 2 as released: never edited, only followed.
    assert len(MIGRATIONS) == SCHEMA_VERSION == 3
    first = MIGRATIONS[0][0].as_string(None)
    assert "id          uuid NOT NULL DEFAULT gen_random_uuid()" in first
    assert [statement.as_string(None).split()[:3] for statement in MIGRATIONS[1]] == [
        ["ALTER", "TABLE", "{memories}"],
        ["CREATE", "INDEX", "memories_id"],
    ]


async def _build_version_2(backdoor: Backdoor) -> None:
    # Exactly what setup() wrote before version 3 existed.
    await _build_version_1(backdoor)
    names = {"memories": sql.Identifier(backdoor.schema, "memories")}
    for statement in MIGRATIONS[1]:
        await backdoor.query(statement.format(**names))
    await _set_version(backdoor, 2)


async def _has_erase_function(backdoor: Backdoor) -> bool:
    signature = sql.SQL("{}(text, text)").format(sql.Identifier(backdoor.schema, "erase_few"))
    rows = await backdoor.query(
        sql.SQL("SELECT to_regprocedure(%s) IS NOT NULL"), (signature.as_string(None),)
    )
    return bool(rows[0][0])


async def test_setup_upgrades_version_2_with_the_erase_function_and_keeps_every_fact(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    await _build_version_2(backdoor)
    await backdoor.load("u1", 3)
    await backdoor.load("u2", 2)
    assert not await _has_erase_function(backdoor)
    # Behind a transaction pooler, where an erase calls the function.
    async with PostgresMemory.connect(postgres_dsn, schema=schema, prepare_threshold=None) as store:
        with pytest.raises(SchemaVersionError, match=r"older .*call setup\(\)") as caught:
            await store.erase("acme", "u1")
        assert caught.value.found == 2
        assert await backdoor.count("acme", "u1") == 3
        await store.setup()
        assert await _recorded_version(backdoor) == [SCHEMA_VERSION]
        assert await _has_erase_function(backdoor)
        assert await store.erase("acme", "u1") == 3
        assert await store.erase("acme", "u1") == 0
        assert len(await store.recall("acme", "u2")) == 2
    assert await backdoor.count("acme", "u1") == 0
