"""A complete agent loop with memory, for Anthropic, OpenAI or Google Gen AI.

Each user turn goes like this:

1. The system prompt is rebuilt from the application's instructions plus the
   memory block (`MemoryTools.prompt`), so it always shows the end user's
   current facts and their ids.
2. The model is called with the conversation and the two memory tools, in
   its provider's shape (`ToolSpec.as_anthropic` / `as_openai` / `as_gemini`).
3. Every tool call it makes runs through `MemoryTools.call`, bound to this
   tenant and end user, and the result goes back to the model (with the
   error flag when the call was refused).
4. Steps 2 and 3 repeat until the model answers in text.

Run it against a real provider (the SDK installed, its API key in the
environment; facts live in this process and end with it):

    python docs/examples/agent_loop.py anthropic --model <model name>
    python docs/examples/agent_loop.py openai --model <model name>
    python docs/examples/agent_loop.py gemini --model <model name>

Without the provider's API key in the environment it stops at once, naming
the variable; `hatch run demo` runs a scripted session offline instead.

Type `/new` to start a new conversation (memory stays, history goes) and
`/quit` to stop. The tests run the same functions with each official SDK
against a scripted model served locally.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.tools.builtins import MemoryTools, memory_tools

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam
    from google import genai
    from google.genai import types as genai_types
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

INSTRUCTIONS = (
    "You are the assistant of a logistics company. Answer briefly. Use the "
    "memory tools to keep durable facts about this user up to date."
)
# The environment variables each provider's SDK reads its API key from (any
# one will do), checked before the first prompt: without one, the SDK fails
# only at the first call, or on its construction, with a traceback.
API_KEYS = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
# A model that keeps calling tools without answering is a bug somewhere;
# stop instead of looping (and paying) forever.
MAX_STEPS = 8


@dataclass(frozen=True)
class Agent:
    """What every turn needs besides the provider's client and the history.

    Attributes:
        tools: The memory tools, bound to this tenant and end user.
        model: The provider's model name.
        fixed: Facts the application already holds (the runtime's
            ``memories=``), shown in the prompt without an id.
    """

    tools: MemoryTools
    model: str
    fixed: Sequence[str] = ()


class TooManyStepsError(RuntimeError):
    """The model kept calling tools for more than `MAX_STEPS` steps."""


def system_prompt(memory_block: str) -> str:
    """The application's instructions, then the memory block if there is one."""
    return f"{INSTRUCTIONS}\n\n{memory_block}" if memory_block else INSTRUCTIONS


async def anthropic_turn(
    client: AsyncAnthropic, agent: Agent, history: list[MessageParam], user_text: str
) -> str:
    """Run one user turn with the Anthropic Messages API; return the answer."""
    history.append({"role": "user", "content": user_text})
    tools = agent.tools
    system = system_prompt(await tools.prompt(agent.fixed))
    specs = [cast("ToolParam", spec.as_anthropic()) for spec in tools.specs]
    for _ in range(MAX_STEPS):
        response = await client.messages.create(
            model=agent.model, max_tokens=1024, system=system, messages=history, tools=specs
        )
        history.append({"role": "assistant", "content": response.content})
        calls = [block for block in response.content if block.type == "tool_use"]
        if not calls:
            return "".join(block.text for block in response.content if block.type == "text")
        results: list[ToolResultBlockParam] = []
        for call in calls:
            result = await tools.call(call.name, call.input)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": result.content,
                    "is_error": result.is_error,
                }
            )
        history.append({"role": "user", "content": results})
    raise TooManyStepsError(f"no answer after {MAX_STEPS} steps")


async def openai_turn(
    client: AsyncOpenAI, agent: Agent, history: list[ChatCompletionMessageParam], user_text: str
) -> str:
    """Run one user turn with OpenAI Chat Completions; return the answer."""
    history.append({"role": "user", "content": user_text})
    tools = agent.tools
    system: ChatCompletionMessageParam = {
        "role": "system",
        "content": system_prompt(await tools.prompt(agent.fixed)),
    }
    specs = [cast("ChatCompletionFunctionToolParam", spec.as_openai()) for spec in tools.specs]
    for _ in range(MAX_STEPS):
        completion = await client.chat.completions.create(
            model=agent.model, messages=[system, *history], tools=specs
        )
        message = completion.choices[0].message
        calls = [call for call in message.tool_calls or () if call.type == "function"]
        if not calls:
            history.append({"role": "assistant", "content": message.content or ""})
            return message.content or ""
        history.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in calls
                ],
            }
        )
        for call in calls:
            # Chat Completions delivers the arguments as JSON text.
            result = await tools.call(call.function.name, call.function.arguments)
            # Tool messages have no error flag: the result text says it.
            history.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
    raise TooManyStepsError(f"no answer after {MAX_STEPS} steps")


