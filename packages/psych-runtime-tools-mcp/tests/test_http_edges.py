"""The HTTP server at its edges: hostile tokens, a failing JWKS, session bounds, Host and Origin."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from psych_runtime.tools.mcp._server import ARGUMENTS_AS_SENT

if TYPE_CHECKING:
    from conftest import Jwks, PythonAnswer, Running

ISSUER = "https://idp.example"
AUDIENCE = "https://memory.example/mcp"
ACCEPT = "application/json, text/event-stream"

RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
P256 = ec.generate_private_key(ec.SECP256R1())
P384 = ec.generate_private_key(ec.SECP384R1())
P521 = ec.generate_private_key(ec.SECP521R1())
ED25519 = ed25519.Ed25519PrivateKey.generate()
# Each accepted algorithm, the key that signs it, and the kid it is published under.
SIGNERS: dict[str, tuple[Any, str]] = {
    "RS256": (RSA, "rsa"),
    "RS384": (RSA, "rsa"),
    "RS512": (RSA, "rsa"),
    "PS256": (RSA, "rsa"),
    "PS384": (RSA, "rsa"),
    "PS512": (RSA, "rsa"),
    "ES256": (P256, "p256"),
    "ES384": (P384, "p384"),
    "ES512": (P521, "p521"),
    "EdDSA": (ED25519, "ed25519"),
}

Launcher = Callable[..., AbstractContextManager["Running"]]


def published(keys: dict[str, Any]) -> list[dict[str, Any]]:
    """The JWKS entries of private keys, by kid (without ``alg``, as many issuers publish them)."""
    entries = []
    for kid, key in keys.items():
        public = key.public_key()
        if isinstance(key, rsa.RSAPrivateKey):
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(public, as_dict=True)
        elif isinstance(key, ec.EllipticCurvePrivateKey):
            jwk = jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = jwt.algorithms.OKPAlgorithm.to_jwk(public, as_dict=True)
        entries.append({**jwk, "kid": kid, "use": "sig"})
    return entries


def claims(subject: str = "alice", **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "sub": subject, "aud": AUDIENCE, "iat": now, "exp": now + 300, **extra}


def signed(algorithm: str, subject: str = "alice", *, kid: str | None = None) -> str:
    key, published_kid = SIGNERS[algorithm]
    headers = {"kid": kid or published_kid}
    return jwt.encode(claims(subject), key, algorithm=algorithm, headers=headers)


def unsigned(algorithm: str, kid: str) -> str:
    """A token whose header names ``algorithm`` and ``kid``, with a signature of four bytes."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': algorithm, 'typ': 'JWT', 'kid': kid})}.{part(claims())}.AAAA"


