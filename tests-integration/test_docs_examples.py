"""Every Python block of the documentation runs, or says in its page why not.

The pages are the site's (``docs/*.md``) and the repository's ``README.md``.
Each page's ```` ```python ```` blocks run in order, as a reader pasting them
one after the other would, in one process per page: this test
environment's interpreter, a temporary folder as the working directory
(where a page's SQLite files are real files), offline (a connection to any
other host is refused). Top-level ``await`` is fine: every block is compiled
as ``python -m asyncio`` compiles what is typed into it, and a block that
awaits runs to its end on the one asyncio event loop the page's process
shares, the same as wrapping the page in an ``async def main()`` run by
``asyncio.run``. A block that starts a loop of its own (``asyncio.run``,
``anyio.run``, ``trio.run``) runs as written.

A page that wires an agent framework runs on that framework's offline test
model, as the framework packages' tests do: before the page's blocks, a
prelude (below, in this file, never in the page) makes every model name the
page gives resolve to it (pydantic-ai's ``TestModel``, LangChain's fake chat
model, a scripted ``Model`` of the OpenAI Agents SDK).

A block that is not meant to run (a signature, a fragment, one that needs a
PostgreSQL server or the Psych runtime) carries ``<!-- not run: the reason
-->`` right before its fence; exactly those are skipped (see ``_blocks.py``).
Each page's test prints how many of its blocks ran and how many are marked,
and ``test_the_count_of_blocks`` prints the totals.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import pytest

# The extractor beside this file, shared with the README tests; the tests
# are imported by path (--import-mode=importlib), which puts no folder on sys.path.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _blocks import Block, MarkerError, extract, run_page  # noqa: E402

REPOSITORY = HERE.parent
PAGES = [*sorted(REPOSITORY.glob("docs/*.md")), REPOSITORY / "README.md"]

# pydantic-ai: every model name resolves to its offline TestModel, which
# calls the agent's tools with arguments made up from their schemas, then answers.
PYDANTIC_AI = """
from pydantic_ai import models as _models
from pydantic_ai.models.test import TestModel as _TestModel

_infer_model = _models.infer_model
_models.infer_model = lambda model, *args, **kwargs: (
    _TestModel() if isinstance(model, str) else _infer_model(model, *args, **kwargs)
)
_models.ALLOW_MODEL_REQUESTS = False
"""

# The OpenAI Agents SDK: every model name the default provider is asked for
# is a scripted Model that answers at once, as the package's tests script it.
OPENAI_AGENTS = """
from agents import Model as _Model, ModelResponse as _ModelResponse, Usage as _Usage
from agents import set_tracing_disabled as _set_tracing_disabled
from agents.models.multi_provider import MultiProvider as _MultiProvider
from openai.types.responses import ResponseOutputMessage as _Message
from openai.types.responses import ResponseOutputText as _Text


