"""Fixtures every test folder of the repository shares, defined once.

pytest reads this file for every test it collects here: the repository's
pyproject.toml makes this folder the rootdir, and conftest files are read
from the rootdir down to each test. The test folders of the distributions
keep only what is theirs.
"""

import pytest
from hypothesis import settings

# Speed is measured by the benchmarks and never asserted by a test: a
# Hypothesis deadline would fail an example that a garbage collection or a
# busy machine happened to slow down, which says nothing about the rule the
# test names.
settings.register_profile("repository", deadline=None)
settings.load_profile("repository")

# Plugins can be named only in a conftest that pytest reads at start-up,
# which this one always is, whichever test folder is run.
pytest_plugins = ["pytester"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # Listed explicitly: anyio's default would silently skip a missing backend.
    backend: str = request.param
    return backend
