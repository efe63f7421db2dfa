"""The test run's own scheduling: a group of tests runs on one worker.

Tests that share an expensive module fixture (the wheels, the private
clusters, the nested kit run, the released runtime's environment) carry one
``xdist_group`` mark, and ``--dist loadgroup`` sends each group to a single
pytest-xdist worker, which builds the fixture once. pytest-xdist reads the
group from a suffix it adds to each test's node id; when that suffix stops
taking effect (as with pytest 9.2's node ids, pytest-xdist#1386), nothing
fails: every worker builds the fixture again and CI runs minutes longer.
This test fails instead.
"""

from __future__ import annotations

import pytest

GROUP = "scheduling-check"

pytestmark = pytest.mark.xdist_group(GROUP)


@pytest.mark.parametrize("member", ["first", "second"])
def test_a_grouped_test_is_scheduled_with_its_group(
    request: pytest.FixtureRequest, member: str
) -> None:
    # pytest-xdist tells its workers the mode in this option of its own.
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("this run does not distribute tests by group")
    # The scheduler sends together the tests whose node ids end alike.
    assert request.node.nodeid.endswith(f"[{member}]@{GROUP}"), request.node.nodeid
