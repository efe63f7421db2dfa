"""Opening a store by URL: the forms, the options, and every bad URL refused before the disk."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from psych_runtime.memory.sqlite import DatabaseFileError, SqliteMemory, open_url

pytestmark = pytest.mark.anyio


async def test_a_relative_path_is_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    async with open_url("sqlite:///data/memory.sqlite3") as memory:
        assert isinstance(memory, SqliteMemory)
        fact = await memory.remember("acme", "user-1", "fact")
        assert memory.path == tmp_path / "data" / "memory.sqlite3"
        assert (memory.busy_timeout, memory.durability) == (5.0, "full")
    # Closed on exit, and the fact is on disk.
    assert memory.scrub_pending is False
    async with SqliteMemory(tmp_path / "data" / "memory.sqlite3") as again:
        assert await again.recall("acme", "user-1") == (fact,)


async def test_an_absolute_path_and_options(tmp_path: Path) -> None:
    path = tmp_path / "my memory.sqlite3"
    url = f"sqlite:///{tmp_path}/my%20memory.sqlite3?busy_timeout=0.5&durability=normal"
    assert url.startswith("sqlite:////")
    async with open_url(url) as memory:
        assert isinstance(memory, SqliteMemory)
        assert (memory.path, memory.busy_timeout, memory.durability) == (path, 0.5, "normal")
        await memory.remember("acme", "user-1", "fact")
    assert path.is_file()


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("postgresql:///memory.sqlite3", "scheme"),
        ("sqlite:", "name a file"),
        ("sqlite://", "name a file"),
        ("sqlite:///", "name a file"),
        ("sqlite:////", "name a file"),
        ("sqlite:///data/", "name a file"),
        ("sqlite:memory.sqlite3", "name a file"),
        ("sqlite://host/memory.sqlite3", "host"),
        ("sqlite://localhost/memory.sqlite3", "host"),
        ("sqlite://user:hunter2-secret@host/memory.sqlite3", "password"),
        ("sqlite://:hunter2-secret@/memory.sqlite3", "password"),
        ("sqlite:///memory.sqlite3#frag", "fragment"),
        ("sqlite:///memory.sqlite3?busy_timeout", "name=value"),
        ("sqlite:///memory.sqlite3?&&", "name=value"),
        ("sqlite:///memory.sqlite3?journal=delete", "unknown option"),
        ("sqlite:///memory.sqlite3?busy_timeout=1&busy_timeout=2", "more than once"),
        ("sqlite:///memory.sqlite3?busy_timeout=soon", "busy_timeout"),
        ("sqlite:///memory.sqlite3?busy_timeout=-1", "busy_timeout"),
        ("sqlite:///memory.sqlite3?busy_timeout=nan", "busy_timeout"),
        ("sqlite:///memory.sqlite3?busy_timeout=inf", "busy_timeout"),
        ("sqlite:///memory.sqlite3?durability=off", "durability"),
        ("sqlite:///memory%FF.sqlite3", "UTF-8"),
        ("sqlite:///memory%00.sqlite3", "NUL"),
        ("sqlite://[::1/memory.sqlite3", "URL"),
    ],
)
async def test_a_bad_url_is_refused_before_anything_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, rule: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=rule) as caught:
        async with open_url(url):
            pytest.fail("a bad URL opened a store")
    message = str(caught.value)
    assert message.startswith("url")
    assert "hunter2-secret" not in message
    # Nothing of the URL is repeated (the short ones are prefixes of the forms shown).
    assert "memory" not in message
    assert "host" not in message or rule == "host"
    assert [p async for p in anyio.Path(tmp_path).iterdir()] == []


def test_a_url_that_is_not_a_str_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="url"):
        open_url(b"sqlite:///memory.sqlite3")  # type: ignore[arg-type]


def test_the_url_is_checked_when_open_url_is_called(tmp_path: Path) -> None:
    # No event loop is needed to find out that a URL is bad.
    with pytest.raises(ValueError, match="host"):
        open_url("sqlite://host/x")


async def test_without_create_a_missing_file_is_refused_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite:///nothere.db", "sqlite:///missing/x.db"):
        with pytest.raises(DatabaseFileError, match="names a SQLite file that does not exist"):
            async with open_url(url, create=False):
                pytest.fail("a missing file was opened")
    assert [p async for p in anyio.Path(tmp_path).iterdir()] == []
    async with open_url("sqlite:///there.db") as created:
        fact = await created.remember("acme", "user-1", "fact")
    async with open_url("sqlite:///there.db", create=False) as memory:
        assert await memory.recall("acme", "user-1") == (fact,)


def test_create_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="create must be a bool, not int"):
        open_url("sqlite:///memory.sqlite3", create=1)  # type: ignore[arg-type]
