"""The issuer's public keys from a JWKS URL: fetched once for all waiting requests, with backoff."""

from __future__ import annotations

import logging
import math
from typing import Final

import anyio
import httpx2
import jwt

__all__ = ["JwksCache", "KeysUnavailableError"]

_KEYS_LIFESPAN: Final = 300.0
_REFETCH_INTERVAL: Final = 30.0
_FIRST_BACKOFF: Final = 5.0
_MAX_BACKOFF: Final = 60.0
_MAX_JWKS_BYTES: Final = 1024 * 1024
_SIGNING_KEY_TYPES: Final = frozenset({"RSA", "EC", "OKP"})

_logger = logging.getLogger("psych_runtime.tools.mcp")


class KeysUnavailableError(Exception):
    """The keys needed to check a token cannot be fetched right now.

    Attributes:
        retry_after: Seconds until the keys will be fetched again.
    """

    def __init__(self, retry_after: float) -> None:
        super().__init__("the signing keys cannot be fetched right now")
        self.retry_after = retry_after


class JwksCache:
    """The keys published at a JWKS URL, looked up by ``kid``.

    The set is fetched when it is first needed, again once it is older than
    five minutes, and again for a ``kid`` it does not hold, at most once every
    30 seconds (so tokens with made-up ``kid`` values cannot make the server
    hammer the issuer). Requests that need the set while it is being fetched
    wait for that one fetch. A fetch that fails or takes longer than
    ``timeout`` is not retried before a backoff of 5 s, doubling up to 60 s;
    meanwhile the keys of the last good fetch are still used.

    Args:
        url: The JWKS URL.
        timeout: The most seconds one fetch may take, connecting included.
    """

    __slots__ = (
        "_backoff",
        "_failed",
        "_fetched_at",
        "_flight",
        "_keys",
        "_retry_at",
        "_timeout",
        "_url",
    )

    def __init__(self, url: str, *, timeout: float) -> None:
        self._url = url
        self._timeout = timeout
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at = -math.inf
        self._retry_at = -math.inf
        self._backoff = 0.0
        self._failed = False
        self._flight: anyio.Event | None = None

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """Return the key named ``kid`` (or the only key, when ``kid`` is ``None``).

        Raises:
            LookupError: The issuer publishes no such key.
            KeysUnavailableError: The keys cannot be fetched now and none of
                an earlier fetch fits.
        """
        while True:
            now = anyio.current_time()
            key = self._cached_key(kid)
            if key is not None and now < self._fetched_at + _KEYS_LIFESPAN:
                return key
            if now < self._retry_at:
                if key is not None:
                    return key
                if self._failed:
                    raise KeysUnavailableError(self._retry_at - now)
                raise LookupError(kid)
            if self._flight is not None:
                await self._flight.wait()
                continue
            flight = self._flight = anyio.Event()
            try:
                await self._fetch()
            finally:
                self._flight = None
                flight.set()

    def _cached_key(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def _fetch(self) -> None:
        try:
            # The client is made outside the bound: loading the CA bundle is
            # our own work, and on a busy machine it alone could use up a
            # bound meant for the issuer's answer.
            async with httpx2.AsyncClient(timeout=self._timeout) as client:
                with anyio.fail_after(self._timeout):
                    keys = await self._download(client)
        except Exception:  # noqa: BLE001 - any failure to fetch is one outcome
            self._backoff = min(_MAX_BACKOFF, self._backoff * 2 or _FIRST_BACKOFF)
            self._retry_at = anyio.current_time() + self._backoff
            self._failed = True
            # No trace: the cause (a timeout, a refused connection, a bad
            # answer) is all the operator needs, and it repeats under load.
            _logger.warning("the JWKS could not be fetched; next try in %.0f s", self._backoff)
            return
        now = anyio.current_time()
        self._keys = keys
        self._fetched_at = now
        self._retry_at = now + _REFETCH_INTERVAL
        self._backoff = 0.0
        self._failed = False

    async def _download(self, client: httpx2.AsyncClient) -> dict[str | None, jwt.PyJWK]:
        response = await client.get(self._url, headers={"Accept": "application/json"})
        response.raise_for_status()
        if len(response.content) > _MAX_JWKS_BYTES:
            raise ValueError("the JWKS is larger than 1 MiB")
        keys = jwt.PyJWKSet.from_dict(response.json()).keys
        # A key published for encryption signs nothing, and a shared secret
        # ("oct") would let anyone who can read it mint tokens.
        return {
            key.key_id: key
            for key in keys
            if key.public_key_use in {None, "sig"} and key.key_type in _SIGNING_KEY_TYPES
        }
