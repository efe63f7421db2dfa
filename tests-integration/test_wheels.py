"""The layout, checked from built wheels in fresh virtual environments.

Every distribution under ``packages/`` is found from its ``pyproject.toml``
and built once per session, so a new distribution is covered without editing
this file. The wheels are then inspected (namespace levels stay empty, no file
is shipped twice, honest metadata) and installed, offline, into fresh virtual
environments for the uses the layout exists for: only the port, to write a
backend; the in-process adapter, for tests; the tool wiring, pinned on its own.
"""

from __future__ import annotations

import email.parser
import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from email.message import Message

pytestmark = [pytest.mark.wheels, pytest.mark.xdist_group("wheels")]

REPOSITORY = Path(__file__).resolve().parent.parent
NAMESPACE_LEVELS = frozenset({"psych_runtime", "psych_runtime/memory", "psych_runtime/tools"})
PORT = "psych-memory-port"
INPROC = "psych-memory-inproc"
TOOLS = "psych-runtime-tools"
ADMIN = "psych-memory-admin"
THIRD_PARTY = "thirdparty-memory"
THIRD_PARTY_SOURCE = Path(__file__).resolve().parent / "thirdparty_backend"


def _discover() -> dict[str, Path]:
    """Map every distribution's name to its folder under ``packages/``.

    A ``pyproject.toml`` that cannot be read keeps its folder's name, so that
    the build reports the problem instead of the collection hiding it.
    """
    found = {}
    for pyproject in sorted(REPOSITORY.glob("packages/*/pyproject.toml")):
        try:
            name = str(tomllib.loads(pyproject.read_text("utf-8"))["project"]["name"])
        except (tomllib.TOMLDecodeError, KeyError):
            name = pyproject.parent.name
        found[_normalise(name)] = pyproject.parent
    return found


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


DISTRIBUTIONS = _discover()


@dataclass
class Wheelhouse:
    """One folder holding a wheel of every distribution that built."""

    folder: Path
    wheels: dict[str, Path] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def wheel(self, name: str) -> Path:
        if name not in self.wheels:
            pytest.fail(f"the wheel of {name} did not build:\n{self.failures.get(name, '?')}")
        return self.wheels[name]

    def files(self, name: str) -> set[str]:
        """Return the paths a wheel ships, its own ``.dist-info`` left out."""
        with zipfile.ZipFile(self.wheel(name)) as archive:
            return {
                path
                for path in archive.namelist()
                if not path.endswith("/") and ".dist-info/" not in path
            }

    def metadata(self, name: str) -> Message:
        with zipfile.ZipFile(self.wheel(name)) as archive:
            (path,) = (p for p in archive.namelist() if p.endswith(".dist-info/METADATA"))
            return email.parser.Parser().parsestr(archive.read(path).decode("utf-8"))

    def requirements(self, name: str) -> set[str]:
        """Return the names of the distributions this one requires."""
        requires = self.metadata(name).get_all("Requires-Dist") or []
        return {
            _normalise(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0])
            for requirement in requires
            if "extra ==" not in requirement
        }


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    house = Wheelhouse(tmp_path_factory.mktemp("wheels"))
    for name, folder in DISTRIBUTIONS.items():
        before = set(house.folder.iterdir())
        # The build runs in the distribution's folder, where hatchling sees
        # that distribution alone, exactly as a release build would.
        result = subprocess.run(
            [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(house.folder)],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
            env=_environment(),
        )
        built = set(house.folder.iterdir()) - before
        if result.returncode == 0 and len(built) == 1:
            house.wheels[name] = built.pop()
        else:
            house.failures[name] = result.stdout + result.stderr
    return house


def _environment() -> dict[str, str]:
    # Offline, and deaf to the machine's pip configuration (extra indexes,
    # find-links, constraints): only the wheels built here may be installed.
    # Coverage is not carried into the builds and installs either: they run
    # none of the code under test, and would leave data files behind.
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "COVERAGE_", "PYTHON"))
    }
    environment.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return environment


