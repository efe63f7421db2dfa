"""The errors of opening a store by URL.

Two small families, on the standard library's bases. The URL cannot name a
store (the caller's mistake)::

    ValueError
     └── StoreUrlError            no scheme, or a rule of the scheme's backend broken
          └── UnknownSchemeError  no installed backend registers the scheme

and the backend registered for the scheme cannot be used (an installation's
mistake)::

    RuntimeError
     └── StoreBackendError        it does not load, is registered twice, or breaks
                                  the opener's contract

Once a backend has opened its store, its own failures are the port's
`MemoryStoreError` family (unreachable, schema version, ...), raised as they
are.

No message and no attribute holds the URL: it may carry a password, or
options naming one. Messages name ``url`` (or the scheme) and the rule.
Every error pickles with its attributes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StoreBackendError", "StoreUrlError", "UnknownSchemeError"]


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
