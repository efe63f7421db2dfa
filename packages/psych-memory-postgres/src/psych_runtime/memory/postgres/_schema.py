"""The tables of the adapter, their migrations and the statements that use them.

Everything lives in one PostgreSQL schema chosen by the application:

``memories``
    One row per fact. ``seq`` is an insertion sequence (an identity column)
    and gives the oldest-first order; ``id`` is the id the port hands out:
    32 random hexadecimal digits chosen by the client before the insert
    (so a broken insert can be replayed without a duplicate), or the id a
    restored fact had in the store it came from. The primary key
    ``(tenant, end_user_id, seq)`` is the index every per-user statement
    walks, so their cost does not grow with the table. The unique index
    ``(tenant, id)`` finds the fact ``forget`` names; it includes the tenant
    so that the table can be distributed by tenant (Citus) unchanged.
``erase_few(tenant, end_user_id)``
    The erase of a key of at most `FEW_FACTS` facts as a function (see
    `ERASE_FEW_BODY`), for calls whose statements are not prepared.
``schema_version``
    One row: the version of this layout that the schema holds.

Key columns use the ``"C"`` collation: keys are compared byte for byte,
never by a locale's rules, exactly as the port compares them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from psycopg import sql

from ._errors import PostgresMemoryError, SchemaVersionError

__all__ = [
    "DEFAULT_SCHEMA",
    "ERASE_FEW_BODY",
    "FEW_FACTS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Script",
    "Statements",
    "Step",
    "setup_steps",
    "validate_schema_name",
]

SCHEMA_VERSION: Final = 3
"""The version of the table layout this code reads and writes."""

DEFAULT_SCHEMA: Final = "psych_memory"
"""The PostgreSQL schema a store uses when none is given."""

FEW_FACTS: Final = 1_000
"""The most facts ``erase_few`` deletes: a key of more goes in ``erase``'s batches."""

# PostgreSQL silently truncates longer identifiers (NAMEDATALEN - 1 bytes), so
# two long names could address one schema; refusing them avoids that.
_MAX_IDENTIFIER_BYTES: Final = 63


