"""`open_memory` with the in-process backend, which is always installed, and bad URLs."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest

from psych_runtime.memory.admin import (
    StoreUrlError,
    UnknownSchemeError,
    open_memory,
    store_schemes,
)
from psych_runtime.memory.port import ListsEndUsers, MemoryStore, StoreClosedError

pytestmark = pytest.mark.anyio

PASSWORD = "Zq8-s3cret"  # noqa: S105 - made up, to look for in what is shown


@pytest.fixture(autouse=True)
def empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in an empty folder, so a stray file would show."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_in_process_scheme_is_always_installed() -> None:
    schemes = store_schemes()
    assert "memory" in schemes
    assert list(schemes) == sorted(schemes)


@pytest.mark.parametrize("url", ["memory:", "MEMORY:"])
async def test_memory_yields_a_ready_store_and_closes_it(url: str) -> None:
    async with open_memory(url) as memory:
        assert isinstance(memory, MemoryStore)
        assert isinstance(memory, ListsEndUsers)
        fact = await memory.remember("acme", "u1", "ships to Berlin")
        assert await memory.recall("acme", "u1") == (fact,)
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "u1")


async def test_an_error_in_the_block_passes_through_unchanged_and_closes_the_store() -> None:
    with pytest.raises(ValueError, match=r"^the application's own$") as caught:
        async with open_memory("memory:") as memory:
            raise ValueError("the application's own")
    assert type(caught.value) is ValueError
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "u1")


async def test_an_unknown_scheme_lists_the_installed_ones() -> None:
    with pytest.raises(UnknownSchemeError) as caught:
        async with open_memory(f"nosuchstore://alice:{PASSWORD}@host/db"):
            pass  # pragma: no cover - never reached
    assert caught.value.scheme == "nosuchstore"
    assert caught.value.installed == store_schemes()
    assert "memory" in caught.value.installed
    assert "nosuchstore" in str(caught.value)
    assert "memory" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    ["", "memory", "/var/lib/facts.db", "facts.db", " memory:", "1sqlite:///x", ":memory:", "://"],
)
async def test_a_url_without_a_scheme_is_refused(url: str) -> None:
    with pytest.raises(StoreUrlError) as caught:
        async with open_memory(url):
            pass  # pragma: no cover - never reached
    assert type(caught.value) is StoreUrlError
    assert caught.value.scheme is None
    assert str(caught.value).startswith("url must start with a scheme and a colon")


async def test_a_url_the_backend_refuses_keeps_its_reason() -> None:
    with pytest.raises(StoreUrlError) as caught:
        async with open_memory("memory:facts"):
            pass  # pragma: no cover - never reached
    assert type(caught.value) is StoreUrlError
    assert caught.value.scheme == "memory"
    assert str(caught.value) == (
        "url is refused by the 'memory' backend: url must be exactly 'memory:' for the "
        "in-process store: it takes no path, host, query or fragment"
    )


async def test_a_url_that_is_not_a_str_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^url must be a str, not bytes$"):
        async with open_memory(b"memory:"):  # type: ignore[arg-type]
            pass  # pragma: no cover - never reached


@pytest.mark.parametrize(
    "url",
    [
        f"memory://alice:{PASSWORD}@host",
        f"memory:?password={PASSWORD}",
        f"nosuchstore://alice:{PASSWORD}@host/db",
        f"nosuchstore://db/app?password={PASSWORD}",
    ],
)
async def test_no_error_traceback_or_log_line_holds_the_password(
    url: str, caplog: pytest.LogCaptureFixture, empty_cwd: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreUrlError) as caught:
        async with open_memory(url):
            pass  # pragma: no cover - never reached
    shown = [
        str(caught.value),
        repr(caught.value),
        repr(vars(caught.value)),
        "".join(traceback.format_exception(caught.value)),
        caplog.text,
    ]
    assert [text for text in shown if PASSWORD in text] == []
    # The backend's own error, which might quote the URL, is not chained.
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None
    assert sorted(empty_cwd.iterdir()) == []  # noqa: ASYNC240 - one listing, nothing to wait on


async def test_opening_logs_the_url_without_its_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="psych_runtime.memory.admin")
    async with open_memory("memory:"):
        pass
    assert [record.getMessage() for record in caplog.records] == ["opened the store memory:"]
