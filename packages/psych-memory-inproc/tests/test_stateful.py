"""Random interleavings of the four calls, checked against a plain model."""

from __future__ import annotations

from collections import defaultdict

import anyio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import MemoryKey

TENANTS = st.sampled_from(["acme", "globex"])
USERS = st.sampled_from(["u1", "u2", "u3"])
CONTENTS = st.sampled_from(["tea", "coffee", "tea", "Berlin\nwarehouse"]) | st.text(
    st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=8
).filter(lambda text: not text.isspace())


class InProcessMachine(RuleBasedStateMachine):
    """Each rule runs one call and compares its answer with the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = InProcessMemory()
        self.model: dict[MemoryKey, list[tuple[str, str]]] = defaultdict(list)
        self.seen_ids: set[str] = set()
        self.backend = "asyncio"

    def run(self, call: object) -> object:
        return anyio.run(call, backend=self.backend)  # type: ignore[arg-type]

    @rule(backend=st.sampled_from(["asyncio", "trio"]))
    def switch_backend(self, backend: str) -> None:
        self.backend = backend

    @rule(tenant=TENANTS, user=USERS, content=CONTENTS)
    def remember(self, tenant: str, user: str, content: str) -> None:
        fact = self.run(lambda: self.memory.remember(tenant, user, content))
        assert fact.id not in self.seen_ids  # type: ignore[attr-defined]
        assert fact.content == content  # type: ignore[attr-defined]
        self.seen_ids.add(fact.id)  # type: ignore[attr-defined]
        self.model[MemoryKey(tenant, user)].append((fact.id, content))  # type: ignore[attr-defined]

    @precondition(lambda self: bool(self.seen_ids))
    @rule(tenant=TENANTS, user=USERS, data=st.data())
    def forget_known_id(self, tenant: str, user: str, data: st.DataObject) -> None:
        memory_id = data.draw(st.sampled_from(sorted(self.seen_ids)))
        facts = self.model[MemoryKey(tenant, user)]
        expected = any(fid == memory_id for fid, _ in facts)
        assert self.run(lambda: self.memory.forget(tenant, user, memory_id)) is expected
        facts[:] = [(fid, text) for fid, text in facts if fid != memory_id]

    @rule(tenant=TENANTS, user=USERS, limit=st.none() | st.integers(0, 6))
    def recall(self, tenant: str, user: str, limit: int | None) -> None:
        got = self.run(lambda: self.memory.recall(tenant, user, limit=limit))
        expected = self.model[MemoryKey(tenant, user)]
        if limit is not None:
            expected = expected[:limit]
        assert [(m.id, m.content) for m in got] == expected  # type: ignore[attr-defined]

    @rule(tenant=TENANTS, user=USERS)
    def erase(self, tenant: str, user: str) -> None:
        key = MemoryKey(tenant, user)
        assert self.run(lambda: self.memory.erase(tenant, user)) == len(self.model[key])
        self.model[key].clear()

    @invariant()
    def every_key_matches(self) -> None:
        stored = {
            key: [(f.id, f.content) for f in facts.values()]
            for key, facts in self.memory._facts.items()
        }
        assert stored == {key: facts for key, facts in self.model.items() if facts}


InProcessMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestInProcessMachine = InProcessMachine.TestCase
