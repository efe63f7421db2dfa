"""Fixtures the in-process adapter's tests share."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def switch_threads_often() -> Iterator[None]:
    """Make the interpreter switch threads far more often than usual.

    An unguarded read-modify-write, or a step of the reaper racing a caller,
    is then actually interleaved.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)
