"""The documented agent loop, end to end, with each provider's official SDK.

The SDKs are real; only their HTTP is served locally, by a mock transport
that plays a scripted model. Each scripted step sees the exact request the
SDK sent (so the tests check what reached the provider: our tool
definitions, the memory block, the tool results) and answers the way that
provider's API does. The model finds ids the way a real one would: by
reading them from the memory block in the system prompt. Each SDK is given
a client of the HTTP library it takes: ``httpx2`` from the major version
that moved to it, ``httpx`` before (the test environment allows both, and
the lowest-versions run installs the older).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import Memory
from psych_runtime.tools.builtins import FORGET, REMEMBER, memory_tools

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "agent_loop.py"
FIXED = ("prefers metric units",)
BERLIN = "prefers the Berlin warehouse"
EUR = "wants invoices in EUR"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up while the class is being built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


loop = load_example()

Body = dict[str, Any]
Step = Callable[[Body], Body]


@dataclass
class ScriptedModel:
    """Answers each request with the next step of its script."""

    provider: Provider
    script: list[Step]
    requests: list[Any] = field(default_factory=list)

    def handle(self, request: Any) -> Any:
        self.requests.append(request)
        assert request.url.path.endswith(self.provider.path), request.url
        assert self.script, "the model was called more often than scripted"
        body: Body = json.loads(request.content)
        return self.provider.http.Response(200, json=self.script.pop(0)(body))

    def client(self) -> Any:
        """The provider's SDK client, its requests answered by this model."""
        http = self.provider.http
        return self.provider.client(http.AsyncClient(transport=http.MockTransport(self.handle)))


@dataclass(frozen=True)
class Result:
    """One tool result as the SDK sent it back to the model."""

    call_id: str | None
    data: dict[str, Any]
    is_error: bool | None  # None: the provider's format has no error flag


class Provider:
    """How one provider's wire format looks, for the scripted model."""

    name: str
    path: str
    sdk: str  # the SDK's distribution

    @cached_property
    def http(self) -> ModuleType:
        """The HTTP library the installed SDK takes a client of (read once: every request asks)."""
        requires = importlib.metadata.requires(self.sdk) or []
        if any(requirement.startswith("httpx2") for requirement in requires):
            return httpx2
        return importlib.import_module("httpx")

    def client(self, http_client: Any) -> Any:
        raise NotImplementedError

    def history(self) -> list[Any]:
        return []

    async def turn(self, client: Any, agent: Any, history: list[Any], text: str) -> str:
        raise NotImplementedError

    def system(self, body: Body) -> str:
        raise NotImplementedError

    def results(self, body: Body) -> list[Result]:
        raise NotImplementedError

    def check_tools(self, body: Body) -> None:
        raise NotImplementedError

    def calls(self, *calls: tuple[str, str, dict[str, Any]]) -> Body:
        raise NotImplementedError

    def text(self, text: str) -> Body:
        raise NotImplementedError


class Anthropic(Provider):
    name = "anthropic"
    path = "/v1/messages"
    sdk = "anthropic"

    def client(self, http_client: Any) -> Any:
        return anthropic.AsyncAnthropic(api_key="test-key", http_client=http_client)

    async def turn(self, client: Any, agent: Any, history: list[Any], text: str) -> str:
        answer: str = await loop.anthropic_turn(client, agent, history, text)
        return answer

    def system(self, body: Body) -> str:
        system: str = body["system"]
        return system

    def results(self, body: Body) -> list[Result]:
        last = body["messages"][-1]
        assert last["role"] == "user"
        return [
            Result(block["tool_use_id"], json.loads(block["content"]), block["is_error"])
            for block in last["content"]
            if block["type"] == "tool_result"
        ]

    def check_tools(self, body: Body) -> None:
        assert body["tools"] == [REMEMBER.as_anthropic(), FORGET.as_anthropic()]

    def calls(self, *calls: tuple[str, str, dict[str, Any]]) -> Body:
        content = [
            {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
            for call_id, name, arguments in calls
        ]
        return self._message(content, "tool_use")

    def text(self, text: str) -> Body:
        return self._message([{"type": "text", "text": text}], "end_turn")

    def _message(self, content: list[Body], stop_reason: str) -> Body:
        return {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }


class OpenAI(Provider):
    name = "openai"
    path = "/chat/completions"
    sdk = "openai"

    def client(self, http_client: Any) -> Any:
        return openai.AsyncOpenAI(api_key="test-key", http_client=http_client)

    async def turn(self, client: Any, agent: Any, history: list[Any], text: str) -> str:
        answer: str = await loop.openai_turn(client, agent, history, text)
        return answer

    def system(self, body: Body) -> str:
        first = body["messages"][0]
        assert first["role"] == "system"
        system: str = first["content"]
        return system

    def results(self, body: Body) -> list[Result]:
        results: list[Result] = []
        for message in reversed(body["messages"]):
            if message["role"] != "tool":
                break
            results.insert(0, Result(message["tool_call_id"], json.loads(message["content"]), None))
        return results

    def check_tools(self, body: Body) -> None:
        assert body["tools"] == [REMEMBER.as_openai(), FORGET.as_openai()]

    def calls(self, *calls: tuple[str, str, dict[str, Any]]) -> Body:
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                # Chat Completions sends the arguments as JSON text.
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, name, arguments in calls
        ]
        message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
        return self._completion(message, "tool_calls")

    def text(self, text: str) -> Body:
        return self._completion({"role": "assistant", "content": text}, "stop")

    def _completion(self, message: Body, finish_reason: str) -> Body:
        return {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "finish_reason": finish_reason, "message": message}],
        }


