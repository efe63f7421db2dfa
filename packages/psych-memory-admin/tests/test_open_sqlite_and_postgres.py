"""`open_memory` with the SQLite and PostgreSQL adapters, through their entry points.

These tests need the adapters' ``open_url`` registered in the entry-point
group (each adapter's own ``pyproject.toml`` does it). A missing entry point
skips them on a developer's machine and fails them under ``CI=true``, where
it can only mean a broken registration. The PostgreSQL tests also need the
server named by ``PSYCH_MEMORY_TEST_POSTGRES_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``), with the same rule.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path

import anyio.to_thread
import psycopg
import pytest

from psych_runtime.memory.admin import StoreUrlError, open_memory
from psych_runtime.memory.port import (
    ListsEndUsers,
    MemoryStore,
    RestoresFacts,
    SchemaVersionError,
    StoreClosedError,
)

pytestmark = pytest.mark.anyio

PASSWORD = "Zq8-s3cret"  # noqa: S105 - made up, to look for in what is shown


async def roundtrip(memory: MemoryStore) -> None:
    """A short session through the port: the store is open and ready."""
    first = await memory.remember("acme", "u1", "ships to Berlin")
    second = await memory.remember("acme", "u1", "pays by invoice")
    assert await memory.recall("acme", "u1") == (first, second)
    assert await memory.forget("acme", "u1", first.id) is True
    assert await memory.recall("acme", "u1") == (second,)


# SQLite.


@pytest.fixture
def sqlite_scheme(require_schemes: Callable[..., None]) -> None:
    require_schemes("sqlite")


@pytest.fixture
def empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.usefixtures("sqlite_scheme")
async def test_sqlite_with_a_relative_path_opens_a_durable_store(empty_cwd: Path) -> None:
    url = "sqlite:///facts.sqlite3"
    async with open_memory(url) as memory:
        assert isinstance(memory, ListsEndUsers)
        assert isinstance(memory, RestoresFacts)
        await roundtrip(memory)
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "u1")
    assert (empty_cwd / "facts.sqlite3").is_file()
    async with open_memory(url) as reopened:
        (kept,) = await reopened.recall("acme", "u1")
        assert kept.content == "pays by invoice"


@pytest.mark.usefixtures("sqlite_scheme")
async def test_sqlite_with_an_absolute_path_opens_that_file(tmp_path: Path) -> None:
    path = tmp_path / "absolute.sqlite3"
    assert path.is_absolute()
    async with open_memory(f"sqlite:///{path}") as memory:
        await roundtrip(memory)
    assert path.is_file()


@pytest.mark.usefixtures("sqlite_scheme")
@pytest.mark.parametrize(
    "url",
    [
        "sqlite:",
        "sqlite://",
        "sqlite:///",
        "sqlite:///folder/",
        "sqlite:///facts.sqlite3?no_such_option=1",
        "sqlite:///facts.sqlite3?durability",
        "sqlite:///facts.sqlite3?durability=sometimes",
        f"sqlite://alice:{PASSWORD}@localhost/facts.sqlite3",
        f"sqlite:///facts.sqlite3?password={PASSWORD}",
    ],
)
async def test_sqlite_bad_urls_are_refused_and_create_nothing(url: str, empty_cwd: Path) -> None:
    with pytest.raises(StoreUrlError) as caught:
        async with open_memory(url):
            pass  # pragma: no cover - never reached
    assert caught.value.scheme == "sqlite"
    assert str(caught.value).startswith("url is refused by the 'sqlite' backend: url ")
    assert PASSWORD not in "".join(traceback.format_exception(caught.value))
    assert sorted(empty_cwd.rglob("*")) == []  # noqa: ASYNC240 - one listing


# PostgreSQL.


@pytest.fixture
def schema(require_schemes: Callable[..., None], postgres_schema: str) -> str:
    """The test's own schema, once both PostgreSQL schemes are registered."""
    require_schemes("postgresql", "postgres")
    return postgres_schema


def with_options(dsn: str, **options: str) -> str:
    query = "&".join(f"{name}={value}" for name, value in options.items())
    return f"{dsn}{'&' if '?' in dsn else '?'}{query}"


async def schema_exists(dsn: str, name: str) -> bool:
    def look() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,)
            )
            return found.fetchone() is not None

    return await anyio.to_thread.run_sync(look)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_postgres_opens_a_ready_store_in_its_schema(
    postgres_dsn: str, schema: str, scheme: str
) -> None:
    url = with_options(postgres_dsn, schema=schema)
    url = scheme + url[url.index(":") :]
    async with open_memory(url) as memory:
        assert isinstance(memory, ListsEndUsers)
        assert isinstance(memory, RestoresFacts)
        await roundtrip(memory)
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "u1")
    assert await schema_exists(postgres_dsn, schema)
    # Laid out now, so a store that may only verify it opens too.
    async with open_memory(with_options(postgres_dsn, schema=schema, setup="never")) as again:
        (kept,) = await again.recall("acme", "u1")
        assert kept.content == "pays by invoice"


async def test_postgres_setup_never_only_verifies_and_creates_nothing(
    postgres_dsn: str, schema: str
) -> None:
    with pytest.raises(SchemaVersionError) as caught:
        async with open_memory(with_options(postgres_dsn, schema=schema, setup="never")):
            pass  # pragma: no cover - never reached
    assert caught.value.found is None
    assert not await schema_exists(postgres_dsn, schema)


@pytest.mark.parametrize(
    "options",
    [{"no_such_option": "1"}, {"setup": "sometimes"}],
)
async def test_postgres_bad_urls_are_refused_and_create_nothing(
    postgres_dsn: str, schema: str, options: dict[str, str]
) -> None:
    # With a password in the user information, which no error may show.
    head, _, rest = postgres_dsn.partition("://")
    user_info, at, host = rest.rpartition("@")
    if at:
        rest = f"{user_info.partition(':')[0]}:{PASSWORD}@{host}"
    url = with_options(f"{head}://{rest}", schema=schema, **options)
    with pytest.raises(StoreUrlError) as caught:
        async with open_memory(url):
            pass  # pragma: no cover - never reached
    assert caught.value.scheme == "postgresql"
    assert PASSWORD not in "".join(traceback.format_exception(caught.value))
    assert not await schema_exists(postgres_dsn, schema)
