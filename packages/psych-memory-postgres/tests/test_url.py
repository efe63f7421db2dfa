"""Opening a store from a ``postgresql://`` URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import anyio.to_thread
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from psych_runtime.memory import port
from psych_runtime.memory.postgres import (
    SCHEMA_VERSION,
    PostgresMemory,
    SchemaVersionError,
    StoreUnavailableError,
    open_url,
)
from psych_runtime.memory.postgres._url import parse_url

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

_PASSWORD = "s3cret-Pa55"  # noqa: S105 - a made-up one, to look for in messages


def _url(postgres_dsn: str, query: str, *, scheme: str = "postgresql") -> str:
    parts = conninfo_to_dict(postgres_dsn)
    host, port_number = parts.get("host", "127.0.0.1"), parts.get("port", "5432")
    user, dbname = parts.get("user", "postgres"), parts.get("dbname", "test")
    return f"{scheme}://{user}@{host}:{port_number}/{dbname}?{query}"


async def _schema_exists(backdoor: Backdoor, name: str) -> bool:
    rows = await backdoor.query(sql.SQL("SELECT 1 FROM pg_namespace WHERE nspname = %s"), (name,))
    return bool(rows)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_a_url_opens_a_ready_store_and_closes_it(
    postgres_dsn: str, schema: str, backdoor: Backdoor, scheme: str
) -> None:
    name = f"psych-url-{schema[-12:]}"
    url = _url(
        postgres_dsn,
        f"schema={quote(schema)}&application_name={name}&min_size=1&max_size=3"
        "&statement_timeout=1.5&lock_timeout=0.5&pool_timeout=10",
        scheme=scheme,
    )
    async with open_url(url) as store:
        assert isinstance(store, PostgresMemory)
        assert store.schema == schema
        fact = await store.remember("acme", "u1", "opened by URL")
        assert await store.recall("acme", "u1") == (fact,)
        pool = store.pool
        assert (pool.min_size, pool.max_size, pool.timeout) == (1, 3, 10.0)
        # The store's own pool, which may prepare: its sessions carry the
        # bounds from their start.
        settings = await backdoor.settings_of(
            store, "statement_timeout", "lock_timeout", "application_name"
        )
        assert settings == ("1500ms", "500ms", name)
    assert store.closed
    with pytest.raises(port.StoreClosedError):
        await store.recall("acme", "u1")
    assert await backdoor.count("acme", "u1") == 1


async def test_setup_never_only_checks_and_creates_nothing(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    url = _url(postgres_dsn, f"schema={quote(schema)}&setup=never")
    with pytest.raises(SchemaVersionError) as caught:
        async with open_url(url):
            pytest.fail("a missing schema was opened")
    assert caught.value.found is None
    assert not await _schema_exists(backdoor, schema)
    async with open_url(_url(postgres_dsn, f"schema={quote(schema)}")) as store:
        await store.remember("acme", "u1", "set up by auto")
    async with open_url(url) as store:
        assert len(await store.recall("acme", "u1")) == 1
    rows = await backdoor.query(
        sql.SQL("SELECT version FROM {}").format(sql.Identifier(schema, "schema_version"))
    )
    assert rows == [(SCHEMA_VERSION,)]


@pytest.mark.parametrize(
    ("query", "rule"),
    [
        ("colour=blue", "unknown option 'colour'"),
        ("schema=a&schema=b", "'schema' more than once"),
        ("min_size=abc", "'min_size' must be a whole number"),
        ("max_size=0", "'max_size' must be a whole number >= 1"),
        ("min_size=5&max_size=2", "'min_size' must not exceed 'max_size'"),
        ("pool_timeout=-1", "'pool_timeout' must be a positive number"),
        ("statement_timeout=nan", "'statement_timeout' must be a positive number of seconds or"),
        ("statement_timeout=nothing", "'statement_timeout' must be a positive number"),
        ("lock_timeout=inf", "'lock_timeout' must be a positive number"),
        ("setup=maybe", "'setup' must be one of: auto, never"),
        ("prepare_threshold=-1", "'prepare_threshold' must be a whole number >= 0 or 'none'"),
        ("prepare_threshold=never", "'prepare_threshold' must be a whole number >= 0 or 'none'"),
        ("prepare_threshold=", "'prepare_threshold' must be a whole number >= 0 or 'none'"),
        ("schema=pg_private", "'schema'.*reserved"),
        ("schema=", "'schema'.*empty"),
        ("novalue", "malformed query string"),
        ("application_name=%zz", "libpq"),
    ],
)
async def test_a_bad_url_names_the_rule_and_never_the_password(query: str, rule: str) -> None:
    # Checked before anything is opened: the host is never asked.
    url = f"postgresql://app:{_PASSWORD}@db.invalid/app?password={_PASSWORD}&{query}"
    with pytest.raises(ValueError, match=rule) as caught:
        async with open_url(url):
            pytest.fail("a bad URL was opened")
    message = str(caught.value)
    assert message.startswith("url ")
    assert _PASSWORD not in message
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or _PASSWORD not in str(caught.value.__context__)


@pytest.mark.parametrize(
    ("value", "threshold"), [("none", None), ("None", None), ("0", 0), ("5", 5), ("100", 100)]
)
async def test_prepare_threshold_reaches_the_pools_connections(
    postgres_dsn: str, schema: str, value: str, threshold: int | None
) -> None:
    # What a pooler in transaction mode needs: psycopg never prepares.
    url = _url(postgres_dsn, f"schema={quote(schema)}&prepare_threshold={value}")
    assert parse_url(url).prepare_threshold == threshold
    async with open_url(url) as store:
        assert isinstance(store, PostgresMemory)
        await store.recall("acme", "u1")
        pool = store.pool
        assert isinstance(pool.kwargs, dict)
        assert pool.kwargs["prepare_threshold"] == threshold
        if isinstance(pool, AsyncConnectionPool):
            async with pool.connection() as conn:
                assert conn.prepare_threshold == threshold
        else:
            assert await anyio.to_thread.run_sync(_threshold_of, pool) == threshold


def _threshold_of(pool: ConnectionPool[Any]) -> int | None:
    with pool.connection() as conn:
        threshold: int | None = conn.prepare_threshold
        return threshold


def test_either_bound_may_be_left_to_the_server() -> None:
    options = parse_url("postgresql:///app?statement_timeout=none&lock_timeout=None")
    assert (options.statement_timeout, options.lock_timeout) == (None, None)
    options = parse_url("postgresql:///app?lock_timeout=none")
    assert (options.statement_timeout, options.lock_timeout) == (5.0, None)


def test_prepare_threshold_defaults_to_psycopgs() -> None:
    assert parse_url("postgresql://db.invalid/app").prepare_threshold == 5
    assert "prepare_threshold=None" in repr(parse_url("postgresql:///app?prepare_threshold=none"))


@pytest.mark.parametrize(
    "url",
    [
        "mysql://user@host/db",
        "sqlite:///memory.db",
        "postgresql://host/db#fragment",
        "postgresql://[::1/db",
    ],
)
async def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"^url "):
        async with open_url(url):
            pytest.fail("opened")


async def test_a_url_must_be_text() -> None:
    with pytest.raises(TypeError, match="url must be a str"):
        async with open_url(b"postgresql://host/db"):  # type: ignore[arg-type]
            pytest.fail("opened")


async def test_an_unreachable_server_is_unavailable_and_its_password_stays_out() -> None:
    url = f"postgresql://user:{_PASSWORD}@127.0.0.1:1/db?connect_timeout=2&pool_timeout=1"
    with anyio.fail_after(60), pytest.raises(StoreUnavailableError) as caught:
        async with open_url(url):
            pytest.fail("opened without a server")
    assert caught.value.operation == "connect"
    assert caught.value.may_have_taken_effect is False
    assert _PASSWORD not in str(caught.value)


def test_the_options_repr_shows_no_password() -> None:
    from psych_runtime.memory.postgres._url import parse_url  # noqa: PLC0415

    options = parse_url(f"postgresql://user:{_PASSWORD}@db/app?password={_PASSWORD}&schema=s")
    assert _PASSWORD not in repr(options)
    assert options.schema == "s"
    # libpq's part passes through untouched; ours is taken out.
    assert options.conninfo == f"postgresql://user:{_PASSWORD}@db/app?password={_PASSWORD}"
