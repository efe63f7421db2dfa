"""The ledger in a PostgreSQL schema of its own.

One synchronous connection, used under the ledger's lock. Every write
commits with ``synchronous_commit = on`` set for its own transaction only
(``set_config(..., true)``), never for the session: behind a pooler in
transaction mode the next transaction may run on another server
connection, and a session setting would both miss the ledger's writes and
stay behind for the pooler's next client.

A connection the server or the network cut (``pg_terminate_backend``, a
restart, a failover) is replaced by a new one at the next call, and the
statement the cut interrupted is sent again on the new one once, where
that is safe (see `PostgresConnection._call`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any, Final, TypeVar
from urllib.parse import unquote

from psych_runtime.memory.port import InvalidInputError

from ._connection import COUNT, PRUNE, ROWS, Connection, first_meta, meta
from ._errors import LedgerError, LedgerNotFoundError
from ._key import LedgerKey

__all__ = ["PostgresConnection", "database_of", "postgres_location"]

_T = TypeVar("_T")

STATEMENT_MODE: Final = (
    "a pooler in statement mode cannot run the ledger's transactions;"
    " use transaction or session mode"
)
"""Why a ledger behind a pooler in statement mode is refused."""

# The options a ledger URL adds to libpq's own in its query string.
_SCHEMA: Final = "schema"
_THRESHOLD: Final = "prepare_threshold"

# The tables of a psych-memory-postgres store: a schema holding either is
# a store's, and a ledger there would be restored with the store.
_STORE_TABLES: Final = ("memories", "schema_version")

# A write's own transaction commits once its WAL is on disk, whatever the
# server's, database's or role's default: the intent is never a write still
# in flight. Appended to a statement's WHERE clause, the scalar subquery is
# evaluated once, before the scan (the store's deletions do the same).
_SYNCED: Final = " AND (SELECT set_config('synchronous_commit', 'on', true)) IS NOT NULL"
_DURABLE: Final = "SELECT set_config('synchronous_commit', 'on', true)"

# The intent's insert, one statement (one implicit transaction, durable as
# above). The parameters are typed: a NULL must reach its column as such.
_INSERT: Final = (
    "INSERT INTO {schema}.psych_ledger_deletion"
    " (kind, tenant, end_user_hash, fact_id, cutoff, recorded_at)"
    " SELECT %s::text, %s::text, %s::text, %s::bytea, %s::text, %s::text"
    " WHERE (SELECT set_config('synchronous_commit', 'on', true)) IS NOT NULL"
    " RETURNING seq"
)


def postgres_location(url: str, query: str) -> tuple[str, str]:
    """The connection string and schema of a ``postgresql://`` ledger URL whose query is ``query``.

    The query holds ``schema`` (once, required), optionally
    ``prepare_threshold`` (as the PostgreSQL store's URL takes it: a whole
    number, or ``none`` behind a pooler in transaction mode), and libpq's
    own connection parameters, passed on exactly as written. Any other
    option is refused: a mistyped one would otherwise reach the server as a
    connection failure, or be ignored.

    Raises:
        InvalidInputError: The URL breaks one of these rules (``ledger``).
    """
    schemas: list[str] = []
    thresholds: list[str] = []
    passed: list[str] = []
    known = _libpq_keywords()
    # Split by hand: libpq decodes percent escapes only (a "+" stays a
    # "+"), so the items libpq reads are passed on exactly as written.
    for item in query.split("&") if query else ():
        raw_name, equals, raw_value = item.partition("=")
        name = unquote(raw_name)
        if name == _SCHEMA:
            schemas.append(unquote(raw_value))
        elif name == _THRESHOLD:
            thresholds.append(unquote(raw_value))
            passed.append(item)
        elif not equals or not name:
            raise InvalidInputError(
                "ledger", "has a malformed query string (each option needs name=value)"
            )
        elif known is None or name in known:
            passed.append(item)
        else:
            raise InvalidInputError(
                "ledger",
                f"has an unknown option {_shown(name)}: a ledger URL takes schema,"
                " prepare_threshold and libpq's connection parameters",
            )
    if len(schemas) != 1 or not schemas[0]:
        raise InvalidInputError("ledger", "must name its schema once: ?schema=NAME")
    if len(thresholds) > 1:
        raise InvalidInputError("ledger", "gives the option 'prepare_threshold' more than once")
    if thresholds:
        _threshold(thresholds[0])
    base = url.partition("?")[0]
    return base + (f"?{'&'.join(passed)}" if passed else ""), schemas[0]


def _threshold(value: str) -> int | None:
    if value.lower() == "none":
        return None
    if not value.isascii() or not value.isdigit():
        raise InvalidInputError(
            "ledger", "option 'prepare_threshold' must be a whole number >= 0 or 'none'"
        )
    return int(value)


def _split(conninfo: str) -> tuple[str, dict[str, Any]]:
    """Libpq's connection string, and psycopg's arguments the ledger's own options give."""
    if not conninfo.lower().startswith(("postgresql://", "postgres://")):
        return conninfo, {}  # key=value pairs, which name no option of the ledger's
    base, _, query = conninfo.partition("?")
    arguments: dict[str, Any] = {}
    passed: list[str] = []
    for item in query.split("&") if query else ():
        raw_name, _, raw_value = item.partition("=")
        if unquote(raw_name) == _THRESHOLD:
            arguments["prepare_threshold"] = _threshold(unquote(raw_value))
        else:
            passed.append(item)
    return base + (f"?{'&'.join(passed)}" if passed else ""), arguments


