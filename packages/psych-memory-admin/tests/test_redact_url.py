"""`redact_url`: the URL as it may be shown, every password hidden."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.memory.admin import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://alice:s3cret@db.example.com:5432/app",
            "postgresql://alice:***@db.example.com:5432/app",
        ),
        ("postgres://alice:s3cret@db/app?schema=psych", "postgres://alice:***@db/app?schema=psych"),
        ("postgresql://alice:p%40ss%2Fw0rd@db/app", "postgresql://alice:***@db/app"),
        # An unencoded "@" in the password: the host follows the last one.
        ("postgresql://alice:p@ss@db/app", "postgresql://alice:***@db/app"),
        ("postgresql://:s3cret@db/app", "postgresql://:***@db/app"),
        (
            "postgresql://db/app?user=alice&password=s3cret",
            "postgresql://db/app?user=alice&password=***",
        ),
        (
            "postgresql:///app?sslpassword=s3cret&PassWord=x",
            "postgresql:///app?sslpassword=***&PassWord=***",
        ),
        (
            "postgresql://alice:s3cret@/app?password=s3cret#top",
            "postgresql://alice:***@/app?password=***#top",
        ),
        ("//alice:s3cret@db/app", "//alice:***@db/app"),
        ("THIRDPARTY://alice:s3cret@host", "THIRDPARTY://alice:***@host"),
    ],
)
def test_passwords_are_replaced_and_the_rest_is_kept(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "memory:",
        "sqlite:///facts.db",
        "sqlite:////var/lib/psych/facts.db",
        "sqlite:///data/user@home.db",
        "postgresql://alice@db:5432/app?schema=psych&max_size=8",
        "postgresql://alice:@db/app",
        "postgresql:///app?password=",
        "postgresql://[::1",
        "not a url at all",
        "",
        "::::@@@///???###",
    ],
)
def test_urls_without_a_password_are_kept_as_written(url: str) -> None:
    assert redact_url(url) == url


def test_a_url_that_is_not_a_str_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^url must be a str, not bytes$"):
        redact_url(b"memory:")  # type: ignore[arg-type]


@given(password=st.text(min_size=1), user=st.text(alphabet="abcxyz", max_size=5))
def test_any_password_in_the_user_information_is_hidden(password: str, user: str) -> None:
    url = f"postgresql://{user}:{quote(password, safe='')}@db.example.com:5432/app?schema=s"
    assert redact_url(url) == f"postgresql://{user}:***@db.example.com:5432/app?schema=s"


@given(password=st.text(min_size=1), name=st.sampled_from(["password", "sslpassword"]))
def test_any_password_option_is_hidden(password: str, name: str) -> None:
    url = f"postgresql://db/app?schema=s&{name}={quote(password, safe='')}&pool=2"
    assert redact_url(url) == f"postgresql://db/app?schema=s&{name}=***&pool=2"


@given(st.text())
def test_it_never_fails(url: str) -> None:
    assert isinstance(redact_url(url), str)