class Gemini(Provider):
    name = "gemini"
    path = ":generateContent"
    sdk = "google-genai"

    def client(self, http_client: Any) -> Any:
        options = genai_types.HttpOptions(httpx_async_client=http_client)
        return genai.Client(api_key="test-key", http_options=options)

    async def turn(self, client: Any, agent: Any, history: list[Any], text: str) -> str:
        answer: str = await loop.gemini_turn(client, agent, history, text)
        return answer

    def system(self, body: Body) -> str:
        system: str = body["systemInstruction"]["parts"][0]["text"]
        return system

    def results(self, body: Body) -> list[Result]:
        last = body["contents"][-1]
        responses = [part["functionResponse"] for part in last["parts"]]
        return [
            Result(response.get("id"), response["response"], "error" in response["response"])
            for response in responses
        ]

    def check_tools(self, body: Body) -> None:
        (tool,) = body["tools"]
        declarations = tool["functionDeclarations"]
        assert [declaration["name"] for declaration in declarations] == ["remember", "forget"]
        # The Developer API refuses additionalProperties in `parameters`.
        assert "additionalProperties" not in json.dumps(declarations)
        assert "additional_properties" not in json.dumps(declarations)
        for declaration, spec in zip(declarations, (REMEMBER, FORGET), strict=True):
            assert declaration["description"] == spec.description
            parameters = declaration["parameters"]
            assert parameters["type"] == "OBJECT"
            assert parameters["required"] == spec.input_schema["required"]

    def calls(self, *calls: tuple[str, str, dict[str, Any]]) -> Body:
        parts = [
            {"functionCall": {"id": call_id, "name": name, "args": arguments}}
            for call_id, name, arguments in calls
        ]
        return self._response(parts)

    def text(self, text: str) -> Body:
        return self._response([{"text": text}])

    def _response(self, parts: list[Body]) -> Body:
        return {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
            ]
        }


PROVIDERS = [Anthropic(), OpenAI(), Gemini()]


@pytest.fixture(params=PROVIDERS, ids=lambda provider: provider.name)
def provider(request: pytest.FixtureRequest) -> Provider:
    chosen: Provider = request.param
    return chosen


def entries(system: str) -> list[dict[str, Any]]:
    """The memory block's entries, read from the system prompt as a model would."""
    return [json.loads(line) for line in system.splitlines() if line.startswith("{")]


def ids_of(system: str) -> Iterator[tuple[str, str]]:
    for entry in entries(system):
        if "id" in entry:
            yield entry["id"], entry["fact"]


async def other_keys(memory: InProcessMemory) -> list[tuple[Memory, ...]]:
    return [await memory.recall("acme", "u2"), await memory.recall("globex", "u1")]


