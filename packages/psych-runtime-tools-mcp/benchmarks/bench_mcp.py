"""Round-trip latency of the MCP memory tools beside a tool that does nothing.

Run with ``hatch run bench:mcp`` (add ``--quick`` for a short smoke run).

One server process per transport (stdio, then streamable HTTP on
127.0.0.1 with a signed bearer token), backed by a SQLite file with the
default durability. The server has one extra tool, ``noop``, that answers
at once without touching memory. The client calls ``noop``, ``remember``,
``forget`` (the fact just saved) and ``recall`` (ten facts) in turn, round
after round, so a busy machine slows them alike. The difference between a
memory tool's median and ``noop``'s median is memory's own share of the round
trip: validation, the store and rendering. The in-process transport (client
and server in one event loop, no serialisation to a pipe or socket) is
measured the same way. Figures go to stdout as a Markdown table; copy them to
docs/mcp.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool

from psych_runtime.memory.sqlite import SqliteMemory
from psych_runtime.tools.mcp import JwtVerifier, memory_http_app, memory_server
from psych_runtime.tools.mcp._uvicorn import serve_http

TENANT = "bench"
USER = "user"
ISSUER = "https://idp.bench.example"
AUDIENCE = "https://memory.bench.example/mcp"
SEEDED = 10
TOOLS = ("noop", "remember", "forget", "recall")


NOOP = Tool(name="noop", description="Does nothing.", input_schema={"type": "object"})


def with_noop(server: Server[Any]) -> Server[Any]:
    """Add a listed ``noop`` tool to ``server``: answers at once, touches nothing."""
    calls = server.get_request_handler("tools/call")
    lists = server.get_request_handler("tools/list")
    if calls is None or lists is None:
        raise LookupError("the server has no tools")
    memory_call, memory_list = calls.handler, lists.handler

    async def call(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> Any:
        if params.name == "noop":
            return CallToolResult(content=[TextContent(type="text", text="{}")])
        return await memory_call(ctx, params)

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> ListToolsResult:
        listed = await memory_list(ctx, params)
        if not isinstance(listed, ListToolsResult):
            raise TypeError("tools/list gave no tool list")
        return ListToolsResult(tools=[*listed.tools, NOOP])

    server.add_request_handler("tools/call", CallToolRequestParams, call)
    server.add_request_handler("tools/list", lists.params_type, list_tools)
    return server


# --- the server side, run as a subprocess -------------------------------------


async def serve(transport: str, db: str, public_key: str | None) -> None:
    async with SqliteMemory(db) as memory:
        if transport == "stdio":
            server = with_noop(memory_server(memory, scope=TENANT, end_user_id=USER))
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        if public_key is None:
            raise ValueError("the HTTP server needs --key")
        verifier = JwtVerifier(issuers=[ISSUER], audience=AUDIENCE, key=public_key)
        app = memory_http_app(
            memory,
            verifier=verifier,
            issuer_url=ISSUER,
            resource_server_url=AUDIENCE,
            tenant=TENANT,
        )
        # memory_http_app built its server; the noop joins the same one.
        with_noop(_server_of(app))
        await serve_http(app, host="127.0.0.1", port=0, path="/mcp")


def _server_of(app: Any) -> Server[Any]:
    for route in app.routes:
        endpoint = getattr(route, "endpoint", None)
        manager = getattr(getattr(endpoint, "app", None), "session_manager", None)
        if manager is not None:
            server: Server[Any] = manager.app
            return server
    raise LookupError("no MCP server in the app")


# --- the client side -----------------------------------------------------------


async def measure(client: Client, rounds: int) -> dict[str, list[float]]:
    for number in range(SEEDED):
        await client.call_tool("remember", {"content": f"seeded fact {number}"})
    timings: dict[str, list[float]] = {tool: [] for tool in TOOLS}

    async def timed(tool: str, arguments: dict[str, Any]) -> CallToolResult:
        start = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        timings[tool].append(time.perf_counter() - start)
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content}")
        return result

    for number in range(rounds + 20):
        if number == 20:  # warm-up done
            timings = {tool: [] for tool in TOOLS}
        await timed("noop", {})
        saved = await timed("remember", {"content": f"fact {number}"})
        (block,) = saved.content
        if not isinstance(block, TextContent):
            raise TypeError("remember gave no text")
        await timed("forget", {"memory_id": json.loads(block.text)["id"]})
        await timed("recall", {})
    return timings


@asynccontextmanager
async def stdio_client(db: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=[__file__, "--serve", "stdio", "--db", db]
    )
    async with Client(params) as client:
        yield client


def start_http_server(db: str, pem: Path) -> tuple[subprocess.Popen[str], str]:
    """Start the HTTP server process; return it and its URL once it listens."""
    command = [sys.executable, __file__, "--serve", "http", "--db", db, "--key", str(pem)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)  # noqa: S603
    url: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in process.stderr or ():
            if "listening on " in line and not url:
                url.append(line.split("listening on ", 1)[1].strip())
                ready.set()
            elif not url:
                sys.stderr.write(line)

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60):
        process.kill()
        raise RuntimeError("the HTTP server did not start")
    return process, url[0]


@asynccontextmanager
async def http_client(db: str, folder: Path) -> AsyncIterator[Client]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = folder / "public.pem"
    pem.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    process, url = await anyio.to_thread.run_sync(start_http_server, db, pem)
    try:
        now = int(time.time())
        token = jwt.encode(
            {"iss": ISSUER, "sub": USER, "aud": AUDIENCE, "iat": now, "exp": now + 3600},
            key,
            algorithm="ES256",
        )
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            yield client
    finally:
        process.terminate()
        await anyio.to_thread.run_sync(process.wait)


@asynccontextmanager
async def inprocess_client(db: str) -> AsyncIterator[Client]:
    async with SqliteMemory(db) as memory:
        server = with_noop(memory_server(memory, scope=TENANT, end_user_id=USER))
        async with Client(server) as client:
            yield client


def row(transport: str, timings: dict[str, list[float]]) -> str:
    medians = {tool: statistics.median(values) * 1e3 for tool, values in timings.items()}
    p95 = {tool: statistics.quantiles(values, n=20)[-1] * 1e3 for tool, values in timings.items()}
    cells = [f"{medians['noop']:.2f} ({p95['noop']:.2f})"]
    for tool in TOOLS[1:]:
        share = medians[tool] - medians["noop"]
        cells.append(f"{medians[tool]:.2f} ({p95[tool]:.2f}) +{share:.2f}")
    return f"| {transport} | " + " | ".join(cells) + " |"


async def drive(rounds: int) -> None:
    print(f"{rounds} rounds per transport; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("Median (p95) round trip in ms; +N: the median minus noop's, memory's own share.\n")
    print("| transport | noop | remember | forget | recall (10 facts) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        clients: dict[str, Callable[[str], Any]] = {
            "in-process": inprocess_client,
            "stdio": stdio_client,
            "streamable HTTP": lambda db: http_client(db, Path(folder)),
        }
        for transport, connect in clients.items():
            db = str(Path(folder) / f"{transport.replace(' ', '-')}.sqlite3")
            async with connect(db) as client:
                print(row(transport, await measure(client, rounds)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--serve", choices=["stdio", "http"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        key = Path(args.key).read_text() if args.key else None
        backend = "asyncio"
        anyio.run(serve, args.serve, args.db, key, backend=backend)
        return
    run: Callable[[], Awaitable[None]] = lambda: drive(30 if args.quick else args.rounds)  # noqa: E731
    anyio.run(run)


if __name__ == "__main__":
    main()
