"""A distribution's README describes that distribution, and no other.

The README is the distribution's page on the package index. The check reads
the file ``[project] readme`` names (``README.md`` when it names none) and
fails when

- its first line is not ``# <distribution>``: the title is the name;
- it has no ``pip install <distribution>`` line (extras and quotes allowed,
  as in ``pip install "psych-memory-admin[cli]"``);
- it names the import path of another distribution here (a leaf package of
  its wheel target, such as ``psych_runtime.tools.pydantic_ai``), unless
  the README's distribution requires that one (directly or through the
  siblings it requires, with the extras they name; its own extras count)
  or that one is a store (it registers a scheme in the entry-point group
  ``psych_runtime.memory.stores``): an example needs some store to run on,
  and any store will do;
- it names a framework it does not build on: each framework below is known
  by the requirement a framework package declares and by the words that
  name it (its project, its import name, the classes our package for it
  exports). A distribution names another distribution's name freely, except
  a framework package's name, which contains its framework's name: such a
  pointer belongs in the documentation, not on a package's page.

The whole text is read, code blocks included. An import path is matched
exactly; a framework's words whole, in any case.

The release check runs this on each distribution it checks; on its own,

    python .ci/_readme.py [--root PATH] [DISTRIBUTION ...]

checks the READMEs alone (every distribution's when none is named), and
exits 1, naming each README, what it names and the rule, if any fails.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from _report import Report
from _repository import ROOT, Distribution, discover
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

STORES_GROUP = "psych_runtime.memory.stores"
OWN_PATHS_ONLY = "a README names no other distribution's import path"
NO_OTHER_FRAMEWORK = "a README names no framework its distribution does not build on"


@dataclass(frozen=True)
class Framework:
    """An agent framework some distribution here builds on."""

    name: str
    requirement: str
    words: tuple[str, ...]

    @property
    def pattern(self) -> re.Pattern[str]:
        words = "|".join(self.words)
        return re.compile(rf"(?<![A-Za-z0-9])(?:{words})(?![A-Za-z0-9])", re.IGNORECASE)


# A separator between two words of a name: "pydantic-ai", "pydantic_ai",
# "pydantic.ai", "pydantic ai".
_SEP = r"[-_. ]"
FRAMEWORKS = (
    Framework("pydantic-ai", "pydantic-ai-slim", (rf"pydantic{_SEP}ai", "MemoryToolset")),
    Framework(
        "openai-agents",
        "openai-agents",
        (
            rf"openai{_SEP}agents",
            "Agents SDK",
            "from agents import",
            "import agents",
            "AgentMemory",
        ),
    ),
    Framework("langchain", "langchain", ("langchain", "langgraph", "MemoryMiddleware")),
    Framework("google-adk", "google-adk", (rf"google{_SEP}adk", "ADK", "StoreMemoryService")),
)


def readme_of(distribution: Distribution) -> Path:
    """Return the README the distribution's metadata names."""
    readme = distribution.project.get("readme", "README.md")
    if isinstance(readme, dict):
        readme = readme.get("file", "README.md")
    return distribution.folder / str(readme)


def check(
    root: Path, distribution: Distribution, found: dict[str, Distribution], report: Report
) -> None:
    """Fail the report for each way the README describes something else."""
    path = readme_of(distribution)
    shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if not path.is_file():
        report.fail(f"{shown}: missing")
        return
    text = path.read_text("utf-8")
    problems = list(_problems(text, distribution, found))
    for line, problem in problems:
        report.fail(f"{shown}:{line}: {problem}" if line else f"{shown}: {problem}")
    if not problems:
        report.note(f"readme: {shown} describes {distribution.name} alone")


def _problems(
    text: str, distribution: Distribution, found: dict[str, Distribution]
) -> Iterable[tuple[int, str]]:
    name = distribution.name
    first = text.splitlines()[0].strip() if text.strip() else ""
    if first != f"# {name}":
        yield 1, f"the title is {first!r}, not '# {name}'"
    install = rf"pip install\s+[\"']?{re.escape(name)}(?:\[[\w,\s-]*\])?[\"']?(?=[\s`]|$)"
    if not re.search(install, text, re.IGNORECASE):
        yield 0, f"no 'pip install {name}' line"
    allowed = _required(distribution, found) | _stores(found) | {name}
    for other, sibling in sorted(found.items()):
        if other in allowed:
            continue
        for module in sibling.modules:
            pattern = rf"(?<![\w.]){re.escape(module)}(?!\w)"
            for match in re.finditer(pattern, text):
                problem = (
                    f"names {module!r}, the import path of {other}, which {name} does not"
                    f" require (rule: {OWN_PATHS_ONLY})"
                )
                yield _line(text, match.start()), problem
    builds_on = _requirements(distribution)
    for framework in FRAMEWORKS:
        if canonicalize_name(framework.requirement) in builds_on:
            continue
        for match in framework.pattern.finditer(text):
            problem = (
                f"names {match.group(0)!r}, of the framework {framework.name}, which {name}"
                f" does not build on (rule: {NO_OTHER_FRAMEWORK})"
            )
            yield _line(text, match.start()), problem


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _parsed(entries: Iterable[object]) -> Iterable[Requirement]:
    for entry in entries:
        try:
            yield Requirement(str(entry))
        except InvalidRequirement:
            continue


def _own_requirements(distribution: Distribution) -> list[Requirement]:
    """Return what the distribution requires, its extras included."""
    project = distribution.project
    entries = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        entries.extend(extra)
    return list(_parsed(entries))


def _requirements(distribution: Distribution) -> set[str]:
    """Return the names of what the distribution requires, its extras included."""
    return {canonicalize_name(requirement.name) for requirement in _own_requirements(distribution)}


def _required(distribution: Distribution, found: dict[str, Distribution]) -> set[str]:
    """Return the siblings a distribution requires, through siblings, with the extras named."""
    pending = _own_requirements(distribution)
    required: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        sibling = found.get(name)
        if sibling is None or name in required:
            continue
        required.add(name)
        more = list(sibling.project.get("dependencies", []))
        extras = sibling.project.get("optional-dependencies", {})
        for extra in requirement.extras:
            more.extend(extras.get(extra, []))
        pending.extend(_parsed(more))
    return required


def _stores(found: dict[str, Distribution]) -> set[str]:
    """Return the distributions that register a store scheme."""
    return {
        name
        for name, distribution in found.items()
        if distribution.project.get("entry-points", {}).get(STORES_GROUP)
    }


def main(argv: list[str] | None = None) -> int:
    """Check the READMEs of the named distributions, or of all; exit 1 if any fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distributions", nargs="*", help="names of distributions under packages/")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check")
    arguments = parser.parse_args(argv)
    root = arguments.root.resolve()
    found = discover(root)
    names = arguments.distributions or sorted(found)
    unknown = [name for name in names if name not in found]
    if unknown:
        parser.error(f"not a distribution under packages/: {', '.join(unknown)}")
    failed = False
    for name in names:
        report = Report(found[name])
        check(root, found[name], found, report)
        for line in report.notes:
            print(line)
        for line in report.problems:
            print(f"FAIL {line}")
        failed = failed or bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
