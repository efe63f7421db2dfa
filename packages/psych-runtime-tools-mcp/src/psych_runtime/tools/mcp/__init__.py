"""The Psych memory tools over the Model Context Protocol, with the end user fixed by the server.

`memory_server` serves one end user's memory (the key fixed when it is
built; the console script ``psych-memory-mcp`` runs it over stdio).
`memory_http_app` serves every signed-in user over streamable HTTP, the end
user taken from the verified OAuth access token (`end_user_id_of`), checked
by `JwtVerifier` or any verifier of the SDK's ``TokenVerifier`` protocol.

The tools are ``remember`` and ``forget`` from `psych_runtime.tools.builtins`
(their specs, validation and refusals, unchanged) and `RECALL`. No tool takes
a tenant, an end user or a scope; a call that passes one is refused. There is
no erase tool. The memory block is also offered as the resource
`MEMORY_RESOURCE_URI` and the prompt `MEMORY_PROMPT`.
"""

from ._app import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_USER,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    SERVER_NAME,
    memory_http_app,
    memory_server,
)
from ._identity import end_user_id_of
from ._jwt import ALGORITHMS, JwtVerifier, KeysUnavailableError
from ._recall import RECALL
from ._server import MEMORY_PROMPT, MEMORY_RESOURCE_URI, IdentityError
from ._version import __version__ as __version__

__all__ = [
    "ALGORITHMS",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SESSIONS_PER_USER",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "MEMORY_PROMPT",
    "MEMORY_RESOURCE_URI",
    "RECALL",
    "SERVER_NAME",
    "IdentityError",
    "JwtVerifier",
    "KeysUnavailableError",
    "end_user_id_of",
    "memory_http_app",
    "memory_server",
]
