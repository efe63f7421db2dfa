"""URLs naming several servers, as libpq defines them, for failover."""

from __future__ import annotations

from functools import partial
from urllib.parse import quote

import anyio
import pytest
from psycopg.conninfo import conninfo_to_dict

from psych_runtime.memory.postgres import StoreUnavailableError, open_url
from psych_runtime.memory.postgres._url import parse_url


@pytest.mark.parametrize(
    ("url", "hosts", "ports"),
    [
        (
            "postgresql://app@db1:5433,db2:5434/app?target_session_attrs=read-write&schema=s",
            "db1,db2",
            "5433,5434",
        ),
        ("postgres://app@db1,db2,db3/app?target_session_attrs=primary", "db1,db2,db3", ",,"),
        ("postgresql://[::1]:5433,[::1]:5434/app", "::1,::1", "5433,5434"),
        # No host in the authority: the hosts come from the query string.
        ("postgresql:///app?host=db1,db2&port=5433,5434&schema=s", "db1,db2", "5433,5434"),
    ],
)
def test_a_url_naming_several_servers_reaches_libpq_unchanged(
    url: str, hosts: str, ports: str
) -> None:
    options = parse_url(url)
    assert options.conninfo == url.replace("&schema=s", "")
    parts = conninfo_to_dict(options.conninfo)
    assert parts["host"] == hosts
    assert parts["port"] == ports


def test_a_url_without_a_host_is_libpqs_default_server() -> None:
    # The "//" of an empty authority is kept: without it libpq refuses the URL.
    assert parse_url("postgresql:///app?schema=s").conninfo == "postgresql:///app"
    assert parse_url("postgresql://").conninfo == "postgresql://"


def _listing(postgres_dsn: str, schema: str) -> str:
    # The first server of the list does not answer; the second is the test
    # server, the only writable one.
    parts = conninfo_to_dict(postgres_dsn)
    host, port = parts.get("host", "127.0.0.1"), parts.get("port", "5432")
    user, dbname = parts.get("user", "postgres"), parts.get("dbname", "test")
    return (
        f"postgresql://{user}@127.0.0.1:1,{host}:{port}/{dbname}"
        f"?target_session_attrs=read-write&connect_timeout=2&schema={quote(schema)}"
    )


@pytest.mark.anyio
async def test_a_store_reaches_the_writable_server_of_a_list(
    postgres_dsn: str, schema: str
) -> None:
    with anyio.fail_after(60):
        async with open_url(_listing(postgres_dsn, schema)) as store:
            fact = await store.remember("acme", "u1", "reached through a list")
            assert await store.recall("acme", "u1") == (fact,)


@pytest.mark.anyio
async def test_open_memory_takes_a_list_of_servers(postgres_dsn: str, schema: str) -> None:
    # The operator's tools (the command line, the MCP server) open stores
    # through open_memory, which hands the URL to this adapter as it is.
    admin = pytest.importorskip("psych_runtime.memory.admin")
    with anyio.fail_after(60):
        async with admin.open_memory(_listing(postgres_dsn, schema)) as store:
            fact = await store.remember("acme", "u1", "opened by the operator's opener")
            assert await store.recall("acme", "u1") == (fact,)


@pytest.mark.anyio
async def test_a_read_only_server_refuses_every_write_having_changed_nothing(
    postgres_dsn: str, schema: str
) -> None:
    # A server that refuses writes (here: the test server, with every
    # transaction of these sessions read-only, as on a standby) is told
    # apart from a statement refused for good: the call is replayed, then
    # fails as unavailable, and it changed nothing.
    read_only = _listing(postgres_dsn, schema).replace(
        "target_session_attrs=read-write", "options=-c%20default_transaction_read_only%3Don"
    )
    with anyio.fail_after(60):
        async with open_url(_listing(postgres_dsn, schema)) as store:
            facts = [await store.remember("acme", "u1", f"fact {index}") for index in range(2)]
        async with open_url(read_only) as store:
            for call in (
                partial(store.forget, "acme", "u1", facts[0].id),
                partial(store.erase, "acme", "u1"),
                partial(store.remember, "acme", "u1", "not stored"),
            ):
                with pytest.raises(StoreUnavailableError, match="read-only") as caught:
                    await call()
                assert caught.value.may_have_taken_effect is False
            assert await store.recall("acme", "u1") == tuple(facts)
