"""A child process that remembers a fact every 20 ms until told to stop.

Usage: ``_paced_writer.py DB USER BUSY_TIMEOUT WATCHED BACKEND``. It prints
``ready``, waits for a line on stdin, then remembers a fact for USER every
20 ms on the anyio BACKEND, until a second line arrives. After each call it
prints ``ok <n>`` or ``failed <error>``, where ``<n>`` is the oldest position
the end user WATCHED still holds (0 when none), read on a connection of its
own: it tells the parent how far an erase of WATCHED had got.
"""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing

import anyio
import anyio.to_thread

from psych_runtime.memory.port import MemoryStoreError
from psych_runtime.memory.sqlite import SqliteMemory

PACE = 0.02


async def main(arguments: list[str]) -> None:
    path, user, busy_timeout, watched = arguments
    async with SqliteMemory(path, busy_timeout=float(busy_timeout)) as memory:
        with closing(sqlite3.connect(path, check_same_thread=False)) as raw:

            def oldest() -> int:
                (seq,) = raw.execute(
                    "SELECT min(seq) FROM psych_memory_fact WHERE tenant = 'acme' "
                    "AND end_user_id = ?",
                    (watched,),
                ).fetchone()
                return int(seq or 0)

            async def write() -> None:
                index = 0
                while True:
                    try:
                        await memory.remember("acme", user, f"paced fact {index}")
                    except MemoryStoreError as exc:
                        print(f"failed {type(exc).__name__}", flush=True)
                    else:
                        print(f"ok {await anyio.to_thread.run_sync(oldest)}", flush=True)
                    index += 1
                    await anyio.sleep(PACE)

            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            async with anyio.create_task_group() as group:
                group.start_soon(write)
                await anyio.to_thread.run_sync(sys.stdin.readline)
                group.cancel_scope.cancel()


if __name__ == "__main__":
    *arguments, backend = sys.argv[1:]
    anyio.run(main, arguments, backend=backend)
