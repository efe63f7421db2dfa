"""Random interleavings of calls on several keys, compared with a reference model."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, ExitStack

import anyio.from_thread
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from psych_runtime.memory.port import MemoryStore

from ._cases import (
    BAD_CONTENTS,
    CONTENTS,
    MAIN,
    SAME_END_USER,
    SAME_TENANT,
    SWAPPED,
    Pair,
    ScopeObject,
    key_of,
)
from ._harness import Harness
from ._model import ReferenceModel
from ._support import BlockingStore, CountStored, Refusal, check, in_worker_thread

__all__ = ["ModelChecks", "model_machine"]

_KEYS = (MAIN, SAME_TENANT, SAME_END_USER, SWAPPED)
_PAIRS = st.sampled_from(_KEYS)
# Repeated contents make duplicates likely, which rule 1 says must stay apart.
_FACT_CONTENTS = st.sampled_from(("likes tea", "likes tea", "lives in Berlin")) | CONTENTS


def model_machine(
    portal: anyio.from_thread.BlockingPortal,
    open_store: Callable[[], AbstractAsyncContextManager[MemoryStore]],
    count_stored: CountStored,
) -> type[RuleBasedStateMachine]:
    """Build a state machine that drives one fresh store per example.

    Args:
        portal: The portal into the event loop the store lives on; the
            machine runs in a worker thread and sends every call through it.
        open_store: Opens a fresh, empty store (entered once per example).
        count_stored: The backend's backdoor row count.

    Returns:
        The machine class, for `hypothesis.stateful.run_state_machine_as_test`.
    """

    class StoreMatchesTheModel(RuleBasedStateMachine):
        """Each rule makes one call and compares its answer with the model's."""

        def __init__(self) -> None:
            super().__init__()
            self._exit = ExitStack()
            # The store is opened and closed inside one task of the store's
            # own event loop, however many calls the example makes.
            opened = self._exit.enter_context(portal.wrap_async_context_manager(open_store()))
            self.store = BlockingStore(portal, opened, count_stored)
            self.model = ReferenceModel()

        def teardown(self) -> None:
            self._exit.close()

        @staticmethod
        def _scope(pair: Pair, by_object: bool) -> object:  # noqa: FBT001
            return ScopeObject(pair[0]) if by_object else pair[0]

        # Hypothesis often spends an example on one rule alone (thirty erases,
        # say); with every key holding facts from the start, even such an
        # example puts a wrong count or a surviving fact to the test.
        @initialize(contents=st.lists(_FACT_CONTENTS, min_size=len(_KEYS), max_size=len(_KEYS)))
        def every_key_holds_a_fact(self, contents: list[str]) -> None:
            for pair, content in zip(_KEYS, contents, strict=True):
                self.remember(pair, False, content)  # noqa: FBT003

        @rule(pair=_PAIRS, by_object=st.booleans(), content=_FACT_CONTENTS)
        def remember(self, pair: Pair, by_object: bool, content: str) -> None:  # noqa: FBT001
            fact = self.store.remember(self._scope(pair, by_object), pair[1], content)
            check(
                fact.id not in self.model.issued,
                1,
                f"remember returned id {fact.id!r}, which an earlier fact already had",
            )
            check(
                fact.key == key_of(pair) and fact.content == content,
                1,
                "remember returned a fact with another key or another content",
            )
            self.model.remember(key_of(pair), fact.id, content)

        @rule(pair=_PAIRS, by_object=st.booleans(), data=st.data())
        def forget(self, pair: Pair, by_object: bool, data: st.DataObject) -> None:  # noqa: FBT001
            choices = (*self.model.issued, "unknown-id")
            memory_id = data.draw(st.sampled_from(choices), label="memory_id")
            key = key_of(pair)
            expected = self.model.forget(key, memory_id)
            answer = self.store.forget(self._scope(pair, by_object), pair[1], memory_id)
            whose = "a fact of this key" if expected else "an id this key does not hold"
            check(answer is expected, 2, f"forget of {whose} returned {answer!r}")
            self._count_matches(pair, 2, "forget")

        @rule(pair=_PAIRS, by_object=st.booleans(), data=st.data())
        def recall(self, pair: Pair, by_object: bool, data: st.DataObject) -> None:  # noqa: FBT001
            key = key_of(pair)
            size = len(self.model.facts(key))
            limit = data.draw(st.none() | st.integers(0, size + 2), label="limit")
            recalled = self.store.recall(self._scope(pair, by_object), pair[1], limit)
            expected = self.model.recall(key, limit)
            check(
                [(memory.id, memory.content) for memory in recalled] == expected,
                3,
                f"recall(limit={limit}) returned {len(recalled)} fact(s) that are not the "
                f"{len(expected)} oldest of the key in insertion order",
            )

        @rule(pair=_PAIRS, by_object=st.booleans())
        def erase(self, pair: Pair, by_object: bool) -> None:  # noqa: FBT001
            expected = self.model.erase(key_of(pair))
            erased = self.store.erase(self._scope(pair, by_object), pair[1])
            check(
                erased == expected,
                4,
                f"erase of a key with {expected} fact(s) returned {erased!r}",
            )
            self._count_matches(pair, 4, "erase")

        @rule(pair=_PAIRS, bad=st.sampled_from(BAD_CONTENTS))
        def remember_invalid(self, pair: Pair, bad: tuple[str, object, type[Exception]]) -> None:
            label, value, expected = bad
            error: Exception | None = None
            try:
                self.store.remember(pair[0], pair[1], value)
            except Exception as exc:  # noqa: BLE001 - Refusal checks which one it is.
                error = exc
            Refusal(expected, "content", value).verify(f"remember with content {label}", error)
            self._count_matches(pair, 6, "a refused remember")

        @rule()
        def every_key_matches_the_model(self) -> None:
            for pair in _KEYS:
                recalled = self.store.recall(pair[0], pair[1])
                expected = self.model.recall(key_of(pair), None)
                check(
                    [(memory.id, memory.content) for memory in recalled] == expected,
                    5,
                    f"key {pair!r} holds {len(recalled)} fact(s) where the calls made on it "
                    f"and on other keys leave {len(expected)}",
                )
                self._count_matches(pair, 5, "the calls so far")

        def _count_matches(self, pair: Pair, rule: int, after: str) -> None:
            stored = self.store.count_stored(key_of(pair))
            expected = len(self.model.facts(key_of(pair)))
            check(
                stored == expected,
                rule,
                f"after {after} the backend holds {stored} row(s) for key {pair!r}, "
                f"which has {expected} fact(s)",
            )

    return StoreMatchesTheModel


class ModelChecks(Harness):
    """Rules 1-6 at once: what no single check's chosen calls would find."""

    async def test_rules_hold_for_random_call_sequences(self) -> None:
        """Rules 1-6: random interleavings of calls on four keys match a reference model."""
        options = self._hypothesis_settings(stateful_step_count=self.max_steps)

        def body(portal: anyio.from_thread.BlockingPortal) -> None:
            machine = model_machine(portal, self._open, self.count_stored)
            run_state_machine_as_test(machine, settings=options)

        await in_worker_thread(body)
