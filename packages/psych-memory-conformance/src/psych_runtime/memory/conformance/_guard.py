"""The anti-weakening guard: a subclass cannot override, delete or skip a check of the kit."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["KitGuard"]

_LOOPS: Final = frozenset({"asyncio]", "trio]"})
_SETTINGS: Final = ("max_examples", "max_steps", "cancelled_calls")
# Marks that, on the class, would stop every check from counting.
_WHOLE_CLASS_MARKS: Final = frozenset({"skip", "skipif", "xfail"})


class KitGuard:
    """What every subclass of the contract class must leave as the kit defined it.

    Built once from the contract class. A subclass is judged on what pytest
    would run, along its whole class hierarchy: each check and kit fixture as
    attribute lookup resolves it through every base (a mixin or an
    intermediate class can override as well as the subclass itself), and the
    marks of every class in the hierarchy, which pytest applies all together.

    Attributes:
        checks: The names of the kit's checks.
    """

    def __init__(self, kit: type, fixtures: Iterable[str]) -> None:
        # The contract class and the groups of checks it inherits, the class's
        # own definitions winning, as attribute lookup would have it.
        own: dict[str, object] = {}
        for klass in reversed(kit.__mro__[:-1]):
            own.update(vars(klass))
        fixture_names = frozenset(fixtures)
        self._fixtures: Final = fixture_names
        self._own: Final[Mapping[str, object]] = own
        self._protected: Final = tuple(
            name for name in own if name.startswith("test") or name in fixture_names
        )
        self.checks: Final = frozenset(name for name in self._protected if name.startswith("test"))

    def tampering(self, cls: type) -> list[str]:
        """Every way ``cls`` weakens the kit, in words; empty when it is intact."""
        problems = [
            f"{name} is a check of the conformance kit and cannot be overridden or "
            "deleted; list it in expected_failures with a reason instead"
            for name in self._protected
            if inspect.getattr_static(cls, name, None) is not self._own[name]
        ]
        problems += [
            f"{attribute} is registered as the kit's fixture {name} and would replace "
            "it; the kit's fixtures cannot be replaced"
            for attribute, name in _renamed_fixtures(cls)
            if name in self._fixtures and attribute != name
        ]
        problems += self._wrong_expected_failures(getattr(cls, "expected_failures", {}))
        marks = _marks(cls)
        if any(getattr(mark, "name", None) in _WHOLE_CLASS_MARKS for mark in marks):
            problems.append(
                "a contract class cannot be skipped or expected to fail as a whole; mark "
                "single checks in expected_failures"
            )
        if any(_parametrizes_the_loop(mark) for mark in marks):
            problems.append("anyio_backend cannot be parametrized: every check runs on both loops")
        for setting in _SETTINGS:
            value = getattr(cls, setting, None)
            if type(value) is not int or value < 1:
                problems.append(f"{setting} must be an int >= 1")
        return problems

    def undefined(self, cls: type, names: Iterable[str]) -> list[str]:
        """The methods among ``names`` that ``cls`` still inherits from the kit itself."""
        return [name for name in names if inspect.getattr_static(cls, name) is self._own[name]]

    def _wrong_expected_failures(self, failures: object) -> list[str]:
        if not isinstance(failures, Mapping):
            return ["expected_failures must map check names to reasons"]
        problems = []
        for name, reason in failures.items():
            check_name, bracket, loop = str(name).partition("[")
            if check_name not in self.checks or (bracket and loop not in _LOOPS):
                problems.append(f"expected_failures names {name!r}, which is no check of the kit")
            elif not isinstance(reason, str) or not reason.strip():
                problems.append(f"expected_failures[{name!r}] needs a reason")
        return problems


def _renamed_fixtures(cls: type) -> list[tuple[str, str]]:
    # Every fixture of the hierarchy that ``@pytest.fixture(name=...)``
    # registers under a name of its own, with that name: pytest looks a
    # fixture up by it, so ``def mine(...)`` named "anyio_backend" replaces
    # the kit's fixture although no attribute of that name changed.
    renamed = []
    for klass in cls.__mro__:
        for attribute, value in vars(klass).items():
            # pytest 8.4 and later wrap the function; earlier ones mark it.
            marker = getattr(value, "_fixture_function_marker", None) or getattr(
                value, "_pytestfixturefunction", None
            )
            name = getattr(marker, "name", None)
            if isinstance(name, str):
                renamed.append((attribute, name))
    return renamed


def _marks(cls: type) -> list[object]:
    # pytest applies the marks of every class in the hierarchy, not only the
    # nearest ``pytestmark``: a skip on any base skips every check.
    marks: list[object] = []
    for klass in cls.__mro__:
        found = vars(klass).get("pytestmark", [])
        marks.extend(found if isinstance(found, list | tuple) else [found])
    return marks


def _parametrizes_the_loop(mark: object) -> bool:
    # A direct parametrization of anyio_backend replaces the kit's fixture and
    # its two loops, such as ["asyncio"] alone.
    if getattr(mark, "name", None) != "parametrize":
        return False
    args = getattr(mark, "args", ())
    argnames = args[0] if args else getattr(mark, "kwargs", {}).get("argnames", "")
    names = argnames.split(",") if isinstance(argnames, str) else argnames
    return "anyio_backend" in {str(name).strip() for name in names}
