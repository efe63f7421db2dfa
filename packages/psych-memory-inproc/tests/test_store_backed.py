"""StoreBackedMemory: the runtime's spelling, which never touches the store."""

from __future__ import annotations

import pytest

from psych_runtime.memory import inproc, store_backed
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.store_backed import StoreBackedMemory

pytestmark = pytest.mark.anyio


class UntouchableStore:
    """Stands for the runtime's store: any use of it at all is a failure."""

    def __getattribute__(self, name: str) -> object:
        raise AssertionError(f"the store was touched: .{name}")


async def test_works_without_ever_touching_the_store() -> None:
    memory = StoreBackedMemory(UntouchableStore())
    fact = await memory.remember("acme", "u1", "prefers the Berlin warehouse")
    assert await memory.recall("acme", "u1") == (fact,)
    assert await memory.forget("acme", "u1", fact.id) is True
    await memory.remember("acme", "u1", "second")
    assert await memory.erase("acme", "u1") == 1


def test_is_the_in_process_adapter() -> None:
    assert isinstance(StoreBackedMemory(object()), InProcessMemory)


def test_changes_nothing_of_the_adapter_but_its_constructor() -> None:
    # The conformance kit runs against InProcessMemory only: that proves
    # this class too, as long as it overrides nothing the kit exercises.
    assert StoreBackedMemory.__bases__ == (InProcessMemory,)
    # What Python and abc write into a class body, none of it behaviour.
    # (Python 3.11 adds an empty __annotations__ when anyone asks for it.)
    bookkeeping = {
        *("__module__", "__qualname__", "__doc__", "__slots__", "__firstlineno__"),
        *("__static_attributes__", "__abstractmethods__", "_abc_impl", "__annotations__"),
    }
    assert set(vars(StoreBackedMemory)) - bookkeeping == {"__init__"}
    assert not vars(StoreBackedMemory).get("__annotations__")
    assert not StoreBackedMemory.__abstractmethods__
    assert StoreBackedMemory.__slots__ == ()


async def test_each_instance_has_its_own_table() -> None:
    store = object()
    first, second = StoreBackedMemory(store), StoreBackedMemory(store)
    await first.remember("acme", "u1", "fact")
    assert await second.recall("acme", "u1") == ()


def test_public_api() -> None:
    assert inproc.__all__ == ["InProcessMemory", "open_url"]
    assert store_backed.__all__ == ["StoreBackedMemory"]
