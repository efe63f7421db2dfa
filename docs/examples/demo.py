"""An offline agent session with memory, played by a scripted model.

Run it with ``hatch run demo``. There is no network and no API key: the
"model" is a short deterministic script that reads the same system prompt
and conversation a real model would get, and decides what to say and which
tools to call from them alone. Everything it is shown, and everything it
does, is printed.

The story: an end user states preferences and the model remembers them; in a
new conversation the model finds them, with their ids, in its prompt; the
user asks to drop one and the model forgets it by that id.

Facts are kept in a SQLite file in the working directory, so what one run
remembers, the next run recalls. When asked (``hatch run demo --erase``), the
operator erases everything stored about the end user, as a customer's
deletion request requires. ``--store memory`` keeps the facts in this process
only.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryStore
from psych_runtime.memory.sqlite import SqliteMemory
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
# Relative paths are taken from the working directory: the demo keeps its
# facts where it is run.
DATABASE = Path("psych-memory-demo.sqlite3").resolve()


@asynccontextmanager
async def open_store(kind: str) -> AsyncIterator[MemoryStore]:
    """Open the store the demo runs on: a SQLite file, or this process only."""
    if kind == "memory":
        yield InProcessMemory()
        return
    async with SqliteMemory(DATABASE) as memory:
        yield memory


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
            self._worth_remembering(said, system)
            or self._about_memory(said, system)
            or Turn("model", "Happy to help. Anything about your orders?")
        )

    def _worth_remembering(self, said: str, system: str) -> Turn | None:
        # Lasting preferences are remembered, once; small talk is not.
        if "berlin" in said and "prefer" in said:
            return _remember_new("prefers the Berlin warehouse", system)
        if "invoice" in said:
            return _remember_new("wants invoices in EUR", system)
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


def _remember_new(content: str, system: str) -> Turn:
    # The store never deduplicates: not writing a known fact twice is the
    # caller's judgement, here the model's.
    if _find(system, content) is not None:
        return Turn("model", "I already have that on file from an earlier conversation.")
    return _calls("remember", content=content)


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


async def converse(store: MemoryStore) -> None:
    """Play the conversations of one run against whatever the store holds."""
    if not await store.recall(TENANT, OTHER_USER):
        await store.remember(TENANT, OTHER_USER, "prefers the Hamburg warehouse")
    tools = memory_tools(store, scope=TENANT, end_user_id=END_USER)
    session = Session(tools)
    earlier = await store.recall(TENANT, END_USER)
    print(f"Facts stored for {END_USER!r} by earlier runs: {len(earlier)}")
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

    kept = await store.recall(TENANT, END_USER)
    heading("After the session")
    print(f"Stored for {END_USER!r}: {len(kept)} fact(s)")
    for memory in kept:
        print(f"    id {memory.id}: {json.dumps(memory.content)}")


async def erase(store: MemoryStore) -> None:
    """The operator's step: erase everything stored about the end user."""
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
    tools = memory_tools(store, scope=TENANT, end_user_id=END_USER)
    print("A new conversation now shows the model only the application's fixed facts:")
    show_block(await tools.prompt(FIXED))


async def run(kind: str, *, erase_end_user: bool) -> None:
    """Hold the session, or take the operator's erase step when asked."""
    print("Psych memory demo: an agent session with memory, offline, with a scripted model.")
    async with open_store(kind) as store:
        where = (
            f"SqliteMemory, file {DATABASE}"
            if kind == "sqlite"
            else "InProcessMemory, this process only"
        )
        print(f"Tenant {TENANT!r}, end user {END_USER!r}, store: {where}.")
        if erase_end_user:
            await erase(store)
            return
        await converse(store)
    if kind == "sqlite":
        print()
        print("Run `hatch run demo` again: the next session starts from these facts.")
        print(f"Run `hatch run demo --erase` to erase {END_USER!r} completely.")


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the demo."""
    parser = argparse.ArgumentParser(description="Psych memory demo: an offline agent session.")
    parser.add_argument(
        "--erase",
        action="store_true",
        help=f"erase everything stored about {END_USER} instead of holding a session",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "memory"),
        default="sqlite",
        help=f"sqlite (default): facts kept in ./{DATABASE.name}; memory: this process only",
    )
    options = parser.parse_args(argv)
    anyio.run(partial(run, options.store, erase_end_user=options.erase))


if __name__ == "__main__":
    main()
