"""The Python code blocks of Markdown pages: found, and run page by page.

For every test that runs the documentation's examples: the site's pages
here, and a README's, each block a script of its own (``run_page`` of one
block with ``top_level_await=False``). A page's ```` ```python ```` blocks
are its examples, in order: each block may use what the blocks above it
defined, as a reader pasting them one after the other into one session
would. A block that is not meant to run (a signature, a fragment, one that
needs a server or a product this repository does not install) says so in
the page, visibly, with an HTML comment right before its fence::

    <!-- not run: a fragment; `handle` stands for your code -->

and the runner skips exactly those blocks. A marker that precedes no Python
block is an error, so that a marker cannot outlive its block.

`run_page` runs one page's blocks in a process of their own, with the given
interpreter, in the given folder: every block is compiled with top-level
``await`` allowed, as ``python -m asyncio`` does, and a block that awaits
runs to its end on the one asyncio event loop the page shares; a block that
starts a loop of its own (``asyncio.run``, ``anyio.run``, ``trio.run``) runs
as it is. The process is offline: a connection to any host but this one is
refused. A traceback names the page and the line of the page.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# A fence opens with three or more backticks, indented as the block is
# (inside an admonition or a list item), and names its language.
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^[ \t]*<!--\s*not run:\s*(?P<reason>.*?)\s*-->[ \t]*$")
_COMMENT = re.compile(r"^[ \t]*<!--.*-->[ \t]*$")
PYTHON = frozenset({"python", "py"})


class MarkerError(ValueError):
    """A ``not run`` marker precedes no Python block."""


@dataclass(frozen=True)
class Block:
    """One fenced Python block of a page."""

    path: Path
    line: int  # the page's line of the block's first line of code, from 1
    source: str
    not_run: str | None  # the reason its marker gives, or None: it runs

    def where(self, root: Path | None = None) -> str:
        path = self.path.relative_to(root) if root is not None else self.path
        return f"{path.as_posix()}:{self.line}"


def extract(path: Path) -> list[Block]:
    """Return every Python block of the Markdown page ``path``, in order.

    Raises:
        MarkerError: a ``not run`` marker is not right before a Python block.
    """
    lines = path.read_text("utf-8").splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = (opening["info"].split() or [""])[0].lower().lstrip(".")
        end = index + 1
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        reason = _marker(lines, index)
        if language in PYTHON:
            body = [_dedent(line, indent) for line in lines[index + 1 : end]]
            blocks.append(Block(path, index + 2, "\n".join(body) + "\n", reason))
        index = end + 1
    # A marker followed by prose, another kind of block or nothing marks no block.
    python_fences = {block.line - 2 for block in blocks}
    for number, line in enumerate(lines):
        if _MARKER.match(line) and _next_fence(lines, number) not in python_fences:
            raise MarkerError(f"{path}:{number + 1}: a 'not run' marker before no Python block")
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


def _marker(lines: list[str], fence: int) -> str | None:
    """Return the reason of a marker among the comment lines right above a fence."""
    above = fence - 1
    while above >= 0 and _COMMENT.match(lines[above]):
        found = _MARKER.match(lines[above])
        if found is not None:
            return found["reason"]
        above -= 1
    return None


def _next_fence(lines: list[str], marker: int) -> int | None:
    """Return the line of the fence right below a marker and any comment lines."""
    below = marker + 1
    while below < len(lines) and _COMMENT.match(lines[below]):
        below += 1
    if below < len(lines) and _FENCE.match(lines[below]):
        return below
    return None


# The program that runs in the page's process: it reads the blocks from the
# file named by its argument, and runs them in order in one namespace.
RUNNER = r"""
import ast, asyncio, builtins, inspect, ipaddress, json, linecache, socket, sys, traceback

LOCAL = {"localhost", "localhost.localdomain", "ip6-localhost"}


def _local(host):
    if host is None or (isinstance(host, str) and host.lower() in LOCAL):
        return True
    try:
        return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback
    except ValueError:
        return False


def _refuse(host):
    raise OSError(f"the examples run offline: no connection to {host!r}")


_getaddrinfo, _connect, _connect_ex = (
    socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex,
)


def getaddrinfo(host, *args, **kwargs):
    if not _local(host):
        _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


def _checked(original):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
            _refuse(address[0])
        return original(self, address)
    return connect


socket.getaddrinfo = getaddrinfo
socket.socket.connect = _checked(_connect)
socket.socket.connect_ex = _checked(_connect_ex)

with open(sys.argv[1], encoding="utf-8") as file:
    spec = json.load(file)
sys.argv = [spec["name"]]
namespace = {"__name__": "__main__", "__builtins__": builtins}
loop = asyncio.new_event_loop()
try:
    for block in spec["blocks"]:
        name, text = block["name"], block["page"]
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        source = "\n" * (block["line"] - 1) + block["source"]
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if spec["top_level_await"] else 0
        code = compile(source, name, "exec", flags=flags)
        if code.co_flags & inspect.CO_COROUTINE:
            loop.run_until_complete(eval(code, namespace))
        else:
            exec(code, namespace)
except Exception:
    # Printed here, from the lines the page holds: before 3.13 the
    # interpreter's own report reads the source from the file system.
    traceback.print_exc()
    sys.exit(1)
finally:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
"""


def run_page(  # noqa: PLR0913 - keyword-only settings, each with its default
    blocks: list[Block],
    *,
    workdir: Path,
    root: Path,
    prelude: str = "",
    python: str | Path = sys.executable,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    top_level_await: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run the blocks that are not marked, in order, in one process in ``workdir``.

    ``prelude`` runs first (named ``<prelude>`` in a traceback): the test's
    own setting, never the page's. With ``top_level_await=False`` a block
    must run as a script would, and an ``await`` outside a function is the
    ``SyntaxError`` Python raises there (for a README's example, pasted
    into a file). Returns the finished process; its exit status is 0 when
    every block ran.
    """
    runnable = [block for block in blocks if block.not_run is None]
    pages = {block.path: block.path.read_text("utf-8") for block in runnable}
    specs = [{"name": "<prelude>", "page": prelude, "line": 1, "source": prelude}]
    specs += [
        {
            "name": block.path.relative_to(root).as_posix(),
            "page": pages[block.path],
            "line": block.line,
            "source": block.source,
        }
        for block in runnable
    ]
    name = runnable[0].path.name if runnable else "page"
    spec = workdir / ".blocks.json"
    spec.write_text(
        json.dumps({"name": name, "blocks": specs, "top_level_await": top_level_await}), "utf-8"
    )
    runner = workdir / ".run_blocks.py"
    runner.write_text(RUNNER, "utf-8")
    return subprocess.run(
        [str(python), str(runner), str(spec)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
