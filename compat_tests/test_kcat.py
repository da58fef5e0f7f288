"""kcat metadata, produce and consume."""

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import Scenario, by_area

SCENARIOS = by_area("kcat")


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_kcat(sc: Scenario, bootstrap: str) -> None:
    try:
        sc.fn(bootstrap)
    except ScenarioSkip as e:
        pytest.skip(str(e))
