"""Backends registered by other distributions: found, loaded and held to the contract.

Each test installs small distributions of its own: a module and its
``.dist-info`` (metadata and entry points) in a fresh folder put on
``sys.path``, which is all `importlib.metadata` reads. So the opener sees
exactly what a ``pip install`` of such a backend would show it.
"""

from __future__ import annotations

import logging
import sys
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from psych_runtime.memory.admin import (
    StoreBackendError,
    StoreUrlError,
    UnknownSchemeError,
    open_memory,
    store_schemes,
)
from psych_runtime.memory.port import StoreClosedError

pytestmark = pytest.mark.anyio

PASSWORD = "Zq8-s3cret"  # noqa: S105 - made up, to look for in what is shown

# A backend as a third party would write it, on the port and the in-process store.
BACKEND = """
from contextlib import asynccontextmanager
from urllib.parse import unquote
from psych_runtime.memory.inproc import InProcessMemory

EXITED = []

@asynccontextmanager
async def open_url(url):
    if "badhost" in url:
        # A careless backend that quotes the whole URL, password and all, as
        # written and decoded.
        raise ValueError(f"url {url!r} ({unquote(url)!r}) must not name badhost")
    async with InProcessMemory() as store:
        try:
            yield store
        finally:
            EXITED.append(store)

@asynccontextmanager
async def yields_no_store(url):
    try:
        yield object()
    finally:
        EXITED.append(url)

def returns_no_context_manager(url):
    return "not a context manager"

@asynccontextmanager
async def fails_to_connect(url):
    raise ConnectionRefusedError("the server said no")
    yield

NOT_CALLABLE = 42
"""


@dataclass
class Site:
    """A folder on ``sys.path`` into which tests install distributions."""

    folder: Path
    modules: list[str]

    def install(self, distribution: str, entry_points: dict[str, str], module: str = "") -> str:
        """Install a distribution registering ``entry_points`` (scheme -> attribute).

        Returns the name of its module, which holds `BACKEND` unless
        ``module`` gives other source.
        """
        name = f"backend_{uuid.uuid4().hex}"
        (self.folder / f"{name}.py").write_text(module or BACKEND, "utf-8")
        self.modules.append(name)
        info = self.folder / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n", "utf-8"
        )
        lines = [f"{scheme} = {name}:{attribute}" for scheme, attribute in entry_points.items()]
        (info / "entry_points.txt").write_text(
            "[psych_runtime.memory.stores]\n" + "\n".join(lines) + "\n", "utf-8"
        )
        return name


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    installed = Site(folder, [])
    yield installed
    for module in installed.modules:
        sys.modules.pop(module, None)


def backend(name: str) -> ModuleType:
    return sys.modules[name]


async def test_a_registered_scheme_opens_and_closes_through_its_backend(site: Site) -> None:
    module = site.install("thirdparty-memory", {"thirdparty": "open_url"})
    assert "thirdparty" in store_schemes()
    async with open_memory("thirdparty:anything") as memory:
        fact = await memory.remember("acme", "u1", "ships to Berlin")
        assert await memory.recall("acme", "u1") == (fact,)
    assert [memory] == backend(module).EXITED
    with pytest.raises(StoreClosedError):
        await memory.recall("acme", "u1")


async def test_schemes_ignore_case(site: Site) -> None:
    site.install("thirdparty-memory", {"ThirdParty": "open_url"})
    assert "thirdparty" in store_schemes()
    async with open_memory("THIRDPARTY:") as memory:
        assert await memory.recall("acme", "u1") == ()


async def test_an_uninstalled_backend_is_no_longer_offered(site: Site) -> None:
    site.install("thirdparty-memory", {"thirdparty": "open_url"})
    assert "thirdparty" in store_schemes()
    for info in site.folder.glob("*.dist-info"):
        for file in info.iterdir():
            file.unlink()
        info.rmdir()
    assert "thirdparty" not in store_schemes()
    with pytest.raises(UnknownSchemeError):
        async with open_memory("thirdparty:"):
            pass  # pragma: no cover - never reached


async def test_a_refusal_that_quotes_the_url_is_shown_without_its_password(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    site.install("thirdparty-memory", {"thirdparty": "open_url"})
    # Written, percent-encoded and decoded: every spelling is hidden.
    encoded = "p%40ss%3Aw0rd"
    url = f"thirdparty://alice:{encoded}@badhost/db?password={PASSWORD}"
    with pytest.raises(StoreUrlError) as caught:
        async with open_memory(url):
            pass  # pragma: no cover - never reached
    assert type(caught.value) is StoreUrlError
    assert caught.value.scheme == "thirdparty"
    message = str(caught.value)
    assert message.startswith("url is refused by the 'thirdparty' backend: url ")
    assert message.endswith("must not name badhost")
    assert "thirdparty://alice:***@badhost/db?password=***" in message
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value) + caplog.text
    for secret in (PASSWORD, encoded, "p@ss:w0rd"):
        assert secret not in shown


async def test_a_scheme_registered_twice_is_refused_naming_both(site: Site) -> None:
    site.install("first-backend", {"twice": "open_url"})
    site.install("second-backend", {"twice": "open_url"})
    with pytest.raises(StoreBackendError) as caught:
        async with open_memory("twice:"):
            pass  # pragma: no cover - never reached
    assert caught.value.scheme == "twice"
    assert "first-backend, second-backend" in caught.value.reason


@pytest.mark.parametrize(
    ("attribute", "reason"),
    [
        ("no_such_attribute", "cannot be loaded (AttributeError)"),
        ("NOT_CALLABLE", "is not callable"),
        ("returns_no_context_manager", "returned a str, not an async context manager"),
    ],
)
async def test_a_backend_that_cannot_open_anything_is_named(
    site: Site, attribute: str, reason: str
) -> None:
    module = site.install("broken-backend", {"broken": attribute})
    with pytest.raises(StoreBackendError) as caught:
        async with open_memory("broken:"):
            pass  # pragma: no cover - never reached
    assert caught.value.scheme == "broken"
    assert caught.value.reason.endswith(reason)
    if "loaded" in reason:
        assert f"'{module}:{attribute}' from broken-backend" in caught.value.reason
        assert isinstance(caught.value.__cause__, AttributeError)


async def test_a_module_that_does_not_import_is_named(site: Site) -> None:
    site.install("broken-backend", {"broken": "open_url"}, module="import no_such_module\n")
    with pytest.raises(StoreBackendError, match=r"cannot be loaded \(ModuleNotFoundError\)$"):
        async with open_memory("broken:"):
            pass  # pragma: no cover - never reached


async def test_a_backend_that_yields_no_store_is_refused_and_closed(site: Site) -> None:
    module = site.install("broken-backend", {"broken": "yields_no_store"})
    with pytest.raises(StoreBackendError, match=r"its opener yielded a object, not a MemoryStore$"):
        async with open_memory("broken:"):
            pass  # pragma: no cover - never reached
    assert backend(module).EXITED == ["broken:"]


async def test_a_backend_failing_to_connect_raises_its_own_error(site: Site) -> None:
    site.install("thirdparty-memory", {"down": "fails_to_connect"})
    with pytest.raises(ConnectionRefusedError, match=r"^the server said no$"):
        async with open_memory("down:"):
            pass  # pragma: no cover - never reached
