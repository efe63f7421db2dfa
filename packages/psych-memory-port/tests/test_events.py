"""The hook through which a store reports to the observer of the current call."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from psych_runtime.memory.port import store_events

Heard = list[tuple[str, dict[str, str | bool | int | float], str]]


def _report(name: str) -> None:
    # What a store does, wherever in its call it is.
    listener = store_events.get()
    if listener is not None:
        listener(name, {"psych_memory.attempt": 2})


def test_nobody_listens_by_default() -> None:
    assert store_events.get() is None
    _report("psych_memory.replay")  # must be harmless


@pytest.mark.anyio
async def test_a_listener_hears_the_call_it_was_set_for_and_its_worker_threads() -> None:
    heard: Heard = []

    def listener(name: str, attributes: Mapping[str, str | bool | int | float]) -> None:
        heard.append((name, dict(attributes), threading.current_thread().name))

    token = store_events.set(listener)
    try:
        _report("in the task")
        await anyio.to_thread.run_sync(_report, "in a worker thread")
    finally:
        store_events.reset(token)
    _report("after the call")
    assert [name for name, _, _ in heard] == ["in the task", "in a worker thread"]
    assert heard[0][2] != heard[1][2]
    assert heard[1][1] == {"psych_memory.attempt": 2}


@pytest.mark.anyio
async def test_concurrent_calls_each_hear_only_their_own_events() -> None:
    heard: dict[str, list[str]] = {"a": [], "b": []}

    async def call(which: str) -> None:
        def listener(name: str, attributes: Mapping[str, str | bool | int | float]) -> None:
            heard[which].append(name)

        token = store_events.set(listener)
        try:
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
                _report(which)
        finally:
            store_events.reset(token)

    async with anyio.create_task_group() as group:
        group.start_soon(call, "a")
        group.start_soon(call, "b")
    assert heard == {"a": ["a"] * 5, "b": ["b"] * 5}
