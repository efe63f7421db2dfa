"""The isolation boundary: one tenant plus one end user."""

from __future__ import annotations

from typing import Any, Final, NoReturn, Protocol, TypeAlias, final

from ._validation import _type_name, validate_key_part

__all__ = ["HasTenant", "MemoryKey", "Scope", "memory_key"]


class HasTenant(Protocol):
    """Any object with a `str` attribute ``tenant``, such as the runtime's scope."""

    @property
    def tenant(self) -> str: ...


Scope: TypeAlias = "str | HasTenant"
"""What callers pass as ``scope``: the tenant itself, or an object carrying it."""

_MISSING: Final = object()

# Keys recently built from plain strings. Validating and building a key is most
# of the cost of a call on a fast store, and an agent asks for the same few
# keys again and again. Only exact `str` arguments are looked up: a subclass
# could compare equal to a string it is not. Emptied when full, which keeps it
# bounded without the bookkeeping of an LRU.
_RECENT_KEYS: Final[dict[tuple[str, str], MemoryKey]] = {}
_RECENT_KEYS_MAX: Final = 4096


@final
class MemoryKey:
    """The key every fact is stored under: a tenant and one of its end users.

    Both fields are required and validated on construction, so a key that
    exists is a valid key. Keys are immutable, hashable and compared exactly:
    nothing is stripped or normalised, because silently changing a key could
    merge two users' facts. The class cannot be subclassed, so no subclass can
    relax the validation.

    Keys work as fields of pydantic models (and so in FastAPI), validated
    by these same rules and serialised as ``{"tenant", "end_user_id"}``;
    the port itself does not import pydantic.

    Raises:
        TypeError: A field is not a `str`.
        InvalidKeyError: A field breaks a key rule (see `validate_key_part`).
    """

    __slots__ = ("_end_user_id", "_hash", "_tenant")
    __match_args__ = ("tenant", "end_user_id")

    _tenant: str
    _end_user_id: str
    _hash: int

    def __init__(self, tenant: str, end_user_id: str) -> None:
        _fill(
            self,
            validate_key_part(tenant, "tenant"),
            validate_key_part(end_user_id, "end_user_id"),
        )

    @property
    def tenant(self) -> str:
        """The tenant: the customer of the application, as a whole."""
        return self._tenant

    @property
    def end_user_id(self) -> str:
        """The end user within the tenant whose facts these are."""
        return self._end_user_id

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("MemoryKey cannot be subclassed")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"MemoryKey is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"MemoryKey is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryKey):
            return NotImplemented
        return self._tenant == other._tenant and self._end_user_id == other._end_user_id

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"MemoryKey(tenant={self._tenant!r}, end_user_id={self._end_user_id!r})"

    def __reduce__(self) -> tuple[type[MemoryKey], tuple[str, str]]:
        return (MemoryKey, (self._tenant, self._end_user_id))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> Any:
        """Let pydantic validate, serialise and describe keys, by the port's rules.

        Called by pydantic only, so the port never needs it installed. A key
        is ``{"tenant": ..., "end_user_id": ...}``; each half is checked by
        `validate_key_part`, and a key passes as it is.
        """
        from ._pydantic import key_schema  # noqa: PLC0415 - pydantic is optional

        return key_schema()

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        """Describe keys in JSON Schema for pydantic, with the limits of their fields."""
        from ._pydantic import describe  # noqa: PLC0415 - pydantic is optional

        return describe(cls, schema, handler)


def memory_key(scope: Scope, end_user_id: str) -> MemoryKey:
    """Turn the arguments of a port call into the key they address.

    This is the one place where call-site arguments become a key, so there is
    exactly one place where a bug that dropped the tenant could live. Every
    adapter calls it before anything else.

    Args:
        scope: The tenant, as a `str` or as any object with a `str`
            attribute ``tenant`` (the runtime's scope object).
        end_user_id: The end user within that tenant.

    Raises:
        TypeError: ``scope`` is neither a `str` nor an object with a `str`
            ``tenant``, or ``end_user_id`` is not a `str`.
        InvalidKeyError: The tenant or the end-user id breaks a key rule.
    """
    plain = type(scope) is str and type(end_user_id) is str
    if plain:
        cached = _RECENT_KEYS.get((scope, end_user_id))  # type: ignore[arg-type]
        if cached is not None:
            return cached
    tenant = _tenant_of(scope)
    key: MemoryKey = object.__new__(MemoryKey)
    _fill(key, tenant, validate_key_part(end_user_id, "end_user_id"))
    if plain:
        if len(_RECENT_KEYS) >= _RECENT_KEYS_MAX:
            _RECENT_KEYS.clear()
        _RECENT_KEYS[tenant, key.end_user_id] = key
    return key


def _tenant_of(scope: Scope) -> str:
    # The one reader of scopes: `memory_key` and `validate_scope` both call it.
    if isinstance(scope, str):
        return validate_key_part(scope, "scope")
    candidate = getattr(scope, "tenant", _MISSING)
    if candidate is _MISSING:
        raise TypeError(
            "scope must be a str or an object with a str attribute 'tenant', "
            f"not {_type_name(scope)}"
        )
    return validate_key_part(candidate, "scope.tenant")


def _fill(key: MemoryKey, tenant: str, end_user_id: str) -> None:
    # Fields are set once, here, past the immutability guard.
    set_field = object.__setattr__
    set_field(key, "_tenant", tenant)
    set_field(key, "_end_user_id", end_user_id)
    set_field(key, "_hash", hash((tenant, end_user_id)))
