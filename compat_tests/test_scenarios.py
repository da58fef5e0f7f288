"""Every compat scenario as a pytest test, named `<area>/<scenario>` (`-k kcat`, `-k java/`, ...).

Areas: roundtrip, offsets, kcat, admin, limits, kafkajs, java (compat_tests/scenarios/). A scenario
that cannot run here (no node, no java or jars, ...) is skipped with its reason."""

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import AREAS, Scenario, load

SCENARIOS = sorted(load().values(), key=lambda s: AREAS.index(s.area))


@pytest.mark.parametrize("sc", SCENARIOS, ids=[f"{s.area}/{s.name}" for s in SCENARIOS])
def test_scenario(sc: Scenario, bootstrap: str) -> None:
    try:
        sc.fn(bootstrap)
    except ScenarioSkip as e:
        pytest.skip(str(e))
