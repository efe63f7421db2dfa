"""An application's own asynchronous pool, which psycopg serves on asyncio alone.

These tests can only run on asyncio, so pytest-asyncio runs them
(``@pytest.mark.asyncio``, strict mode) instead of anyio with a one-loop
parametrisation. That the store refuses such a pool on trio is tested with
the store's other rules, in ``test_store.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from psych_runtime.memory.postgres import PostgresMemory, StoreUnavailableError

if TYPE_CHECKING:
    from conftest import Backdoor


@pytest.mark.asyncio
async def test_app_owned_async_pool_works_on_asyncio(
    postgres_dsn: str, schema: str, backdoor: Backdoor
) -> None:
    async with AsyncConnectionPool(postgres_dsn, min_size=1, max_size=2, open=False) as pool:
        store = PostgresMemory(pool, schema=schema)
        await store.setup()
        fact = await store.remember("acme", "u1", "kept by the application's pool")
        assert await backdoor.count("acme", "u1") == 1
        assert await store.recall("acme", "u1") == (fact,)
        assert await store.forget("acme", "u1", fact.id) is True
    # The store never closes a pool it was given; the application did.
    assert pool.closed


@pytest.mark.asyncio
async def test_a_closed_application_pool_is_an_unavailable_store(
    postgres_dsn: str, schema: str
) -> None:
    async with AsyncConnectionPool(
        postgres_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    ) as pool:
        store = PostgresMemory(pool, schema=schema)
        await store.setup()
    with pytest.raises(StoreUnavailableError) as caught:
        await store.remember("acme", "u1", "the pool is gone")
    assert caught.value.may_have_taken_effect is False
    assert isinstance(caught.value.__cause__, psycopg.Error)
