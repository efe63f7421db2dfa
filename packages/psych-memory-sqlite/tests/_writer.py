"""A child process that writes facts and reports each one it got back.

Usage: ``_writer.py DB USER COUNT DURABILITY FORGET_EVERY PAYLOAD BACKEND``.
It prints ``ready``, waits for a line on stdin, then remembers COUNT facts
(the i-th is ``USER:i:PAYLOAD``) on the anyio BACKEND, and prints
``ack <i> <id>`` after each ``remember`` returned (and ``forgot <i>`` after
each forget of every FORGET_EVERY-th fact, when that is not 0).
"""

from __future__ import annotations

import sys

import anyio

from psych_runtime.memory.sqlite import Durability, SqliteMemory


async def main(argv: list[str]) -> None:
    path, user, total, level, every, payload = argv
    count, forget_every = int(total), int(every)
    durability: Durability = "normal" if level == "normal" else "full"
    async with SqliteMemory(path, durability=durability) as memory:
        print("ready", flush=True)
        sys.stdin.readline()
        for index in range(count):
            fact = await memory.remember("acme", user, f"{user}:{index}:{payload}")
            print(f"ack {index} {fact.id}", flush=True)
            if forget_every and index % forget_every == 0:
                assert await memory.forget("acme", user, fact.id)
                print(f"forgot {index}", flush=True)


if __name__ == "__main__":
    *arguments, backend = sys.argv[1:]
    anyio.run(main, arguments, backend=backend)
