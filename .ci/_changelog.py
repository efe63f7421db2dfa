"""CHANGELOG.md as the checks read it: Keep a Changelog, one section per distribution.

The layout (``docs/releasing.md`` explains it)::

    ## <distribution>               one per distribution under packages/
    ### [1.2.0] - Unreleased        the next version, until it is released
    ### [1.1.0] - 2026-12-03        a released version and its date
    #### Added                      Added, Changed, Deprecated, Removed, Fixed, Security
    - one bullet per change

    ## Repository                   changes that ship in no distribution
    ### 2026-12-03                  grouped by date instead of version
"""

from __future__ import annotations

import datetime
import itertools
import re
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

REPOSITORY_SECTION = "Repository"
UNRELEASED = "Unreleased"
CHANGE_TYPES = frozenset({"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"})
_RELEASE = re.compile(r"^\[(?P<version>[^\]]+)\] - (?P<when>\S+)$")


@dataclass
class Release:
    """One ``###`` section: a version of a distribution, or a date of the repository."""

    title: str
    line: int
    version: Version | None = None
    when: str = ""
    entries: int = 0

    @property
    def released(self) -> bool:
        """Tell whether the section carries a release date."""
        return self.when != UNRELEASED


@dataclass
class Changelog:
    """The sections found, and every way the file departs from the layout."""

    sections: dict[str, list[Release]] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)

    def report(self, section: str | None = None) -> list[str]:
        """Return the problems, all of them or those within one ``##`` section."""
        if section is None:
            return [f"line {line}: {message}" for line, message in self.problems]
        start = self.starts.get(section, 0)
        end = min((line for line in self.starts.values() if line > start), default=None)
        return [
            f"line {line}: {message}"
            for line, message in self.problems
            if start <= line and (end is None or line < end)
        ]

    def release(self, distribution: str, version: Version) -> Release | None:
        """Return the section of one version of a distribution, if there is one."""
        for release in self.sections.get(distribution, []):
            if release.version == version:
                return release
        return None


def parse(text: str) -> Changelog:
    """Read a changelog and check its layout; problems name their line."""
    changelog = Changelog()
    section: str | None = None
    current: Release | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            section = line[3:].strip()
            current = None
            if section in changelog.sections:
                changelog.problems.append((number, f"a second section {section!r}"))
            changelog.sections[section] = []
            changelog.starts[section] = number
        elif line.startswith("### "):
            if section is None:
                changelog.problems.append((number, "a version outside any section"))
                continue
            current = _release(line[4:].strip(), number, section, changelog.problems)
            changelog.sections[section].append(current)
        elif line.startswith("#### "):
            kind = line[5:].strip()
            if kind not in CHANGE_TYPES:
                changelog.problems.append(
                    (number, f"{kind!r} is not one of {', '.join(sorted(CHANGE_TYPES))}")
                )
        elif line.startswith("- ") and current is not None:
            current.entries += 1
    for name, releases in changelog.sections.items():
        changelog.problems.extend(_order(name, releases))
    return changelog


def _release(title: str, number: int, section: str, problems: list[tuple[int, str]]) -> Release:
    release = Release(title, number)
    if section == REPOSITORY_SECTION:
        release.when = title
        if not _is_date(title):
            problems.append((number, "the repository's sections are dated YYYY-MM-DD"))
        return release
    found = _RELEASE.match(title)
    if found is None:
        rule = "a version heading reads '### [X.Y.Z] - YYYY-MM-DD' or '### [X.Y.Z] - Unreleased'"
        problems.append((number, rule))
        return release
    release.when = found.group("when")
    try:
        release.version = Version(found.group("version"))
    except InvalidVersion:
        problems.append((number, f"{found.group('version')!r} is not a version"))
    if release.when != UNRELEASED and not _is_date(release.when):
        problems.append((number, f"the date reads YYYY-MM-DD or the word {UNRELEASED}"))
    return release


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) is not None


def _order(name: str, releases: list[Release]) -> list[tuple[int, str]]:
    problems = []
    for earlier, later in itertools.pairwise(releases):
        if not later.released:
            problems.append((later.line, f"in {name}, only the newest section is unreleased"))
        if earlier.version is not None and later.version is not None:
            if earlier.version <= later.version:
                problems.append((later.line, f"in {name}, versions go newest first"))
        elif earlier.when and later.when and earlier.when <= later.when and later.released:
            problems.append((later.line, f"in {name}, dates go newest first"))
    return problems
