"""A child process that adds facts within a limit and reports each answer.

Usage: ``_limited_writer.py DB END_USERS CALLS MAX_FACTS BACKEND``. It prints
``ready``, waits for a line on stdin, then for each of END_USERS end users
(``user-0``, ``user-1``, ...) makes CALLS ``remember_within_limit`` calls
at once with MAX_FACTS, on the anyio BACKEND, and prints ``added <user>
<id>`` or ``refused <user>`` for each answer.
"""

from __future__ import annotations

import sys

import anyio

from psych_runtime.memory.sqlite import SqliteMemory


async def main(argv: list[str]) -> None:
    path, users, calls, limit = argv
    async with SqliteMemory(path) as memory:
        print("ready", flush=True)
        sys.stdin.readline()
        for number in range(int(users)):
            user = f"user-{number}"

            async def add(call: int, user: str = user) -> None:
                fact = await memory.remember_within_limit(
                    "acme", user, f"{user} call {call}", max_facts=int(limit)
                )
                print(f"refused {user}" if fact is None else f"added {user} {fact.id}", flush=True)

            async with anyio.create_task_group() as group:
                for call in range(int(calls)):
                    group.start_soon(add, call)


if __name__ == "__main__":
    *arguments, backend = sys.argv[1:]
    anyio.run(main, arguments, backend=backend)
