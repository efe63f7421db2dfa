"""Ctrl-C in the operator's command: held while an export is written, never lost.

Python raises a Ctrl-C as ``KeyboardInterrupt`` between two steps of
whatever code runs; when that code is a weak reference's callback or a
finaliser (an import ends with one), Python cannot let it propagate,
prints it as an exception it ignored and goes on. The command would then
finish a job its operator asked it to stop. While the command is the whole
process, an interrupt lost that way is noted instead, silently, and the
command stops at its next step that would do anything: it is cancelled,
and says so, exactly as if the interrupt had been raised.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

__all__ = ["INTERRUPTS"]


class _Interrupts:
    def __init__(self) -> None:
        # Ctrl-C recorded while held (from the moment an export is written).
        self.received = False
        # Ctrl-C raised where Python discarded it, since `watch`.
        self.lost = False
        # The command is the whole process, which ends when it returns.
        self.process = False
        self._previous: Any = None
        self._holding = False
        self._watching = False
        self._next_hook: Callable[[sys.UnraisableHookArgs], Any] = sys.unraisablehook

    def watch(self) -> None:
        """Note a Ctrl-C that Python would discard; for the whole process's command only."""
        if not self._watching:
            self._watching = True
            self._next_hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        self.lost = False

    def hold(self) -> None:
        # Signal handlers can only be set from the main thread; elsewhere
        # (a program running the command in a thread) there is no Ctrl-C.
        if self._holding or threading.current_thread() is not threading.main_thread():
            return
        self.received = False
        self._previous = signal.signal(signal.SIGINT, self._record)
        self._holding = True

    def written(self) -> None:
        # The whole process ends soon: ignored rather than recorded, as the
        # interpreter puts back the default handler while it shuts down.
        if self._holding and self.process:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def release(self) -> None:
        if self._holding:
            signal.signal(signal.SIGINT, self._previous)
            self._holding = False

    def _record(self, _signal: int, _frame: object) -> None:
        self.received = True

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            self.lost = True
        else:
            self._next_hook(unraisable)


INTERRUPTS: Final = _Interrupts()