async def test_a_session_remembers_and_forgets_through_the_sdk(provider: Provider) -> None:
    memory = InProcessMemory()
    untouched = [
        (await memory.remember("acme", "u2", "theirs"),),
        (await memory.remember("globex", "u1", "theirs too"),),
    ]
    agent = loop.Agent(
        memory_tools(memory, scope="acme", end_user_id="u1"), "scripted-model", FIXED
    )
    seen: dict[str, str] = {}

    def first_call(body: Body) -> Body:
        provider.check_tools(body)
        system = provider.system(body)
        assert entries(system) == [{"fact": "prefers metric units"}]
        # The model tries to write for another user first.
        return provider.calls(("call_1", "remember", {"content": BERLIN, "end_user_id": "u2"}))

    def after_refusal(body: Body) -> Body:
        (result,) = provider.results(body)
        assert result.call_id == "call_1"
        assert "'end_user_id' cannot be passed" in result.data["error"]
        assert result.is_error in (True, None)
        return provider.calls(
            ("call_2", "remember", {"content": BERLIN}),
            ("call_3", "remember", {"content": EUR}),
        )

    def after_remembering(body: Body) -> Body:
        results = provider.results(body)
        assert [result.call_id for result in results] == ["call_2", "call_3"]
        for result in results:
            assert result.is_error in (False, None)
            assert result.data["remembered"] is True
        seen["berlin"] = results[0].data["id"]
        return provider.text("Noted: Berlin warehouse, invoices in EUR.")

    def new_conversation(body: Body) -> Body:
        system = provider.system(body)
        known = dict(ids_of(system))
        assert sorted(known.values()) == sorted([BERLIN, EUR])
        (berlin_id,) = [memory_id for memory_id, fact in known.items() if fact == BERLIN]
        assert berlin_id == seen["berlin"]
        return provider.calls(("call_4", "forget", {"memory_id": berlin_id}))

    def after_forgetting(body: Body) -> Body:
        (result,) = provider.results(body)
        assert result.call_id == "call_4"
        assert result.data == {"forgotten": True}
        return provider.text("Done, I dropped the warehouse preference.")

    model = ScriptedModel(
        provider,
        [first_call, after_refusal, after_remembering, new_conversation, after_forgetting],
    )
    client = model.client()

    first = provider.history()
    answer = await provider.turn(client, agent, first, "Ship from Berlin, and bill me in EUR.")
    assert answer == "Noted: Berlin warehouse, invoices in EUR."
    stored = await memory.recall("acme", "u1")
    assert [fact.content for fact in stored] == [BERLIN, EUR]
    assert await other_keys(memory) == untouched

    second = provider.history()
    answer = await provider.turn(client, agent, second, "Forget the warehouse thing.")
    assert answer == "Done, I dropped the warehouse preference."
    assert [fact.content for fact in await memory.recall("acme", "u1")] == [EUR]
    assert await other_keys(memory) == untouched
    assert model.script == []
    assert len(model.requests) == 5


async def test_a_model_that_never_answers_is_stopped(provider: Provider) -> None:
    memory = InProcessMemory()
    agent = loop.Agent(memory_tools(memory, scope="acme", end_user_id="u1"), "scripted-model")

    def forget_again(body: Body) -> Body:
        del body
        return provider.calls(("call", "forget", {"memory_id": "nothing"}))

    model = ScriptedModel(provider, [forget_again] * loop.MAX_STEPS)
    client = model.client()
    with pytest.raises(loop.TooManyStepsError):
        await provider.turn(client, agent, provider.history(), "hello")
    assert len(model.requests) == loop.MAX_STEPS


async def test_a_model_at_the_cap_forgets_an_outdated_fact_to_make_room(
    provider: Provider,
) -> None:
    memory = InProcessMemory()
    outdated = await memory.remember("acme", "u1", "ships to the old Hamburg address")
    kept = await memory.remember("acme", "u1", BERLIN)
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_facts=2)
    agent = loop.Agent(tools, "scripted-model")
    rambling = "the user's whole delivery history, " * 20

    def try_to_remember(body: Body) -> Body:
        provider.check_tools(body)
        assert sorted(fact for _, fact in ids_of(provider.system(body))) == sorted(
            [outdated.content, kept.content]
        )
        return provider.calls(
            ("call_1", "remember", {"content": EUR}),
            ("call_2", "remember", {"content": rambling}),
        )

    def make_room(body: Body) -> Body:
        full, too_long = provider.results(body)
        assert [full.call_id, too_long.call_id] == ["call_1", "call_2"]
        for result in (full, too_long):
            assert result.is_error in (True, None)
            assert EUR not in result.data["error"]
            assert "delivery history" not in result.data["error"]
        assert "memory is full" in full.data["error"]
        assert "save a shorter fact" in too_long.data["error"]
        # The model reads the id of the outdated fact from its prompt.
        (old_id,) = [
            memory_id
            for memory_id, fact in ids_of(provider.system(body))
            if fact == outdated.content
        ]
        return provider.calls(
            ("call_3", "forget", {"memory_id": old_id}),
            ("call_4", "remember", {"content": EUR}),
        )

    def after_making_room(body: Body) -> Body:
        forgotten, remembered = provider.results(body)
        assert forgotten.data == {"forgotten": True}
        assert remembered.data["remembered"] is True
        assert remembered.is_error in (False, None)
        return provider.text("Noted: invoices in EUR; I dropped the old Hamburg address.")

    model = ScriptedModel(provider, [try_to_remember, make_room, after_making_room])
    client = model.client()
    answer = await provider.turn(client, agent, provider.history(), "Bill me in EUR from now on.")
    assert answer == "Noted: invoices in EUR; I dropped the old Hamburg address."
    assert [fact.content for fact in await memory.recall("acme", "u1")] == [BERLIN, EUR]
    assert model.script == []
