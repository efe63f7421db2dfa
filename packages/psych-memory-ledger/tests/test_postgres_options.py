"""A PostgreSQL ledger's URL options, and the schema it may be created in.

The URL refusals need no server; the rest use the root conftest's
``postgres_dsn`` (skipped without a server, except under ``CI=true``).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from psych_runtime.memory.ledger import (
    LedgerError,
    LedgerKey,
    LedgerNotFoundError,
    open_ledger,
    with_ledger,
)
from psych_runtime.memory.port import InvalidInputError
from psych_runtime.memory.postgres import PostgresMemory


def _url(dsn: str, schema: str, options: str = "") -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}{options}"


def _ledger_tables(dsn: str, schema: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s"
            " AND tablename LIKE 'psych\\_ledger\\_%%' ORDER BY 1",
            (schema,),
        ).fetchall()
    return [str(name) for (name,) in rows]


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        ("&prepare_treshold=none", r"unknown option 'prepare_treshold'"),
        ("&pool_size=3", r"unknown option 'pool_size'.*schema, prepare_threshold and libpq"),
        ("&min_size=1", r"unknown option 'min_size'"),
        ("&sslmode", r"malformed query string"),
        ("&prepare_threshold=never", r"'prepare_threshold' must be a whole number >= 0 or 'none'"),
        ("&prepare_threshold=-1", r"'prepare_threshold' must be a whole number"),
        ("&prepare_threshold=none&prepare_threshold=5", r"'prepare_threshold' more than once"),
        ("#frag", r"must not have a fragment"),
    ],
)
def test_an_option_the_ledger_does_not_know_is_refused_before_anything_is_opened(
    key: LedgerKey, unused_tcp_port: int, options: str, rule: str
) -> None:
    # No server listens there: the refusal comes before any connection.
    url = _url(f"postgresql://postgres@127.0.0.1:{unused_tcp_port}/test", "s", options)
    with pytest.raises(InvalidInputError, match=rf"ledger .*{rule}") as raised:
        open_ledger(url, key, busy_timeout=1)
    assert raised.value.argument == "ledger"


def test_the_options_it_knows_and_libpqs_own_reach_the_server(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    # The store's own spelling turns prepared statements off; libpq's
    # parameters pass on exactly as written (a "+" stays a "+").
    options = (
        "&prepare_threshold=none&connect_timeout=5&sslmode=disable"
        "&application_name=ledger+options%20test&options=-c%20lock_timeout%3D1234"
    )
    with open_ledger(_url(postgres_dsn, postgres_schema, options), key) as ledger:
        conn = ledger._conn._conn  # type: ignore[attr-defined]
        assert conn.prepare_threshold is None
        row = conn.execute(
            "SELECT current_setting('application_name'), current_setting('lock_timeout')"
        ).fetchone()
        assert row == ("ledger+options test", "1234ms")
        assert ledger.entries() == ()
    with open_ledger(_url(postgres_dsn, postgres_schema, "&prepare_threshold=0"), key) as again:
        assert again._conn._conn.prepare_threshold == 0  # type: ignore[attr-defined]
    with open_ledger(_url(postgres_dsn, postgres_schema), key) as plain:
        # psycopg's default when the URL says nothing, as for the store.
        assert plain._conn._conn.prepare_threshold == 5  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_ledger_is_never_created_in_a_schema_holding_a_store(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    async with PostgresMemory.connect(postgres_dsn, schema=postgres_schema) as store:
        await store.setup()
    url = _url(postgres_dsn, postgres_schema, "&prepare_threshold=none")
    with pytest.raises(InvalidInputError, match="ledger must live outside the store it records"):
        open_ledger(url, key)
    assert _ledger_tables(postgres_dsn, postgres_schema) == []
    # The store's first table alone, as a store part-way through its setup.
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(postgres_schema, "memories")))
    with pytest.raises(InvalidInputError, match="ledger must live outside"):
        open_ledger(url, key)
    assert _ledger_tables(postgres_dsn, postgres_schema) == []


@pytest.mark.anyio
async def test_a_ledger_beside_the_store_in_its_database_is_still_a_ledger_apart(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    # The ledger's own options are no part of the comparison with the
    # store's connection string: the same schema is refused, another kept.
    url = _url(postgres_dsn, postgres_schema, "&prepare_threshold=none")
    with open_ledger(url, key) as ledger:
        async with PostgresMemory.connect(postgres_dsn, schema=postgres_schema) as inside:
            with pytest.raises(InvalidInputError, match="ledger must live outside"):
                with_ledger(inside, ledger)
    assert _ledger_tables(postgres_dsn, postgres_schema) == [
        "psych_ledger_deletion",
        "psych_ledger_meta",
    ]


def test_a_schema_without_a_ledger_is_not_opened_for_reading_and_not_created(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    url = _url(postgres_dsn, postgres_schema)
    with pytest.raises(LedgerNotFoundError, match="the schema holds no ledger"):
        open_ledger(url, key, create=False)
    assert _ledger_tables(postgres_dsn, postgres_schema) == []
    # A table of that name that is not a ledger's is refused either way.
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(postgres_schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {} (other integer)").format(
                sql.Identifier(postgres_schema, "psych_ledger_meta")
            )
        )
    with pytest.raises(LedgerError, match=r"not a usable ledger \(UndefinedColumn\)"):
        open_ledger(url, key)
    with pytest.raises(LedgerError, match=r"cannot be read as a ledger \(UndefinedColumn\)"):
        open_ledger(url, key, create=False)


@pytest.mark.anyio
async def test_a_store_named_by_libpq_pairs_is_compared_with_the_ledger_url(
    postgres_dsn: str, postgres_schema: str, key: LedgerKey
) -> None:
    server = conninfo_to_dict(postgres_dsn)
    pairs = make_conninfo("", **server)
    with open_ledger(_url(postgres_dsn, postgres_schema, "&prepare_threshold=none"), key) as ledger:
        async with PostgresMemory.connect(pairs, schema=postgres_schema) as inside:
            with pytest.raises(InvalidInputError, match="ledger must live outside"):
                with_ledger(inside, ledger)
        # A connection string libpq refuses names no database: never the ledger's.
        assert not ledger._holds_schema_of("host='unclosed", postgres_schema)