@cache
def _libpq_keywords() -> frozenset[str] | None:
    # None without psycopg: opening the ledger then says what to install.
    try:
        from psycopg.pq import Conninfo  # noqa: PLC0415
    except ImportError:
        return None
    return frozenset(option.keyword.decode("ascii") for option in Conninfo.get_defaults())


def _shown(name: str) -> str:
    # The caller's text, shown short: a pasted value cannot spill into a log.
    return repr(name if len(name) <= 40 else name[:40] + "...")


def _statement_mode(exc: BaseException) -> bool:
    # PgBouncer's refusal of a transaction block in statement mode (it then
    # closes the connection); no SQLSTATE of its own tells it apart.
    return "statement pooling mode" in str(exc)


class PostgresConnection(Connection):
    def __init__(self, connect: Callable[[], Any], schema: str, conninfo: str) -> None:
        import psycopg  # noqa: PLC0415

        self.errors = (psycopg.Error,)
        self._connect = connect
        self._conn = connect()
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
        libpq, arguments = _split(conninfo)

        def connect() -> Any:
            return psycopg.connect(
                libpq, autocommit=True, connect_timeout=max(1, int(busy_timeout)), **arguments
            )

        try:
            return cls(connect, schema, conninfo)
        except psycopg.Error as exc:
            raise LedgerError(
                f"the ledger database cannot be reached ({type(exc).__name__})"
            ) from exc

    def _call(
        self, attempt: Callable[[Any], _T], *, again: Callable[[], bool] = lambda: True
    ) -> _T:
        """``attempt`` on the connection; on a new one if the connection is lost.

        A connection found lost (by an earlier call) is replaced before
        anything is sent. One lost during ``attempt`` is replaced and
        ``attempt`` runs once more on the new one when ``again()`` says it
        is safe, which each caller decides:

        - the reads, and the updates and deletes by ``seq`` (an outcome
          recorded, an intent withdrawn), give the same result however often
          they run;
        - an intent's insert may have committed before the connection was
          lost, so a second run may leave a duplicate intent: the same row,
          the same instant (its parameters are made once, before the first
          run), which stays pending. A duplicate is harmless because it
          names the same deletion at the same instant as the entry it
          doubles: a replay deletes what that entry's replay deletes (an
          erase bounded by the instant, a forget by the fact id, an expiry
          by the cutoff), and a pending intent is only ever re-applied,
          never trusted to say something was not deleted. Refusing the
          deletion instead would make the caller retry it as a new intent
          all the same. When the server ended the session (terminated,
          restarted), it ran nothing of the statement it never read, and
          no duplicate is left;
        - a prune is run again only if it was lost before its commit.

        A failure of the new connection, or of the second run, is raised:
        the caller's write is then refused, and the next call tries again.
        """
        import psycopg  # noqa: PLC0415

        if self._conn.closed:
            self._conn = self._connect()
        try:
            return attempt(self._conn)
        except psycopg.OperationalError as exc:
            if not self._conn.closed or _statement_mode(exc) or not again():
                raise
        self._conn = self._connect()
        return attempt(self._conn)

    def _sql(self, statement: str) -> Any:
        from psycopg import sql  # noqa: PLC0415

        return sql.SQL(statement.replace("?", "%s")).format(schema=sql.Identifier(self.schema))

    def _table_sql(self, statement: str) -> Any:
        return self._sql(statement.replace("psych_ledger_", "{schema}.psych_ledger_"))

    def insert(self, parameters: tuple[object, ...]) -> int:
        statement = self._sql(_INSERT)
        row = self._call(lambda conn: conn.execute(statement, parameters).fetchone())
        return int(row[0])

    def run(self, statement: str, parameters: tuple[object, ...]) -> None:
        # Every statement the ledger runs here is an UPDATE or DELETE of one
        # entry, by its seq, ending in its WHERE clause.
        synced = self._table_sql(statement + _SYNCED)
        self._call(lambda conn: conn.execute(synced, parameters))

    def rows(self) -> list[tuple[Any, ...]]:
        statement = self._table_sql(ROWS)
        return self._call(lambda conn: list(conn.execute(statement).fetchall()))

    def prune(self, before: str) -> tuple[int, int]:
        import psycopg  # noqa: PLC0415

        prune = self._table_sql(PRUNE.replace("{collate}", 'COLLATE "C" '))
        count = self._table_sql(COUNT)
        committing = False

        def attempt(conn: Any) -> tuple[int, int]:
            nonlocal committing
            committing = False
            with conn.transaction():
                conn.execute(_DURABLE)
                removed = conn.execute(prune, (before,)).rowcount
                row = conn.execute(count).fetchone()
                committing = True
            return int(removed), int(row[0])

        try:
            return self._call(attempt, again=lambda: not committing)
        except psycopg.Error as exc:
            if _statement_mode(exc):
                raise LedgerError(f"{STATEMENT_MODE}; nothing was pruned") from exc
            if committing and self._conn.closed:
                raise LedgerError(
                    f"the connection to the ledger was lost as the pruning committed"
                    f" ({type(exc).__name__}): it may be done; prune again to know"
                ) from exc
            raise

    def prepare(self, key: LedgerKey, *, create: bool) -> dict[str, str]:
        import psycopg  # noqa: PLC0415

        if not create:
            return self._existing()
        try:
            found = self._call(lambda conn: self._create(conn, key))
        except psycopg.Error as exc:
            if _statement_mode(exc):
                raise LedgerError(STATEMENT_MODE) from exc
            raise LedgerError(f"the schema is not a usable ledger ({type(exc).__name__})") from exc
        return found or {}

    def _create(self, conn: Any, key: LedgerKey) -> dict[str, str] | None:
        with conn.transaction():
            conn.execute(_DURABLE)
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('psych_ledger:' || %s))", (self.schema,)
            )
            # Before anything is created: a ledger inside a store would be
            # restored with it, and its tables would be the store's.
            (store,) = conn.execute(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_class c"
                " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = ANY(%s))",
                (self.schema, list(_STORE_TABLES)),
            ).fetchone()
            if store:
                raise InvalidInputError("ledger", "must live outside the store it records")
            # CREATE SCHEMA IF NOT EXISTS would still need the right to
            # create schemas, which a role given a prepared schema may lack.
            exists = conn.execute(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
            if exists is None:
                conn.execute(self._sql("CREATE SCHEMA {schema}"))
            for statement in _POSTGRES_SCHEMA:
                conn.execute(self._sql(statement))
            read = self._sql("SELECT name, value FROM {schema}.psych_ledger_meta")
            found = meta(conn.execute(read))
            if found is None:
                write = self._sql(
                    "INSERT INTO {schema}.psych_ledger_meta (name, value) VALUES (?, ?)"
                )
                for row in first_meta(key):
                    conn.execute(write, row)
        return found

    def _existing(self) -> dict[str, str]:
        import psycopg  # noqa: PLC0415
        from psycopg import sql  # noqa: PLC0415

        table = sql.Identifier(self.schema, "psych_ledger_meta").as_string(None)
        read = self._sql("SELECT name, value FROM {schema}.psych_ledger_meta")

        def attempt(conn: Any) -> dict[str, str] | None:
            # One transaction, as every ledger needs: a pooler in statement
            # mode is found at the opening, not at the first prune.
            with conn.transaction():
                (exists,) = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
                return meta(conn.execute(read)) if exists else None

        try:
            found = self._call(attempt)
        except psycopg.Error as exc:
            if _statement_mode(exc):
                raise LedgerError(STATEMENT_MODE) from exc
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
    # alike), port and database, with libpq's defaults. The ledger's own
    # options are no part of libpq's string.
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

    try:
        found = conninfo_to_dict(_split(conninfo)[0])
    except Exception:  # noqa: BLE001 - a string libpq refuses names no database
        return None
    host = str(found.get("host") or os.environ.get("PGHOST", ""))
    port = str(found.get("port") or os.environ.get("PGPORT", "5432"))
    user = str(found.get("user") or os.environ.get("PGUSER", ""))
    dbname = str(found.get("dbname") or os.environ.get("PGDATABASE", user))
    return ("local" if host.startswith("/") or host in _LOCAL_HOSTS else host, port, dbname)
