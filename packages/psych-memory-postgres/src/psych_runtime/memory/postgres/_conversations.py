"""Each operation of the store as a conversation with the server.

A conversation yields its statements one at a time and is sent back each
one's rows and row count (see `_runner`). Those that may be replayed after a
broken connection are written so that a replay finds the first attempt's
work instead of repeating it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import blake2b
from time import monotonic
from typing import Final

from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    RestorePlan,
    StalePageError,
    new_memory_id,
)

from ._replays import Conversation
from ._schema import FEW_FACTS, Statements

__all__ = [
    "FEW_FACTS",
    "Walk",
    "end_users",
    "erase",
    "erase_few",
    "expiry_batch",
    "fact_counts",
    "forget",
    "limit_lock",
    "recall",
    "recall_page",
    "remember",
    "remember_within_limit",
    "restore_many",
    "schema_version",
    "tenants",
]


# An erase deletes in batches sized so that each takes about this long,
# or an eighth of statement_timeout when that is shorter: far from the
# bound even when the server is busy, long enough that round trips cost
# little.
_BATCH_SECONDS: Final = 0.1
_BATCH_SHARE_OF_TIMEOUT: Final = 8
# As many as `erase_few` deletes at most, so that its one statement never
# does more than the batched erase's first batch would.
_FIRST_BATCH: Final = FEW_FACTS
_MIN_BATCH: Final = 100
_MAX_BATCH: Final = 50_000

# Below every seq: identity values are bigints.
_BEFORE_ANY_SEQ: Final = -(2**63)


def remember(sql: Statements, key: MemoryKey, content: str, memory_id: str) -> Conversation[Memory]:
    """Insert the fact under ``memory_id``; a replay returns the row already stored."""
    while True:
        rows, _ = yield (sql.remember, (memory_id, key.tenant, key.end_user_id, content))
        if rows:
            return Memory(memory_id, key, content, utc(rows[0][0]))
        rows, _ = yield (sql.fact, (key.tenant, memory_id))
        if not rows:
            # The row went between the two statements (erased meanwhile):
            # the insert is tried again with the same id.
            continue
        end_user_id, stored, created_at = rows[0]
        if end_user_id == key.end_user_id and stored == content:
            # An earlier attempt of this call stored it before its
            # connection broke.
            return Memory(memory_id, key, content, utc(created_at))
        # Another fact holds this id: 128 random bits make this a
        # curiosity, but a new id is all it takes.
        memory_id = new_memory_id()


def remember_within_limit(
    sql: Statements, key: MemoryKey, content: str, memory_id: str, max_facts: int
) -> Conversation[Memory | None]:
    """Insert the fact under ``memory_id`` unless the key holds ``max_facts``; one round trip.

    The count and the insert run under the key's lock (`limit_lock`), in
    one script that ends by reading the fact holding the id: ``None`` when
    there is none, as the insert was refused at the cap. A replay returns
    the row its first attempt stored, whatever the count says now.
    """
    lock = limit_lock(sql.schema, key)
    tenant, end_user_id = key.tenant, key.end_user_id
    while True:
        rows, _ = yield (
            sql.remember_within_limit,
            (
                lock,
                memory_id,
                tenant,
                end_user_id,
                content,
                tenant,
                end_user_id,
                max_facts,
                max_facts,
                tenant,
                memory_id,
            ),
        )
        if not rows:
            # Refused at the cap. (The only other way to find no row: a
            # replay whose first attempt's fact was deleted between the
            # script's insert and its read; nothing of the call is held,
            # which is what None says.)
            return None
        owner, stored, created_at = rows[0]
        if owner == end_user_id and stored == content:
            # Inserted now, or by an earlier attempt of this call before
            # its connection broke.
            return Memory(memory_id, key, content, utc(created_at))
        # Another fact holds this id (see `remember`).
        memory_id = new_memory_id()


def limit_lock(schema: str, key: MemoryKey) -> int:
    """The advisory lock (a signed 64-bit key) that `remember_within_limit` takes for ``key``.

    Every process and release serving the store must compute the same
    number for a key: the first 8 bytes of BLAKE2b over the schema, the
    tenant and the end user in UTF-8, each followed by a NUL (a character
    none of them may hold), read as a big-endian signed integer. Two keys
    sharing a number only take turns.
    """
    text = f"{schema}\0{key.tenant}\0{key.end_user_id}\0".encode()
    return int.from_bytes(blake2b(text, digest_size=8).digest(), "big", signed=True)


def restore_many(sql: Statements, plan: RestorePlan) -> Conversation[int]:
    """Insert, in order, the facts of ``plan`` the store does not hold.

    Run in one transaction: the plan's refusal of a taken id, raised here,
    rolls back everything. The insert skips every id the store holds; only
    those facts are then looked at.
    """
    pending = plan.facts
    stored = 0
    while pending:
        rows, _ = yield (sql.restore_many, _columns(pending))
        stored += len(rows)
        if len(rows) == len(pending):
            break
        inserted = {row[0] for row in rows}
        skipped = tuple(memory for memory in pending if memory.id not in inserted)
        rows, _ = yield (sql.owners, ([memory.id for memory in skipped],))
        held = {
            memory_id: Memory(memory_id, MemoryKey(tenant, end_user_id), content, utc(created_at))
            for memory_id, tenant, end_user_id, content, created_at in rows
        }
        # An id whose row went away meanwhile is tried again.
        pending = plan.to_store(held, among=skipped)
    return stored


def _columns(memories: tuple[Memory, ...]) -> tuple[str, ...]:
    # Each column as one JSON array: the C encoder writes thousands of
    # values faster than any per-value adaptation, and the server splits
    # them again in one pass. Times go as ISO 8601 text in UTC with every
    # microsecond and an explicit offset (``created_at`` is in UTC already,
    # see `validate_restored`), which the server reads exactly.
    return (
        json.dumps([memory.id for memory in memories]),
        json.dumps([memory.key.tenant for memory in memories], ensure_ascii=False),
        json.dumps([memory.key.end_user_id for memory in memories], ensure_ascii=False),
        json.dumps([memory.content for memory in memories], ensure_ascii=False),
        json.dumps([memory.created_at.isoformat(timespec="microseconds") for memory in memories]),
    )


def forget(sql: Statements, key: MemoryKey, memory_id: str) -> Conversation[bool]:
    """Delete the fact, if this key holds it."""
    _, deleted = yield (sql.forget, (key.tenant, key.end_user_id, memory_id))
    return deleted == 1


def recall(sql: Statements, key: MemoryKey, limit: int) -> Conversation[tuple[Memory, ...]]:
    """Read the key's facts, oldest first."""
    rows, _ = yield (sql.recall, (key.tenant, key.end_user_id, limit))
    # `utc` written out: this runs once per fact of every recall.
    return tuple([Memory(row[0], key, row[1], _UTC_EPOCH + (row[2] - _EPOCH)) for row in rows])


