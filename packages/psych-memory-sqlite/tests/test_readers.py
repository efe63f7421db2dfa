"""The store's reader connections: how many, who waits, and holding reads back."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from psych_runtime.memory.sqlite._readers import Readers

DEADLINE = 60.0


def opener(path: Path, opened: list[sqlite3.Connection]) -> object:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False)
        opened.append(conn)
        return conn

    return connect


def test_reads_share_at_most_size_connections(tmp_path: Path) -> None:
    opened: list[sqlite3.Connection] = []
    readers = Readers(opener(tmp_path / "r.sqlite3", opened), 2)  # type: ignore[arg-type]
    inside = threading.Barrier(3)
    release = threading.Event()

    def hold(conn: sqlite3.Connection) -> int:
        inside.wait(DEADLINE)
        release.wait(DEADLINE)
        return 1

    holders = [threading.Thread(target=readers.read, args=(hold,)) for _ in range(2)]
    for thread in holders:
        thread.start()
    inside.wait(DEADLINE)
    # Both connections are taken: a third read waits for one.
    third = threading.Thread(target=readers.read, args=(lambda conn: 3,))
    third.start()
    third.join(0.05)
    assert third.is_alive()
    release.set()
    for thread in [*holders, third]:
        thread.join(DEADLINE)
    assert len(opened) == 2
    readers.close()


def test_quiet_waits_for_reads_under_way_and_holds_new_ones_back(tmp_path: Path) -> None:
    readers = Readers(opener(tmp_path / "r.sqlite3", []), 2)  # type: ignore[arg-type]
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(DEADLINE)
        order.append("slow read")

    reading = threading.Thread(target=readers.read, args=(slow,))
    reading.start()
    assert entered.wait(DEADLINE)
    # A read under way longer than the timeout: quiet gives up waiting.
    with readers.quiet(0.01) as ended:
        assert ended is False
    release.set()
    reading.join(DEADLINE)
    with readers.quiet(DEADLINE) as ended:
        assert ended is True
        late = threading.Thread(target=readers.read, args=(lambda conn: order.append("late read"),))
        late.start()
        late.join(0.05)
        assert late.is_alive()  # held back until the block ends
        order.append("quiet")
    late.join(DEADLINE)
    assert order == ["slow read", "quiet", "late read"]
    readers.close()


def test_a_connection_that_cannot_be_opened_frees_its_place(tmp_path: Path) -> None:
    attempts: list[int] = []

    def connect() -> sqlite3.Connection:
        attempts.append(1)
        if len(attempts) == 1:
            raise sqlite3.OperationalError("unable to open database file")
        return sqlite3.connect(tmp_path / "r.sqlite3", check_same_thread=False)

    readers = Readers(connect, 1)
    with pytest.raises(sqlite3.OperationalError):
        readers.read(lambda conn: None)
    assert readers.read(lambda conn: 7) == 7
    readers.close()


def test_closing_waits_for_reads_and_refuses_later_ones(tmp_path: Path) -> None:
    opened: list[sqlite3.Connection] = []
    readers = Readers(opener(tmp_path / "r.sqlite3", opened), 2)  # type: ignore[arg-type]
    entered, release = threading.Event(), threading.Event()

    def slow(conn: sqlite3.Connection) -> int:
        entered.set()
        release.wait(DEADLINE)
        return 1

    reading = threading.Thread(target=readers.read, args=(slow,))
    reading.start()
    assert entered.wait(DEADLINE)
    closing = threading.Thread(target=readers.close)
    closing.start()
    closing.join(0.05)
    assert closing.is_alive()  # the read is still under way
    release.set()
    for thread in (reading, closing):
        thread.join(DEADLINE)
    with pytest.raises(RuntimeError, match="closed"):
        readers.read(lambda conn: None)
    # Every connection was closed, the one in use when closing began included.
    for conn in opened:
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
