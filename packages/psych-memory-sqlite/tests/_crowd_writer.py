"""A child process whose many tasks write at once, reporting each answer.

Usage: ``_crowd_writer.py DB PREFIX TASKS PAYLOAD DURABILITY BACKEND``. It prints
``ready``, waits for a line on stdin, then runs TASKS tasks at once, task
``t`` on end user ``PREFIX-<t>``: each remembers facts (the i-th is
``PREFIX-<t>:i:PAYLOAD``) until it is killed, printing ``ack <t> <i> <id>``
after each ``remember`` returned, and forgets every third fact right after
remembering it, printing ``forgot <t> <i>`` once ``forget`` returned.
"""

from __future__ import annotations

import sys

import anyio

from psych_runtime.memory.sqlite import Durability, SqliteMemory


async def main(argv: list[str]) -> None:
    path, prefix, tasks, payload, level = argv
    durability: Durability = "normal" if level == "normal" else "full"
    async with SqliteMemory(path, durability=durability) as memory:
        print("ready", flush=True)
        sys.stdin.readline()

        async def task(number: int) -> None:
            user = f"{prefix}-{number}"
            index = 0
            while True:
                fact = await memory.remember("acme", user, f"{user}:{index}:{payload}")
                print(f"ack {number} {index} {fact.id}", flush=True)
                if index % 3 == 0:
                    assert await memory.forget("acme", user, fact.id)
                    print(f"forgot {number} {index}", flush=True)
                index += 1

        async with anyio.create_task_group() as group:
            for number in range(int(tasks)):
                group.start_soon(task, number)


if __name__ == "__main__":
    *arguments, backend = sys.argv[1:]
    anyio.run(main, arguments, backend=backend)