def _run(command: list[str], cwd: Path) -> str:
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, check=False, env=_environment()
    )
    # The command itself is left out: for a script it is the whole script.
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment without pip, driven by a shared pip."""

    root: Path
    pip: Path
    wheels: Path

    @property
    def python(self) -> Path:
        return self.root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    def install(self, *requirements: str) -> None:
        _run(
            [
                str(self.pip),
                "-m",
                "pip",
                "--python",
                str(self.python),
                "install",
                "--find-links",
                str(self.wheels),
                *requirements,
            ],
            self.root.parent,
        )

    def uninstall(self, name: str) -> None:
        _run(
            [str(self.pip), "-m", "pip", "--python", str(self.python), "uninstall", "-y", name],
            self.root.parent,
        )

    def python_code(self, code: str) -> str:
        # -I: no PYTHON* variables, no user site, no current folder on the
        # path, so only what was installed into this environment is seen.
        return _run([str(self.python), "-I", "-c", textwrap.dedent(code)], self.root.parent)

    def distributions(self) -> set[str]:
        out = self.python_code(
            """
            import importlib.metadata as metadata, json
            print(json.dumps([d.metadata["Name"] for d in metadata.distributions()]))
            """
        )
        return {_normalise(name) for name in json.loads(out)}


@pytest.fixture(scope="session")
def seed_pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a Python with pip, made once; the test environments get none.

    Bootstrapping pip into every environment would cost seconds each; one pip
    installs into the others with ``--python`` instead.
    """
    root = tmp_path_factory.mktemp("seed") / "venv"
    _run([sys.executable, "-m", "venv", str(root)], root.parent)
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@pytest.fixture
def venv(tmp_path: Path, seed_pip: Path, wheelhouse: Wheelhouse) -> Venv:
    root = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], tmp_path)
    return Venv(root, seed_pip, wheelhouse.folder)


# A backend written against the port alone, as its authors would: a tiny
# dictionary adapter that relies on the port's validation and types.
PORT_WORKS = """
import asyncio, importlib.util, itertools
import psych_runtime, psych_runtime.memory
from datetime import UTC, datetime
from psych_runtime.memory.port import (
    InvalidContentError, Memory, MemoryStore, memory_key, validate_content,
    validate_limit, validate_memory_id,
)

class DictMemory(MemoryStore):
    def __init__(self):
        self.facts, self.ids = {}, itertools.count()

    async def remember(self, scope, end_user_id, content):
        key, content = memory_key(scope, end_user_id), validate_content(content)
        memory = Memory(str(next(self.ids)), key, content, datetime.now(UTC))
        self.facts.setdefault(key, {})[memory.id] = memory
        return memory

    async def forget(self, scope, end_user_id, memory_id):
        key, memory_id = memory_key(scope, end_user_id), validate_memory_id(memory_id)
        return self.facts.get(key, {}).pop(memory_id, None) is not None

    async def recall(self, scope, end_user_id, *, limit=None):
        key, limit = memory_key(scope, end_user_id), validate_limit(limit)
        return tuple(self.facts.get(key, {}).values())[:limit]

    async def erase(self, scope, end_user_id):
        return len(self.facts.pop(memory_key(scope, end_user_id), {}))

async def main():
    store = DictMemory()
    first = await store.remember("acme", "u1", "prefers email")
    second = await store.remember("acme", "u1", "prefers email")
    assert first.id != second.id
    assert await store.recall("acme", "u1") == (first, second)
    assert await store.forget("acme", "u2", first.id) is False
    assert await store.forget("acme", "u1", first.id) is True
    try:
        await store.remember("acme", "u1", "   ")
    except InvalidContentError:
        pass
    else:
        raise AssertionError("blank content was accepted")
    assert await store.erase("acme", "u1") == 1

asyncio.run(main())
assert psych_runtime.__file__ is None and psych_runtime.memory.__file__ is None
print(sorted(
    name for name in ("inproc", "store_backed")
    if importlib.util.find_spec(f"psych_runtime.memory.{name}") is not None
))
"""

