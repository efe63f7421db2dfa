"""Rules of the PostgreSQL adapter beyond the port's shared contract."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

import anyio
import anyio.to_thread
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory.port import (
    MAX_CONTENT_LENGTH,
    InvalidContentError,
    InvalidInputError,
    InvalidKeyError,
    Memory,
    MemoryKey,
    StoreClosedError,
)
from psych_runtime.memory.postgres import PostgresMemory
from psych_runtime.memory.postgres._schema import Statements

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

# For pools that are never opened: nothing may ever connect to it.
_NOWHERE = "postgresql://nobody@127.0.0.1:1/never"

# Everything the port accepts as content: no control characters but newline
# and tab, no lone surrogates, not blank.
_content = st.text(
    st.characters(
        blacklist_categories=("Cs", "Cc"),
        blacklist_characters="\x7f",
    )
    | st.sampled_from("\n\t"),
    min_size=1,
    max_size=300,
).filter(lambda text: not text.isspace())

_AT = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


async def test_ids_are_128_random_bits_in_hex_unique_across_keys(store: PostgresMemory) -> None:
    facts = [
        await store.remember(tenant, user, "same words")
        for tenant in ("acme", "globex")
        for user in ("u1", "u2")
        for _ in range(3)
    ]
    ids = [fact.id for fact in facts]
    assert len(set(ids)) == len(ids)
    for memory_id in ids:
        assert re.fullmatch("[0-9a-f]{32}", memory_id), "not 32 lowercase hex digits"


async def test_order_is_insertion_order_even_with_equal_timestamps(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    facts = [await store.remember("acme", "u1", f"fact {n}") for n in range(20)]
    # Same instant for every row, and the reverse order of insertion for
    # good measure: order must still come from the sequence.
    await backdoor.query(
        sql.SQL("UPDATE {} SET created_at = '2001-02-03T04:05:06Z'").format(backdoor.table)
    )
    recalled = await store.recall("acme", "u1")
    assert [m.id for m in recalled] == [f.id for f in facts]
    limited = await store.recall("acme", "u1", limit=5)
    assert [m.id for m in limited] == [f.id for f in facts[:5]]


async def test_recalled_facts_equal_remembered_ones_in_utc(store: PostgresMemory) -> None:
    fact = await store.remember("acme", "u1", "prefers the Berlin warehouse")
    assert fact.created_at.tzinfo is UTC
    (recalled,) = await store.recall("acme", "u1")
    assert recalled == fact
    assert recalled.created_at.tzinfo is UTC


async def test_limit_beyond_bigint_means_all(store: PostgresMemory) -> None:
    facts = [await store.remember("acme", "u1", f"fact {n}") for n in range(3)]
    assert await store.recall("acme", "u1", limit=2**80) == tuple(facts)
    assert await store.recall("acme", "u1", limit=0) == ()


async def test_forget_of_a_foreign_id_deletes_nothing(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    fact = await store.remember("acme", "u1", "mine")
    assert await store.forget("acme", "u2", fact.id) is False
    assert await store.forget("globex", "u1", fact.id) is False
    assert await backdoor.count("acme", "u1") == 1
    assert await store.forget("acme", "u1", fact.id) is True
    assert await backdoor.count("acme", "u1") == 0


@pytest.mark.parametrize(
    "spelling",
    [
        str.upper,
        lambda i: "{" + i + "}",
        lambda i: "urn:uuid:" + i,
        lambda i: str(UUID(i)),
        lambda i: i + " ",
        lambda i: i[:-1],
    ],
    ids=["upper", "braces", "urn", "dashed", "space", "shorter"],
)
async def test_only_the_exact_id_spelling_forgets(
    store: PostgresMemory, backdoor: Backdoor, spelling: Any
) -> None:
    fact = await store.remember("acme", "u1", "mine")
    assert await store.forget("acme", "u1", spelling(fact.id)) is False
    assert await backdoor.count("acme", "u1") == 1


@pytest.mark.parametrize("memory_id", ["", "not an id", "\x00", "123", "\ud800"])
async def test_malformed_ids_are_answered_false(store: PostgresMemory, memory_id: str) -> None:
    await store.remember("acme", "u1", "mine")
    assert await store.forget("acme", "u1", memory_id) is False
    assert len(await store.recall("acme", "u1")) == 1


async def test_erase_is_a_real_delete_of_that_key_only(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    for n in range(4):
        await store.remember("acme", "u1", f"fact {n}")
    await store.remember("acme", "u2", "other user")
    await store.remember("globex", "u1", "other tenant")
    assert await store.erase("acme", "u1") == 4
    assert await backdoor.count("acme", "u1") == 0
    assert await backdoor.count("acme", "u2") == 1
    assert await backdoor.count("globex", "u1") == 1
    assert await store.erase("acme", "u1") == 0


async def test_keys_are_compared_exactly(store: PostgresMemory) -> None:
    # Case, accents in two Unicode spellings, and width: distinct keys under
    # the "C" collation, whatever the database's locale would say.
    users = ["user", "User", "caf\u00e9", "cafe\u0301", "\uff55ser"]
    for user in users:
        await store.remember("acme", user, f"fact of {user!a}")
    for user in users:
        (fact,) = await store.recall("acme", user)
        assert fact.content == f"fact of {user!a}"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(content=_content)
async def test_content_is_stored_exactly(store: PostgresMemory, content: str) -> None:
    fact = await store.remember("acme", "u1", content)
    recalled = await store.recall("acme", "u1")
    assert recalled[-1].content == content
    assert recalled[-1] == fact
    assert await store.forget("acme", "u1", fact.id) is True


async def test_longest_content_round_trips(store: PostgresMemory) -> None:
    content = "\u00e9" * MAX_CONTENT_LENGTH
    fact = await store.remember("acme", "u1", content)
    assert (await store.recall("acme", "u1"))[0].content == content == fact.content


async def test_invalid_input_is_refused_before_the_server_is_asked() -> None:
    # The pool is never opened: any call that reached it would fail with a
    # pool error, so these errors can only come from validation beforehand.
    pool = ConnectionPool(_NOWHERE, open=False)
    store = PostgresMemory(pool, schema="never_used")
    with pytest.raises(InvalidContentError):
        await store.remember("acme", "u1", " ")
    with pytest.raises(InvalidKeyError):
        await store.recall("acme", " u1")
    with pytest.raises(TypeError):
        await store.forget("acme", "u1", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await store.erase(None, "u1")  # type: ignore[arg-type]


async def test_app_owned_sync_pool_works_on_both_backends(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    # Default settings: not autocommit, so each statement is committed by the
    # pool's connection context; another connection must see it at once.
    with ConnectionPool(postgres_dsn, min_size=1, max_size=2, open=True) as pool:
        store = PostgresMemory(pool, schema=schema)
        assert store.pool is pool
        assert store.schema == schema
        await store.setup()
        fact = await store.remember("acme", "u1", "kept by the application's pool")
        assert await backdoor.count("acme", "u1") == 1
        assert await store.recall("acme", "u1") == (fact,)
        assert await store.erase("acme", "u1") == 1
    assert pool.closed


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_async_pool_is_refused_on_trio() -> None:
    pool = AsyncConnectionPool(_NOWHERE, open=False)
    store = PostgresMemory(pool, schema="never_used")
    with pytest.raises(RuntimeError, match="only on asyncio"):
        await store.recall("acme", "u1")
    with pytest.raises(RuntimeError, match="only on asyncio"):
        await store.setup()


async def test_connect_runs_without_a_thread_hop_on_asyncio_and_serves_every_loop(
    postgres_dsn: str, schema: str, anyio_backend: str
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=schema, max_size=4) as store:
        await store.setup()
        expected = AsyncConnectionPool if anyio_backend == "asyncio" else ConnectionPool
        assert isinstance(store.pool, expected)
        fact = await store.remember("acme", "u1", "from the opening loop")

        # Threads each running an event loop of their own, of either kind:
        # they cannot use an asynchronous pool of another loop, and must not
        # notice.
        def elsewhere(backend: str) -> tuple[Any, ...]:
            async def calls() -> tuple[Any, ...]:
                other = await store.remember("acme", "u1", f"from a {backend} thread")
                return (other, await store.recall("acme", "u1"))

            return anyio.run(calls, backend=backend)

        from_threads = []
        for backend in ("asyncio", "trio"):
            other, seen = await anyio.to_thread.run_sync(elsewhere, backend)
            from_threads.append(other)
            assert seen == (fact, *from_threads)
        assert await store.recall("acme", "u1") == (fact, *from_threads)
    with pytest.raises(StoreClosedError):
        await anyio.to_thread.run_sync(elsewhere, "trio")


async def test_many_tasks_remember_concurrently(store: PostgresMemory) -> None:
    contents = [f"fact {n}" for n in range(64)]
    ids: list[str] = []

    async def remember(content: str) -> None:
        ids.append((await store.remember("acme", "u1", content)).id)

    async with anyio.create_task_group() as tasks:
        for content in contents:
            tasks.start_soon(remember, content)
    recalled = await store.recall("acme", "u1")
    assert sorted(m.content for m in recalled) == sorted(contents)
    assert len(set(ids)) == 64
    assert {m.id for m in recalled} == set(ids)


async def test_per_user_statements_walk_the_key_index(
    store: PostgresMemory, backdoor: Backdoor
) -> None:
    # Enough rows of other users that a full scan would be the wrong plan;
    # the plan must then use the index and need no sort.
    await backdoor.query(
        sql.SQL(
            "INSERT INTO {} (id, tenant, end_user_id, content)"
            " SELECT md5(n::text), 'acme', 'user-' || (n %% 2000), 'fact'"
            " FROM generate_series(1, 20000) AS n"
        ).format(backdoor.table)
    )
    await backdoor.query(sql.SQL("ANALYZE {}").format(backdoor.table))
    fact = await store.remember("acme", "user-7", "one more")

    async def plan(statement: str, params: tuple[object, ...]) -> str:
        rows = await backdoor.query(
            sql.SQL("EXPLAIN " + statement).format(backdoor.table),
            params,
        )
        return "\n".join(row[0] for row in rows)

    recall = await plan(
        "SELECT id, content FROM {} WHERE tenant = %s AND end_user_id = %s"
        " ORDER BY seq LIMIT %s::bigint",
        ("acme", "user-7", None),
    )
    assert "memories_key_seq" in recall
    assert "Sort" not in recall
    erase = await plan("DELETE FROM {} WHERE tenant = %s AND end_user_id = %s", ("acme", "user-7"))
    assert "memories_key_seq" in erase
    forget = await plan(
        "DELETE FROM {} WHERE tenant = %s AND end_user_id = %s AND id = %s",
        ("acme", "user-7", fact.id),
    )
    # Either index that starts at the id finds the one row.
    assert "memories_tenant_id" in forget or "using memories_id" in forget
    assert "Seq Scan" not in recall + erase + forget


def test_constructor_refuses_what_is_not_a_pool() -> None:
    with pytest.raises(TypeError, match="pool must be"):
        PostgresMemory("postgresql://localhost/db")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schema", "error", "rule"),
    [
        (42, TypeError, "must be a str"),
        ("", ValueError, "must not be empty"),
        ("a\x00b", ValueError, "NUL"),
        ("x" * 64, ValueError, "at most 63 bytes"),
        ("\u00e9" * 32, ValueError, "at most 63 bytes"),
        ("\udc80", ValueError, "lone surrogate"),
        ("pg_memory", ValueError, "reserved"),
    ],
)
def test_schema_names_are_checked(schema: Any, error: type, rule: str) -> None:
    pool = ConnectionPool(_NOWHERE, open=False)
    with pytest.raises(error, match=rule):
        PostgresMemory(pool, schema=schema)


def test_repr_names_the_schema_and_never_the_address() -> None:
    pool = ConnectionPool("postgresql://app:secret@db.internal/app", open=False)
    text = repr(PostgresMemory(pool, schema='Odd "Name"'))
    assert text == "PostgresMemory(schema='Odd \"Name\"', open)"
    assert "secret" not in text


@pytest.mark.parametrize("prepare_threshold", [5, None])
async def test_odd_schema_names_are_quoted(
    postgres_dsn: str, prepare_threshold: int | None
) -> None:
    # Each run its own name, so parallel runs never share it. The erase
    # function's body names the table too: dollar quotes, quotes and a
    # backslash must not end it.
    schema = f"Odd \"{uuid4().hex[:12]}\" $$ 'q' \\ $x$; DROP TABLE x; --"
    try:
        async with PostgresMemory.connect(
            postgres_dsn, schema=schema, prepare_threshold=prepare_threshold
        ) as store:
            await store.setup()
            fact = await store.remember("acme", "u1", "quoted, not executed")
            assert await store.recall("acme", "u1") == (fact,)
            await store.remember("acme", "u1", "a second fact")
            assert await store.erase("acme", "u1") == 2
            assert await store.recall("acme", "u1") == ()
    finally:
        await anyio.to_thread.run_sync(_drop_schema, postgres_dsn, schema)


def _drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def test_a_restored_id_taken_in_another_tenant_is_refused(store: PostgresMemory) -> None:
    fact = await store.remember("acme", "user-1", "likes tea")
    elsewhere = Memory(fact.id, MemoryKey("globex", "user-1"), "likes tea", fact.created_at)
    with pytest.raises(InvalidInputError) as caught:
        await store.restore(elsewhere)
    assert caught.value.argument == "memory.id"
    assert await store.recall("globex", "user-1") == ()
    assert await store.restore(fact) is False


async def test_concurrent_restores_of_one_batch_store_each_fact_once(
    store: PostgresMemory,
) -> None:
    # The tasks race on the same ids: every insert but one finds its row
    # taken and must judge it again instead of refusing or counting it.
    batch = [
        Memory(f"raced-{index}", MemoryKey("acme", "user-1"), f"fact {index}", _AT)
        for index in range(40)
    ]
    counts: list[int] = []

    async def restore() -> None:
        counts.append(await store.restore_many(batch))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(restore)
    assert sum(counts) == len(batch)
    assert await store.recall("acme", "user-1") == tuple(batch)


async def test_a_batch_with_a_taken_id_in_another_tenant_stores_nothing(
    store: PostgresMemory,
) -> None:
    fact = await store.remember("acme", "user-1", "likes tea")
    fresh = Memory("fresh-1", MemoryKey("globex", "user-1"), "fresh", _AT)
    taken = Memory(fact.id, MemoryKey("globex", "user-1"), "likes tea", fact.created_at)
    with pytest.raises(InvalidInputError) as caught:
        await store.restore_many([fresh, taken])
    assert caught.value.argument == "memories[1].id"
    assert await store.recall("globex", "user-1") == ()


@pytest.mark.parametrize(
    "operation", ["forget", "erase few", "erase few function", "erase batch", "erase rest"]
)
@pytest.mark.parametrize(
    "setting",
    [
        ("off", "remote_apply"),
        ("local", "remote_apply"),
        ("remote_write", "remote_apply"),
        ("on", "remote_apply"),
        ("remote_apply", "remote_apply"),
    ],
)
async def test_a_deletion_is_never_committed_asynchronously(
    store: PostgresMemory, postgres_dsn: str, schema: str, operation: str, setting: tuple[str, str]
) -> None:
    # With synchronous_commit = off, a server crash can lose a committed
    # delete and bring the facts back; below remote_apply, a promoted or
    # queried synchronous standby can still show them. The deletion's
    # statement sets remote_apply for its own transaction only.
    session, at_commit = setting
    fact = await store.remember("acme", "user-1", "a fact")
    statements = Statements.for_schema(schema)
    args: tuple[object, ...]
    if operation == "forget":
        statement, args = statements.forget, ("acme", "user-1", fact.id)
    else:
        # Each statement of an erase that deletes: the one for few facts,
        # inline or by the schema's function, a batch, and the rest.
        lowest = -(2**63)
        statement, args = {
            "erase few": (statements.erase_few, ("acme", "user-1") * 2),
            "erase few function": (statements.erase_few_function, ("acme", "user-1")),
            "erase batch": (statements.erase_batch, ("acme", "user-1", lowest, 2**63 - 1)),
            "erase rest": (statements.erase_rest, ("acme", "user-1", lowest)),
        }[operation]

    def delete() -> tuple[int, str, str]:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET synchronous_commit = {}").format(sql.Literal(session)))
            with conn.transaction():
                cursor = conn.execute(statement, args)
                # The function answers how many it deleted; a DELETE's count.
                answer = cursor.fetchone() if operation == "erase few function" else None
                deleted = cursor.rowcount if answer is None else int(answer[0])
                during = conn.execute("SHOW synchronous_commit").fetchone()
            after = conn.execute("SHOW synchronous_commit").fetchone()
            assert during is not None
            assert after is not None
            return deleted, str(during[0]), str(after[0])

    assert await anyio.to_thread.run_sync(delete) == (1, at_commit, session)
    assert await store.recall("acme", "user-1") == ()