async def gemini_turn(
    client: genai.Client, agent: Agent, history: list[genai_types.Content], user_text: str
) -> str:
    """Run one user turn with the Google Gen AI SDK; return the answer."""
    from google.genai import types  # noqa: PLC0415 - only this provider needs it

    history.append(types.Content(role="user", parts=[types.Part(text=user_text)]))
    config = types.GenerateContentConfig(
        system_instruction=system_prompt(await agent.tools.prompt(agent.fixed)),
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration.model_validate(spec.as_gemini())
                    for spec in agent.tools.specs
                ]
            )
        ],
        # The loop runs the tools itself, through MemoryTools.call.
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    for _ in range(MAX_STEPS):
        response = await client.aio.models.generate_content(
            model=agent.model, contents=list(history), config=config
        )
        candidates = response.candidates or []
        if candidates and candidates[0].content is not None:
            history.append(candidates[0].content)
        calls = response.function_calls or []
        if not calls:
            return response.text or ""
        parts: list[genai_types.Part] = []
        for call in calls:
            result = await agent.tools.call(call.name or "", call.args)
            # Gemini reads {"error": ...} as a failed call and anything else
            # as its output; the result is already one or the other.
            payload: dict[str, Any] = json.loads(result.content)
            parts.append(
                types.Part(
                    function_response=types.FunctionResponse(
                        id=call.id, name=call.name, response=payload
                    )
                )
            )
        history.append(types.Content(role="user", parts=parts))
    raise TooManyStepsError(f"no answer after {MAX_STEPS} steps")


async def chat(provider: str, model: str, tenant: str, end_user_id: str) -> None:
    """Talk to a real model in the terminal, with memory."""
    tools = memory_tools(InProcessMemory(), scope=tenant, end_user_id=end_user_id)
    agent = Agent(tools, model, fixed=("prefers metric units",))
    if provider == "anthropic":
        from anthropic import AsyncAnthropic  # noqa: PLC0415

        anthropic_client = AsyncAnthropic()
        anthropic_history: list[MessageParam] = []

        async def turn(text: str) -> str:
            return await anthropic_turn(anthropic_client, agent, anthropic_history, text)

        def new_conversation() -> None:
            anthropic_history.clear()
    elif provider == "openai":
        from openai import AsyncOpenAI  # noqa: PLC0415

        openai_client = AsyncOpenAI()
        openai_history: list[ChatCompletionMessageParam] = []

        async def turn(text: str) -> str:
            return await openai_turn(openai_client, agent, openai_history, text)

        def new_conversation() -> None:
            openai_history.clear()
    else:
        from google import genai  # noqa: PLC0415

        gemini_client = genai.Client()
        gemini_history: list[genai_types.Content] = []

        async def turn(text: str) -> str:
            return await gemini_turn(gemini_client, agent, gemini_history, text)

        def new_conversation() -> None:
            gemini_history.clear()

    print(f"{provider} / {model}, tenant {tenant!r}, end user {end_user_id!r}. /new, /quit.")
    while True:
        try:
            text = (await anyio.to_thread.run_sync(input, "you> ")).strip()
        except EOFError:
            return
        if text == "/quit":
            return
        if text == "/new":
            new_conversation()
            print("(new conversation; memory kept)")
        elif text:
            print("model>", await turn(text))


def missing_key(provider: str) -> str | None:
    """The line saying which variable to set, or ``None`` when the provider's key is set."""
    names = API_KEYS[provider]
    if any(os.environ.get(name) for name in names):
        return None
    return (
        f"{provider} needs its API key: set {' or '.join(names)} "
        "(or run `hatch run demo`, which needs no key and no network)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line, check the provider's API key, and start the chat."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("provider", choices=list(API_KEYS))
    parser.add_argument("--model", required=True, help="the provider's model name")
    parser.add_argument("--tenant", default="demo-tenant")
    parser.add_argument("--end-user", default="demo-user")
    args = parser.parse_args(argv)
    missing = missing_key(args.provider)
    if missing is not None:
        # One line and exit 2, as argparse ends a command line it refuses.
        print(f"{parser.prog}: error: {missing}", file=sys.stderr)
        sys.exit(2)
    anyio.run(chat, args.provider, args.model, args.tenant, args.end_user)


if __name__ == "__main__":
    main()
