"""A budget for the memory block: never exceeded, facts whole, the left-out count exact."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import Memory, MemoryKey
from psych_runtime.tools.builtins import (
    DEFAULT_MAX_FACT_LENGTH,
    DEFAULT_MAX_FACTS,
    DEFAULT_MAX_PROMPT_CHARS,
    MIN_PROMPT_CHARS,
    memory_tools,
    render_memories,
)

KEY = MemoryKey("acme", "u1")
NOTE_TEXT = (
    "Not shown, to keep this block within its size limit (still stored): "
    "facts from the application: {}; older saved facts: {}."
)
NOTE = re.compile(re.escape(NOTE_TEXT).replace(r"\{\}", r"(\d+)"))


def fact(memory_id: str, content: str) -> Memory:
    return Memory(memory_id, KEY, content, datetime.now(UTC))


def read(block: str) -> tuple[list[dict[str, Any]], tuple[int, int] | None]:
    """The entries of a block and the counts of its note, the way a model reads them."""
    lines = block.splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    notes = [NOTE.fullmatch(line) for line in lines if line.startswith("Not shown")]
    if not notes:
        return entries, None
    (note,) = notes
    assert note is not None
    assert lines[-1] == note.group()
    return entries, (int(note.group(1)), int(note.group(2)))


def test_the_smallest_budget_holds_the_header_and_the_widest_note() -> None:
    many = [fact(f"m{i}", "x" * 50) for i in range(1000)]
    block = render_memories(many, ["y" * 50] * 1000, max_chars=MIN_PROMPT_CHARS)
    assert len(block) <= MIN_PROMPT_CHARS
    assert read(block) == ([], (1000, 1000))
    assert block.splitlines()[0].startswith("Memory: ")


@pytest.mark.parametrize("budget", [MIN_PROMPT_CHARS - 1, 0, -1])
def test_a_budget_below_the_minimum_fails_even_without_facts(budget: int) -> None:
    with pytest.raises(ValueError, match=f"max_chars must be at least {MIN_PROMPT_CHARS}"):
        render_memories((), max_chars=budget)


def test_a_budget_must_be_an_int() -> None:
    with pytest.raises(TypeError, match="max_chars must be None or an int, not float"):
        render_memories((), max_chars=1e6)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_chars must be None or an int, not bool"):
        render_memories((), max_chars=True)


def test_the_newest_saved_facts_are_kept_after_the_fixed_ones() -> None:
    recalled = [fact(f"m{i}", f"saved fact number {i:02}") for i in range(30)]
    fixed = ["fixed one", "fixed two"]
    full = render_memories(recalled, fixed)
    budget = len(full) - 200
    block = render_memories(recalled, fixed, max_chars=budget)
    entries, note = read(block)
    assert len(block) <= budget
    assert entries[:2] == [{"fact": "fixed one"}, {"fact": "fixed two"}]
    shown = [entry["id"] for entry in entries[2:]]
    assert note == (0, 30 - len(shown))
    # The newest, oldest first among themselves.
    assert shown == [f"m{i}" for i in range(30 - len(shown), 30)]


def test_fixed_facts_come_first_even_when_they_crowd_out_the_rest() -> None:
    fixed = [f"fixed fact {i} " + "z" * 100 for i in range(10)]
    recalled = [fact("m1", "saved")]
    block = render_memories(recalled, fixed, max_chars=MIN_PROMPT_CHARS + 400)
    entries, note = read(block)
    shown_fixed = [entry for entry in entries if "id" not in entry]
    assert 0 < len(shown_fixed) < 10
    assert shown_fixed == [{"fact": text} for text in fixed[: len(shown_fixed)]]
    # The short saved fact still fits after the first fixed fact that did not.
    assert entries[len(shown_fixed) :] == [{"id": "m1", "fact": "saved"}]
    assert note == (10 - len(shown_fixed), 0)


def test_everything_that_fits_is_shown_without_a_note() -> None:
    recalled = [fact("m1", "likes tea")]
    full = render_memories(recalled, ["metric units"])
    block = render_memories(recalled, ["metric units"], max_chars=len(full))
    assert block == full
    assert read(block)[1] is None
    assert read(render_memories(recalled, ["metric units"], max_chars=len(full) - 1))[1]


contents = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=80)
ids = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
plain_fixed = st.text(st.characters(codec="ascii", categories=["L", "N", "P", "Zs"]), max_size=80)


@given(
    recalled=st.lists(st.tuples(ids, contents), max_size=25),
    fixed=st.lists(plain_fixed.filter(lambda text: text.strip() != ""), max_size=6),
    extra=st.integers(0, 4000),
)
def test_any_facts_any_budget(
    recalled: list[tuple[str, str]], fixed: list[str], extra: int
) -> None:
    budget = MIN_PROMPT_CHARS + extra
    facts = [fact(i, c) for i, c in recalled]
    block = render_memories(facts, fixed, max_chars=budget)
    # Within budget.
    assert len(block) <= budget
    entries, note = read(block)
    shown_fixed = [entry for entry in entries if "id" not in entry]
    shown_saved = [entry for entry in entries if "id" in entry]
    # Every shown fact whole and exact: a prefix of the fixed facts, then a
    # suffix of the saved ones, in order.
    assert shown_fixed == [{"fact": text} for text in fixed[: len(shown_fixed)]]
    tail = recalled[len(recalled) - len(shown_saved) :]
    assert shown_saved == [{"id": i, "fact": c} for i, c in tail]
    # The left-out count is exact, and the note is there exactly when needed.
    left_out = (len(fixed) - len(shown_fixed), len(recalled) - len(shown_saved))
    assert note == (None if left_out == (0, 0) else left_out)
    # Nothing left out that would have fitted: with no budget, it all fits
    # exactly when the budgeted block shows it all, and one more fact of
    # either section (the next fixed one, the next older saved one) would
    # have taken the block past the budget.
    unlimited = render_memories(facts, fixed)
    assert (block == unlimited) is (len(unlimited) <= budget)
    if left_out[0]:
        more = with_note(
            facts[len(facts) - len(shown_saved) :],
            fixed[: len(shown_fixed) + 1],
            (left_out[0] - 1, left_out[1]),
        )
        assert len(more) > budget
    if left_out[1]:
        more = with_note(
            facts[len(facts) - len(shown_saved) - 1 :],
            fixed[: len(shown_fixed)],
            (left_out[0], left_out[1] - 1),
        )
        assert len(more) > budget


def with_note(shown_facts: list[Memory], shown_fixed: list[str], left: tuple[int, int]) -> str:
    """The block showing these facts, with the note of what it leaves out."""
    block = render_memories(shown_facts, shown_fixed)
    return block if left == (0, 0) else block + "\n" + NOTE_TEXT.format(*left)


@pytest.mark.anyio
async def test_prompt_uses_the_bound_budget_unless_told_otherwise(anyio_backend: str) -> None:
    memory = InProcessMemory()
    for i in range(40):
        await memory.remember("acme", "u1", f"saved fact {i} " + "w" * 60)
    bound = MIN_PROMPT_CHARS + 500
    tools = memory_tools(memory, scope="acme", end_user_id="u1", max_prompt_chars=bound)
    recalled = await memory.recall("acme", "u1")
    assert await tools.prompt(["fixed"]) == render_memories(recalled, ["fixed"], max_chars=bound)
    wider = bound + 2000
    assert await tools.prompt(max_chars=wider) == render_memories(recalled, max_chars=wider)
    with pytest.raises(ValueError, match="max_chars must be at least"):
        await tools.prompt(max_chars=10)
    unbounded = memory_tools(memory, scope="acme", end_user_id="u1", max_prompt_chars=None)
    assert await unbounded.prompt() == render_memories(recalled)


def test_the_sizes_the_documentation_gives() -> None:
    # docs/tools.md quotes these figures; they change only with the texts.
    assert MIN_PROMPT_CHARS == 361
    full = [fact("0" * 32, "x" * DEFAULT_MAX_FACT_LENGTH) for _ in range(DEFAULT_MAX_FACTS)]
    assert len(render_memories(full)) == 18_033 <= DEFAULT_MAX_PROMPT_CHARS
    hidden = [fact("0" * 32, "\U000e0041" * DEFAULT_MAX_FACT_LENGTH)] * DEFAULT_MAX_FACTS
    assert len(render_memories(hidden)) == 183_033
    assert len(render_memories(hidden, max_chars=DEFAULT_MAX_PROMPT_CHARS)) <= 20_000
