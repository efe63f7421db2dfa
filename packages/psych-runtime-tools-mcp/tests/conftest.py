from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.builtins import ToolResult, memory_tools


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite3"


@pytest.fixture
async def memory(db_path: Path, anyio_backend: str) -> AsyncIterator[SqliteMemory]:
    async with SqliteMemory(db_path) as store:
        yield store


PythonAnswer = Callable[[str, dict[str, Any] | str], Awaitable[ToolResult]]


@pytest.fixture
def python_answer() -> PythonAnswer:
    """What the Python tools answer to a call, from a separate empty store."""

    async def answer(name: str, arguments: dict[str, Any] | str) -> ToolResult:
        async with InProcessMemory() as other:
            return await memory_tools(other, scope="t", end_user_id="u").call(name, arguments)

    return answer


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


@pytest.fixture(scope="session")
def initialize() -> dict[str, Any]:
    """The JSON-RPC request that opens a session."""
    return INITIALIZE


@dataclass
class Running:
    """A ``psych-memory-mcp --http`` process: its endpoint and what it wrote to stderr."""

    url: str
    stderr: list[str]


@contextmanager
def _running_http(*args: str) -> Iterator[Running]:
    script = shutil.which("psych-memory-mcp", path=str(Path(sys.executable).parent))
    assert script is not None
    process = subprocess.Popen(
        [script, "--http", "--port", "0", *args], stderr=subprocess.PIPE, text=True
    )
    listening = threading.Event()
    lines: list[str] = []
    url: list[str] = []

    def read_stderr() -> None:
        # Drained to the end, so the server never blocks on a full pipe.
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "listening on " in line and not url:
                url.append(line.split("listening on ", 1)[1].strip())
                listening.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert listening.wait(timeout=60), f"the server did not start: {lines}"
        yield Running(url[0], lines)
    finally:
        process.terminate()
        status = process.wait(timeout=30)
        reader.join(timeout=30)
        assert process.stderr is not None
        process.stderr.close()
    # SIGTERM shut the server down gracefully, store closed, instead of
    # ending the process on the signal.
    assert status == 0


@pytest.fixture(scope="session")
def running_http() -> Callable[..., AbstractContextManager[Running]]:
    """Start ``psych-memory-mcp --http --port 0`` with more arguments, for a ``with`` block."""
    return _running_http


@dataclass
class Jwks:
    """A JWKS endpoint served in the test: its URL, what it answers, how often it was asked."""

    url: str
    keys: list[dict[str, Any]]
    behaviour: str = "serve"
    hits: int = 0


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    """A local JWKS endpoint; ``behaviour``: "serve", "fail" (HTTP 500) or "hang" (no answer)."""
    released = threading.Event()
    state = Jwks(url="", keys=[])
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                state.hits += 1
            if state.behaviour == "hang":
                released.wait()
                return
            if state.behaviour == "fail":
                self.send_response(500)
                self.end_headers()
                return
            body = json.dumps({"keys": state.keys}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        state.url = f"http://{host!s}:{port}/jwks.json"
        yield state
    finally:
        released.set()
        server.shutdown()
        server.server_close()
        thread.join()
