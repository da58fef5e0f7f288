"""The scenario registry: each scenario is a function of the bootstrap address that raises on
failure (ScenarioSkip when it cannot run here)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

AREAS = ("roundtrip", "offsets", "kcat", "admin", "limits", "kafkajs", "java")


@dataclass(frozen=True)
class Scenario:
    name: str
    area: str
    fn: Callable[[str], None]


REGISTRY: dict[str, Scenario] = {}


def scenario(name: str, area: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    def register(fn: Callable[[str], None]) -> Callable[[str], None]:
        if name in REGISTRY:
            raise ValueError(f"duplicate scenario {name}")
        REGISTRY[name] = Scenario(name, area, fn)
        return fn

    return register


def load() -> dict[str, Scenario]:
    for area in AREAS:
        importlib.import_module(f"compat_tests.scenarios.{area}")
    return REGISTRY
