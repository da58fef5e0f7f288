"""Produce/consume round trips through every client and codec."""

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import Scenario, by_area

SCENARIOS = by_area("roundtrip")


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_roundtrip(sc: Scenario, bootstrap: str) -> None:
    try:
        sc.fn(bootstrap)
    except ScenarioSkip as e:
        pytest.skip(str(e))
