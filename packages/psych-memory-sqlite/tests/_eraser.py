"""A child process that erases one end user when told to, and prints the count.

Usage: ``_eraser.py DB USER``. It opens the store, prints ``ready``, waits
for a line on stdin, erases the end user of tenant "acme" and prints
``erased <count>``.
"""

from __future__ import annotations

import sys

import anyio

from psych_runtime.memory.sqlite import SqliteMemory


async def main(path: str, user: str) -> None:
    async with SqliteMemory(path) as memory:
        print("ready", flush=True)
        sys.stdin.readline()
        print(f"erased {await memory.erase('acme', user)}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