def recall_page(
    sql: Statements, key: MemoryKey, after: str | None, size: int
) -> Conversation[tuple[Memory, ...]]:
    """Read up to ``size`` facts of the key after the fact ``after``, oldest first.

    Raises:
        StalePageError: The key holds no fact ``after``.
    """
    if after is None:
        return (yield from recall(sql, key, size))
    rows, _ = yield (
        sql.page,
        (key.tenant, key.end_user_id, after, key.tenant, key.end_user_id, size),
    )
    if rows[0][0] is None:
        raise StalePageError
    return tuple(
        [
            Memory(row[1], key, row[2], _UTC_EPOCH + (row[3] - _EPOCH))
            for row in rows
            if row[1] is not None
        ]
    )


def erase_few(sql: Statements, key: MemoryKey, *, prepared: bool) -> Conversation[int | None]:
    """Delete every fact of the key with one statement, if it holds at most `FEW_FACTS`.

    With statements that are ``prepared``, the ``DELETE`` itself, followed
    by one read when it deleted nothing (the key held no fact, or more than
    `FEW_FACTS`, which it left whole); otherwise one call of the schema's
    function, which does both and keeps its plans on the server.

    Returns:
        How many facts were deleted, or ``None`` (nothing deleted) when the
        key holds more: those go with `erase`.
    """
    key_of = (key.tenant, key.end_user_id)
    if not prepared:
        rows, _ = yield (sql.erase_few_function, key_of)
        answer: int | None = rows[0][0]
        return answer
    _, deleted = yield (sql.erase_few, key_of + key_of)
    if deleted:
        return deleted
    rows, _ = yield (sql.holds_facts, key_of)
    return None if rows[0][0] else 0


def erase(sql: Statements, key: MemoryKey, statement_timeout: float | None) -> Conversation[int]:
    """Delete every fact of the key, batch after batch; run in one transaction.

    Each batch is two short statements (where the batch ends, then its
    ``DELETE``), so none meets ``statement_timeout`` however many facts the
    key holds, and the transaction makes them one change: other connections
    see every fact until it commits, then none. The size of the next batch
    follows the time the last one took.
    """
    target = _BATCH_SECONDS
    if statement_timeout is not None:
        target = min(target, statement_timeout / _BATCH_SHARE_OF_TIMEOUT)
    size = _FIRST_BATCH
    after = _BEFORE_ANY_SEQ
    total = 0
    while True:
        started = monotonic()
        rows, _ = yield (sql.erase_bound, (key.tenant, key.end_user_id, after, size - 1))
        if not rows:
            _, deleted = yield (sql.erase_rest, (key.tenant, key.end_user_id, after))
            return total + deleted
        upper = rows[0][0]
        _, deleted = yield (sql.erase_batch, (key.tenant, key.end_user_id, after, upper))
        total += deleted
        after = upper
        size = _next_batch(size, monotonic() - started, target)


