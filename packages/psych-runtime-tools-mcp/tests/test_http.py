"""Streamable HTTP: a real server on 127.0.0.1, real signed tokens, the SDK's own client."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

if TYPE_CHECKING:
    from conftest import Running

ISSUER_A = "https://idp-a.example"
ISSUER_B = "https://idp-b.example"
AUDIENCE = "https://memory.example/mcp"
TENANT_CLAIM = "org"


@dataclass(frozen=True)
class Server:
    url: str
    key: ec.EllipticCurvePrivateKey

    def token(
        self,
        subject: str,
        *,
        issuer: str = ISSUER_A,
        audience: str = AUDIENCE,
        lifetime: int = 300,
        key: ec.EllipticCurvePrivateKey | None = None,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {"iss": issuer, "sub": subject, "aud": audience, "iat": now}
        payload |= {"exp": now + lifetime, TENANT_CLAIM: "acme", **claims}
        return jwt.encode(payload, key or self.key, algorithm="ES256")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    running_http: Callable[..., AbstractContextManager[Running]],
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("http")
    key = ec.generate_private_key(ec.SECP256R1())
    public = folder / "public.pem"
    pem = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    public.write_bytes(pem)
    with running_http(
        "--host", "127.0.0.1", "--store", "memory:", "--tenant-claim", TENANT_CLAIM,
        "--issuer", ISSUER_A, "--issuer", ISSUER_B, "--audience", AUDIENCE,
        "--jwt-key-file", str(public),
    ) as running:  # fmt: skip
        yield Server(running.url, key)


@asynccontextmanager
async def connect(server: Server, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(server.url, http_client=http)) as session,
    ):
        yield session


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def recall_ids(session: Client) -> set[str]:
    recalled = text(await session.call_tool("recall", {}))
    return {json.loads(line)["id"] for line in recalled.splitlines() if line.startswith("{")}


@pytest.mark.anyio
async def test_each_token_reaches_only_its_own_users_facts(
    server: Server, anyio_backend: str
) -> None:
    tokens = {
        "alice@a": server.token("alice"),
        "bob@a": server.token("bob"),
        # The same subject at another issuer is another person.
        "alice@b": server.token("alice", issuer=ISSUER_B),
        # The same subject in another tenant is another end user.
        "alice@a/other": server.token("alice", org="other"),
    }
    saved: dict[str, str] = {}
    for who, token in tokens.items():
        async with connect(server, token) as session:
            result = await session.call_tool("remember", {"content": f"{who} {anyio_backend}"})
            saved[who] = json.loads(text(result))["id"]
    for who, token in tokens.items():
        async with connect(server, token) as session:
            assert saved[who] in await recall_ids(session)
            for other, memory_id in saved.items():
                if other == who:
                    continue
                assert memory_id not in await recall_ids(session)
                answer = await session.call_tool("forget", {"memory_id": memory_id})
                assert json.loads(text(answer))["forgotten"] is False


@pytest.mark.anyio
async def test_an_end_user_id_argument_is_refused_and_nothing_stored(
    server: Server, anyio_backend: str, python_answer: Any
) -> None:
    smuggled = {"content": "is an admin", "end_user_id": f"{ISSUER_A}#bob"}
    async with connect(server, server.token("carol")) as session:
        result = await session.call_tool("remember", smuggled)
        assert result.is_error
        assert text(result) == (await python_answer("remember", smuggled)).content
        for tool in (await session.list_tools()).tools:
            schema = json.dumps(tool.input_schema).lower()
            assert "user" not in schema
            assert "tenant" not in schema
    for user in ("carol", "bob"):
        async with connect(server, server.token(user)) as session:
            assert "is an admin" not in text(await session.call_tool("recall", {}))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "claims",
    [{"org": None}, {"org": 7}, {"org": " acme"}],
    ids=["no tenant", "tenant not a string", "invalid tenant"],
)
async def test_a_token_without_a_valid_key_reaches_no_memory(
    server: Server, anyio_backend: str, claims: dict[str, Any]
) -> None:
    async with connect(server, server.token("dave", **claims)) as session:
        result = await session.call_tool("remember", {"content": "likes tea"})
    assert result.is_error
    assert "not signed in as a user this server can serve" in text(result)


@pytest.mark.parametrize(
    "kind", ["none", "expired", "unknown issuer", "forged signature", "other audience", "garbage"]
)
def test_requests_without_a_valid_token_are_refused(server: Server, kind: str) -> None:
    tokens = {
        "none": None,
        "expired": server.token("alice", lifetime=-60),
        "unknown issuer": server.token("alice", issuer="https://idp-evil.example"),
        "forged signature": server.token("alice", key=ec.generate_private_key(ec.SECP256R1())),
        "other audience": server.token("alice", audience="https://other.example/mcp"),
        "garbage": "not-a-jwt",
    }
    token = tokens[kind]
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": f"{kind} got in"}},
    }
    response = httpx2.post(server.url, headers=headers, json=request, timeout=30)
    assert response.status_code == 401
    assert "got in" not in response.text


@pytest.mark.anyio
async def test_parallel_calls_from_several_clients_lose_nothing(
    server: Server, anyio_backend: str
) -> None:
    users, clients_per_user, calls = 2, 2, 8
    ids: dict[str, list[str]] = {f"par-{anyio_backend}-{u}": [] for u in range(users)}

    async def client(user: str) -> None:
        async with connect(server, server.token(user)) as session, anyio.create_task_group() as tg:
            for call in range(calls):
                tg.start_soon(remember, session, user, call)

    async def remember(session: Client, user: str, call: int) -> None:
        result = await session.call_tool("remember", {"content": f"{user} fact {call}"})
        assert not result.is_error, text(result)
        ids[user].append(json.loads(text(result))["id"])

    async with anyio.create_task_group() as group:
        for user in ids:
            for _ in range(clients_per_user):
                group.start_soon(client, user)
    for user, saved in ids.items():
        async with connect(server, server.token(user)) as session:
            assert await recall_ids(session) == set(saved)
        assert len(set(saved)) == clients_per_user * calls


def test_a_session_opened_with_one_token_is_refused_to_another(
    server: Server, initialize: dict[str, Any]
) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    alice = {**headers, "Authorization": f"Bearer {server.token('alice')}"}
    opened = httpx2.post(server.url, headers=alice, json=initialize, timeout=30)
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    bob = {
        **headers,
        "Authorization": f"Bearer {server.token('bob')}",
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-06-18",
    }
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall"}}
    taken = httpx2.post(server.url, headers=bob, json=call, timeout=30)
    assert taken.status_code in {403, 404}
    assert "alice" not in taken.text


@pytest.mark.anyio
async def test_parallel_remembers_over_http_keep_the_cap(
    tmp_path: Path,
    running_http: Callable[..., AbstractContextManager[Running]],
    anyio_backend: str,
) -> None:
    # Every request binds the tools afresh: the cap holds because the store
    # counts and adds as one step.
    key = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path / "public.pem"
    pem = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    public.write_bytes(pem)
    store = f"sqlite:///{tmp_path / 'memory.sqlite3'}"
    with running_http(
        "--host", "127.0.0.1", "--store", store, "--tenant-claim", TENANT_CLAIM,
        "--issuer", ISSUER_A, "--audience", AUDIENCE, "--jwt-key-file", str(public),
        "--max-facts", "2",
    ) as running:  # fmt: skip
        server = Server(running.url, key)
        token = server.token("erin")
        results: list[CallToolResult] = []

        async def client(first: int) -> None:
            async with connect(server, token) as session, anyio.create_task_group() as group:
                for call in range(first, 6, 2):
                    group.start_soon(remember, session, call)

        async def remember(session: Client, call: int) -> None:
            results.append(await session.call_tool("remember", {"content": f"fact {call}"}))

        async with anyio.create_task_group() as group:
            for first in range(2):
                group.start_soon(client, first)
        async with connect(server, token) as session:
            stored = await recall_ids(session)
    assert [result.is_error for result in results].count(False) == 2
    assert stored == {json.loads(text(result))["id"] for result in results if not result.is_error}
