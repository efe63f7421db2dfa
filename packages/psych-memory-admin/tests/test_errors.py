"""The opener's errors: their families, their messages and their pickling."""

from __future__ import annotations

import pickle

import pytest

from psych_runtime.memory.admin import StoreBackendError, StoreUrlError, UnknownSchemeError
from psych_runtime.memory.port import MemoryStoreError


def test_a_bad_url_is_a_value_error_and_a_broken_backend_is_not() -> None:
    assert issubclass(StoreUrlError, ValueError)
    assert issubclass(UnknownSchemeError, StoreUrlError)
    assert issubclass(StoreBackendError, RuntimeError)
    assert not issubclass(StoreBackendError, ValueError)
    # A store's own failures stay the port's; these are about opening one.
    for error in (StoreUrlError, StoreBackendError):
        assert not issubclass(error, MemoryStoreError)


def test_messages_name_the_url_and_the_rule() -> None:
    assert str(StoreUrlError("must start with a scheme")) == "url must start with a scheme"
    unknown = UnknownSchemeError("jsonl", ("memory", "sqlite"))
    assert str(unknown) == (
        "url has the scheme 'jsonl', which no installed backend registers "
        "(installed schemes: memory, sqlite)"
    )
    assert str(UnknownSchemeError("jsonl", ())).endswith("(installed schemes: none)")
    broken = StoreBackendError("jsonl", "it is not callable")
    assert str(broken) == (
        "the backend registered for the scheme 'jsonl' cannot be used: it is not callable"
    )


@pytest.mark.parametrize(
    "error",
    [
        StoreUrlError("must start with a scheme"),
        StoreUrlError("is refused by the 'sqlite' backend: no path", "sqlite"),
        UnknownSchemeError("jsonl", ("memory", "sqlite")),
        StoreBackendError("jsonl", "it is not callable"),
    ],
)
def test_every_error_pickles_with_its_attributes(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)
