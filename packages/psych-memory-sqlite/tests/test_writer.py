"""The writer's queue and turns, with real threads: what the store's groups rest on."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing

import pytest

from psych_runtime.memory.port import StoreClosedError
from psych_runtime.memory.sqlite import StoreUnavailableError
from psych_runtime.memory.sqlite._writer import WriteCall, Writer

DEADLINE = 60.0

Group = list[WriteCall[object]]


class Recorder:
    """Runs each group by calling its bodies in order; the first group waits for a signal."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.first_entered = threading.Event()
        self.first_may_end = threading.Event()

    def __call__(self, group: Group) -> Callable[[], None] | None:
        self.groups.append([call.operation for call in group])
        if len(self.groups) == 1:
            self.first_entered.set()
            self.first_may_end.wait(DEADLINE)
        with closing(sqlite3.connect(":memory:")) as conn:
            for call in group:
                call.succeed(call.body(conn))
        return None


def call(name: str) -> WriteCall[object]:
    return WriteCall(name, lambda conn: name)


def served(writer: Writer, *calls: WriteCall[object]) -> list[threading.Thread]:
    threads = [threading.Thread(target=writer.serve, args=(one,)) for one in calls]
    for thread in threads:
        thread.start()
    return threads


def held_in_a_first_group() -> tuple[Recorder, Writer, threading.Thread]:
    """A writer whose first group, of the call "first", runs until the recorder lets it end."""
    recorder = Recorder()
    writer = Writer(recorder)
    first = call("first")
    writer.submit(first)
    (leader,) = served(writer, first)
    assert recorder.first_entered.wait(DEADLINE)
    return recorder, writer, leader


def test_calls_queued_while_a_group_runs_are_the_next_group_in_order() -> None:
    recorder, writer, leader = held_in_a_first_group()
    queued = [call(f"queued {index}") for index in range(5)]
    for one in queued:
        writer.submit(one)
    followers = served(writer, *queued)
    recorder.first_may_end.set()
    for thread in [leader, *followers]:
        thread.join(DEADLINE)
    assert recorder.groups == [["first"], [f"queued {index}" for index in range(5)]]
    assert [one.wait() for one in queued] == [f"queued {index}" for index in range(5)]


def test_a_withdrawn_call_never_runs_and_a_running_one_cannot_be_withdrawn() -> None:
    recorder = Recorder()
    writer = Writer(recorder)
    first, second, third = call("first"), call("second"), call("third")
    writer.submit(first)
    (leader,) = served(writer, first)
    assert recorder.first_entered.wait(DEADLINE)
    writer.submit(second)
    writer.submit(third)
    (waiting,) = served(writer, second)
    assert writer.withdraw(second) is True
    assert writer.withdraw(second) is True  # withdrawn stays withdrawn
    assert writer.withdraw(first) is False  # its group has started
    recorder.first_may_end.set()
    for thread in (leader, waiting):
        thread.join(DEADLINE)
    # The third call's own thread never started: the writer ran it anyway.
    assert recorder.groups == [["first"], ["third"]]
    assert third.wait() == "third"
    writer.close()


def test_a_closed_writer_refuses_calls_after_running_those_queued() -> None:
    recorder = Recorder()
    recorder.first_may_end.set()
    writer = Writer(recorder)
    queued = call("queued")
    writer.submit(queued)
    closing = threading.Thread(target=writer.close)
    closing.start()
    served(writer, queued)[0].join(DEADLINE)
    closing.join(DEADLINE)
    assert not closing.is_alive()
    assert queued.wait() == "queued"
    with pytest.raises(StoreClosedError):
        writer.submit(call("late"))


def test_calls_that_run_alone_are_groups_of_their_own() -> None:
    recorder, writer, leader = held_in_a_first_group()
    calls: list[WriteCall[object]] = [
        call("a"),
        WriteCall("alone", lambda conn: "alone", alone=True),
        call("b"),
        call("c"),
    ]
    for one in calls:
        writer.submit(one)
    recorder.first_may_end.set()
    leader.join(DEADLINE)
    assert recorder.groups == [["first"], ["a"], ["alone"], ["b", "c"]]


def test_an_interrupted_group_fails_its_calls_and_frees_the_turn() -> None:
    runs: list[int] = []

    def interrupted(group: Group) -> Callable[[], None] | None:
        runs.append(len(group))
        if len(runs) == 1:
            raise KeyboardInterrupt
        with closing(sqlite3.connect(":memory:")) as conn:
            for one in group:
                one.succeed(one.body(conn))
        return None

    writer = Writer(interrupted)
    first = call("first")
    writer.submit(first)
    with pytest.raises(KeyboardInterrupt):
        writer.serve(first)
    with pytest.raises(StoreUnavailableError) as caught:
        first.wait()
    assert caught.value.may_have_taken_effect is True
    # The next call finds the turn free and runs.
    after = call("after")
    writer.submit(after)
    writer.serve(after)
    assert after.wait() == "after"
