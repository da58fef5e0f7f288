"""ListOffsets and offset reset through the clients."""

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import Scenario, by_area

SCENARIOS = by_area("offsets")


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_offsets(sc: Scenario, bootstrap: str) -> None:
    try:
        sc.fn(bootstrap)
    except ScenarioSkip as e:
        pytest.skip(str(e))
