"""The port's reference page lists its public API in reading order, all of it and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from psych_runtime.memory import port

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "port.md"


def test_the_port_reference_lists_exactly_the_public_api_starting_with_the_store() -> None:
    listed = re.findall(r"^\s+- (\w+)$", PAGE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sorted(listed) == sorted(port.__all__)
    assert len(listed) == len(set(listed))
    assert listed[0] == "MemoryStore"
