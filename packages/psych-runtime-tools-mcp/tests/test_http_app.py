"""The HTTP app in the test's own process: plugged-in verifiers, odd bodies, settings it refuses."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.tools.mcp import KeysUnavailableError, memory_http_app, memory_server

if TYPE_CHECKING:
    from conftest import PythonAnswer

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"
ISSUER = "https://idp.example"


FAILURES: dict[str, Exception] = {
    "raise": RuntimeError("the introspection endpoint is down"),
    "keys": KeysUnavailableError(7.2),
}


class Verifier:
    """Answers by the token's text: a subject, ``raise``, ``keys`` or ``anonymous``."""

    async def verify_token(self, token: str) -> AccessToken | None:
        failure = FAILURES.get(token)
        if failure is not None:
            raise failure
        subject = {"anonymous": None}.get(token, token)
        claims = {"iss": ISSUER}
        return AccessToken(
            token=token,
            client_id="desk",
            scopes=[],
            expires_at=int(time.time()) + 300,
            subject=subject,
            claims=claims,
        )


def app(**settings: Any) -> Starlette:
    return memory_http_app(
        InProcessMemory(),
        verifier=Verifier(),
        issuer_url=ISSUER,
        resource_server_url="https://memory.example/mcp",
        tenant="acme",
        **settings,
    )


