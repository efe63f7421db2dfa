import os
import uuid
from collections.abc import Iterator

import pytest

DSN_VARIABLE = "PSYCH_MEMORY_TEST_POSTGRES_DSN"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def _unavailable(message: str) -> None:
    # Skipped on a developer's machine; under CI=true a missing server is a broken setup.
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The address of a live PostgreSQL server, or a skip (a failure under CI=true)."""
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need the driver

    dsn = os.environ.get(DSN_VARIABLE, DEFAULT_DSN)
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        _unavailable(f"no PostgreSQL server answers at ${DSN_VARIABLE} or its default ({exc})")
    return dsn


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema name, dropped with everything in it after the test."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    name = f"psych_cli_test_{uuid.uuid4().hex}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
