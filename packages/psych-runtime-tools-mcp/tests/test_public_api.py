"""The public surface of psych_runtime.tools.mcp, and the layout it relies on."""

from __future__ import annotations

import importlib.metadata
import inspect
from pathlib import Path

import pytest
from starlette.applications import Starlette

import psych_runtime
import psych_runtime.memory
import psych_runtime.tools
import psych_runtime.tools.mcp as mcp_
from psych_runtime.memory.inproc import InProcessMemory
from psych_runtime.memory.port import InvalidKeyError
from psych_runtime.tools.mcp import JwtVerifier, memory_http_app, memory_server


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(mcp_.__all__) == [
        "ALGORITHMS",
        "DEFAULT_MAX_SESSIONS",
        "DEFAULT_MAX_SESSIONS_PER_USER",
        "DEFAULT_SESSION_IDLE_TIMEOUT",
        "IdentityError",
        "JwtVerifier",
        "KeysUnavailableError",
        "MEMORY_PROMPT",
        "MEMORY_RESOURCE_URI",
        "RECALL",
        "SERVER_NAME",
        "end_user_id_of",
        "memory_http_app",
        "memory_server",
    ]
    for name in mcp_.__all__:
        assert hasattr(mcp_, name), name


def test_namespace_levels_are_namespaces() -> None:
    # An __init__.py at a namespace level would hide every other distribution.
    for namespace in (psych_runtime, psych_runtime.memory, psych_runtime.tools):
        assert vars(namespace).get("__file__") is None, namespace.__name__


def test_leaf_is_typed_and_versioned() -> None:
    assert mcp_.__file__ is not None
    assert (Path(mcp_.__file__).parent / "py.typed").is_file()
    assert mcp_.__version__ == importlib.metadata.version("psych-runtime-tools-mcp")


def test_console_script_is_registered() -> None:
    scripts = importlib.metadata.entry_points(group="console_scripts")
    (script,) = [entry for entry in scripts if entry.name == "psych-memory-mcp"]
    assert script.value == "psych_runtime.tools.mcp._cli:main"


def test_keys_and_settings_are_keyword_only_without_defaults_for_the_key() -> None:
    params = inspect.signature(memory_server).parameters
    assert list(params) == ["memory", "scope", "end_user_id", "limits"]
    assert params["limits"].kind is inspect.Parameter.VAR_KEYWORD
    for name in ("scope", "end_user_id"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default is inspect.Parameter.empty, name
    http = inspect.signature(memory_http_app).parameters
    assert "end_user_id" not in http
    assert [p.kind for p in http.values()][1:] == [inspect.Parameter.KEYWORD_ONLY] * (
        len(http) - 2
    ) + [inspect.Parameter.VAR_KEYWORD]
    jwt = inspect.signature(JwtVerifier).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in jwt.values())


def test_documented_contracts() -> None:
    for function in (memory_server, memory_http_app, JwtVerifier):
        assert "Raises:" in (function.__doc__ or ""), function


def test_the_http_app_refuses_bad_settings_when_built() -> None:
    memory = InProcessMemory()
    verifier = JwtVerifier(issuers=["https://i.example"], audience="a", key="k")

    def app(store: object = memory, **settings: str) -> Starlette:
        return memory_http_app(
            store,  # type: ignore[arg-type]
            verifier=verifier,
            issuer_url="https://i.example",
            resource_server_url="https://r.example/mcp",
            **settings,  # type: ignore[arg-type]
        )

    with pytest.raises(ValueError, match="exactly one of tenant and tenant_claim"):
        app()
    with pytest.raises(ValueError, match="exactly one of tenant and tenant_claim"):
        app(tenant="acme", tenant_claim="org")
    with pytest.raises(InvalidKeyError, match="tenant"):
        app(tenant=" acme")
    with pytest.raises(TypeError, match="memory must be a MemoryStore"):
        app(object(), tenant="acme")
    paths = {getattr(route, "path", None) for route in app(tenant_claim="org").routes}
    assert {"/mcp", "/.well-known/oauth-protected-resource/mcp"} <= paths
