"""Beside the released runtime: ``psych-runtime`` 0.1.x with the supported set of our wheels.

One virtual environment on Python 3.12 (the runtime requires it), as a user
makes it: ``psych-runtime==0.1.4`` and the test tools at the versions of the
runtime's own lock file, from the registry; then our supported wheels, built
here. Against it:

- three agent sessions of the runtime, in three processes, over one SQLite
  file of ours as the runtime's ``memory=`` (remember; the fact in the prompt,
  then forget; nothing left);
- a FastAPI app serving and reading ``Memory`` as the runtime's models did;
- the runtime's own tests that touch memory, from its sdist: no error, and
  exactly the failures "Coming from psych-runtime 0.1" lists;
- the combination that cannot work, ``psych-runtime-tools`` beside it,
  refused on import in one message, and the way out that message names.

It runs once per test run (marker ``runtime01``), with the Python 3.12 it
finds: the one running the tests, or a ``python3.12`` on ``PATH`` that runs
(a version manager's shim that refuses is none). Without one it is skipped,
saying why; under ``CI=true`` that fails it. It reaches the
registry, and caches nothing outside its temporary folders.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

pytestmark = [pytest.mark.runtime01, pytest.mark.xdist_group("runtime01")]

REPOSITORY = Path(__file__).resolve().parents[2]
RUNTIME = "psych-runtime"
RUNTIME_VERSION = "0.1.4"
# Ours that install beside it. psych-runtime-tools (and psych-runtime-tools-mcp,
# which needs it) cannot: see test_the_tools_beside_the_runtime_fail_clearly.
SUPPORTED = (
    "psych-memory-port",
    "psych-memory-inproc",
    "psych-memory-sqlite",
    "psych-memory-postgres",
    "psych-memory-admin",
    "psych-memory-conformance",
    "psych-memory-otel",
)
TOOLS = "psych-runtime-tools"
# The runtime's tools that the docs' page asks of the lock file, and its extras
# that its playground's tests import.
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "pytest-xdist", "hypothesis")
EXTRAS = "playground,all"
# Its tests that touch memory. test_code_execution_console.py is left out: it
# runs the runtime's local sandbox, which fails the same way without our
# wheels where the machine refuses the sandbox its namespaces.
RUNTIME_TESTS = (
    "tests/unit/test_memory.py",
    "tests/functional/test_memory.py",
    "tests/e2e/test_skills_memory.py",
    "tests/playground",
)
LEFT_OUT = "tests/playground/test_code_execution_console.py"
# Each is listed, with its reason, in docs/coming-from-0.1.md: these tests
# assert pydantic's own errors of the runtime's pydantic classes.
EXPECTED_FAILURES = frozenset(
    {
        "tests.unit.test_memory.TestMemoryKey::test_both_fields_are_required",
        "tests.unit.test_memory.TestMemoryKey::test_an_empty_tenant_is_rejected",
        "tests.unit.test_memory.TestMemoryKey::test_an_empty_end_user_id_is_rejected",
        "tests.unit.test_memory.TestMemoryKey::test_is_frozen",
        "tests.unit.test_memory.TestMemory::test_content_cannot_be_empty",
        "tests.unit.test_memory.TestMemory::test_is_frozen",
    }
)

SESSION = textwrap.dedent(
    """
    import asyncio, json, sys

    import psych_runtime
    from psych_runtime.memory.sqlite import SqliteMemory
    from psych_runtime.testing.fake_model import FakeModel

    FACT = "prefers the Berlin warehouse"

    async def main(path, step):
        model = FakeModel()
        if step == "remember":
            model.turn(tool_calls=[("remember", {"content": FACT})])
        elif step == "forget":
            model.turn(tool_calls=[("forget", {"content": FACT})])
        model.turn(text="done")
        spec = psych_runtime.AgentSpec(name="support", model=psych_runtime.ModelRef(model="m"))
        async with (
            SqliteMemory(path) as memory,
            psych_runtime.session(
                model, tenant="acme", memory=memory, end_user_id="user-42"
            ) as session,
        ):
            view = await session.ask(spec, "hello")
            held = await memory.recall("acme", "user-42")
        print(json.dumps({
            "finished": view.finished,
            "text": view.text,
            "prompts": [request.messages[0].content for request in model.requests],
            "held": [fact.content for fact in held],
        }))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)

FASTAPI_APP = textwrap.dedent(
    """
    import json
    from datetime import UTC, datetime

    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from pydantic import BaseModel

    from psych_runtime.memory.port import Memory, MemoryKey

    KEY = MemoryKey("acme", "user-42")
    FACT = Memory("mem_1", KEY, "likes tea", datetime(2026, 12, 4, tzinfo=UTC))

    class Facts(BaseModel):
        facts: list[Memory]

    app = FastAPI()

    @app.get("/facts", response_model=Facts)
    def read() -> Facts:
        return Facts(facts=[FACT])

    @app.post("/facts", response_model=list[Memory])
    def write(body: Facts) -> list[Memory]:
        return body.facts

    client = TestClient(app)
    served = client.get("/facts").json()
    echoed = client.post("/facts", json=served)
    refused = client.post("/facts", json={"facts": [dict(served["facts"][0], content="")]})
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    print(json.dumps({
        "served": served,
        "echoed": echoed.json(),
        "refused": [refused.status_code, [e["loc"] for e in refused.json()["detail"]]],
        "schemas": sorted(schemas),
    }))
    """
)