class _OfflineModel(_Model):
    async def get_response(self, *args, **kwargs):
        text = _Text(text="Noted.", type="output_text", annotations=[])
        message = _Message(
            id="msg_1", content=[text], role="assistant", status="completed", type="message"
        )
        return _ModelResponse(output=[message], usage=_Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


_MultiProvider.get_model = lambda self, model_name: _OfflineModel()
_set_tracing_disabled(True)
"""

# LangChain: init_chat_model, for any model name, gives the fake chat model
# the package's tests use, answering every prompt with the same message.
LANGCHAIN = """
import itertools as _itertools

import langchain.agents.factory as _factory
import langchain.chat_models as _chat_models
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel as _Fake
from langchain_core.messages import AIMessage as _AIMessage


class _OfflineChatModel(_Fake):
    def bind_tools(self, tools, **kwargs):
        return self


def _offline(*args, **kwargs):
    return _OfflineChatModel(messages=_itertools.repeat(_AIMessage(content="Noted.")))


_chat_models.init_chat_model = _factory.init_chat_model = _offline
"""

PRELUDES = {
    "pydantic_ai": PYDANTIC_AI,
    "agents": OPENAI_AGENTS,
    "langchain": LANGCHAIN,
}

# What a page's reader sets in their environment before running it.
ENVIRONMENT = {
    # The ledger's secret, which an operator gives the process.
    "ledger.md": {"PSYCH_MEMORY_LEDGER_KEY": "a secret of the docs' example, long enough"},
}


def _prelude(blocks: list[Block]) -> str:
    imports = {
        line.split()[1].split(".")[0]
        for block in blocks
        if block.not_run is None
        for line in block.source.splitlines()
        if line.startswith(("import ", "from "))
    }
    return "".join(code for module, code in PRELUDES.items() if module in imports)


def _environment(page: Path) -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        # No provider's key and no interpreter setting leaks into the pages.
        if not key.endswith("_API_KEY") and not key.startswith("PYTHON")
    }
    environment.update(ENVIRONMENT.get(page.name, {}))
    return environment


def _pages_with_blocks() -> list[Path]:
    return [page for page in PAGES if "```python" in page.read_text("utf-8")]


def _id(page: Path) -> str:
    return page.relative_to(REPOSITORY).as_posix()


@pytest.mark.parametrize("page", _pages_with_blocks(), ids=_id)
def test_the_page_runs(page: Path, tmp_path: Path) -> None:
    blocks = extract(page)
    ran = [block for block in blocks if block.not_run is None]
    marked = [block for block in blocks if block.not_run is not None]
    print(f"{_id(page)}: {len(ran)} block(s) ran, {len(marked)} marked not to run")
    for block in marked:
        print(f"  {block.where(REPOSITORY)} not run: {block.not_run}")
    if not ran:
        return
    finished = run_page(
        blocks,
        workdir=tmp_path,
        root=REPOSITORY,
        prelude=_prelude(blocks),
        env=_environment(page),
    )
    assert finished.returncode == 0, (
        f"{_id(page)}: a block failed (exit {finished.returncode})\n"
        f"{finished.stdout}\n{finished.stderr}"
    )


def test_the_count_of_blocks() -> None:
    """Every block found is run or marked; prints the totals (shown with ``-rP``)."""
    blocks = [block for page in PAGES for block in extract(page)]
    marked = [block for block in blocks if block.not_run is not None]
    print(f"{len(blocks) - len(marked)} Python blocks run, {len(marked)} marked not to run")
    assert blocks
    assert all(block.not_run for block in marked), "a marker gives no reason"


# The install of the getting-started page, as written: the wheelhouse
# command of hatch.toml, then the page's pip line into a fresh environment,
# where the page's examples run.

GETTING_STARTED = REPOSITORY / "docs" / "getting-started.md"
PIP_LINE = re.compile(r"^\$ (pip install --find-links dist/wheelhouse .*)$", re.MULTILINE)


def _wheelhouse_command() -> list[str]:
    hatch = tomllib.loads((REPOSITORY / "hatch.toml").read_text("utf-8"))
    environment = hatch["envs"]["wheelhouse"]
    assert any(requirement.startswith("hatchling") for requirement in environment["dependencies"])
    command = shlex.split(environment["scripts"]["build"])
    assert command[0] == "python", command
    return command


def _install_environment() -> dict[str, str]:
    # pip reaches the package index the machine is set up for, and nothing
    # else: no other folder of wheels, no constraints, no interpreter setting.
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "COVERAGE_"))
        and key not in {"PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_CONSTRAINT", "PIP_REQUIREMENT"}
    }
    environment.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return environment


def _index_reachable() -> bool:
    index = urlsplit(os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/"))
    try:
        socket.create_connection((index.hostname or "", index.port or 443), timeout=10).close()
    except OSError:
        return False
    return True


@pytest.mark.wheels
def test_the_getting_started_install_works_as_written(
    tmp_path: Path, unavailable: Callable[[str], NoReturn]
) -> None:
    # A clone's distributions, built by the wheelhouse command of hatch.toml
    # with this interpreter (where hatchling is installed, as in its environment).
    clone = tmp_path / "clone"
    shutil.copytree(
        REPOSITORY / "packages",
        clone / "packages",
        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.sqlite3*", "*.db"),
    )
    built = subprocess.run(
        [sys.executable, *_wheelhouse_command()[1:]],
        cwd=clone,
        capture_output=True,
        text=True,
        check=False,
        env=_install_environment(),
    )
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = sorted(path.name for path in (clone / "dist" / "wheelhouse").glob("*.whl"))
    assert len(wheels) == len(list(clone.glob("packages/*/pyproject.toml"))), wheels

    # The page's pip line, run by a fresh environment's own pip in the clone.
    (line,) = PIP_LINE.findall(GETTING_STARTED.read_text("utf-8"))
    if not _index_reachable():
        unavailable("the package index cannot be reached, for the distributions' own requirements")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pip, *arguments = shlex.split(line)
    assert pip == "pip"
    installed = subprocess.run(
        [str(python), "-m", "pip", *arguments],
        cwd=clone,
        capture_output=True,
        text=True,
        check=False,
        env=_install_environment(),
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    # The page's examples, with that environment's interpreter.
    workdir = tmp_path / "run"
    workdir.mkdir()
    finished = run_page(
        extract(GETTING_STARTED),
        workdir=workdir,
        root=REPOSITORY,
        python=python,
        env=_environment(GETTING_STARTED),
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr


# The extractor itself, on pages written for the test.


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, "utf-8")
    return page


def test_blocks_are_found_in_order_with_their_lines_and_markers(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "# Page\n\n```python\nx = 1\n```\n\n<!-- not run: a fragment -->\n```python\ny\n```\n"
        "\n```console\n$ pip install x\n```\n\n!!! note\n\n    ```python\n    z = x\n    ```\n",
    )
    blocks = extract(page)
    assert [(block.line, block.source, block.not_run) for block in blocks] == [
        (4, "x = 1\n", None),
        (9, "y\n", "a fragment"),
        (19, "z = x\n", None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "<!-- not run: nothing follows -->\n\nSome prose.\n",
        "<!-- not run: a console block -->\n```console\n$ ls\n```\n",
        "<!-- not run: too far -->\n\n```python\nx = 1\n```\n",
    ],
)
def test_a_marker_that_marks_no_python_block_is_an_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(MarkerError, match="marker before no Python block"):
        extract(_page(tmp_path, text))


def test_a_failing_block_fails_the_page_naming_its_line(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```python\nimport asyncio\n\nvalue = await asyncio.sleep(0, 41)\n```\n\n"
        "<!-- not run: would fail -->\n```python\nraise SystemExit(3)\n```\n\n"
        "```python\nassert value == 42, value\n```\n",
    )
    workdir = tmp_path / "run"
    workdir.mkdir()
    finished = run_page(extract(page), workdir=workdir, root=tmp_path)
    assert finished.returncode == 1
    assert 'File "page.md", line 13' in finished.stderr
    assert "assert value == 42, value" in finished.stderr
    assert "AssertionError: 41" in finished.stderr


def test_a_script_has_no_top_level_await_when_told(tmp_path: Path) -> None:
    page = _page(tmp_path, "```python\nimport asyncio\n\nawait asyncio.sleep(0)\n```\n")
    workdir = tmp_path / "run"
    workdir.mkdir()
    blocks = extract(page)
    assert run_page(blocks, workdir=workdir, root=tmp_path).returncode == 0
    finished = run_page(blocks, workdir=workdir, root=tmp_path, top_level_await=False)
    assert finished.returncode == 1
    assert "SyntaxError: 'await' outside function" in finished.stderr


def test_blocks_share_names_and_a_loop_and_run_offline(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```python\nimport asyncio, socket\n\n"
        "loop = await asyncio.sleep(0, asyncio.get_running_loop())\n```\n\n"
        "```python\nassert await asyncio.sleep(0, asyncio.get_running_loop()) is loop\n"
        "try:\n    socket.create_connection(('192.0.2.1', 80), timeout=1)\n"
        "except OSError as error:\n    print(error)\n```\n\n"
        "```python\nimport trio\n\ntrio.run(trio.sleep, 0)\nprint(open('f', 'w').name)\n```\n",
    )
    workdir = tmp_path / "run"
    workdir.mkdir()
    finished = run_page(extract(page), workdir=workdir, root=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines() == [
        "the examples run offline: no connection to '192.0.2.1'",
        "f",
    ]
    assert (workdir / "f").exists()
