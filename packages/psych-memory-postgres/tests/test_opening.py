"""Opening a store: the server's refusal said at once, and a store that creates nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from psych_runtime.memory import port
from psych_runtime.memory.postgres import (
    ConnectionRefusedByServerError,
    PostgresMemory,
    SchemaVersionError,
    StoreUnavailableError,
    open_url,
)

if TYPE_CHECKING:
    from conftest import Backdoor

pytestmark = pytest.mark.anyio

# Never sent to a server that checks it: what matters is that no message shows it.
_PASSWORD = "s3cret-Pa55word"  # noqa: S105

# Far longer than a refusal takes: a store that waited for its pool
# instead would fail with the plain timeout error, not the refusal.
_WAIT = 5


def _changed(dsn: str, **settings: str) -> str:
    return make_conninfo(dsn, **settings)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"dbname": "psych_no_such_database"}, 'database "psych_no_such_database" does not exist'),
        ({"user": "psych_no_such_role", "password": _PASSWORD}, 'role "psych_no_such_role"'),
        ({"options": "-c psych_no_such_setting=1"}, "unrecognized configuration parameter"),
    ],
)
async def test_a_connection_the_server_refuses_is_reported_at_once_in_its_words(
    postgres_dsn: str, settings: dict[str, str], said: str
) -> None:
    conninfo = _changed(postgres_dsn, **settings)
    with pytest.raises(ConnectionRefusedByServerError) as caught:
        async with PostgresMemory.connect(conninfo, pool_timeout=_WAIT):
            pytest.fail("the store opened")
    error = caught.value
    assert isinstance(error, port.StoreUnavailableError)
    assert error.may_have_taken_effect is False
    assert said in error.server_message
    assert said in str(error)
    assert "\n" not in str(error)
    assert _PASSWORD not in str(error)
    assert isinstance(error.__cause__, psycopg.OperationalError)


async def test_a_refused_url_names_the_server_reason_without_the_password(
    postgres_dsn: str,
) -> None:
    parts = conninfo_to_dict(postgres_dsn)
    url = (
        f"postgresql://psych_no_such_role:{_PASSWORD}@{parts.get('host', '127.0.0.1')}:"
        f"{parts.get('port', 5432)}/{parts.get('dbname', 'test')}?pool_timeout={_WAIT}"
    )
    with pytest.raises(ConnectionRefusedByServerError, match=r"psych_no_such_role") as caught:
        async with open_url(url):
            pytest.fail("the store opened")
    assert _PASSWORD not in str(caught.value)
    assert _PASSWORD not in repr(caught.value.args)


async def test_a_server_that_does_not_answer_is_waited_for_and_named(postgres_dsn: str) -> None:
    # Nothing listens on port 1: the pool keeps trying (a server may be
    # starting), then the error says what the first attempt met.
    conninfo = _changed(postgres_dsn, host="127.0.0.1", port="1")
    with pytest.raises(StoreUnavailableError) as caught:
        async with PostgresMemory.connect(conninfo, pool_timeout=0.5):
            pytest.fail("the store opened")
    assert type(caught.value) is StoreUnavailableError
    assert "could be opened in time" in str(caught.value)
    assert "the first attempt said: " in str(caught.value)


async def test_a_connection_string_libpq_refuses_is_a_value_error(postgres_dsn: str) -> None:
    with pytest.raises(ValueError, match="conninfo is not a connection string") as caught:
        async with PostgresMemory.connect(f"{postgres_dsn}?password={_PASSWORD}&psych_bogus=1"):
            pytest.fail("the store opened")
    assert _PASSWORD not in str(caught.value)


def _url(postgres_dsn: str, schema: str, extra: str = "") -> str:
    parts = urlsplit(postgres_dsn)
    query = f"schema={schema}{extra}"
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


async def _schema_exists(backdoor: Backdoor) -> bool:
    rows = await backdoor.query(
        sql.SQL("SELECT count(*) FROM pg_namespace WHERE nspname = %s"), (backdoor.schema,)
    )
    return bool(rows[0][0])


@pytest.mark.parametrize("extra", ["", "&setup=auto", "&setup=never"])
async def test_open_url_without_create_creates_nothing_and_names_the_missing_schema(
    postgres_dsn: str, backdoor: Backdoor, extra: str
) -> None:
    with pytest.raises(SchemaVersionError, match=r"does not exist") as caught:
        async with open_url(_url(postgres_dsn, backdoor.schema, extra), create=False):
            pytest.fail("the store opened")
    assert isinstance(caught.value, port.SchemaVersionError)
    assert (caught.value.found, caught.value.schema_exists) == (None, False)
    assert not await _schema_exists(backdoor)


async def test_open_url_without_create_opens_a_schema_that_was_set_up(
    postgres_dsn: str, backdoor: Backdoor
) -> None:
    async with open_url(_url(postgres_dsn, backdoor.schema)) as store:
        fact = await store.remember("acme", "u1", "kept")
    assert await _schema_exists(backdoor)
    async with open_url(_url(postgres_dsn, backdoor.schema), create=False) as store:
        assert await store.recall("acme", "u1") == (fact,)


async def test_open_url_refuses_a_create_that_is_not_a_bool(postgres_dsn: str) -> None:
    with pytest.raises(TypeError, match="create must be a bool"):
        async with open_url(postgres_dsn, create="no"):  # type: ignore[arg-type]
            pytest.fail("the store opened")
