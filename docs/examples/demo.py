"""An offline agent session with memory, played by a scripted model.

Run it with ``hatch run demo``. There is no network and no API key: the
"model" is a short deterministic script that reads the same system prompt
and conversation a real model would get, and decides what to say and which
tools to call from them alone. Everything it is shown, and everything it
does, is printed.

The story: an end user states preferences and the model remembers them; in a
new conversation the model finds them, with their ids, in its prompt; the
user asks to drop one and the model forgets it by that id; finally the
operator erases everything stored about the end user.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any

import anyio

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryStore
from psych_runtime.tools.builtins import MemoryTools, ToolResult, memory_tools

TENANT = "acme-logistics"
END_USER = "user-42"
OTHER_USER = "user-7"
# Facts the application already holds: the runtime's `memories=`. They are
# shown to the model on every turn and can never be forgotten by it.
FIXED = ("prefers metric units",)
INSTRUCTIONS = "You are the assistant of Acme Logistics. Answer briefly."
MAX_STEPS = 4
WIDTH = 100


def make_store() -> MemoryStore:
    """Build the store the demo runs on: facts in this process only."""
    return InProcessMemory()


# The conversation, as the model sees it.


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asks for."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """One message: from the user, from the model, or a tool's result."""

    role: str  # "user", "model" or "tool"
    text: str = ""
    calls: tuple[ToolCall, ...] = ()


@dataclass
class ScriptedModel:
    """A stand-in for a real model: a few fixed rules over what it is shown.

    It keeps no state of its own between calls, exactly like a real model
    behind an API: whatever it knows comes from the system prompt and the
    conversation it is given.
    """

    def respond(self, system: str, conversation: list[Turn]) -> Turn:
        """Return the next message: tool calls, or a text answer."""
        last = conversation[-1]
        if last.role == "tool":
            return self._after_tool(json.loads(last.text))
        said = last.text.lower()
        return (
            self._worth_remembering(said)
            or self._about_memory(said, system)
            or Turn("model", "Happy to help. Anything about your orders?")
        )

    def _worth_remembering(self, said: str) -> Turn | None:
        # Lasting preferences are remembered; small talk is not.
        if "berlin" in said and "prefer" in said:
            return _calls("remember", content="prefers the Berlin warehouse")
        if "invoice" in said:
            return _calls("remember", content="wants invoices in EUR")
        if "colleague" in said:
            # A model may try to write about someone else; the tool refuses.
            return _calls("remember", content="prefers Hamburg", end_user_id=OTHER_USER)
        return None

    def _about_memory(self, said: str, system: str) -> Turn | None:
        if "warehouse" not in said:
            return None
        warehouse = _find(system, "warehouse")
        if "forget" in said:
            if warehouse is None:
                return Turn("model", "There is no warehouse preference to forget.")
            return _calls("forget", memory_id=warehouse["id"])
        if warehouse is None:
            return Turn("model", "I have no warehouse preference on file for you.")
        return Turn("model", f"My notes on you say {json.dumps(warehouse['fact'])}.")

    def _after_tool(self, result: dict[str, Any]) -> Turn:
        if "error" in result:
            return Turn("model", "I can only keep notes about you, not about other people.")
        if result.get("remembered"):
            return Turn("model", "Noted, I will keep that in mind from now on.")
        if result.get("forgotten"):
            return Turn("model", "Done: I no longer hold that preference.")
        return Turn("model", "I could not find that note any more.")


def _calls(name: str, **arguments: Any) -> Turn:
    return Turn("model", calls=(ToolCall(name, arguments),))


def _find(system: str, word: str) -> dict[str, Any] | None:
    # Reads the memory block the way it is written: one JSON object per line,
    # and only entries with an id can be forgotten.
    for line in system.splitlines():
        if line.startswith("{"):
            entry: dict[str, Any] = json.loads(line)
            if "id" in entry and word in entry["fact"]:
                return entry
    return None


# The loop: the same steps as docs/examples/agent_loop.py, printed.