@asynccontextmanager
async def client(served: Starlette) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=served)
    async with (
        served.router.lifespan_context(served),
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        yield http


def headers(token: str, **extra: str) -> dict[str, str]:
    return {"Accept": ACCEPT, "Authorization": f"Bearer {token}", **extra}


async def test_a_verifier_that_fails_gets_503_not_500(
    initialize: dict[str, Any], anyio_backend: str
) -> None:
    async with client(app()) as http:
        failed = await http.post("/mcp", headers=headers("raise"), json=initialize)
        assert failed.status_code == 503
        assert "retry-after" not in failed.headers
        assert failed.json()["error"] == "temporarily_unavailable"
        keys = await http.post("/mcp", headers=headers("keys"), json=initialize)
        assert keys.status_code == 503
        assert keys.headers["retry-after"] == "8"
        assert (await http.post("/mcp", headers=headers("alice"), json=initialize)).is_success
        # A verifier that names no subject still has its sessions counted.
        anonymous = await http.post("/mcp", headers=headers("anonymous"), json=initialize)
        assert anonymous.is_success


async def test_one_session_more_than_the_server_holds_gets_503_with_retry_after(
    initialize: dict[str, Any], anyio_backend: str
) -> None:
    served = app(max_sessions=2, max_sessions_per_user=1, session_idle_timeout=30)
    async with client(served) as http:
        assert (await http.post("/mcp", headers=headers("alice"), json=initialize)).is_success
        assert (await http.post("/mcp", headers=headers("bob"), json=initialize)).is_success
        full = await http.post("/mcp", headers=headers("carol"), json=initialize)
        assert full.status_code == 503
        assert "Too many open sessions" in full.text
        # Both sessions went idle just now: the first ends within the timeout.
        assert 1 <= int(full.headers["retry-after"]) <= 30


HOSTS_REFUSED = [
    "localhost:8000.evil.com",
    "localhost:8000@evil.com",
    "localhost:1.evil.com",
    "127.0.0.1:80/evil",
    "[::1]:80]",
    "localhost:",
    "localhost:0",
    "localhost:08000",
    "localhost:65536",
    "localhost:+80",
    "localhost: 80",
    "localhost:80 ",
    "proxy.internal:8443.evil.com",
    "proxy.internal:",
    "evil.com",
]
HOSTS_ACCEPTED = [
    "localhost:8000",
    "localhost:1",
    "127.0.0.1:65535",
    "[::1]:80",
    "proxy.internal:8443",
]
ORIGINS_REFUSED = [
    "http://localhost:1@evil.com",
    "http://localhost:8000.evil.com",
    "http://127.0.0.1:80/",
    "http://localhost:",
    "http://localhost:99999",
    "https://app.example:443#",
    "https://evil.example",
]
ORIGINS_ACCEPTED = ["http://localhost:3000", "http://[::1]:1", "https://app.example:8443"]


@pytest.mark.parametrize("host", HOSTS_REFUSED + HOSTS_ACCEPTED)
async def test_name_star_accepts_only_a_port_after_the_colon_in_host(
    initialize: dict[str, Any], host: str, anyio_backend: str
) -> None:
    served = app(host="127.0.0.1", allowed_hosts=["proxy.internal:*"])
    async with client(served) as http:
        answered = await http.post("/mcp", headers=headers("alice", Host=host), json=initialize)
    assert answered.status_code == (421 if host in HOSTS_REFUSED else 200), host


@pytest.mark.parametrize("origin", ORIGINS_REFUSED + ORIGINS_ACCEPTED)
async def test_name_star_accepts_only_a_port_after_the_colon_in_origin(
    initialize: dict[str, Any], origin: str, anyio_backend: str
) -> None:
    served = app(host="127.0.0.1", allowed_origins=["https://app.example:*"])
    async with client(served) as http:
        answered = await http.post("/mcp", headers=headers("alice", Origin=origin), json=initialize)
    assert answered.status_code == (403 if origin in ORIGINS_REFUSED else 200), origin


async def _session(
    http: httpx2.AsyncClient, token: str, initialize: dict[str, Any]
) -> dict[str, str]:
    opened = await http.post("/mcp", headers=headers(token), json=initialize)
    assert opened.is_success
    session = headers(
        token,
        **{
            "Content-Type": "application/json",
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-06-18",
        },
    )
    note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert (await http.post("/mcp", headers=session, content=note)).is_success
    return session


def _result(response: httpx2.Response) -> Any:
    for line in response.text.splitlines():
        if line.startswith("data: "):
            return json.loads(line[len("data: ") :])
    return None


async def test_odd_bodies_reach_the_sdk_unchanged_or_marked(
    initialize: dict[str, Any], python_answer: PythonAnswer, anyio_backend: str
) -> None:
    async with client(app()) as http:
        session = await _session(http, "bob", initialize)
        for body in (b"not json", b"[1, 2]", b'{"jsonrpc":"2.0","id":3,"method":"tools/call"}'):
            answered = await http.post("/mcp", headers=session, content=body)
            assert answered.status_code < 500, body
        nested = '{"content": "A", "tags": [{"x": 1, "x": 2}]}'
        raw = (
            '{"jsonrpc":"2.0","id":4,"method":"tools/call",'
            f'"params":{{"name":"remember","arguments":{nested}}}}}'
        )
        answered = await http.post("/mcp", headers=session, content=raw.encode())
        (block,) = _result(answered)["result"]["content"]
        assert block["text"] == (await python_answer("remember", nested)).content


# Each body repeats a key outside a tool call's arguments: its id, and where.
REPEATS_REFUSED: list[tuple[str, int | str | None, str]] = [
    (
        (
            '{"jsonrpc":"2.0","id":5,"method":"tools/call",'
            '"params":{"name":"recall","name":"remember","arguments":{"content":"A"}}}'
        ),
        5,
        "params.name",
    ),
    (
        (
            '{"jsonrpc":"2.0","id":"six","method":"tools/call",'
            '"params":{"name":"remember","arguments":{"content":"A"},"arguments":{"content":"B"}}}'
        ),
        "six",
        "params.arguments",
    ),
    (
        (
            '{"jsonrpc":"2.0","id":7,"method":"tools/list","method":"tools/call",'
            '"params":{"name":"remember","arguments":{"content":"A"}}}'
        ),
        7,
        "method",
    ),
    (
        (
            '{"jsonrpc":"2.0","id":8,"id":9,"method":"tools/call",'
            '"params":{"name":"remember","arguments":{"content":"A"}}}'
        ),
        None,
        "id",
    ),
    (
        (
            '{"jsonrpc":"2.0","id":true,"method":"tools/call",'
            '"params":{"name":"remember","arguments":{"content":"A"},"_meta":{"x":1,"x":2}}}'
        ),
        None,
        "params._meta.x",
    ),
    (
        (
            '{"jsonrpc":"2.0","id":10,"method":"prompts/get",'
            '"params":{"name":"memory","arguments":{"a":"1","a":"2"}}}'
        ),
        10,
        "params.arguments.a",
    ),
    (
        (
            '{"jsonrpc":"2.0","id":11,"method":"tools/call",'
            '"params":{"name":"remember","arguments":{"content":"A"},"_meta":[{"y":[{"z":1,"z":2}]}]}}'
        ),
        11,
        "params._meta[0].y[0].z",
    ),
    ('[{"jsonrpc":"2.0","id":12,"method":"tools/list","jsonrpc":"2.0"}]', None, "[0].jsonrpc"),
    ('{"jsonrpc":"2.0","method":"notifications/initialized","method":"x"}', None, "method"),
]


async def test_a_repeated_key_outside_tool_arguments_refuses_the_request(
    initialize: dict[str, Any], anyio_backend: str
) -> None:
    async with client(app()) as http:
        session = await _session(http, "dora", initialize)
        for body, request_id, path in REPEATS_REFUSED:
            answered = await http.post("/mcp", headers=session, content=body.encode())
            assert answered.status_code == 400, body
            assert answered.headers["content-type"] == "application/json"
            error = answered.json()
            assert error["jsonrpc"] == "2.0"
            assert error["id"] == request_id, body
            assert error["error"]["code"] == -32600
            assert error["error"]["message"] == (
                f"Invalid Request: a JSON object in the request repeats a key ({path})"
            )
        recall = '{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"recall"}}'
        recalled = _result(await http.post("/mcp", headers=session, content=recall.encode()))
    (block,) = recalled["result"]["content"]
    # Nothing was stored: the memory block lists no fact.
    assert not [line for line in block["text"].splitlines() if line.startswith("{")]


async def test_an_ipv6_bind_accepts_its_own_host(
    initialize: dict[str, Any], anyio_backend: str
) -> None:
    for host in ("::1", "::"):
        async with client(app(host=host)) as http:
            own = headers("carol", Host="[::1]:8000")
            assert (await http.post("/mcp", headers=own, json=initialize)).is_success
            evil = headers("carol", Host="evil.example")
            assert (await http.post("/mcp", headers=evil, json=initialize)).status_code == 421


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"max_sessions": 0}, ValueError),
        ({"max_sessions_per_user": 0}, ValueError),
        ({"max_sessions": 2, "max_sessions_per_user": 3}, ValueError),
        ({"max_sessions": "10"}, TypeError),
        ({"max_sessions_per_user": 1.5}, TypeError),
        ({"session_idle_timeout": float("nan")}, ValueError),
        ({"session_idle_timeout": 0}, ValueError),
        ({"session_idle_timeout": "600"}, TypeError),
        ({"session_idle_timeout": True}, TypeError),
        ({"session_idle_timeout": 10**400}, ValueError),
    ],
)
def test_session_settings_out_of_range_are_refused(
    settings: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"max_sessions|session_idle_timeout"):
        app(**settings)


@pytest.mark.parametrize(
    ("limits", "error", "words"),
    [
        ({"max_facts": 0}, ValueError, "max_facts must be None or at least 1 (got 0)"),
        ({"max_fact_length": "300"}, TypeError, "max_fact_length must be None or an int"),
        ({"max_prompt_chars": 10}, ValueError, "max_prompt_chars must be at least"),
        ({"max_fact": 10}, TypeError, "max_fact"),
    ],
)
def test_tool_limits_are_refused_when_the_servers_are_built(
    limits: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        app(**limits)
    with pytest.raises(error, match=re.escape(words)):
        memory_server(InProcessMemory(), scope="acme", end_user_id="alice", **limits)