IMPORTS = textwrap.dedent(
    """
    import json
    import psych_runtime
    import psych_runtime.memory.port as port
    import psych_runtime.memory.store_backed as store_backed
    import psych_runtime.memory.admin, psych_runtime.memory.conformance
    import psych_runtime.memory.otel, psych_runtime.memory.postgres, psych_runtime.memory.sqlite
    import psych_runtime.tools.builtins as builtins
    print(json.dumps({
        "version": psych_runtime.__version__,
        "memory": psych_runtime.Memory is port.Memory,
        "store_backed": store_backed.StoreBackedMemory.__module__,
        "builtins": builtins.ASK_QUESTION,
    }))
    """
)


def _python312() -> str | None:
    """A Python 3.12 that runs, as the path of its real executable.

    A name on ``PATH`` may be a version manager's shim that answers only
    when asked for that version (pyenv's exits 127 otherwise): a candidate
    counts only if it runs and says it is 3.12, and then its real path is
    used, so that no later call depends on the shim.
    """
    if sys.version_info[:2] == (3, 12):
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = sorted(pyenv.glob("versions/3.12*/bin/python3.12"), reverse=True)
    on_path = shutil.which("python3.12")
    for candidate in [*([on_path] if on_path else []), *map(str, installed)]:
        executable = _runs_as_312(candidate)
        if executable:
            return executable
    return None


def _runs_as_312(candidate: str) -> str | None:
    try:
        answer = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12), sys.executable)"],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    works, _, executable = answer.stdout.strip().partition(" ")
    return executable if answer.returncode == 0 and works == "True" and executable else None


@pytest.fixture(scope="module")
def python312(unavailable: Callable[[str], NoReturn]) -> str:
    found = _python312()
    if found is None:
        unavailable(
            f"{RUNTIME} {RUNTIME_VERSION} needs Python 3.12, and no python3.12 on PATH runs"
        )
    return found


def _environment(cache: Path) -> dict[str, str]:
    # The registry is reached as the machine's pip configuration says; the
    # cache lives in this test's temporary folder, and coverage stays out.
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("COVERAGE_", "PYTHON", "VIRTUAL_ENV"))
    }
    environment.update(
        PIP_CACHE_DIR=str(cache), PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1"
    )
    return environment


@dataclass
class Runtime01:
    """The virtual environment, the runtime's unpacked sdist and our wheels."""

    root: Path
    sdist: Path
    wheels: dict[str, Path]
    environment: dict[str, str]

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def run(
        self, *args: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.python, *args],
            cwd=cwd or self.root,
            capture_output=True,
            text=True,
            check=False,
            env=self.environment,
        )
        if check:
            output = f"{result.stdout}\n{result.stderr}"
            assert result.returncode == 0, f"exit {result.returncode}:\n{output}"
        return result

    def code(self, source: str, *args: str) -> dict[str, object]:
        script = self.root / "script.py"
        script.write_text(source, "utf-8")
        loaded: dict[str, object] = json.loads(self.run(str(script), *args).stdout)
        return loaded


def _build(names: tuple[str, ...], folder: Path) -> dict[str, Path]:
    wheels = {}
    for name in names:
        before = set(folder.iterdir())
        subprocess.run(
            [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(folder)],
            cwd=REPOSITORY / "packages" / name,
            capture_output=True,
            check=True,
        )
        (wheels[name],) = set(folder.iterdir()) - before
    return wheels


def _constraints(lock: Path) -> str:
    packages = tomllib.loads(lock.read_text("utf-8"))["package"]
    return "".join(
        f"{package['name']}=={package['version']}\n"
        for package in packages
        if package["name"] != RUNTIME and "registry" in package.get("source", {})
    )


