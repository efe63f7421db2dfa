"""How `InProcessMemory` compares with the cheapest dict-plus-lock store.

Run it from the repository root with ``hatch run bench:inproc`` (add
``--quick`` for a smaller run that takes a few seconds). It prints Markdown
tables, ready to paste into ``docs/benchmarks.md``:

1. Throughput of ``remember``, ``recall``, ``forget`` and ``erase`` for the
   adapter and for `DictBaseline`, measured in the same run, rounds
   interleaved, with the ratio adapter / baseline (target: at most 1.25).
2. ``recall``, ``forget`` and ``erase`` of small end users while the store
   holds a thousand versus a million facts of other end users, with the
   ratio large / small (target: at most 1.25, that is flat).
3. Bytes of memory per stored fact, traced with `tracemalloc`, beside the
   baseline's figure (target: at most 1.3 times the baseline's).
4. One end user of a million facts (restored, so the id index exists):
   the worst wait of another thread's ``recall`` of another end user while
   that end user is erased and freed, beside the same reader with nothing
   else running, in the same run (target: a few milliseconds); and reading
   the end user page by page beside one ``recall`` of it.
   ``--large-only`` runs this part alone.

The figures are printed, never asserted: a benchmark that fails on a busy
machine teaches nothing. Like `timeit`, the timed loops run with the garbage
collector paused so that a collection triggered by unrelated objects does not
land in one implementation's timing and not the other's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import threading
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import count, islice
from time import perf_counter
from typing import TYPE_CHECKING

from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import (
    Memory,
    MemoryKey,
    MemoryStore,
    Scope,
    StoreClosedError,
    memory_key,
    validate_content,
    validate_limit,
    validate_memory_id,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator, Sequence

    Factory = Callable[[], MemoryStore]

FACTS_PER_USER = 10
"""Facts each end user holds in the throughput and memory workloads."""

SMALL_USER_FACTS = 5
"""Facts each small end user holds in the scaling workload."""

SMALL_USERS = 100
"""Small end users measured in one round of the scaling workload."""

TENANTS = 10


class DictBaseline(MemoryStore):
    """The cheapest store that keeps the whole contract: dictionaries, one lock, counter ids.

    It validates with the port's functions, returns the port's `Memory` and
    refuses calls once closed (rule 7), exactly as the adapter does, so the
    comparison measures only what the adapter adds: random ids, removing an
    end user's entry once it is empty, and the id index a restore builds.
    """

    __slots__ = ("_closed", "_facts", "_ids", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = count()
        self._facts: dict[MemoryKey, dict[str, Memory]] = {}
        self._closed = False

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
            self._facts = {}

    async def remember(self, scope: Scope, end_user_id: str, content: str) -> Memory:
        key = memory_key(scope, end_user_id)
        content = validate_content(content)
        created_at = datetime.now(UTC)
        with self._lock:
            if self._closed:
                raise StoreClosedError("remember")
            memory = Memory(str(next(self._ids)), key, content, created_at)
            facts = self._facts.get(key)
            if facts is None:
                facts = self._facts[key] = {}
            facts[memory.id] = memory
        return memory

    async def forget(self, scope: Scope, end_user_id: str, memory_id: str) -> bool:
        key = memory_key(scope, end_user_id)
        memory_id = validate_memory_id(memory_id)
        with self._lock:
            if self._closed:
                raise StoreClosedError("forget")
            facts = self._facts.get(key)
            return facts is not None and facts.pop(memory_id, None) is not None

    async def recall(
        self, scope: Scope, end_user_id: str, *, limit: int | None = None
    ) -> tuple[Memory, ...]:
        key = memory_key(scope, end_user_id)
        limit = validate_limit(limit)
        with self._lock:
            if self._closed:
                raise StoreClosedError("recall")
            facts = self._facts.get(key)
            if not facts:
                return ()
            if limit is None:
                return tuple(facts.values())
            return tuple(islice(facts.values(), limit))

    async def erase(self, scope: Scope, end_user_id: str) -> int:
        key = memory_key(scope, end_user_id)
        with self._lock:
            if self._closed:
                raise StoreClosedError("erase")
            facts = self._facts.pop(key, None)
        return 0 if facts is None else len(facts)


IMPLEMENTATIONS: dict[str, Factory] = {
    "InProcessMemory": InProcessMemory,
    "baseline": DictBaseline,
}


@dataclass(frozen=True)
class Sizes:
    """How much work one run does."""

    rounds: int
    remember_calls: int
    users: int
    erase_users: int
    backgrounds: tuple[int, int]
    scaling_rounds: int
    memory_facts: int
    large_facts: int


FULL = Sizes(
    rounds=7,
    remember_calls=50_000,
    users=1_000,
    erase_users=5_000,
    backgrounds=(1_000, 1_000_000),
    scaling_rounds=60,
    memory_facts=100_000,
    large_facts=1_000_000,
)
QUICK = Sizes(
    rounds=3,
    remember_calls=10_000,
    users=200,
    erase_users=1_000,
    backgrounds=(1_000, 100_000),
    scaling_rounds=15,
    memory_facts=20_000,
    large_facts=100_000,
)


def users(count_: int, prefix: str = "user") -> list[tuple[str, str]]:
    """Return ``count_`` distinct (tenant, end user) pairs over a few tenants."""
    return [(f"tenant-{n % TENANTS}", f"{prefix}-{n}") for n in range(count_)]


def contents(count_: int) -> list[str]:
    """Return distinct, valid facts, built before any timing or tracing."""
    return [f"prefers warehouse {n} for deliveries" for n in range(count_)]


async def fill(store: MemoryStore, owners: Sequence[tuple[str, str]], per_user: int) -> list[str]:
    """Give every owner ``per_user`` facts, round-robin, and return their ids."""
    ids: list[str] = []
    texts = contents(per_user)
    for text in texts:
        for tenant, user in owners:
            memory = await store.remember(tenant, user, text)
            ids.append(memory.id)
    return ids


# Throughput: each function builds its own state, then times one batch of
# calls and returns the seconds per call.


async def time_remember(store: MemoryStore, sizes: Sizes) -> float:
    owners = users(sizes.users)
    texts = contents(sizes.remember_calls)
    calls = [(*owners[n % len(owners)], text) for n, text in enumerate(texts)]
    start = perf_counter()
    for tenant, user, text in calls:
        await store.remember(tenant, user, text)
    return (perf_counter() - start) / len(calls)


async def time_recall(store: MemoryStore, sizes: Sizes) -> float:
    owners = users(sizes.users)
    await fill(store, owners, FACTS_PER_USER)
    calls = [owners[n % len(owners)] for n in range(sizes.remember_calls)]
    start = perf_counter()
    for tenant, user in calls:
        await store.recall(tenant, user)
    return (perf_counter() - start) / len(calls)


async def time_forget(store: MemoryStore, sizes: Sizes) -> float:
    owners = users(sizes.users)
    ids = await fill(store, owners, FACTS_PER_USER)
    # fill() went round-robin, so id n belongs to owner n % len(owners).
    calls = [(*owners[n % len(owners)], memory_id) for n, memory_id in enumerate(ids)]
    start = perf_counter()
    for tenant, user, memory_id in calls:
        await store.forget(tenant, user, memory_id)
    return (perf_counter() - start) / len(calls)


async def time_erase(store: MemoryStore, sizes: Sizes) -> float:
    owners = users(sizes.erase_users)
    await fill(store, owners, FACTS_PER_USER)
    start = perf_counter()
    for tenant, user in owners:
        await store.erase(tenant, user)
    return (perf_counter() - start) / len(owners)


THROUGHPUT = {
    "remember": time_remember,
    "recall (10 facts)": time_recall,
    "forget": time_forget,
    "erase (10 facts)": time_erase,
}


def run(coroutine: Coroutine[object, object, float]) -> float:
    """Run one measurement on a fresh event loop with the collector paused."""
    gc.collect()
    gc.disable()
    try:
        return asyncio.run(coroutine)
    finally:
        gc.enable()


def interleaved(rounds: int) -> Iterator[list[str]]:
    """Yield the order of the implementations for each round, alternating.

    Alternating who goes first keeps a slow phase of a shared machine from
    always landing on the same implementation.
    """
    names = list(IMPLEMENTATIONS)
    for round_ in range(rounds):
        yield names if round_ % 2 == 0 else names[::-1]


def throughput(sizes: Sizes) -> list[tuple[str, float, float]]:
    """Return (operation, adapter seconds per call, baseline seconds per call)."""
    rows = []
    for operation, measure in THROUGHPUT.items():
        samples: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
        for order in interleaved(sizes.rounds):
            for name in order:
                samples[name].append(run(measure(IMPLEMENTATIONS[name](), sizes)))
        adapter, baseline = (statistics.median(samples[name]) for name in IMPLEMENTATIONS)
        rows.append((operation, adapter, baseline))
    return rows


# Scaling: small end users while the store holds many other facts.


async def scaling_round(store: MemoryStore, small: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Time recall, forget and erase once for every small end user.

    Returns seconds per call for each operation. The small users' facts are
    added untimed at the start, and are gone again at the end.
    """
    ids = await fill(store, small, SMALL_USER_FACTS)
    start = perf_counter()
    for tenant, user in small:
        await store.recall(tenant, user)
    recall = (perf_counter() - start) / len(small)
    # Forget the first fact of every small user: one call each.
    firsts = [(*small[n], ids[n]) for n in range(len(small))]
    start = perf_counter()
    for tenant, user, memory_id in firsts:
        await store.forget(tenant, user, memory_id)
    forget = (perf_counter() - start) / len(firsts)
    start = perf_counter()
    for tenant, user in small:
        await store.erase(tenant, user)
    erase = (perf_counter() - start) / len(small)
    return {"recall": recall, "forget": forget, "erase": erase}