@dataclass
class Session:
    """One end user's agent, with what it last showed the model."""

    tools: MemoryTools
    model: ScriptedModel = field(default_factory=ScriptedModel)
    shown_system: str = ""

    async def turn(self, conversation: list[Turn], user_text: str) -> None:
        """Run one user turn to the model's answer, printing every step."""
        # Rebuilt on every turn, so it always carries the current facts.
        memory_block = await self.tools.prompt(FIXED)
        system = f"{INSTRUCTIONS}\n\n{memory_block}" if memory_block else INSTRUCTIONS
        if not conversation:
            print("The system prompt the model sees (rebuilt on every turn):")
            show_block(system)
        elif system != self.shown_system:
            print("The system prompt has changed; the model now sees:")
            show_block(system)
        self.shown_system = system
        conversation.append(Turn("user", user_text))
        say("user", user_text)
        for _ in range(MAX_STEPS):
            reply = self.model.respond(system, conversation)
            conversation.append(reply)
            if not reply.calls:
                say("model", reply.text)
                return
            for call in reply.calls:
                say("model", f"calls {call.name} {json.dumps(call.arguments)}")
                result = await self.tools.call(call.name, call.arguments)
                say("tool", result.content)
                if result.is_error:
                    say("", "(is_error: the call was refused and nothing was stored)")
                conversation.append(tool_turn(result))
        raise RuntimeError(f"the model did not answer within {MAX_STEPS} steps")


def tool_turn(result: ToolResult) -> Turn:
    return Turn("tool", result.content)


# Printing.


def heading(title: str) -> None:
    print()
    print(f"=== {title} ".ljust(WIDTH, "="))


def say(who: str, text: str) -> None:
    print(textwrap.fill(text, WIDTH, initial_indent=f"{who:>5} | ", subsequent_indent="      | "))


def show_block(text: str) -> None:
    for line in text.splitlines():
        if line.startswith("{"):
            # A fact's line is printed whole: one fact, one line, as the model gets it.
            print(f"    > {line}")
        else:
            print(
                textwrap.fill(line, WIDTH, initial_indent="    > ", subsequent_indent="    >   ")
                or "    >"
            )
    print()


async def main() -> None:
    """Play the whole session."""
    store = make_store()
    # A durable store keeps facts between runs: start from a clean slate.
    for end_user in (END_USER, OTHER_USER):
        await store.erase(TENANT, end_user)
    await store.remember(TENANT, OTHER_USER, "prefers the Hamburg warehouse")
    tools = memory_tools(store, scope=TENANT, end_user_id=END_USER)
    session = Session(tools)

    print("Psych memory demo: an agent session with memory, offline, with a scripted model.")
    print(f"Tenant {TENANT!r}, end user {END_USER!r}, store {type(store).__name__}.")
    print(f"Fixed facts from the application (the runtime's memories=): {list(FIXED)}")
    print("The model is given two tools:")
    for spec in tools.specs:
        arguments = ", ".join(spec.input_schema["properties"])
        print(f"    {spec.name}({arguments})")

    heading("Conversation 1")
    first: list[Turn] = []
    await session.turn(first, "Hi! Please always ship from the Berlin warehouse, I prefer it.")
    await session.turn(first, "And my invoices should be in EUR.")
    await session.turn(first, "Nice weather today, isn't it?")

    heading("Conversation 2: a new conversation, no history, only memory")
    second: list[Turn] = []
    await session.turn(second, "Which warehouse do my orders ship from?")
    await session.turn(second, "My colleague likes Hamburg better, note that for her.")
    await session.turn(second, "Actually, please forget my warehouse preference.")
    await session.turn(second, "Which warehouse do my orders ship from now?")

    heading(f"The operator erases end user {END_USER!r}")
    remaining = await store.recall(TENANT, END_USER)
    print(f"Stored for {END_USER!r} before erasing: {len(remaining)} fact(s)")
    for memory in remaining:
        print(f"    id {memory.id}: {json.dumps(memory.content)}")
    erased = await store.erase(TENANT, END_USER)
    print(f"erase({TENANT!r}, {END_USER!r}) deleted {erased} fact(s).")
    print(f"Stored for {END_USER!r} now: {len(await store.recall(TENANT, END_USER))} fact(s)")
    others = await store.recall(TENANT, OTHER_USER)
    print(f"Stored for {OTHER_USER!r} (another end user, untouched): {len(others)} fact(s)")
    print("A new conversation now shows the model only the application's fixed facts:")
    show_block(await tools.prompt(FIXED))


if __name__ == "__main__":
    anyio.run(main)
