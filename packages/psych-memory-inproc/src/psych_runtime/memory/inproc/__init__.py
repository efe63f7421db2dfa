"""The in-process memory adapter, for tests and single-process use."""

from ._memory import InProcessMemory
from ._url import open_url
from ._version import __version__ as __version__

__all__ = ["InProcessMemory", "open_url"]