def validate_schema_name(schema: object) -> str:
    """Check the name of the PostgreSQL schema a store keeps its tables in.

    Any name PostgreSQL accepts unquoted or quoted is fine: it is always
    quoted, so case and punctuation are kept as given.

    Returns:
        The name, unchanged.

    Raises:
        TypeError: ``schema`` is not a `str`.
        ValueError: ``schema`` is empty, longer than 63 bytes in UTF-8,
            contains a NUL character or a lone surrogate, or starts with
            ``pg_`` (reserved by PostgreSQL).
    """
    if not isinstance(schema, str):
        raise TypeError(f"schema must be a str, not {type(schema).__qualname__}")
    if not schema:
        raise ValueError("schema must not be empty")
    if "\x00" in schema:
        raise ValueError("schema must not contain a NUL character")
    try:
        size = len(schema.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("schema must not contain a lone surrogate") from None
    if size > _MAX_IDENTIFIER_BYTES:
        raise ValueError(
            f"schema must be at most {_MAX_IDENTIFIER_BYTES} bytes in UTF-8 (got {size})"
        )
    if schema.lower().startswith("pg_"):
        raise ValueError("schema must not start with 'pg_' (reserved by PostgreSQL)")
    return schema


def _table(schema: str, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name)


# One entry per version: MIGRATIONS[n - 1] takes a schema from version n - 1
# to version n. Entries are never edited once released, only appended.
MIGRATIONS: Final[tuple[tuple[sql.SQL, ...], ...]] = (
    (
        sql.SQL(
            """
            CREATE TABLE {memories} (
                tenant      text COLLATE "C" NOT NULL,
                end_user_id text COLLATE "C" NOT NULL,
                seq         bigint GENERATED ALWAYS AS IDENTITY,
                id          uuid NOT NULL DEFAULT gen_random_uuid(),
                content     text NOT NULL,
                created_at  timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT memories_key_seq PRIMARY KEY (tenant, end_user_id, seq),
                CONSTRAINT memories_tenant_id UNIQUE (tenant, id)
            )
            """
        ),
    ),
    # Version 2: ids are text, so facts restored from any store keep theirs
    # (32 hexadecimal digits, or any id `validate_restored_id` accepts). The
    # unique constraint is rebuilt on the new type; old ids keep their UUID
    # spelling, which is also a restorable id.
    (
        sql.SQL(
            """
            ALTER TABLE {memories}
                ALTER COLUMN id DROP DEFAULT,
                ALTER COLUMN id TYPE text COLLATE "C" USING id::text
            """
        ),
        # Ids are unique in the whole store, not only per tenant: restoring a
        # fact looks its id up everywhere. Not a unique index, so that the
        # table can still be distributed by tenant.
        sql.SQL("CREATE INDEX memories_id ON {memories} (id)"),
    ),
    # Version 3: a function erases a key of few facts in one short call
    # where statements are not prepared (see ERASE_FEW_BODY).
    (
        sql.SQL(
            "CREATE FUNCTION {erase_few}(text, text) RETURNS bigint"
            " LANGUAGE plpgsql VOLATILE AS {erase_few_body}"
        ),
    ),
)

ERASE_FEW_BODY: Final = sql.SQL(
    """
    DECLARE
        deleted bigint;
    BEGIN
        DELETE FROM {memories} WHERE tenant = $1 AND end_user_id = $2
            AND NOT EXISTS (SELECT FROM {memories} WHERE tenant = $1 AND end_user_id = $2
                ORDER BY seq OFFSET {few});
        GET DIAGNOSTICS deleted = ROW_COUNT;
        IF deleted = 0 THEN
            IF EXISTS (SELECT FROM {memories} WHERE tenant = $1 AND end_user_id = $2) THEN
                RETURN NULL;
            END IF;
            RETURN 0;
        END IF;
        PERFORM set_config('synchronous_commit', 'remote_apply', true);
        RETURN deleted;
    END
    """
)
"""What ``erase_few(tenant, end_user_id)`` runs: how many facts it deleted, or NULL.

`Statements.erase_few`, and when that deleted nothing `Statements.holds_facts`,
in one call: 0 for a key that held no fact, NULL (nothing deleted) for a
key of more than `FEW_FACTS` facts, which go in `erase`'s batches. A
store uses it where its statements are not prepared (behind a transaction
pooler, or with its bounds sent as ``SET LOCAL``): there the call is a
short statement to parse and plan, where the inline ``DELETE`` with its
guard is a long one, and PL/pgSQL keeps the plans of the statements inside
for the server session's life, which a pooler's sessions share. Where
statements are prepared, the inline ``DELETE`` costs the server less than
the function's call.

A deletion sets ``synchronous_commit = remote_apply`` for its transaction,
as `Statements.erase_few` does; ``set_config`` with ``is_local`` lasts
until the transaction ends, past the function's return, since the function
has no ``SET`` clause of its own. Every name is qualified with the schema,
so the caller's ``search_path`` plays no part; the function runs with the
caller's rights. Part of migration 3: never edited once released.
"""


# Appended to a deletion: its own transaction commits with
# ``synchronous_commit = remote_apply``, whatever the server's setting.
# With ``off`` (a common tuning) a committed delete could be lost in a
# server crash, and the facts would come back; with ``local``, ``on`` or
# ``remote_write``, a synchronous standby promoted after the primary failed,
# or read meanwhile, could still show the facts. ``remote_apply`` returns
# only once the local WAL is flushed and every synchronous standby (if
# ``synchronous_standby_names`` names any) has applied the delete; without
# such a standby it waits for the local flush alone. The condition is
# evaluated once, before the scan, whether or not a row matches.
_SYNCED: Final = " AND (SELECT set_config('synchronous_commit', 'remote_apply', true)) IS NOT NULL"


class Script(bytes):
    """Several statements sent as one query of the simple protocol.

    The server runs them as one implicit transaction, in one round trip,
    each statement with a snapshot of its own (in ``READ COMMITTED``);
    values are bound by the client and nothing is prepared, so a script
    runs alike on every path, behind a transaction pooler included. The
    runner sends a statement of this type that way even where it sends
    the others alone.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Statements:
    """The statements of one store, rendered once for its schema.

    Each port operation but ``erase`` is one of these statements, run on its
    own: PostgreSQL applies a single statement atomically, so no partial
    state is ever visible to another connection. ``erase`` runs
    ``erase_few`` on its own, which deletes a key of at most `FEW_FACTS`
    facts (and, when it deleted none, ``holds_facts`` to tell an empty key
    from a bigger one), or ``erase_few_function``, the schema's function
    doing the same in one call where statements are not prepared; for a key
    of more it runs ``erase_bound`` and ``erase_batch`` as often as the key
    needs, then ``erase_rest``, inside one transaction.
    ``remember_within_limit`` is a `Script`: the key's lock, the counting
    insert and the read of its fact, one implicit transaction.

    Every time is read as ``created_at AT TIME ZONE 'UTC'``, a time without
    zone in UTC: the session's ``TimeZone`` can neither shift it nor push it
    past year 9999 on the way to the client.
    """

    remember: bytes
    remember_within_limit: Script
    restore_many: bytes
    fact: bytes
    owners: bytes
    forget: bytes
    recall: bytes
    page: bytes
    erase_few: bytes
    holds_facts: bytes
    erase_few_function: bytes
    erase_bound: bytes
    erase_batch: bytes
    erase_rest: bytes
    expire_bound: bytes
    expire_batch: bytes
    expire_rest: bytes
    count_expired_batch: bytes
    count_expired_rest: bytes
    tenants: bytes
    end_users: bytes
    fact_counts: bytes
    has_versions: bytes
    schema: str
    versions_table: str
    version: bytes

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        """Render the statements for the tables in ``schema``."""
        names = {
            "memories": _table(schema, "memories"),
            "versions": _table(schema, "schema_version"),
            "erase_few": _table(schema, "erase_few"),
            "synced": sql.SQL(_SYNCED),
            "few": sql.Literal(FEW_FACTS),
        }

        def render(text: str) -> bytes:
            return sql.SQL(text).format(**names).as_bytes(None)

        return cls(
            # The id is chosen before the statement runs: replayed after a
            # broken connection, the insert finds its own row and adds none.
            remember=render(
                "INSERT INTO {memories} (id, tenant, end_user_id, content)"
                " VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (tenant, id) DO NOTHING RETURNING created_at AT TIME ZONE 'UTC'"
            ),
            # The count and the insert under a lock of the key, held until
            # the script's implicit transaction ends: the INSERT's snapshot
            # is taken once the lock is granted, so it counts every fact a
            # call that held the lock before committed. READ COMMITTED
            # whatever the session's default: in REPEATABLE READ the
            # transaction's snapshot would be the lock statement's, taken
            # before the wait. The count reads at most max_facts entries of
            # the key's index. The last statement, with a snapshot of its
            # own, reads the fact holding the id: this call's, inserted now
            # or by an earlier attempt (a replay), another key's (the id is
            # taken), or none (refused at the cap).
            remember_within_limit=Script(
                render(
                    "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"
                    " SELECT pg_advisory_xact_lock(%s::bigint);"
                    " INSERT INTO {memories} (id, tenant, end_user_id, content)"
                    " SELECT %s, %s, %s, %s WHERE (SELECT count(*) FROM (SELECT FROM {memories}"
                    " WHERE tenant = %s AND end_user_id = %s LIMIT %s::bigint) AS facts)"
                    " < %s::bigint ON CONFLICT (tenant, id) DO NOTHING;"
                    " SELECT end_user_id, content, created_at AT TIME ZONE 'UTC' FROM {memories}"
                    " WHERE tenant = %s AND id = %s"
                )
            ),
            # Each column comes as a JSON array (see the conversation);
            # ROWS FROM zips them. Times come as ISO 8601 text with an
            # explicit UTC offset, which PostgreSQL reads exactly whatever
            # the session's TimeZone and DateStyle. Ids held anywhere are skipped here and
            # judged by the caller. Rows come out of the sort in the given
            # order, so the identity column numbers them in that order.
            restore_many=render(
                "INSERT INTO {memories} (id, tenant, end_user_id, content, created_at)"
                " SELECT given.id, given.tenant, given.end_user_id, given.content,"
                " given.created_at::timestamptz"
                " FROM ROWS FROM (json_array_elements_text(%s::json),"
                " json_array_elements_text(%s::json), json_array_elements_text(%s::json),"
                " json_array_elements_text(%s::json), json_array_elements_text(%s::json))"
                " WITH ORDINALITY AS given (id, tenant, end_user_id, content, created_at, n)"
                " WHERE NOT EXISTS (SELECT FROM {memories} AS held WHERE held.id = given.id)"
                " ORDER BY given.n ON CONFLICT (tenant, id) DO NOTHING RETURNING id"
            ),
            owners=render(
                "SELECT id, tenant, end_user_id, content, created_at AT TIME ZONE 'UTC'"
                " FROM {memories} WHERE id = ANY(%b::text[])"
            ),
            fact=render(
                "SELECT end_user_id, content, created_at AT TIME ZONE 'UTC' FROM {memories}"
                " WHERE tenant = %s AND id = %s"
            ),
            # The key is part of the condition, so an id of another end user
            # or tenant matches no row: the refusal is the WHERE clause.
            forget=render(
                "DELETE FROM {memories} WHERE tenant = %s AND end_user_id = %s AND id = %s{synced}"
            ),
            recall=render(
                "SELECT id, content, created_at AT TIME ZONE 'UTC' FROM {memories}"
                " WHERE tenant = %s AND end_user_id = %s ORDER BY seq LIMIT %s::bigint"
            ),
            # The fact named ``after`` is looked up within the key: one row
            # with a NULL anchor says the key does not hold it; a row with
            # NULL page columns, that the page is empty.
            page=render(
                "SELECT anchor.seq, page.id, page.content, page.created_at AT TIME ZONE 'UTC'"
                " FROM (SELECT (SELECT seq FROM {memories}"
                " WHERE tenant = %s AND end_user_id = %s AND id = %s) AS seq) AS anchor"
                " LEFT JOIN LATERAL (SELECT id, content, created_at, seq FROM {memories}"
                " WHERE tenant = %s AND end_user_id = %s AND seq > anchor.seq"
                " ORDER BY seq LIMIT %s::bigint) AS page ON true ORDER BY page.seq"
            ),
            # Deletes the key only if its index holds no fact after the
            # first FEW_FACTS: the condition is evaluated once, before the
            # scan, and reads at most FEW_FACTS + 1 entries of the key's
            # index, so the statement costs O(FEW_FACTS) whatever the key
            # holds. ORDER BY seq keeps the planner on the key's index:
            # without it, a key holding much of the table made a sequential
            # scan look cheaper. Both read one snapshot: the facts deleted
            # are all the key held.
            erase_few=render(
                "DELETE FROM {memories} WHERE tenant = %s AND end_user_id = %s"
                " AND NOT EXISTS (SELECT FROM {memories} WHERE tenant = %s AND end_user_id = %s"
                " ORDER BY seq OFFSET {few}){synced}"
            ),
            holds_facts=render(
                "SELECT EXISTS (SELECT FROM {memories} WHERE tenant = %s AND end_user_id = %s)"
            ),
            # The same erase by the schema's function, for calls whose
            # statements are not prepared (see ERASE_FEW_BODY).
            erase_few_function=render("SELECT {erase_few}(%s, %s)"),
            # An erase of more goes batch by batch through the key's part of the
            # primary key, each batch starting after the last seq of the one
            # before, so no scan walks again the rows earlier batches of
            # the same transaction deleted. ``erase_bound`` finds the seq
            # that ends the next batch of n rows (OFFSET n - 1), none when
            # fewer are left; ``erase_rest`` then deletes those.
            erase_bound=render(
                "SELECT seq FROM {memories} WHERE tenant = %s AND end_user_id = %s"
                " AND seq > %s ORDER BY seq OFFSET %s::bigint LIMIT 1"
            ),
            erase_batch=render(
                "DELETE FROM {memories} WHERE tenant = %s AND end_user_id = %s"
                " AND seq > %s AND seq <= %s{synced}"
            ),
            erase_rest=render(
                "DELETE FROM {memories} WHERE tenant = %s AND end_user_id = %s AND seq > %s{synced}"
            ),
            # Expiry walks the tenant's part of the primary key in key order,
            # from just after the last row the batch before looked at:
            # ``expire_bound`` finds the last row of the next batch of n rows
            # (OFFSET n - 1), none when fewer are left; the others delete, or
            # count, the old facts up to it or to the end. Each batch is its
            # own transaction; a row comparison on the key's columns is a
            # range of the index.
            expire_bound=render(
                "SELECT end_user_id, seq FROM {memories} WHERE tenant = %s"
                " AND (end_user_id, seq) > (%s, %s) ORDER BY end_user_id, seq"
                " OFFSET %s::bigint LIMIT 1"
            ),
            expire_batch=render(
                "DELETE FROM {memories} WHERE tenant = %s AND (end_user_id, seq) > (%s, %s)"
                " AND (end_user_id, seq) <= (%s, %s) AND created_at < %s{synced}"
            ),
            expire_rest=render(
                "DELETE FROM {memories} WHERE tenant = %s AND (end_user_id, seq) > (%s, %s)"
                " AND created_at < %s{synced}"
            ),
            count_expired_batch=render(
                "SELECT count(*) FROM {memories} WHERE tenant = %s"
                " AND (end_user_id, seq) > (%s, %s) AND (end_user_id, seq) <= (%s, %s)"
                " AND created_at < %s"
            ),
            count_expired_rest=render(
                "SELECT count(*) FROM {memories} WHERE tenant = %s"
                " AND (end_user_id, seq) > (%s, %s) AND created_at < %s"
            ),
            # The "C" collation sorts UTF-8 bytes, which is code point order.
            tenants=render("SELECT DISTINCT tenant FROM {memories} ORDER BY tenant"),
            end_users=render(
                "SELECT DISTINCT end_user_id FROM {memories} WHERE tenant = %s ORDER BY end_user_id"
            ),
            fact_counts=render(
                "SELECT end_user_id, count(*) FROM {memories} WHERE tenant = %s"
                " GROUP BY end_user_id ORDER BY end_user_id"
            ),
            has_versions=(
                b"SELECT to_regclass(%s) IS NOT NULL,"
                b" EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = %s)"
            ),
            schema=schema,
            versions_table=names["versions"].as_string(None),
            version=render("SELECT version FROM {versions}"),
        )


Step: TypeAlias = tuple[sql.SQL | sql.Composed, tuple[object, ...]]
"""One statement of `setup_steps` and its parameters."""


def setup_steps(schema: str) -> Generator[Step, tuple[list[tuple[Any, ...]], int], None]:
    """The statements that create or upgrade ``schema``, as a conversation.

    The generator yields each statement with its parameters and is sent back
    the rows it returned and its row count; the caller runs them all in one
    transaction. Written once, it is driven by both the synchronous and the
    asynchronous driver.

    Raises:
        SchemaVersionError: ``schema`` is at a newer version than this code.
        PostgresMemoryError: The database does not store text as UTF-8.
    """
    memories = _table(schema, "memories")
    body = ERASE_FEW_BODY.format(memories=memories, few=sql.Literal(FEW_FACTS))
    names = {
        "schema": sql.Identifier(schema),
        "memories": memories,
        "versions": _table(schema, "schema_version"),
        "erase_few": _table(schema, "erase_few"),
        # A string constant rather than dollar quotes, which a schema name
        # may contain.
        "erase_few_body": sql.Literal(body.as_string(None)),
    }
    # Several processes may set up at once: the lock makes them take turns,
    # so each sees either nothing or the finished schema.
    # A migration rewrites the table, which may take longer than any call
    # should: the statement bound is lifted for this transaction only. The
    # lock bound stays, so setup never queues behind a long transaction
    # while every call on the table queues behind it.
    yield (sql.SQL("SELECT set_config('statement_timeout', '0', true)"), ())
    yield (
        sql.SQL("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"),
        (f"psych-memory:{schema}",),
    )
    rows, _ = yield (sql.SQL("SELECT current_setting('server_encoding')"), ())
    encoding = rows[0][0]
    if isinstance(encoding, bytes):
        # A SQL_ASCII database hands text back undecoded.
        encoding = encoding.decode("ascii", "replace")
    if encoding != "UTF8":
        raise PostgresMemoryError(
            f"the database must store text as UTF8, not {encoding}: "
            "other encodings cannot hold every fact exactly"
        )
    # CREATE SCHEMA IF NOT EXISTS would still need the right to create
    # schemas, which a role given a prepared schema may lack.
    rows, _ = yield (
        sql.SQL("SELECT 1 FROM pg_namespace WHERE nspname = %s"),
        (schema,),
    )
    if not rows:
        yield (sql.SQL("CREATE SCHEMA {schema}").format(**names), ())
    yield (
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {versions} ("
            " one boolean PRIMARY KEY DEFAULT true CHECK (one),"
            " version integer NOT NULL)"
        ).format(**names),
        (),
    )
    rows, _ = yield (sql.SQL("SELECT version FROM {versions}").format(**names), ())
    current = int(rows[0][0]) if rows else 0
    if current > SCHEMA_VERSION:
        raise SchemaVersionError(schema, current, SCHEMA_VERSION)
    for version in range(current + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[version - 1]:
            yield (statement.format(**names), ())
    yield (
        sql.SQL(
            "INSERT INTO {versions} (version) VALUES (%s)"
            " ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version"
        ).format(**names),
        (SCHEMA_VERSION,),
    )
