"""`LedgerKey`: the operator's secret, and the keyed hash of an end user."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NoReturn, final

from psych_runtime.memory.port import InvalidInputError

__all__ = ["KEY_VARIABLE", "MIN_KEY_LENGTH", "LedgerKey", "ledger_key"]

KEY_VARIABLE: Final = "PSYCH_MEMORY_LEDGER_KEY"
"""The environment variable `ledger_key` reads the secret from."""

MIN_KEY_LENGTH: Final = 32
"""The fewest bytes a secret may have: the length of an HMAC-SHA256 output."""

_CHECK_MESSAGE: Final = b"psych-memory-ledger key check v1"


@final
class LedgerKey:
    """The operator's secret that turns end-user ids into keyed hashes.

    The secret is kept in memory only: it is never written to the ledger,
    never part of an error message, and never shown by ``repr``.

    Raises:
        TypeError: ``secret`` is not `bytes`.
        InvalidInputError: ``secret`` is shorter than `MIN_KEY_LENGTH` bytes.
    """

    __slots__ = ("_secret",)

    _secret: bytes

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes, not {type(secret).__qualname__}")
        if len(secret) < MIN_KEY_LENGTH:
            raise InvalidInputError("key", f"must be at least {MIN_KEY_LENGTH} bytes long")
        object.__setattr__(self, "_secret", bytes(secret))

    def __repr__(self) -> str:
        return "LedgerKey(<hidden>)"

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"LedgerKey is immutable: cannot set {name!r}")

    def __reduce__(self) -> NoReturn:
        # A pickle would write the secret wherever it goes.
        raise TypeError("LedgerKey cannot be pickled")

    def end_user_hash(self, tenant: str, end_user_id: str) -> str:
        """The keyed hash (HMAC-SHA256, hexadecimal) recorded for an end user of a tenant.

        The tenant is part of the message, so that the same end-user id in two
        tenants gives two unrelated hashes.
        """
        tenant_bytes = tenant.encode("utf-8", "surrogatepass")
        message = (
            len(tenant_bytes).to_bytes(4, "big")
            + tenant_bytes
            + end_user_id.encode("utf-8", "surrogatepass")
        )
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def check_value(self) -> str:
        """A value stored in the ledger to tell, on opening, whether this is its key."""
        return hmac.new(self._secret, _CHECK_MESSAGE, hashlib.sha256).hexdigest()


def ledger_key(
    *, file: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> LedgerKey:
    """Read the operator's secret from a file, or else from ``PSYCH_MEMORY_LEDGER_KEY``.

    Args:
        file: A file holding the secret as bytes; one trailing line end
            (LF or CR LF) is not part of it.
        environ: Where to read the variable (``None``: the process's
            environment); its value is the secret, encoded in UTF-8.

    Raises:
        InvalidInputError: No file is named and the variable is unset, the
            file cannot be read, or the secret is too short.
    """
    if file is not None:
        try:
            secret = Path(file).read_bytes()
        except OSError as exc:
            raise InvalidInputError(
                "key file", f"must be a readable file ({type(exc).__name__})"
            ) from None
        for ending in (b"\r\n", b"\n"):
            if secret.endswith(ending):
                secret = secret[: -len(ending)]
                break
        return LedgerKey(secret)
    value = (os.environ if environ is None else environ).get(KEY_VARIABLE)
    if not value:
        raise InvalidInputError("key", f"must be given: set {KEY_VARIABLE} or name a key file")
    return LedgerKey(value.encode("utf-8"))
