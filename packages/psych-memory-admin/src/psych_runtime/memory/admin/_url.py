"""Reading a store URL: its scheme, and the same URL with its secrets hidden."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote, unquote_plus

from ._errors import StoreUrlError

__all__ = ["redact_url"]

REDACTED: Final = "***"

# RFC 3986, section 3.1.
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def url_scheme(url: object) -> str:
    """Return the scheme of a store URL, in lower case (schemes ignore case).

    Raises:
        TypeError: ``url`` is not a `str`.
        StoreUrlError: ``url`` does not start with a scheme and a colon.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    scheme, colon, _ = url.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme):
        raise StoreUrlError(
            "must start with a scheme and a colon, such as 'memory:', 'sqlite:///facts.db' "
            "or 'postgresql://host/database'"
        )
    return scheme.lower()


def redact_url(url: str) -> str:
    """Return ``url`` with every password in it replaced by ``***``.

    Hidden are the password of the user information
    (``postgresql://user:***@host/db``) and the value of every query option
    whose name contains ``password`` (such as libpq's ``password`` and
    ``sslpassword``). Everything else is kept as written, so the result
    still says which store was meant: print this, never the URL itself. It
    never fails on a malformed URL; a password must be percent-encoded (as
    every URL parser expects) to be recognised.

    Raises:
        TypeError: ``url`` is not a `str`.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__qualname__}")
    redacted, _ = _redact(url)
    return redacted


def secrets_in(url: str) -> tuple[str, ...]:
    """Return every password in ``url``, as written and decoded, longest first.

    What a message from a backend is scrubbed of, in case it echoes the URL.
    """
    _, secrets = _redact(url)
    spellings = {
        spelling
        for secret in secrets
        for spelling in (secret, unquote(secret), unquote_plus(secret))
        if spelling
    }
    return tuple(sorted(spellings, key=len, reverse=True))


def _redact(url: str) -> tuple[str, list[str]]:
    secrets: list[str] = []
    rest, hash_sign, fragment = url.partition("#")
    rest, question_mark, query = rest.partition("?")
    start = _authority_start(rest)
    if start is not None:
        end = rest.find("/", start)
        if end == -1:
            end = len(rest)
        # The host never holds an "@", so the last one ends the user information.
        userinfo, at, host = rest[start:end].rpartition("@")
        user, colon, password = userinfo.partition(":")
        if at and colon and password:
            secrets.append(password)
            rest = f"{rest[:start]}{user}:{REDACTED}@{host}{rest[end:]}"
    if query:
        options = []
        for option in query.split("&"):
            name, equals, value = option.partition("=")
            if equals and value and "password" in unquote_plus(name).lower():
                secrets.append(value)
                option = f"{name}={REDACTED}"  # noqa: PLW2901 - the option, hidden
            options.append(option)
        query = "&".join(options)
    return f"{rest}{question_mark}{query}{hash_sign}{fragment}", secrets


def _authority_start(rest: str) -> int | None:
    scheme, colon, after = rest.partition(":")
    if colon and _SCHEME.fullmatch(scheme) and after.startswith("//"):
        return len(scheme) + 3
    if rest.startswith("//"):
        return 2
    return None