INPROC_WORKS = """
import asyncio
import psych_runtime, psych_runtime.memory
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.store_backed import StoreBackedMemory

async def main():
    for store in (InProcessMemory(), StoreBackedMemory(object())):
        fact = await store.remember("acme", "u1", "ships to Berlin")
        assert await store.recall("acme", "u1") == (fact,)
        assert await store.recall("acme", "u2") == ()
        assert await store.forget("acme", "u1", fact.id) is True
        await store.remember("acme", "u1", "ships to Hamburg")
        assert await store.erase("acme", "u1") == 1

asyncio.run(main())
assert psych_runtime.__file__ is None and psych_runtime.memory.__file__ is None
print("ok")
"""


# What the wheels contain.


def _leaf(path: str) -> str:
    """Return the package a shipped file belongs to: the folder below the
    deepest namespace level on its path."""
    parts = path.split("/")
    depth = 1
    while "/".join(parts[: depth + 1]) in NAMESPACE_LEVELS:
        depth += 1
    return "/".join(parts[: depth + 1])


def test_distributions_are_discovered() -> None:
    assert {PORT, INPROC} <= set(DISTRIBUTIONS)


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_wheel_builds(wheelhouse: Wheelhouse, name: str) -> None:
    assert wheelhouse.wheel(name).name.startswith(name.replace("-", "_") + "-")


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_wheel_ships_nothing_at_a_namespace_level(wheelhouse: Wheelhouse, name: str) -> None:
    files = wheelhouse.files(name)
    assert files
    outside = sorted(path for path in files if not path.startswith("psych_runtime/"))
    assert outside == [], "files outside the psych_runtime namespace"
    at_namespace = sorted(path for path in files if path.rpartition("/")[0] in NAMESPACE_LEVELS)
    assert at_namespace == [], "files at a namespace level"


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_every_leaf_is_a_typed_regular_package(wheelhouse: Wheelhouse, name: str) -> None:
    files = wheelhouse.files(name)
    leaves = {_leaf(path) for path in files}
    assert leaves
    for leaf in sorted(leaves):
        assert f"{leaf}/__init__.py" in files, f"{leaf} is not a regular package"
        assert f"{leaf}/py.typed" in files, f"{leaf} has no py.typed"


def test_no_file_is_shipped_by_two_wheels(wheelhouse: Wheelhouse) -> None:
    # Over the wheels that built; a failed build fails test_wheel_builds.
    shared = {
        (first, second): sorted(wheelhouse.files(first) & wheelhouse.files(second))
        for first, second in itertools.combinations(sorted(wheelhouse.wheels), 2)
    }
    assert {pair: paths for pair, paths in shared.items() if paths} == {}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_metadata_is_honest(wheelhouse: Wheelhouse, name: str) -> None:
    metadata = wheelhouse.metadata(name)
    assert _normalise(metadata["Name"]) == name
    assert metadata["Requires-Python"] == ">=3.11"
    assert "Typing :: Typed" in (metadata.get_all("Classifier") or [])
    assert metadata["License-Expression"] == "MIT"


def test_the_port_has_no_runtime_dependencies(wheelhouse: Wheelhouse) -> None:
    assert wheelhouse.requirements(PORT) == set()


def test_no_memory_distribution_requires_the_tools(wheelhouse: Wheelhouse) -> None:
    def ships(name: str, prefix: str) -> bool:
        return any(path.startswith(prefix) for path in wheelhouse.files(name))

    tools = {name for name in wheelhouse.wheels if ships(name, "psych_runtime/tools/")}
    memory = {name for name in wheelhouse.wheels if ships(name, "psych_runtime/memory/")}
    assert {name: wheelhouse.requirements(name) & tools for name in memory} == {
        name: set() for name in memory
    }


# The wheels installed: the three uses the layout exists for.


def test_only_the_port_installed_works_without_any_adapter(venv: Venv) -> None:
    venv.install(PORT)
    assert venv.distributions() == {PORT}
    assert venv.python_code(PORT_WORKS).strip() == "[]"


def test_the_adapter_pulls_the_port_and_leaves_it_working_when_removed(venv: Venv) -> None:
    venv.install(INPROC)
    assert venv.distributions() == {PORT, INPROC}
    assert venv.python_code(INPROC_WORKS).strip() == "ok"
    venv.uninstall(INPROC)
    assert venv.distributions() == {PORT}
    assert venv.python_code(PORT_WORKS).strip() == "[]"
    # Every file the port installed is still in place.
    missing = venv.python_code(
        """
        import importlib.metadata as metadata
        files = metadata.files("psych-memory-port")
        print([str(f) for f in files if not f.locate().exists()])
        """
    )
    assert missing.strip() == "[]"