@dataclass(slots=True)
class Walk:
    """How far an expiry (or its count) has walked the tenant's rows, batch after batch.

    Each batch is a call of its own (`expiry_batch`), so that no transaction
    holds the tenant's rows for long; the walk carries the last row looked
    at and the size of the next batch from one call to the next.
    """

    target: float
    """Seconds a batch should take."""
    size: int = _FIRST_BATCH
    """Rows the next batch looks at, whatever their age."""
    after: tuple[str, int] = ("", _BEFORE_ANY_SEQ)
    """The key and seq of the last row looked at; before every row at first."""

    @classmethod
    def for_timeout(cls, statement_timeout: float | None) -> Walk:
        """A walk whose batches stay far below ``statement_timeout``, as an erase's do."""
        target = _BATCH_SECONDS
        if statement_timeout is not None:
            target = min(target, statement_timeout / _BATCH_SHARE_OF_TIMEOUT)
        return cls(target)


def expiry_batch(
    sql: Statements, tenant: str, cutoff: datetime, walk: Walk, *, delete: bool
) -> Conversation[tuple[int, bool]]:
    """Delete (or count) the tenant's facts created before ``cutoff`` in the walk's next batch.

    The walk moves on only once the batch is done, so a replay of the
    call starts the same batch again.

    Returns:
        How many facts the batch deleted (or counted), and whether it was
        the last.
    """
    started = monotonic()
    after = walk.after
    rows, _ = yield (sql.expire_bound, (tenant, *after, walk.size - 1))
    if not rows:
        statement = sql.expire_rest if delete else sql.count_expired_rest
        rows, deleted = yield (statement, (tenant, *after, cutoff))
        return (deleted if delete else int(rows[0][0])), True
    bound = (str(rows[0][0]), int(rows[0][1]))
    statement = sql.expire_batch if delete else sql.count_expired_batch
    rows, deleted = yield (statement, (tenant, *after, *bound, cutoff))
    walk.after = bound
    walk.size = _next_batch(walk.size, monotonic() - started, walk.target)
    return (deleted if delete else int(rows[0][0])), False


def _next_batch(size: int, took: float, target: float) -> int:
    # Scaled towards the target, by at most a factor of two either way, so
    # one slow or fast batch (a lock wait, a cached page) does not swing it.
    scaled = size * target / max(took, 1e-6)
    bounded = min(max(scaled, size / 2), size * 2)
    return int(min(max(bounded, _MIN_BATCH), _MAX_BATCH))


def tenants(sql: Statements) -> Conversation[tuple[str, ...]]:
    """Every tenant holding a fact, in code point order."""
    rows, _ = yield (sql.tenants, ())
    return tuple([row[0] for row in rows])


def end_users(sql: Statements, tenant: str) -> Conversation[tuple[str, ...]]:
    """Every end user of ``tenant`` holding a fact, in code point order."""
    rows, _ = yield (sql.end_users, (tenant,))
    return tuple([row[0] for row in rows])


def fact_counts(sql: Statements, tenant: str) -> Conversation[dict[str, int]]:
    """How many facts each end user of ``tenant`` holds, in code point order."""
    rows, _ = yield (sql.fact_counts, (tenant,))
    return {end_user: int(count) for end_user, count in rows}


def schema_version(sql: Statements) -> Conversation[tuple[bool, int | None]]:
    """Whether the PostgreSQL schema exists, and the version it records; changes nothing.

    The version is ``None`` without tables. Reads the catalog first, so a
    missing table is an answer rather than an error (which would abort an
    application's open transaction).
    """
    rows, _ = yield (sql.has_versions, (sql.versions_table, sql.schema))
    has_versions, exists = rows[0]
    if not has_versions:
        return bool(exists), None
    rows, _ = yield (sql.version, ())
    return True, (int(rows[0][0]) if rows else None)


def utc(moment: datetime) -> datetime:
    """A time read from the server as ``created_at AT TIME ZONE 'UTC'``, in UTC.

    Exact to the microsecond over the years 1 to 9999: the distance from
    the epoch, a `timedelta`, is moved from the naive epoch to the aware
    one. On Python 3.11 the two arithmetic operations cost about an eighth
    of ``datetime.replace(tzinfo=UTC)`` (0.08 against 0.7 microseconds), and a
    recall does this once per fact; on 3.13 both cost about 0.09.
    """
    return _UTC_EPOCH + (moment - _EPOCH)


# The naive times the server sends are in UTC; see `utc`.
_EPOCH: Final = datetime(1970, 1, 1)
_UTC_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
