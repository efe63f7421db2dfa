"""Opening the in-process store by URL: exactly ``memory:``."""

from __future__ import annotations

from pathlib import Path

import pytest

from psych_runtime.memory.inproc import InProcessMemory, open_url
from psych_runtime.memory.port import StoreClosedError

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("url", ["memory:", "MEMORY:", "Memory:"])
async def test_memory_opens_a_fresh_store_and_closes_it(url: str) -> None:
    async with open_url(url) as memory:
        assert isinstance(memory, InProcessMemory)
        fact = await memory.remember("acme", "u1", "ships to Berlin")
        assert await memory.recall("acme", "u1") == (fact,)
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "u1")


async def test_each_url_opened_is_a_store_of_its_own() -> None:
    async with open_url("memory:") as first, open_url("memory:") as second:
        assert first is not second
        await first.remember("acme", "u1", "ships to Berlin")
        assert await second.recall("acme", "u1") == ()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "memory",
        "memory:x",
        "memory:/",
        "memory://",
        "memory://host",
        "memory:?size=1",
        "memory:#top",
        " memory:",
        "memory: ",
        "sqlite:///memory.db",
        "memory://user:s3cr%C3%A9t@host/db",
    ],
)
async def test_anything_but_memory_is_refused_without_echoing_it(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^url must be exactly 'memory:'") as caught:
        async with open_url(url):
            pass  # pragma: no cover - never reached
    assert "s3cr" not in str(caught.value)
    assert sorted(tmp_path.iterdir()) == []  # noqa: ASYNC240 - one listing, not I/O to wait on


async def test_a_url_that_is_not_a_str_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^url must be a str, not bytes$"):
        async with open_url(b"memory:"):  # type: ignore[arg-type]
            pass  # pragma: no cover - never reached
