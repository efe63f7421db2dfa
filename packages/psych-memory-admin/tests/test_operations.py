"""The operations under the command: what they return, and errors that name stores by role."""

from __future__ import annotations

import pickle

import anyio
import pytest

from psych_runtime.memory.admin._errors import (
    CopyMismatchError,
    FactRefusedError,
    FactsForgottenError,
    HeldFactsConflictError,
    ImportStoppedError,
    MissingCapabilityError,
    OperationRefusedError,
)
from psych_runtime.memory.admin._migrate import Progress, migrate
from psych_runtime.memory.admin._operations import count_stored, erase_end_user
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    InvalidInputError,
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    StoreUnavailableError,
)


@pytest.mark.parametrize(
    "error",
    [
        MissingCapabilityError("source", "list its users", "ListsEndUsers"),
        FactsForgottenError("store", "counted", retried=True),
        FactsForgottenError("source", "copied", retried=False),
        HeldFactsConflictError(3),
        FactRefusedError(InvalidInputError("memories[0].id", "is taken")),
        CopyMismatchError(2),
        ImportStoppedError(4_000, InvalidInputError("memories[0].id", "is taken")),
        ImportStoppedError(
            2_000, StoreUnavailableError("restore_many", "gone", may_have_taken_effect=False)
        ),
    ],
)
def test_every_operation_error_pickles_with_its_attributes(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert {name: str(value) for name, value in vars(copy).items()} == {
        name: str(value) for name, value in vars(error).items()
    }


def test_refusals_name_stores_by_role_never_by_an_argument() -> None:
    for error in (
        MissingCapabilityError("target", "restore facts as they were", "RestoresFacts"),
        HeldFactsConflictError(1),
        CopyMismatchError(1),
    ):
        assert isinstance(error, OperationRefusedError)
        assert error.role == "target"
        assert "URL" not in str(error)
    assert str(MissingCapabilityError("source", "list its users", "ListsEndUsers")) == (
        "the source cannot list its users (its backend does not provide ListsEndUsers)"
    )


class _Unlisted(MemoryStore):
    """A store providing nothing beyond the port's `MemoryStore`."""

    def __init__(self) -> None:
        self._inner = InProcessMemory()

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        return await self._inner.remember(scope, end_user_id, content)

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        return await self._inner.forget(scope, end_user_id, memory_id)

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        return await self._inner.recall(scope, end_user_id, limit=limit)

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        return await self._inner.erase(scope, end_user_id)


def test_count_and_erase_return_what_they_found_and_did() -> None:
    async def run() -> None:
        store = InProcessMemory()
        for end_user, content in (("ann", "a"), ("ann", "b"), ("bob", "c")):
            await store.remember("acme", end_user, content)
        await store.remember("other", "cy", "d")
        assert await count_stored(store) == 4
        assert await count_stored(store, "acme") == 3
        receipt = await erase_end_user(store, MemoryKey("acme", "ann"), "memory:")
        assert (receipt.facts_deleted, receipt.outcome, receipt.store) == (2, "erased", "memory:")
        assert receipt.key == MemoryKey("acme", "ann")
        again = await erase_end_user(store, MemoryKey("acme", "ann"), "memory:")
        assert (again.facts_deleted, again.outcome, again.scrub) == (0, "already_erased", None)
        assert again.deletion_durability is None

    anyio.run(run)


def test_migrate_names_the_source_that_cannot_list_its_users() -> None:
    async def run() -> None:
        with pytest.raises(MissingCapabilityError) as refused:
            await migrate(_Unlisted(), InProcessMemory(), None, jobs=1, progress=Progress())
        assert (refused.value.role, refused.value.capability) == ("source", "ListsEndUsers")
        with pytest.raises(MissingCapabilityError) as uncounted:
            await count_stored(_Unlisted())
        assert uncounted.value.role == "store"

    anyio.run(run)
