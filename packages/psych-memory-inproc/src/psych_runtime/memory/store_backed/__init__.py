"""The adapter under the name the runtime's documentation uses."""

from ._memory import StoreBackedMemory

__all__ = ["StoreBackedMemory"]