def post(url: str, token: str | None, body: object, **headers: str) -> httpx2.Response:
    sent = {"Accept": ACCEPT, **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return httpx2.post(url, headers=sent, json=body, timeout=30)


@pytest.fixture
def serving_jwks(jwks: Jwks, running_http: Launcher) -> Iterator[tuple[Jwks, Running]]:
    jwks.keys = published({kid: key for key, kid in SIGNERS.values()})
    with running_http(
        "--store", "memory:", "--tenant", "acme", "--issuer", ISSUER, "--audience", AUDIENCE,
        "--jwks-url", jwks.url, "--jwks-timeout", "2",
    ) as running:  # fmt: skip
        yield jwks, running


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "public.pem"
    public = P256.public_key()
    path.write_bytes(public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return path


def launch_with_key(running_http: Launcher, key_file: Path, *args: str) -> Any:
    return running_http(
        "--store", "memory:", "--tenant", "acme", "--issuer", ISSUER, "--audience", AUDIENCE,
        "--jwt-key-file", str(key_file), *args,
    )  # fmt: skip


def test_a_header_naming_another_key_type_is_refused_with_401(
    initialize: dict[str, Any],
    serving_jwks: tuple[Jwks, Running],
) -> None:
    _, running = serving_jwks
    mismatches = [
        ("ES256", "rsa"),
        ("RS256", "p256"),
        ("PS256", "ed25519"),
        ("EdDSA", "p384"),
        ("ES512", "p256"),
        ("ES256", "p521"),
    ]
    for algorithm, kid in mismatches:
        response = post(running.url, unsigned(algorithm, kid), initialize)
        assert response.status_code == 401, (algorithm, kid, response.status_code)
        assert "resource_metadata" in response.headers["www-authenticate"]
    assert not [line for line in running.stderr if "Traceback" in line]


def test_every_documented_algorithm_is_accepted(
    initialize: dict[str, Any], serving_jwks: tuple[Jwks, Running]
) -> None:
    _, running = serving_jwks
    for algorithm in SIGNERS:
        response = post(running.url, signed(algorithm), initialize)
        assert response.status_code == 200, (algorithm, response.status_code)


def test_the_algorithm_option_narrows_the_list(
    initialize: dict[str, Any], jwks: Jwks, running_http: Launcher
) -> None:
    jwks.keys = published({kid: key for key, kid in SIGNERS.values()})
    with running_http(
        "--store", "memory:", "--tenant", "acme", "--issuer", ISSUER, "--audience", AUDIENCE,
        "--jwks-url", jwks.url, "--algorithm", "ES256", "--algorithm", "EdDSA",
    ) as running:  # fmt: skip
        accepted = {
            algorithm
            for algorithm in SIGNERS
            if post(running.url, signed(algorithm), initialize).status_code == 200
        }
    assert accepted == {"ES256", "EdDSA"}


def test_made_up_kids_do_not_refetch_the_keys(
    initialize: dict[str, Any], serving_jwks: tuple[Jwks, Running]
) -> None:
    jwks, running = serving_jwks
    assert post(running.url, signed("ES256"), initialize).status_code == 200
    assert jwks.hits == 1
    for attempt in range(5):
        response = post(running.url, signed("ES256", kid=f"made-up-{attempt}"), initialize)
        assert response.status_code == 401
    assert jwks.hits == 1


async def _batch(url: str, token: str, size: int, body: object) -> list[httpx2.Response]:
    responses: list[httpx2.Response] = []
    headers = {"Accept": ACCEPT, "Authorization": f"Bearer {token}"}

    async def one(client: httpx2.AsyncClient) -> None:
        responses.append(await client.post(url, headers=headers, json=body))

    async with httpx2.AsyncClient(timeout=20) as client, anyio.create_task_group() as group:
        for _ in range(size):
            group.start_soon(one, client)
    return responses


@pytest.mark.anyio
@pytest.mark.parametrize("behaviour", ["hang", "fail"])
async def test_a_failing_jwks_is_fetched_once_then_backed_off_and_answered_503(
    initialize: dict[str, Any],
    serving_jwks: tuple[Jwks, Running],
    behaviour: str,
    anyio_backend: str,
) -> None:
    jwks, running = serving_jwks
    jwks.behaviour = behaviour
    # A client timeout shorter than the SDK default's 30 s wait: requests
    # queued behind each other's fetch would not all be answered.
    first = await _batch(running.url, signed("ES256"), 6, initialize)
    assert [response.status_code for response in first] == [503] * 6
    assert jwks.hits == 1
    for response in first:
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"] == "temporarily_unavailable"
    # Inside the backoff nobody fetches again, whatever the kid.
    again = await _batch(running.url, signed("RS256"), 6, initialize)
    assert [response.status_code for response in again] == [503] * 6
    assert jwks.hits == 1
    assert not [line for line in running.stderr if "Traceback" in line]


def open_session(url: str, token: str, body: object) -> httpx2.Response:
    return post(url, token, body)


def es256(subject: str) -> str:
    return jwt.encode(claims(subject), P256, algorithm="ES256")


async def statuses_seen_by_the_sdk_client(url: str, token: str, **extra: str) -> set[int]:
    """Connect with the SDK's client; the HTTP statuses it got, once it gave up or listed tools."""
    statuses: set[int] = set()

    async def record(response: httpx2.Response) -> None:
        statuses.add(response.status_code)

    headers = {"Authorization": f"Bearer {token}", **extra}
    async with httpx2.AsyncClient(
        headers=headers, timeout=30, event_hooks={"response": [record]}
    ) as http:
        try:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                await client.list_tools()
        except Exception:  # noqa: BLE001, S110 - the statuses say why the client gave up
            pass
    return statuses


@pytest.mark.anyio
async def test_a_token_whose_time_claims_are_not_numbers_gets_401(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path, anyio_backend: str
) -> None:
    now = int(time.time())
    good = claims("alice")
    bad = [
        {**good, "exp": str(now + 300)},
        {**good, "nbf": str(now - 60)},
        {**good, "iat": True},
        {**good, "nbf": False},
    ]
    with launch_with_key(running_http, key_file) as running:
        for payload in bad:
            token = jwt.encode(payload, P256, algorithm="ES256")
            response = post(running.url, token, initialize)
            assert response.status_code == 401, payload
            assert "resource_metadata" in response.headers["www-authenticate"]
            assert await statuses_seen_by_the_sdk_client(running.url, token) == {401}
        accepted = await statuses_seen_by_the_sdk_client(running.url, es256("alice"))
    assert accepted
    assert all(status < 300 for status in accepted)


def test_sessions_are_bounded_per_end_user_and_in_total(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path
) -> None:
    options = ("--max-sessions", "3", "--max-sessions-per-user", "2")
    with launch_with_key(running_http, key_file, *options) as running:
        alice = es256("alice")
        opened = [open_session(running.url, alice, initialize) for _ in range(2)]
        assert [response.status_code for response in opened] == [200, 200]
        refused = open_session(running.url, alice, initialize)
        assert refused.status_code == 429
        assert "Too many open sessions for this user" in refused.text
        # Alice's sessions leave room for others: Bob is not refused.
        assert open_session(running.url, es256("bob"), initialize).status_code == 200
        full = open_session(running.url, es256("carol"), initialize)
        assert full.status_code == 503
        assert "Too many open sessions" in full.text
        # The sessions just opened end idle after the default 600 s at the latest.
        assert 1 <= int(full.headers["retry-after"]) <= 600
        # A session the client deletes frees its place at once.
        session = opened[0].headers["mcp-session-id"]
        headers = {
            "Accept": ACCEPT,
            "Authorization": f"Bearer {alice}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-06-18",
        }
        assert httpx2.delete(running.url, headers=headers, timeout=30).status_code == 200
        assert open_session(running.url, alice, initialize).status_code == 200


def test_an_idle_session_stops_counting_once_it_expires(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path
) -> None:
    options = ("--max-sessions-per-user", "1", "--session-idle-timeout", "1")
    with launch_with_key(running_http, key_file, *options) as running:
        alice = es256("alice")
        assert open_session(running.url, alice, initialize).status_code == 200
        assert open_session(running.url, alice, initialize).status_code == 429
        # The session expires on the server's clock: wait for it, boundedly.
        deadline = time.monotonic() + 30
        status = 429
        while status == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
            status = open_session(running.url, alice, initialize).status_code
        assert status == 200


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0"])  # noqa: S104 - the bind under test
def test_origin_and_host_are_checked_on_every_bind(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path, host: str
) -> None:
    with launch_with_key(running_http, key_file, "--host", host) as running:
        netloc = urlsplit(running.url).netloc
        url = running.url.replace("0.0.0.0", "127.0.0.1")  # noqa: S104
        token = es256("alice")
        assert post(url, token, initialize, Origin="http://evil.example").status_code == 403
        assert post(url, token, initialize, Host="evil.example").status_code == 421
        assert post(url, token, initialize).status_code == 200
        # The public URL's host and origin, as a reverse proxy forwards them.
        public = {"Host": "memory.example", "Origin": "https://memory.example"}
        assert post(url, token, initialize, **public).status_code == 200
        if host != "0.0.0.0":  # noqa: S104
            assert post(url, token, initialize, Host=netloc).status_code == 200


def test_allowed_hosts_and_origins_can_be_added(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path
) -> None:
    options = ("--allowed-host", "proxy.internal", "--allowed-origin", "https://app.example")
    with launch_with_key(running_http, key_file, "--host", "127.0.0.1", *options) as running:
        token = es256("alice")
        assert post(running.url, token, initialize, Host="proxy.internal").status_code == 200
        assert post(running.url, token, initialize, Origin="https://app.example").status_code == 200
        assert (
            post(running.url, token, initialize, Origin="https://evil.example").status_code == 403
        )
        assert post(running.url, token, initialize, Host="proxy.internal:8443").status_code == 421


@pytest.mark.anyio
async def test_a_name_with_any_port_accepts_only_a_port_after_the_colon(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path, anyio_backend: str
) -> None:
    options = ("--allowed-host", "proxy.internal:*", "--allowed-origin", "https://app.example:*")
    with launch_with_key(running_http, key_file, "--host", "127.0.0.1", *options) as running:
        port = urlsplit(running.url).port
        token = es256("alice")
        refused = [
            ({"Host": f"localhost:{port}.evil.com"}, 421),
            ({"Host": f"127.0.0.1:{port}@evil.com"}, 421),
            ({"Host": "proxy.internal:8443.evil.com"}, 421),
            ({"Origin": "http://localhost:1@evil.com"}, 403),
            ({"Origin": "https://app.example:443.evil.com"}, 403),
        ]
        for headers, status in refused:
            assert post(running.url, token, initialize, **headers).status_code == status, headers
            seen = await statuses_seen_by_the_sdk_client(running.url, token, **headers)
            assert seen == {status}, headers
        accepted = [
            {"Host": f"localhost:{port}"},
            {"Host": "proxy.internal:8443"},
            {"Origin": "https://app.example:8443"},
        ]
        for headers in accepted:
            assert post(running.url, token, initialize, **headers).status_code == 200, headers
            seen = await statuses_seen_by_the_sdk_client(running.url, token, **headers)
            assert seen, headers
            assert all(status < 300 for status in seen), headers


class Session:
    """One MCP session spoken as raw JSON-RPC, so a body can hold a key twice."""

    def __init__(self, url: str, token: str, initialize: dict[str, Any]) -> None:
        self._url = url
        opened = open_session(url, token, initialize)
        assert opened.status_code == 200
        self._headers = {
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-06-18",
        }
        self.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def send(self, raw: str) -> httpx2.Response:
        return httpx2.post(self._url, headers=self._headers, content=raw.encode(), timeout=30)

    def call(self, name: str, arguments: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        extra = f',"_meta":{json.dumps(meta)}' if meta is not None else ""
        raw = (
            '{"jsonrpc":"2.0","id":7,"method":"tools/call",'
            f'"params":{{"name":{json.dumps(name)},"arguments":{arguments}{extra}}}}}'
        )
        response = self.send(raw)
        assert response.status_code == 200, response.text
        for line in response.text.splitlines():
            if line.startswith("data: "):
                result: dict[str, Any] = json.loads(line[len("data: ") :])["result"]
                return result
        raise AssertionError(response.text)


@pytest.mark.anyio
async def test_arguments_with_a_repeated_key_are_refused_as_the_python_tools_refuse_them(
    initialize: dict[str, Any],
    running_http: Launcher,
    key_file: Path,
    python_answer: PythonAnswer,
    anyio_backend: str,
) -> None:
    calls = [
        ("remember", '{"content": "A", "content": "B"}'),
        ("remember", '{"content": "A", "end_user_id": "x", "end_user_id": "y"}'),
        ("forget", '{"memory_id": "m1", "memory_id": "m2"}'),
        ("recall", '{"a": 1, "a": 1}'),
    ]
    with launch_with_key(running_http, key_file) as running:
        session = Session(running.url, es256(f"dup-{anyio_backend}"), initialize)
        for name, arguments in calls:
            result = session.call(name, arguments)
            assert result["isError"] is True, (name, arguments)
            if name != "recall":
                expected = (await python_answer(name, arguments)).content
                assert result["content"][0]["text"] == expected
            assert "appears more than once" in result["content"][0]["text"]
        # A body larger than the SDK accepts is read no further and refused.
        assert session.send(" " * (4 * 1024 * 1024 + 1)).status_code == 413
        # A client cannot smuggle its own text past the parsed arguments.
        meta = {ARGUMENTS_AS_SENT: '{"content": "A", "content": "B"}'}
        kept = session.call("remember", '{"content": "kept"}', meta)
        assert kept["isError"] is False
        recalled = session.call("recall", "{}")["content"][0]["text"]
    assert '"kept"' in recalled
    assert '"A"' not in recalled
    assert '"B"' not in recalled


class RepeatingTransport(httpx2.AsyncBaseTransport):
    """Sends what the SDK's client sends, with ``params`` of each tool call opened by ``prefix``.

    ``prefix`` repeats a key the client sends after it (``"name":"forget",``),
    so the last one, the client's own, is the one a lenient parser keeps.
    """

    def __init__(self, prefix: bytes) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._prefix = prefix
        self.on = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.content if request.method == "POST" else b""
        if self.on and b'"method":"tools/call"' in body:
            changed = body.replace(b'"params":{', b'"params":{' + self._prefix, 1)
            headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
            request = httpx2.Request(request.method, request.url, headers=headers, content=changed)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def refused_for_the_sdk_client(url: str, token: str, prefix: bytes) -> MCPError:
    """What the SDK's client gets for a ``remember`` sent with ``prefix``; nothing is stored."""
    transport = RepeatingTransport(prefix)
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, transport=transport) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        transport.on = True
        with pytest.raises(MCPError) as refused:
            await client.call_tool("remember", {"content": "A"})
        transport.on = False
        recalled = await client.call_tool("recall", {})
    (block,) = recalled.content
    assert isinstance(block, TextContent)
    assert not [line for line in block.text.splitlines() if line.startswith("{")]
    return refused.value


@pytest.mark.anyio
async def test_a_repeated_key_above_the_arguments_is_refused_for_raw_and_sdk_clients(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path, anyio_backend: str
) -> None:
    token = es256(f"above-{anyio_backend}")
    with launch_with_key(running_http, key_file) as running:
        # Raw: the requests a lenient parser would read as remember("B") and remember("A").
        session = Session(running.url, token, initialize)
        raw = [
            (
                '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":'
                '{"name":"remember","arguments":{"content":"A"},"arguments":{"content":"B"}}}'
            ),
            (
                '{"jsonrpc":"2.0","id":9,"method":"tools/call",'
                '"params":{"name":"recall","name":"remember","arguments":{"content":"A"}}}'
            ),
        ]
        for body in raw:
            answered = session.send(body)
            assert answered.status_code == 400, body
            assert answered.json()["id"] == json.loads(body)["id"]
            assert answered.json()["error"]["code"] == -32600
        prefixes = {
            "params.name": b'"name":"forget",',
            "params.arguments": b'"arguments":{"content":"B"},',
            "params._meta": b'"_meta":{},',
        }
        for path, prefix in prefixes.items():
            refused = await refused_for_the_sdk_client(running.url, token, prefix)
            assert refused.error.code == -32600
            assert refused.error.message == (
                f"Invalid Request: a JSON object in the request repeats a key ({path})"
            )


def test_long_subjects_are_served_each_as_its_own_end_user(
    initialize: dict[str, Any], running_http: Launcher, key_file: Path
) -> None:
    long_a, long_b = "x" * 300, "x" * 299 + "y"
    with launch_with_key(running_http, key_file) as running:
        first = Session(running.url, es256(long_a), initialize)
        assert first.call("remember", '{"content": "long subject"}')["isError"] is False
        again = Session(running.url, es256(long_a), initialize).call("recall", "{}")
        other = Session(running.url, es256(long_b), initialize).call("recall", "{}")
    assert "long subject" in again["content"][0]["text"]
    assert "long subject" not in other["content"][0]["text"]