@pytest.fixture(scope="module")
def runtime01(python312: str, tmp_path_factory: pytest.TempPathFactory) -> Runtime01:
    base = tmp_path_factory.mktemp("runtime01")
    environment = _environment(base / "pip-cache")
    wheels = _build((*SUPPORTED, TOOLS), base)
    root = base / "venv"
    subprocess.run([python312, "-m", "venv", str(root)], check=True, env=environment)
    venv = Runtime01(root, base / "sdist", wheels, environment)
    pip = ("-m", "pip", "install", "--quiet")
    download = base / "download"
    venv.run("-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             "-d", str(download), f"{RUNTIME}=={RUNTIME_VERSION}")  # fmt: skip
    (archive,) = download.iterdir()
    with tarfile.open(archive) as opened:
        opened.extractall(venv.sdist, filter="data")
    (unpacked,) = venv.sdist.iterdir()
    venv.sdist = unpacked
    constraints = base / "constraints.txt"
    constraints.write_text(_constraints(unpacked / "uv.lock"), "utf-8")
    venv.run(*pip, "-c", str(constraints), f"{RUNTIME}[{EXTRAS}]=={RUNTIME_VERSION}", *TEST_TOOLS)
    venv.run(*pip, "-c", str(constraints), *(str(wheels[name]) for name in SUPPORTED))
    return venv


def test_pip_sees_no_conflict_and_every_import_works(runtime01: Runtime01) -> None:
    assert "No broken requirements found." in runtime01.run("-m", "pip", "check").stdout

    assert runtime01.code(IMPORTS) == {
        "version": RUNTIME_VERSION,
        # Ours replace the runtime's port and default adapter, by design.
        "memory": True,
        "store_backed": "psych_runtime.memory.store_backed._memory",
        # The runtime's own tools stay its own.
        "builtins": "ask_question",
    }


def test_three_sessions_in_three_processes_share_one_sqlite_file(
    runtime01: Runtime01, tmp_path: Path
) -> None:
    path = str(tmp_path / "memory.sqlite3")
    fact = "prefers the Berlin warehouse"

    first = runtime01.code(SESSION, path, "remember")
    assert first["finished"] is True
    assert first["held"] == [fact]

    second = runtime01.code(SESSION, path, "forget")
    assert second["finished"] is True
    prompts = second["prompts"]
    assert isinstance(prompts, list)
    assert fact in prompts[0]
    assert second["held"] == []

    third = runtime01.code(SESSION, path, "nothing")
    assert third["finished"] is True
    assert third["text"] == "done"
    assert all(fact not in prompt for prompt in third["prompts"])  # type: ignore[attr-defined]
    assert third["held"] == []


def test_fastapi_serves_and_reads_facts(runtime01: Runtime01) -> None:
    fact = {
        "id": "mem_1",
        "key": {"tenant": "acme", "end_user_id": "user-42"},
        "content": "likes tea",
        "created_at": "2026-12-04T00:00:00Z",
    }

    assert runtime01.code(FASTAPI_APP) == {
        "served": {"facts": [fact]},
        "echoed": [fact],
        "refused": [422, [["body", "facts", 0, "content"]]],
        "schemas": ["Facts", "HTTPValidationError", "Memory", "MemoryKey", "ValidationError"],
    }


def test_the_runtimes_own_memory_tests_pass_but_the_listed_failures(
    runtime01: Runtime01, tmp_path: Path
) -> None:
    # Its tests and examples, without its source folder: they must import
    # the installed runtime and our wheels, not a copy beside them.
    suite = tmp_path / "suite"
    for part in ("tests", "examples"):
        shutil.copytree(runtime01.sdist / part, suite / part)
    shutil.copy(runtime01.sdist / "pyproject.toml", suite)
    report = tmp_path / "report.xml"

    # Several workers, stealing work from each other: three playground tests
    # each wait out the retries of a model that is deliberately unreachable
    # (about 90 s), and a worker given two of them in a row would run them
    # one after the other (211 s for the suite so, 163 s with stealing).
    result = runtime01.run(
        "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "4", "--dist", "worksteal",
        f"--junitxml={report}", "--deselect", LEFT_OUT, *RUNTIME_TESTS,
        cwd=suite, check=False,
    )  # fmt: skip

    failed: set[str] = set()
    errors: set[str] = set()
    passed = 0
    # The report pytest just wrote in this test's own folder.
    for case in ET.parse(report).iter("testcase"):  # noqa: S314
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("error") is not None:
            errors.add(name)
        elif case.find("failure") is not None:
            failed.add(name)
        elif case.find("skipped") is None:
            passed += 1
    assert not errors, result.stdout[-4000:]
    assert failed == EXPECTED_FAILURES, result.stdout[-4000:]
    assert passed > 200


def test_the_tools_beside_the_runtime_fail_clearly(runtime01: Runtime01) -> None:
    runtime01.run("-m", "pip", "install", "--quiet", "--no-deps", str(runtime01.wheels[TOOLS]))
    try:
        for statement in ("import psych_runtime", "import psych_runtime.memory.sqlite"):
            failed = runtime01.run("-c", statement, check=False)
            assert failed.returncode == 1
            last = failed.stderr.strip().splitlines()[-1]
            assert last.startswith(
                f"ImportError: {TOOLS} cannot be used beside {RUNTIME} {RUNTIME_VERSION}: "
            )
            assert f"`pip uninstall {TOOLS} psych-runtime-tools-mcp`" in last
    finally:
        runtime01.run("-m", "pip", "uninstall", "--quiet", "--yes", TOOLS)

    # The way out the message names works.
    assert runtime01.code(IMPORTS)["builtins"] == "ask_question"
