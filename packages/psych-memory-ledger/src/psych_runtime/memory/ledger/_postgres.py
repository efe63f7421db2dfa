"""The ledger in a PostgreSQL schema of its own."""

from __future__ import annotations

import os
from typing import Any, Final

from ._connection import COUNT, INSERT, PRUNE, ROWS, Connection, first_meta, meta
from ._errors import LedgerError, LedgerNotFoundError
from ._key import LedgerKey

__all__ = ["PostgresConnection", "database_of"]


class PostgresConnection(Connection):
    def __init__(self, conn: Any, schema: str, conninfo: str) -> None:
        import psycopg  # noqa: PLC0415

        self.errors = (psycopg.Error,)
        self._conn = conn
        self.schema = schema
        self.conninfo = conninfo

    @classmethod
    def open(cls, conninfo: str, schema: str, busy_timeout: float) -> PostgresConnection:
        try:
            import psycopg  # noqa: PLC0415
        except ImportError:
            raise LedgerError(
                "a PostgreSQL ledger needs psycopg (pip install 'psych-memory-ledger[postgres]')"
            ) from None
        try:
            conn = psycopg.connect(
                conninfo, autocommit=True, connect_timeout=max(1, int(busy_timeout))
            )
        except psycopg.Error as exc:
            raise LedgerError(
                f"the ledger database cannot be reached ({type(exc).__name__})"
            ) from exc
        return cls(conn, schema, conninfo)

    def _sql(self, statement: str) -> Any:
        from psycopg import sql  # noqa: PLC0415

        return sql.SQL(statement.replace("?", "%s")).format(schema=sql.Identifier(self.schema))

    def insert(self, parameters: tuple[object, ...]) -> int:
        statement = INSERT.replace("psych_ledger_", "{schema}.psych_ledger_")
        row = self._conn.execute(self._sql(f"{statement} RETURNING seq"), parameters).fetchone()
        return int(row[0])

    def run(self, statement: str, parameters: tuple[object, ...]) -> None:
        self._conn.execute(
            self._sql(statement.replace("psych_ledger_", "{schema}.psych_ledger_")), parameters
        )

    def rows(self) -> list[tuple[Any, ...]]:
        statement = ROWS.replace("psych_ledger_", "{schema}.psych_ledger_")
        return list(self._conn.execute(self._sql(statement)).fetchall())

    def prune(self, before: str) -> tuple[int, int]:
        prune = PRUNE.replace("{collate}", 'COLLATE "C" ')
        with self._conn.transaction():
            removed = self._conn.execute(
                self._sql(prune.replace("psych_ledger_", "{schema}.psych_ledger_")), (before,)
            ).rowcount
            row = self._conn.execute(
                self._sql(COUNT.replace("psych_ledger_", "{schema}.psych_ledger_"))
            ).fetchone()
        return int(removed), int(row[0])

    def prepare(self, key: LedgerKey, *, create: bool) -> dict[str, str]:
        import psycopg  # noqa: PLC0415

        conn = self._conn
        if not create:
            return self._existing()
        try:
            # A commit returns once it is on the server's disk, whatever the
            # server's default: the intent is never a write still in flight.
            conn.execute("SET synchronous_commit = on")
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('psych_ledger:' || %s))",
                    (self.schema,),
                )
                conn.execute(self._sql("CREATE SCHEMA IF NOT EXISTS {schema}"))
                for statement in _POSTGRES_SCHEMA:
                    conn.execute(self._sql(statement))
                found = meta(
                    conn.execute(self._sql("SELECT name, value FROM {schema}.psych_ledger_meta"))
                )
                if found is None:
                    for row in first_meta(key):
                        conn.execute(
                            self._sql(
                                "INSERT INTO {schema}.psych_ledger_meta (name, value) VALUES (?, ?)"
                            ),
                            row,
                        )
        except psycopg.Error as exc:
            raise LedgerError(f"the schema is not a usable ledger ({type(exc).__name__})") from exc
        return found or {}

    def _existing(self) -> dict[str, str]:
        import psycopg  # noqa: PLC0415
        from psycopg import sql  # noqa: PLC0415

        table = sql.Identifier(self.schema, "psych_ledger_meta").as_string(None)
        try:
            (exists,) = self._conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (table,)
            ).fetchone()
            read = self._sql("SELECT name, value FROM {schema}.psych_ledger_meta")
            found = meta(self._conn.execute(read)) if exists else None
        except psycopg.Error as exc:
            raise LedgerError(
                f"the schema cannot be read as a ledger ({type(exc).__name__})"
            ) from exc
        if found is None:
            raise LedgerNotFoundError("the schema holds no ledger")
        return found

    def close(self) -> None:
        self._conn.close()


_POSTGRES_SCHEMA: Final = (
    """
CREATE TABLE IF NOT EXISTS {schema}.psych_ledger_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS {schema}.psych_ledger_deletion (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind TEXT NOT NULL,
    tenant TEXT NOT NULL,
    end_user_hash TEXT,
    fact_id BYTEA,
    cutoff TEXT,
    recorded_at TEXT NOT NULL,
    done_at TEXT,
    deleted BIGINT
)""",
)


_LOCAL_HOSTS: Final = frozenset({"", "localhost", "127.0.0.1", "::1"})


def database_of(conninfo: str) -> tuple[str, str, str] | None:
    # Compared as the connection strings name them: host (every local name
    # alike), port and database, with libpq's defaults.
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

    try:
        found = conninfo_to_dict(conninfo)
    except Exception:  # noqa: BLE001 - a string libpq refuses names no database
        return None
    host = str(found.get("host") or os.environ.get("PGHOST", ""))
    port = str(found.get("port") or os.environ.get("PGPORT", "5432"))
    user = str(found.get("user") or os.environ.get("PGUSER", ""))
    dbname = str(found.get("dbname") or os.environ.get("PGDATABASE", user))
    return ("local" if host.startswith("/") or host in _LOCAL_HOSTS else host, port, dbname)