async def build_background(factory: Factory, facts: int) -> MemoryStore:
    store = factory()
    await fill(store, users(facts // FACTS_PER_USER, prefix="other"), FACTS_PER_USER)
    return store


async def scaling_for(background: int, sizes: Sizes) -> dict[str, dict[str, float]]:
    """Return seconds per call, by implementation and operation."""
    stores = {
        name: await build_background(make, background) for name, make in IMPLEMENTATIONS.items()
    }
    small = users(SMALL_USERS, prefix="small")
    samples: dict[str, dict[str, list[float]]] = {
        name: {"recall": [], "forget": [], "erase": []} for name in IMPLEMENTATIONS
    }
    for order in interleaved(sizes.scaling_rounds):
        for name in order:
            for operation, seconds in (await scaling_round(stores[name], small)).items():
                samples[name][operation].append(seconds)
    return {
        name: {operation: statistics.median(values) for operation, values in by_op.items()}
        for name, by_op in samples.items()
    }


def scaling(sizes: Sizes) -> dict[int, dict[str, dict[str, float]]]:
    results = {}
    for background in sizes.backgrounds:
        gc.collect()
        gc.disable()
        try:
            results[background] = asyncio.run(scaling_for(background, sizes))
        finally:
            gc.enable()
    gc.collect()
    return results


# Memory: bytes traced per stored fact.


async def _store_facts(store: MemoryStore, calls: Sequence[tuple[str, str, str]]) -> None:
    for tenant, user, text in calls:
        await store.remember(tenant, user, text)


def bytes_per_fact(factory: Factory, facts: int) -> float:
    """Return the bytes a store allocates per fact, content strings excluded.

    The caller's strings (tenant, end user, content) are built before tracing
    starts, so only what the store itself allocates is counted: the `Memory`,
    its id, key and timestamp, and the tables that hold them.
    """
    owners = users(max(1, facts // FACTS_PER_USER))
    texts = contents(facts)
    calls = [(*owners[n % len(owners)], text) for n, text in enumerate(texts)]
    store = factory()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        asyncio.run(_store_facts(store, calls))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / facts


# Report.


SLOW_GAP = 0.005
"""A gap between two answers longer than the interpreter's switch interval."""


class Waits:
    """Another thread calling ``recall`` of a small end user in a loop, timing each call."""

    def __init__(self, store: InProcessMemory) -> None:
        self._store = store
        self._stop = threading.Event()
        self._calls: list[float] = []
        self._gaps: list[float] = []
        self._thread = threading.Thread(target=asyncio.run, args=(self._read(),))

    async def _read(self) -> None:
        last = perf_counter()
        while not self._stop.is_set():
            started = perf_counter()
            await self._store.recall("acme", "reader")
            ended = perf_counter()
            self._calls.append(ended - started)
            # From one answer to the next: a wait for the GIL between two
            # calls counts too.
            self._gaps.append(ended - last)
            last = ended

    def __enter__(self) -> Waits:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> tuple[int, float, float, float, int]:
        """Calls, 99th percentile and worst of the call times, the worst gap, gaps over 5 ms."""
        calls = sorted(self._calls)
        over = sum(gap > SLOW_GAP for gap in self._gaps)
        return len(calls), calls[int(len(calls) * 0.99)], calls[-1], max(self._gaps), over


@dataclass
class Large:
    """What `large_end_user` measured."""

    recall: float = 0.0
    pages: float = 0.0
    erased: int = 0
    erase_call: float = 0.0
    freed: float = 0.0
    quiet: tuple[int, float, float, float, int] = (0, 0.0, 0.0, 0.0, 0)
    during: tuple[int, float, float, float, int] = (0, 0.0, 0.0, 0.0, 0)


def large_end_user(facts: int) -> Large:
    """Erase and page one end user of ``facts`` facts, with a reader of another end user."""
    from psych_runtime.memory.inproc._reaper import REAPER  # noqa: PLC0415 - private, only here.

    store = InProcessMemory()
    key = MemoryKey("acme", "large")
    when = datetime.now(UTC)
    large = Large()

    async def fill() -> None:
        await store.restore_many(
            Memory(f"fact-{number}", key, "a fact", when) for number in range(facts)
        )
        for number in range(5):
            await store.remember("acme", "reader", f"reader fact {number}")

    async def read_whole() -> None:
        started = perf_counter()
        await store.recall("acme", "large")
        large.recall = perf_counter() - started
        started = perf_counter()
        page = await store.recall_page("acme", "large", size=1000)
        while len(page) == 1000:
            page = await store.recall_page("acme", "large", after=page[-1].id, size=1000)
        large.pages = perf_counter() - started

    async def erase() -> None:
        started = perf_counter()
        large.erased = await store.erase("acme", "large")
        large.erase_call = perf_counter() - started

    asyncio.run(fill())
    asyncio.run(read_whole())
    gc.collect()
    with Waits(store) as quiet:
        threading.Event().wait(1.0)
    large.quiet = quiet.figures()
    with Waits(store) as during:
        threading.Event().wait(0.05)
        started = perf_counter()
        asyncio.run(erase())
        REAPER.wait()
        large.freed = perf_counter() - started
    large.during = during.figures()
    return large


def report_large(facts: int) -> None:
    large = large_end_user(facts)
    print(f"## One end user of {facts:,} facts (restored: the id index exists)\n")
    print(
        f"`erase` returned {large.erased:,} after {large.erase_call * 1e3:.2f} ms (the first "
        f"large erase of the process also starts the thread that frees the facts); its "
        f"facts and index entries were freed {large.freed:.2f} s after the call began.\n"
    )
    print("Another thread's `recall` of another end user (5 facts), called in a loop:\n")
    print("| while | calls | p99 | worst call | worst gap between two answers | gaps > 5 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, (calls, p99, worst, gap, over) in (
        ("nothing else runs (1 s)", large.quiet),
        ("the erase runs, until freed", large.during),
    ):
        print(
            f"| {label} | {calls:,} | {p99 * 1e6:,.0f} us | {worst * 1e3:.2f} ms "
            f"| {gap * 1e3:.2f} ms | {over:,} |"
        )
    print()
    print(
        f"Reading the end user: one `recall` {large.recall * 1e3:.0f} ms, "
        f"pages of 1,000 {large.pages * 1e3:.0f} ms.\n"
    )


class Targets:
    """Collects which of the adapter's targets a run missed."""

    def __init__(self) -> None:
        self.missed: list[str] = []

    def check(self, what: str, ratio: float, target: float) -> str:
        if ratio <= target:
            return "ok"
        self.missed.append(f"{what}: {ratio:.2f} > {target}")
        return "MISSED"


def ns(seconds: float) -> str:
    return f"{seconds * 1e9:,.0f}"


def report_machine(sizes: Sizes, *, quick: bool) -> None:
    print("## Machine\n")
    print(f"- Python {platform.python_version()} ({platform.python_implementation()})")
    print(f"- {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs")
    print(f"- run: {'--quick' if quick else 'full'}, {sizes.rounds} rounds, medians shown")
    print()


def report_throughput(rows: Sequence[tuple[str, float, float]], targets: Targets) -> None:
    print("## Throughput (ns per call, median of rounds)\n")
    print("| operation | InProcessMemory | baseline | ratio | target <= 1.25 |")
    print("| --- | ---: | ---: | ---: | --- |")
    for operation, adapter, baseline in rows:
        ratio = adapter / baseline
        print(
            f"| {operation} | {ns(adapter)} | {ns(baseline)} | {ratio:.2f} | "
            f"{targets.check(operation, ratio, 1.25)} |"
        )
    print()


def report_scaling(results: dict[int, dict[str, dict[str, float]]], targets: Targets) -> None:
    small, large = sorted(results)
    print(
        f"## Small end users ({SMALL_USER_FACTS} facts each) beside "
        f"{small:,} and {large:,} other facts (ns per call)\n"
    )
    print(
        f"| implementation | operation | {small:,} others | {large:,} others "
        "| ratio | target <= 1.25 |"
    )
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for name in IMPLEMENTATIONS:
        for operation in ("recall", "forget", "erase"):
            before = results[small][name][operation]
            after = results[large][name][operation]
            ratio = after / before
            # The baseline's ratio is shown for comparison; only the
            # adapter has a target.
            mark = (
                targets.check(f"{operation} at {large:,}", ratio, 1.25)
                if name == "InProcessMemory"
                else ""
            )
            print(f"| {name} | {operation} | {ns(before)} | {ns(after)} | {ratio:.2f} | {mark} |")
    print()


def report_memory(adapter: float, baseline: float, facts: int, targets: Targets) -> None:
    ratio = adapter / baseline
    mark = targets.check("bytes per fact", ratio, 1.3)
    print(f"## Memory per stored fact ({facts:,} facts, tracemalloc)\n")
    print("| InProcessMemory | baseline | ratio | target <= 1.3 |")
    print("| ---: | ---: | ---: | --- |")
    print(f"| {adapter:,.0f} B | {baseline:,.0f} B | {ratio:.2f} | {mark} |")
    print()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smaller run (100 thousand background facts instead of a million)",
    )
    parser.add_argument(
        "--large-only",
        action="store_true",
        help="only the erase and pages of one large end user",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    started = perf_counter()
    targets = Targets()
    print("# InProcessMemory beside a dict-plus-lock baseline\n")
    report_machine(sizes, quick=args.quick)
    if args.large_only:
        report_large(sizes.large_facts)
        return
    report_throughput(throughput(sizes), targets)
    report_scaling(scaling(sizes), targets)
    report_memory(
        bytes_per_fact(InProcessMemory, sizes.memory_facts),
        bytes_per_fact(DictBaseline, sizes.memory_facts),
        sizes.memory_facts,
        targets,
    )
    report_large(sizes.large_facts)
    if targets.missed:
        print("Targets missed: " + "; ".join(targets.missed) + ".")
    else:
        print("All targets met.")
    print(f"Total time: {perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
