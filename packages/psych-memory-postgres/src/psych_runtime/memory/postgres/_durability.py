"""Where an acknowledged deletion is durable, as the server says it now.

A deletion commits with ``synchronous_commit = remote_apply`` (see
`_schema`), so when it returns it is applied on every synchronous standby
that ``synchronous_standby_names`` requires, or, with none named, flushed on
the primary alone, from where asynchronous standbys receive it later.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from ._replays import Conversation

__all__ = ["DeletionDurability", "deletion_durability"]

DeletionDurability: TypeAlias = Literal["synchronous_standbys", "primary_only", "no_replication"]

# Standbys are the physical ones streaming from this server: a logical
# subscriber (its sender holds a logical slot) is never promoted, and a base
# backup in progress is not a standby yet. pg_stat_replication lists every
# sender to any role allowed to read it; only its details (state) need
# pg_read_all_stats, and without them a backup is counted as a standby, the
# cautious side. A role refused the view itself gets the server's refusal,
# not a guess.
_SYNCHRONOUS: Final = b"SELECT current_setting('synchronous_standby_names') <> ''"
_STANDBYS: Final = (
    b"SELECT count(*) FROM pg_catalog.pg_stat_replication AS sender"
    b" WHERE sender.state IS DISTINCT FROM 'backup' AND NOT EXISTS"
    b" (SELECT FROM pg_catalog.pg_replication_slots AS slot"
    b" WHERE slot.slot_type = 'logical' AND slot.active_pid = sender.pid)"
)


def deletion_durability() -> Conversation[DeletionDurability]:
    """Read the server's replication settings and, if needed, its standbys; changes nothing.

    The standbys are looked at only when none is named synchronous: the
    setting alone answers otherwise, for any role.
    """
    rows, _ = yield (_SYNCHRONOUS, ())
    if rows[0][0]:
        return "synchronous_standbys"
    rows, _ = yield (_STANDBYS, ())
    return "primary_only" if rows[0][0] else "no_replication"
