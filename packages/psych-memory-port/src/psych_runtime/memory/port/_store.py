"""The port: the four operations every memory backend provides."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

from ._key import Scope
from ._memory import Memory

__all__ = ["MemoryStore"]


class MemoryStore(ABC):
    """Facts about end users, kept apart per tenant and per end user.

    Every method addresses exactly one key, built from ``scope`` and
    ``end_user_id`` by `memory_key`, and touches no other key's facts. Every
    method validates all of its input before it changes anything: invalid
    input raises and leaves the store as it was.

    There is deliberately no search, ranking or query of any kind: a backend
    stores facts, returns them in the order they were added, and deletes them
    for good.

    Every store has one lifecycle: ``async with store:`` opens it if it needs
    opening and closes it on exit; `aclose` closes it too, and closing twice is
    harmless. A call after closing raises `StoreClosedError`. A failure that
    is not the caller's fault raises a `MemoryStoreError`; the four methods
    raise nothing but `TypeError`, the `InvalidInputError` family and the
    `MemoryStoreError` family.
    """

    __slots__ = ()

    async def __aenter__(self) -> Self:
        """Open the store if it needs opening, and return it.

        Raises:
            MemoryStoreError: The store cannot be opened (for example
                `StoreClosedError` when it was closed already).
        """
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # Not abstract on purpose: the port keeps exactly four abstract methods.
    async def aclose(self) -> None:  # noqa: B027
        """Close the store and release what it holds; closing again does nothing.

        Afterwards each of the four methods raises `StoreClosedError`. This
        default has nothing to release; adapters that hold connections,
        files or state override it.
        """

    @abstractmethod
    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        """Store a new fact for this end user and return it.

        Always adds: the same content stored twice is two facts with two
        different ids. Nothing is merged, deduplicated or rewritten, and the
        content is stored exactly as given.

        Args:
            scope: The tenant, as a `str` or an object with a `str` ``tenant``.
            end_user_id: The end user within that tenant.
            content: The fact (see `validate_content` for the rules).

        Returns:
            The stored fact, with a fresh id never used before in this store.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidContentError: The content breaks a content rule.
            StoreUnavailableError: The store could not be reached or stayed
                busy past its bound; ``may_have_taken_effect`` says whether
                the fact may have been stored all the same.
            StoreClosedError: The store is not open, or was closed.
            MemoryStoreError: Any other failure of the store (a
                `SchemaVersionError`, or an adapter's own subclass).
        """

    @abstractmethod
    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        """Delete one fact of this end user, for good.

        Args:
            scope: The tenant, as a `str` or an object with a `str` ``tenant``.
            end_user_id: The end user within that tenant.
            memory_id: The id of the fact, as returned by `remember` or `recall`.

        Returns:
            ``True`` if this call deleted the fact. ``False`` if no fact of
            this key has that id: it never existed, is already gone, or
            belongs to another end user or tenant. Then nothing is deleted;
            this is an answer, not an error.

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            StoreUnavailableError: The store could not be reached or stayed
                busy past its bound; ``may_have_taken_effect`` says whether
                the fact may have been deleted all the same.
            StoreClosedError: The store is not open, or was closed.
            MemoryStoreError: Any other failure of the store.
        """

    @abstractmethod
    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        """Return this end user's facts, oldest first.

        The order is the order of insertion, stable even when two facts share
        a timestamp. Nothing is ranked, filtered or selected.

        Args:
            scope: The tenant, as a `str` or an object with a `str` ``tenant``.
            end_user_id: The end user within that tenant.
            limit: ``None`` for every fact; otherwise at most this many, taken
                from the start of the oldest-first order. ``0`` gives ``()``.

        Returns:
            The facts, oldest first; ``()`` when there are none.

        Raises:
            TypeError: An argument has the wrong type (a `bool` limit included).
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            InvalidLimitError: ``limit`` is negative.
            StoreUnavailableError: The store could not be reached or stayed
                busy past its bound (reading changes nothing).
            StoreClosedError: The store is not open, or was closed.
            MemoryStoreError: Any other failure of the store.
        """

    @abstractmethod
    async def erase(self, scope: Scope, end_user_id: str) -> int:
        """Delete every fact of this end user at once and for good.

        No soft delete, tombstone, retained copy or history remains: afterwards
        `recall` returns ``()`` and `forget` of any old id returns ``False``.
        Other end users and tenants are untouched.

        An adapter may delete a very large key in several steps inside this
        one call, so that no step runs past its time bounds or holds a lock
        for long (its documentation says whether it does). While the call
        runs, a reader may see some of the key's facts already gone (whether
        a page of `PagesFacts` may, the adapter says). If it fails after some
        steps it raises `StoreUnavailableError` with
        ``may_have_taken_effect=True``; a retry deletes the rest and returns
        only what it deleted itself.

        Args:
            scope: The tenant, as a `str` or an object with a `str` ``tenant``.
            end_user_id: The end user within that tenant.

        Returns:
            How many facts this call deleted (``0`` if there were none).

        Raises:
            TypeError: An argument has the wrong type.
            InvalidKeyError: The tenant or end-user id breaks a key rule.
            StoreUnavailableError: The store could not be reached or stayed
                busy past its bound; ``may_have_taken_effect`` says whether
                some or all of the facts may have been deleted all the same.
            StoreClosedError: The store is not open, or was closed.
            MemoryStoreError: Any other failure of the store.
        """
