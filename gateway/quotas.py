"""Client quotas as Kafka's ClientQuotaManager enforces them: `producer_byte_rate` (Produce request
bytes), `consumer_byte_rate` (Fetch response bytes) and `request_percentage` (time spent handling
requests, 100 = one thread's whole time), per user and client id.

A quota applies to the most specific entity configured for a (user, client id), in Kafka's order:
users/<user>/clients/<client>, users/<user>/clients/<default>, users/<user>,
users/<default>/clients/<client>, users/<default>/clients/<default>, users/<default>,
clients/<client>, clients/<default>; every client sharing that entity shares its rate. Rates are
measured over `quota.window.num` windows of `quota.window.size.seconds`. A request that takes its
entity over the quota is answered at once with `throttle_time_ms` = (rate - quota) / quota * the
measured window (capped at the whole window), and the connection is then muted for that long (KIP-219:
the broker, not the client, enforces the delay).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from rdmalog.security.entity_configs import DEFAULT, Entity, EntityConfigs

PRODUCE, FETCH = 0, 1
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
_EXEMPT = frozenset({17, 18, 36})  # SASL and ApiVersions are never throttled (as in Kafka)


def quota_entities(user: str | None, client_id: str) -> list[Entity]:
    """The entities that may hold a (user, client id)'s quota, most specific first."""
    out = []
    if user is not None:
        out += [Entity(user, client_id), Entity(user, DEFAULT), Entity(user)]
        out += [Entity(DEFAULT, client_id), Entity(DEFAULT, DEFAULT), Entity(DEFAULT)]
    return out + [Entity(None, client_id), Entity(None, DEFAULT)]


class Rate:
    """A rate over `samples` windows of `window_s` (Kafka's SampledStat Rate)."""

    __slots__ = ("window_s", "samples", "_buckets")

    def __init__(self, samples: int, window_s: float) -> None:
        self.window_s = window_s
        self.samples = samples
        self._buckets: deque[list[float]] = deque()  # [window start, total]

    def record(self, value: float, now: float) -> None:
        buckets = self._buckets
        if not buckets or now >= buckets[-1][0] + self.window_s:
            buckets.append([now, 0.0])
        buckets[-1][1] += value
        oldest = now - self.samples * self.window_s
        while buckets and buckets[0][0] + self.window_s <= oldest:
            buckets.popleft()

    def measure(self, now: float) -> tuple[float, float]:
        """(rate per second, the window it was measured over in seconds)."""
        if not self._buckets:
            return 0.0, 0.0
        total = sum(b[1] for b in self._buckets)
        elapsed = now - self._buckets[0][0]
        # Kafka: a window not yet full counts as (samples - 1) windows, so a first burst is not
        # divided by almost nothing
        window = max(elapsed, (self.samples - 1) * self.window_s)
        return total / window, window


class QuotaManager:
    """The rates of the quota entities of one broker and the throttle they call for."""

    def __init__(self, configs: EntityConfigs, samples: int, window_s: float) -> None:
        self.configs = configs
        self.samples = samples
        self.window_s = window_s
        self._rates: dict[tuple[str, Entity], Rate] = {}
        self._resolved: dict[tuple[str, str | None, str], tuple[Entity, float] | None] = {}
        self._lock = threading.Lock()
        self.enabled = self._any_quota()
        configs.add_listener(self._changed)

    def _any_quota(self) -> bool:
        return any(
            key in QUOTA_KEYS for config in self.configs.entities().values() for key in config
        )

    def _changed(self) -> None:
        with self._lock:
            self._resolved.clear()
            self._rates.clear()
            self.enabled = self._any_quota()

    def _quota(self, key: str, user: str | None, client_id: str) -> tuple[Entity, float] | None:
        cache_key = (key, user, client_id)
        found = self._resolved.get(cache_key, False)
        if found is not False:
            return found  # type: ignore[return-value]
        found = None
        for entity in quota_entities(user, client_id):
            value = self.configs.get(entity).get(key)
            if value is not None:
                # the rate is kept per entity: the clients an entity covers share it
                found = (entity, float(value))
                break
        self._resolved[cache_key] = found
        return found

    def record(
        self,
        user: str | None,
        client_id: str | None,
        api_key: int,
        request_bytes: int,
        response_bytes: int,
        handling_s: float,
        now: float | None = None,
    ) -> int:
        """Record one request; the throttle time (ms) its entity's quotas call for (0: none)."""
        if not self.enabled or api_key in _EXEMPT:
            return 0
        now = time.monotonic() if now is None else now
        client = client_id or ""
        throttle = 0.0
        with self._lock:
            checks = [("request_percentage", handling_s * 100)]
            if api_key == PRODUCE:
                checks.append(("producer_byte_rate", request_bytes))
            elif api_key == FETCH:
                checks.append(("consumer_byte_rate", response_bytes))
            for key, value in checks:
                quota = self._quota(key, user, client)
                if quota is None:
                    continue
                entity, bound = quota
                rate = self._rates.get((key, entity))
                if rate is None:
                    rate = self._rates[(key, entity)] = Rate(self.samples, self.window_s)
                rate.record(value, now)
                measured, window = rate.measure(now)
                if bound >= 0 and measured > bound:
                    over = (measured - bound) / bound if bound > 0 else float("inf")
                    throttle = max(throttle, min(over * window, self.samples * self.window_s))
        return int(throttle * 1000)
