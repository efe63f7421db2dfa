"""The operator's secret: its rules, where it is read from, and that it is never shown."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from psych_runtime.memory.ledger import KEY_VARIABLE, MIN_KEY_LENGTH, LedgerKey, ledger_key
from psych_runtime.memory.port import InvalidInputError

SECRET = b"s" * MIN_KEY_LENGTH


def test_a_short_or_empty_key_is_refused_without_its_value() -> None:
    for short in (b"", b"x" * (MIN_KEY_LENGTH - 1)):
        with pytest.raises(InvalidInputError, match="key must be at least 32 bytes") as info:
            LedgerKey(short)
        assert "xxxx" not in str(info.value)
    with pytest.raises(TypeError, match="secret must be bytes, not str"):
        LedgerKey("s" * MIN_KEY_LENGTH)  # type: ignore[arg-type]


def test_the_secret_is_never_shown_nor_pickled() -> None:
    key = LedgerKey(SECRET)
    assert repr(key) == "LedgerKey(<hidden>)"
    assert "sss" not in str(key)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(key)
    with pytest.raises(AttributeError, match="immutable"):
        key._secret = b"other"


def test_an_end_user_hash_is_keyed_and_tied_to_its_tenant() -> None:
    key = LedgerKey(SECRET)
    hashed = key.end_user_hash("acme", "user-1")
    assert len(hashed) == 64
    assert "user-1" not in hashed
    assert hashed == LedgerKey(SECRET).end_user_hash("acme", "user-1")
    assert hashed != key.end_user_hash("other", "user-1")
    assert hashed != LedgerKey(b"t" * MIN_KEY_LENGTH).end_user_hash("acme", "user-1")
    # The tenant's length is part of the message: no two splits collide.
    assert key.end_user_hash("ab", "c") != key.end_user_hash("a", "bc")


def test_the_key_is_read_from_the_environment() -> None:
    key = ledger_key(environ={KEY_VARIABLE: SECRET.decode()})
    assert key.check_value() == LedgerKey(SECRET).check_value()
    with pytest.raises(InvalidInputError, match=f"key must be given: set {KEY_VARIABLE}"):
        ledger_key(environ={})
    with pytest.raises(InvalidInputError, match="at least 32 bytes"):
        ledger_key(environ={KEY_VARIABLE: "short"})


def test_the_key_is_read_from_a_file_without_its_line_end(tmp_path: Path) -> None:
    for ending in (b"", b"\n", b"\r\n"):
        path = tmp_path / "key"
        path.write_bytes(SECRET + ending)
        assert ledger_key(file=path, environ={}).check_value() == LedgerKey(SECRET).check_value()
    with pytest.raises(InvalidInputError, match="key file must be a readable file"):
        ledger_key(file=tmp_path / "missing")
