import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # Listed explicitly: anyio's default would silently skip a missing backend.
    backend: str = request.param
    return backend