@pytest.mark.skipif(TOOLS not in DISTRIBUTIONS, reason="psych-runtime-tools is not in packages/")
def test_the_tools_pinned_to_their_version_pull_both_memory_distributions(
    venv: Venv, wheelhouse: Wheelhouse
) -> None:
    version = wheelhouse.metadata(TOOLS)["Version"]
    venv.install(f"{TOOLS}=={version}")
    assert venv.distributions() == {TOOLS, PORT, INPROC}
    out = venv.python_code(
        """
        import importlib.metadata as metadata
        import psych_runtime.memory.inproc, psych_runtime.memory.port
        import psych_runtime.tools.builtins
        print(metadata.version("psych-runtime-tools"))
        """
    )
    assert out.strip() == version


# Opening stores by URL: the opener finds every backend through entry points.


@pytest.mark.skipif(ADMIN not in DISTRIBUTIONS, reason="psych-memory-admin is not in packages/")
def test_the_opener_requires_the_port_and_the_in_process_adapter_only(
    wheelhouse: Wheelhouse,
) -> None:
    assert wheelhouse.requirements(ADMIN) == {PORT, INPROC}
    metadata = wheelhouse.metadata(ADMIN)
    assert set(metadata.get_all("Provides-Extra") or []) == {"sqlite", "postgres", "cli", "ledger"}
    extras: dict[str, set[str]] = {}
    for requirement in metadata.get_all("Requires-Dist") or []:
        spec, _, marker = requirement.partition(";")
        if "extra ==" in marker:
            extra = marker.partition("==")[2].strip().strip("'\"")
            extras.setdefault(extra, set()).add(
                _normalise(re.split(r"[\s<>=!~\[(]", spec, maxsplit=1)[0])
            )
    assert extras == {
        "sqlite": {"psych-memory-sqlite"},
        "postgres": {"psych-memory-postgres"},
        # The operator's command; the opener itself needs neither.
        "cli": {"anyio", "click"},
        # replay-deletions and erase --ledger.
        "ledger": {"psych-memory-ledger"},
    }


# Run in the fresh environment: what a program using the opener would see.
OPEN_BY_URL = """
import asyncio, json
from psych_runtime.memory.admin import UnknownSchemeError, open_memory, store_schemes

async def session(url):
    async with open_memory(url) as memory:
        fact = await memory.remember("acme", "u1", "ships to Berlin")
        assert await memory.recall("acme", "u1") == (fact,)
        return type(memory).__module__ + "." + type(memory).__qualname__

async def main():
    opened = {}
    for url in ("memory:", "thirdparty:"):
        try:
            opened[url] = await session(url)
        except UnknownSchemeError as error:
            opened[url] = list(error.installed)
    return {"schemes": list(store_schemes()), "opened": opened}

print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.skipif(ADMIN not in DISTRIBUTIONS, reason="psych-memory-admin is not in packages/")
def test_a_third_party_scheme_opens_from_its_own_wheel(venv: Venv, tmp_path: Path) -> None:
    built = tmp_path / "third-party-wheel"
    build = [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(built)]
    _run(build, THIRD_PARTY_SOURCE)
    (wheel,) = built.glob("*.whl")
    venv.install(ADMIN, str(wheel))
    assert venv.distributions() == {PORT, INPROC, ADMIN, THIRD_PARTY}
    assert json.loads(venv.python_code(OPEN_BY_URL)) == {
        "schemes": ["memory", "thirdparty"],
        "opened": {
            "memory:": "psych_runtime.memory.inproc._memory.InProcessMemory",
            "thirdparty:": "thirdparty_memory.DictMemory",
        },
    }
    # Uninstalled, the backend's scheme is gone and the others stay.
    venv.uninstall(THIRD_PARTY)
    assert json.loads(venv.python_code(OPEN_BY_URL)) == {
        "schemes": ["memory"],
        "opened": {
            "memory:": "psych_runtime.memory.inproc._memory.InProcessMemory",
            "thirdparty:": ["memory"],
        },
    }
