"""The errors of opening a store by URL, and of the operations on open stores.

Two small families, on the standard library's bases. The URL cannot name a
store (the caller's mistake):

    ValueError
     └── StoreUrlError            no scheme, or a rule of the scheme's backend broken
          └── UnknownSchemeError  no installed backend registers the scheme

and the backend registered for the scheme cannot be used (an installation's
mistake):

    RuntimeError
     └── StoreBackendError        it does not load, is registered twice, or breaks
                                  the opener's contract

Once a backend has opened its store, its own failures are the port's
`MemoryStoreError` family (unreachable, schema version, ...), raised as they
are.

The operations on open stores (counting, export, import, erasure,
migration) refuse what a rule forbids with one family; each error names the
store by its role in the operation (``"store"``, ``"source"``,
``"target"``), never by how a caller spelt it, and nothing changed unless
it says so:

    RuntimeError
     ├── OperationRefusedError
     │    ├── MissingCapabilityError   the store lacks a capability the operation needs
     │    ├── FactsForgottenError      facts were forgotten while they were read
     │    ├── HeldFactsConflictError   the target holds facts the source does not start with
     │    ├── FactRefusedError         the target refused a fact the source held
     │    └── CopyMismatchError        after a copy the stores hold different facts
     └── ImportStoppedError           a batch of an import failed; the first ones stay

No message and no attribute holds the URL: it may carry a password, or
options naming one. Messages name ``url`` (or the scheme) and the rule.
Every error pickles with its attributes.
"""

from __future__ import annotations

from typing import Any

from psych_runtime.memory.port import InvalidInputError, MemoryStoreError

__all__ = [
    "CopyMismatchError",
    "FactRefusedError",
    "FactsForgottenError",
    "HeldFactsConflictError",
    "ImportStoppedError",
    "MissingCapabilityError",
    "OperationRefusedError",
    "StoreBackendError",
    "StoreUrlError",
    "UnknownSchemeError",
]


class StoreUrlError(ValueError):
    """The URL cannot name a store: nothing was opened or created.

    Attributes:
        rule: What is wrong with the URL, in words, without the URL.
        scheme: The URL's scheme, in lower case, or ``None`` when the URL has
            none.
    """

    rule: str
    scheme: str | None

    def __init__(self, rule: str, scheme: str | None = None) -> None:
        super().__init__(f"url {rule}")
        self.rule = rule
        self.scheme = scheme

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rule, self.scheme))


class UnknownSchemeError(StoreUrlError):
    """No installed backend registers the URL's scheme.

    Attributes:
        scheme: The URL's scheme, in lower case.
        installed: The schemes that are registered, sorted: what the URL
            could have used.
    """

    scheme: str
    installed: tuple[str, ...]

    def __init__(self, scheme: str, installed: tuple[str, ...]) -> None:
        listed = ", ".join(installed) if installed else "none"
        super().__init__(
            f"has the scheme {scheme!r}, which no installed backend registers "
            f"(installed schemes: {listed})",
            scheme,
        )
        self.installed = installed

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.scheme, self.installed))


class StoreBackendError(RuntimeError):
    """The backend registered for a scheme cannot be used: the installation is broken.

    Attributes:
        scheme: The scheme whose backend failed, in lower case.
        reason: What is wrong with it, in words.
    """

    scheme: str
    reason: str

    def __init__(self, scheme: str, reason: str) -> None:
        super().__init__(
            f"the backend registered for the scheme {scheme!r} cannot be used: {reason}"
        )
        self.scheme = scheme
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.scheme, self.reason))


class OperationRefusedError(RuntimeError):
    """A rule forbids what an operation on open stores was asked to do.

    Attributes:
        role: The store at fault, by its role in the operation: ``"store"``
            (the one store of the operation), ``"source"`` or ``"target"``.
    """

    role: str

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role


class MissingCapabilityError(OperationRefusedError):
    """The store does not provide a capability the operation needs; nothing was done.

    Attributes:
        ability: What the store cannot do, in words (``"list its users"``).
        capability: The port's capability it lacks (``"ListsEndUsers"``).
    """

    ability: str
    capability: str

    def __init__(self, role: str, ability: str, capability: str) -> None:
        super().__init__(
            role, f"the {role} cannot {ability} (its backend does not provide {capability})"
        )
        self.ability = ability
        self.capability = capability

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.role, self.ability, self.capability))


class FactsForgottenError(OperationRefusedError):
    """Facts of an end user were forgotten or erased while they were read.

    Attributes:
        doing: What was being done with them (``"counted"``, ``"copied"``).
        retried: Whether the read was started again, a few times, first.
    """

    doing: str
    retried: bool

    def __init__(self, role: str, doing: str, *, retried: bool) -> None:
        super().__init__(
            role, f"facts of an end user in the {role} were forgotten while being {doing}"
        )
        self.doing = doing
        self.retried = retried

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), (self.role, self.doing), {"retried": self.retried}))


class HeldFactsConflictError(OperationRefusedError):
    """End users in the target hold facts that are not the first facts of the source's.

    Other ids, contents, times or order; nothing was written.

    Attributes:
        end_users: How many end users disagree.
    """

    end_users: int

    def __init__(self, end_users: int, role: str = "target") -> None:
        super().__init__(
            role,
            f"{end_users} end user(s) in the {role} hold facts that are not the first "
            "facts of the same end user in the source",
        )
        self.end_users = end_users

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.end_users, self.role))


class FactRefusedError(OperationRefusedError):
    """The target refused a fact the source held (its rules are stricter).

    Attributes:
        reason: The target's refusal.
    """

    reason: InvalidInputError

    def __init__(self, reason: InvalidInputError, role: str = "target") -> None:
        super().__init__(role, f"the {role} refused a fact: {reason}")
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.role))


class CopyMismatchError(OperationRefusedError):
    """After copying, end users hold other facts in the target than in the source.

    Either store was written to meanwhile; copying again finishes the copy.

    Attributes:
        end_users: How many end users differ.
    """

    end_users: int

    def __init__(self, end_users: int, role: str = "target") -> None:
        super().__init__(
            role, f"after copying, {end_users} end user(s) hold other facts than in the source"
        )
        self.end_users = end_users

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.end_users, self.role))


class ImportStoppedError(RuntimeError):
    """A batch of an import failed: the batches before it are stored, whole.

    Attributes:
        stored: How many facts of the export are stored (whole batches only,
            those found already held included).
        reason: The target's refusal of a fact (`InvalidInputError`) or its
            failure (`MemoryStoreError`).
    """

    stored: int
    reason: InvalidInputError | MemoryStoreError

    def __init__(self, stored: int, reason: InvalidInputError | MemoryStoreError) -> None:
        super().__init__(f"the import stopped after {stored} fact(s): {reason}")
        self.stored = stored
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stored, self.reason))


def _rebuilt(kind: type[Exception], args: tuple[Any, ...], keywords: dict[str, Any]) -> Exception:
    # Unpickles an error whose constructor takes keywords.
    return kind(*args, **keywords)
