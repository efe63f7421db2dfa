"""Serve an ASGI app with uvicorn, saying on stderr where it listens once it does."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any, Final

import uvicorn
from starlette.applications import Starlette

__all__ = ["serve_http"]

_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


async def serve_http(app: Starlette, *, host: str, port: int, path: str) -> None:
    """Serve ``app`` until the process is told to stop (SIGINT or SIGTERM); main thread only.

    Once the socket listens, one line ``psych-memory-mcp: listening on
    http://HOST:PORT/PATH`` goes to stderr, with the real port when ``port``
    is 0.

    Args:
        app: The app.
        host: The interface to listen on.
        port: The port, or 0 for a free one.
        path: The MCP endpoint's path, for the announcement.
    """
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = _AnnouncingServer(config, path)
    # After a graceful shutdown uvicorn raises the signal again with the
    # handlers it found installed. The default ones would end the process
    # there, before the caller closes the store; these do nothing instead.
    previous = {sig: signal.signal(sig, _ignore) for sig in _STOP_SIGNALS}
    try:
        await server.serve()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore(sig: int, frame: FrameType | None) -> None:
    del sig, frame


class _AnnouncingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, path: str) -> None:
        super().__init__(config)
        self._path = path

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                print(
                    f"psych-memory-mcp: listening on http://{host}:{port}{self._path}",
                    file=sys.stderr,
                    flush=True,
                )
