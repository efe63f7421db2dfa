"""The statements the store sends, in one place."""

from __future__ import annotations

from typing import Final

__all__ = [
    "COUNTS",
    "COUNT_EXPIRED",
    "COUNT_UP_TO",
    "DELETE_BATCH",
    "DELETE_ONE",
    "END_USERS",
    "EXPIRE_BOUND",
    "EXPIRE_RANGE",
    "EXPIRE_REST",
    "INSERT",
    "LAST_SEQ",
    "SELECT",
    "SELECT_AFTER",
    "SELECT_BY_ID",
    "TENANTS",
]

# The new fact's position is computed in the same statement that inserts it,
# under the write lock, so concurrent writers (other processes included)
# cannot both take the same one.
INSERT: Final = (
    "INSERT INTO psych_memory_fact (tenant, end_user_id, seq, id, content, created_at) "
    "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ? FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ?"
)
# How many facts the key holds, counted up to the bound only: at most that
# many entries of the key's part of the primary key are read.
COUNT_UP_TO: Final = (
    "SELECT count(*) FROM (SELECT 1 FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ? LIMIT ?)"
)
SELECT: Final = (
    "SELECT id, content, created_at FROM psych_memory_fact "
    "WHERE tenant = ? AND end_user_id = ? ORDER BY seq LIMIT ?"
)
# The fact ``after`` is found through the index on ids, within its key; the
# page follows it in the key's order. No row at all: the key does not hold
# ``after``. One row of NULLs: it does, and it is the last fact.
SELECT_AFTER: Final = (
    "SELECT f.id, f.content, f.created_at FROM psych_memory_fact AS a "
    "LEFT JOIN psych_memory_fact AS f ON f.tenant = a.tenant "
    "AND f.end_user_id = a.end_user_id AND f.seq > a.seq "
    "WHERE a.id = ? AND a.tenant = ? AND a.end_user_id = ? ORDER BY f.seq LIMIT ?"
)
SELECT_BY_ID: Final = (
    "SELECT tenant, end_user_id, content, created_at FROM psych_memory_fact WHERE id = ?"
)
DELETE_ONE: Final = "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND id = ?"
LAST_SEQ: Final = "SELECT max(seq) FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ?"
# The oldest facts of the key, up to the last one it held when the erase began.
DELETE_BATCH: Final = (
    "DELETE FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND seq IN ("
    "SELECT seq FROM psych_memory_fact WHERE tenant = ? AND end_user_id = ? AND seq <= ? "
    "ORDER BY seq LIMIT ?)"
)
# Expiry walks the tenant's part of the primary key in key order, from just
# after the last row the batch before looked at: each batch reads at most
# its rows of the index, however many rows there are and however few of
# them are old. ``EXPIRE_BOUND`` finds the last row of the next batch
# (none when fewer are left); the other two delete the old facts up to it,
# or to the end.
EXPIRE_BOUND: Final = (
    "SELECT end_user_id, seq FROM psych_memory_fact WHERE tenant = ? "
    "AND (end_user_id, seq) > (?, ?) ORDER BY end_user_id, seq LIMIT 1 OFFSET ?"
)
EXPIRE_RANGE: Final = (
    "DELETE FROM psych_memory_fact WHERE tenant = ? AND (end_user_id, seq) > (?, ?) "
    "AND (end_user_id, seq) <= (?, ?) AND created_at < ?"
)
EXPIRE_REST: Final = (
    "DELETE FROM psych_memory_fact WHERE tenant = ? AND (end_user_id, seq) > (?, ?) "
    "AND created_at < ?"
)
COUNT_EXPIRED: Final = "SELECT count(*) FROM psych_memory_fact WHERE tenant = ? AND created_at < ?"
TENANTS: Final = "SELECT DISTINCT tenant FROM psych_memory_fact ORDER BY tenant"
END_USERS: Final = (
    "SELECT DISTINCT end_user_id FROM psych_memory_fact WHERE tenant = ? ORDER BY end_user_id"
)
# UTF-8 compared byte by byte (SQLite's BINARY collation) is code-point order.
COUNTS: Final = (
    "SELECT end_user_id, count(*) FROM psych_memory_fact WHERE tenant = ? "
    "GROUP BY end_user_id ORDER BY end_user_id"
)
