"""What one distribution's release check found."""

from __future__ import annotations

from pathlib import Path

from _repository import Distribution


class Report:
    """What one distribution's check found: facts as it went, and problems."""

    def __init__(self, distribution: Distribution) -> None:
        self.distribution = distribution
        self.notes: list[str] = []
        self.problems: list[str] = []
        self.out: Path | None = None

    def note(self, line: str) -> None:
        """Record a fact the check established."""
        self.notes.append(line)

    def fail(self, line: str) -> None:
        """Record a problem: the distribution is not ready."""
        self.problems.append(line)
