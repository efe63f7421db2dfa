"""The conformance kit against the JSON-lines adapter of "Write a backend"."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from psych_runtime.memory.conformance import MemoryStoreContract
from psych_runtime.memory.port import MemoryKey, MemoryStore

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "jsonl_backend.py"


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jsonl_backend", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The tutorial's file is not an installed module; in a project of your own
# this is a plain import of your adapter.
if TYPE_CHECKING:
    from docs.examples.jsonl_backend import JsonLinesMemory
else:
    JsonLinesMemory = _load_example().JsonLinesMemory


# --8<-- [start:kit]
class TestJsonLinesMemory(MemoryStoreContract):
    # Every example writes a real file with fsync: fewer examples keep it quick.
    max_examples = 25

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[MemoryStore]:
        yield JsonLinesMemory(self.fresh_path(".jsonl"))

    async def count_stored(self, store: MemoryStore, key: MemoryKey) -> int:
        # The backdoor reads the file itself, not through the adapter: a line
        # left behind by a forget or an erase is counted here.
        assert isinstance(store, JsonLinesMemory)
        if not store.path.exists():
            return 0
        lines = store.path.read_text(encoding="ascii").splitlines()
        return sum(
            1
            for record in map(json.loads, lines)
            if (record["tenant"], record["end_user_id"]) == (key.tenant, key.end_user_id)
        )


# --8<-- [end:kit]
