"""KafkaJS (Node.js) scenarios; skipped without node or without `npm ci --prefix compat_tests/js`."""

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import Scenario, by_area

SCENARIOS = by_area("kafkajs")


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_kafkajs(sc: Scenario, bootstrap: str) -> None:
    try:
        sc.fn(bootstrap)
    except ScenarioSkip as e:
        pytest.skip(str(e))
