"""The controller against a real ZooKeeper, brokers played by registry sessions: election and
failover, first states of new partitions, leader election from the ISR on broker loss, restarted
brokers leaving the ISR, offline partitions, controlled shutdown, topic deletion, reassignment."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.controller import Controller, Reassignment
from rdmalog.cluster.registry import Registry
from rdmalog.cluster.view import ClusterWatcher

WAIT_S = 20.0


def wait_for(what: str, check: Callable[[], object], timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class FakeBroker:
    """A broker's ZooKeeper side only: session, registration, watches, controller."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.connect = connect
        self.broker_id = broker_id
        self.start()

    def start(self) -> None:
        self.registry = Registry(self.connect, session_timeout_ms=4000).start()
        self.registry.register_broker(
            self.broker_id, [Z.Endpoint("PLAINTEXT", "127.0.0.1", 9000 + self.broker_id)]
        )
        self.watcher = ClusterWatcher(self.registry).start()
        self.controller = Controller(self.registry, self.watcher, self.broker_id).start()

    def stop(self) -> None:
        self.controller.stop()
        self.watcher.stop()
        self.registry.stop()

    def crash(self) -> None:
        """Vanish without resigning: the session's close removes the ephemeral znodes."""
        self.watcher.stop()
        self.controller._stop.set()
        self.controller._queue.put(None)
        self.registry.stop()


@pytest.fixture
def brokers(zk_connect: str):
    made: list[FakeBroker] = []

    def make(*ids: int) -> list[FakeBroker]:
        out = [FakeBroker(zk_connect, i) for i in ids]
        made.extend(out)
        return out

    yield make
    for b in made:
        try:
            b.stop()
        except Exception:
            pass


def _controller(bs: list[FakeBroker]) -> FakeBroker:
    return wait_for("a controller", lambda: next((b for b in bs if b.controller.active), None))


def _state(reg: Registry, topic: str, p: int = 0) -> Z.PartitionState | None:
    return reg.partition_state(topic, p)


def test_new_topic_failover_and_restart(brokers) -> None:
    b1, b2, b3 = bs = brokers(1, 2, 3)
    reg = b1.registry
    ctrl = _controller(bs)
    assert sum(b.controller.active for b in bs) == 1
    reg.create_topic("t", Z.TopicAssignment(uuid.uuid4(), {0: [2, 3, 1], 1: [3, 1, 2]}), {})
    s0 = wait_for("state of t-0", lambda: _state(reg, "t", 0))
    assert (s0.leader, s0.leader_epoch, s0.isr) == (2, 0, (2, 3, 1))
    assert wait_for("state of t-1", lambda: _state(reg, "t", 1)).leader == 3

    # the leader of t-0 goes: the next ISR member in assignment order leads, in a new epoch
    b2.crash()
    if ctrl is b2:
        ctrl = _controller([b1, b3])
    s = wait_for("new leader", lambda: (s := _state(reg, "t", 0)) and s.leader != 2 and s)
    assert (s.leader, s.leader_epoch, s.isr) == (3, 1, (3, 1))
    s1 = wait_for("ISR of t-1 shrinks", lambda: (s := _state(reg, "t", 1)) and 2 not in s.isr and s)
    assert s1.leader == 3 and s1.leader_epoch == 1

    # it comes back: not in the ISR (the leader adds it once caught up), leads nothing
    b2.start()
    time.sleep(0.5)
    assert _state(reg, "t", 0).isr == (3, 1)


def test_offline_partition_waits_for_an_isr_member(brokers) -> None:
    b1, b2 = bs = brokers(1, 2)
    _controller(bs)
    reg = b1.registry
    reg.create_topic("solo", Z.TopicAssignment(uuid.uuid4(), {0: [2]}), {})
    wait_for("state", lambda: _state(reg, "solo"))
    b2.crash()
    s = wait_for("offline", lambda: (s := _state(reg, "solo")) and s.leader == -1 and s)
    assert s.isr == (2,)  # the last ISR kept: only it may lead again
    b2.start()
    s = wait_for("back", lambda: (s := _state(reg, "solo")) and s.leader == 2 and s)
    assert s.isr == (2,) and s.leader_epoch == 2
    # it leads under a state written after it registered again
    assert s.mzxid > b2.registry.broker(2).epoch


def test_controller_failover_keeps_deciding(brokers) -> None:
    bs = brokers(1, 2, 3)
    first = _controller(bs)
    epoch = first.controller.lease.epoch
    first.crash()
    rest = [b for b in bs if b is not first]
    second = _controller(rest)
    assert second.controller.lease.epoch == epoch + 1
    reg = second.registry
    reg.create_topic(
        "after", Z.TopicAssignment(uuid.uuid4(), {0: sorted(b.broker_id for b in rest)}), {}
    )
    s = wait_for("state", lambda: _state(reg, "after"))
    assert s.controller_epoch == epoch + 1


def test_controlled_shutdown_moves_leadership(brokers) -> None:
    bs = brokers(1, 2, 3)
    _controller(bs)
    reg = bs[0].registry
    reg.create_topic(
        "cs", Z.TopicAssignment(uuid.uuid4(), {0: [3, 1, 2], 1: [1, 2, 3], 2: [2, 3, 1]}), {}
    )
    wait_for("states", lambda: all(_state(reg, "cs", p) for p in range(3)))
    reg.create_topic("cs-solo", Z.TopicAssignment(uuid.uuid4(), {0: [3]}), {})
    wait_for("solo state", lambda: _state(reg, "cs-solo"))
    b3 = bs[2]
    b3.registry.request_controlled_shutdown(3)
    remaining = wait_for(
        "answer", lambda: (r := b3.registry.controlled_shutdown_answer(3)) is not None and (r,)
    )[0]
    assert remaining == 1  # cs-solo has nobody else in sync
    for p in range(3):
        s = _state(reg, "cs", p)
        assert s.leader != 3 and 3 not in s.isr
    assert _state(reg, "cs", 0).leader == 1


def test_topic_deletion_and_reassignment(brokers) -> None:
    bs = brokers(1, 2, 3)
    ctrl = _controller(bs)
    reg = bs[0].registry
    reg.create_topic("gone", Z.TopicAssignment(uuid.uuid4(), {0: [1, 2]}), {"retention.ms": "5"})
    wait_for("state", lambda: _state(reg, "gone"))
    reg.mark_for_deletion("gone")
    wait_for(  # the controller removes the deletion marker last, as Kafka's does
        "deleted",
        lambda: (
            reg.topic("gone") is None
            and not reg.zk.exists("/config/topics/gone")
            and reg.topics_to_delete() == []
        ),
    )

    reg.create_topic("move", Z.TopicAssignment(uuid.uuid4(), {0: [1, 2]}), {})
    wait_for("state", lambda: _state(reg, "move"))
    result = ctrl.controller.call(
        lambda: ctrl.controller.reassign([Reassignment("move", 0, [2, 3])])
    ).result(10)
    assert result == {("move", 0): (0, None)}
    a = reg.topic("move")
    assert a.partitions[0] == [2, 3, 1] and a.adding[0] == [3] and a.removing[0] == [1]
    # broker 3 catches up; its leader adds it to the ISR (played here by a conditional write)
    s = _state(reg, "move")
    reg.set_isr(
        "move",
        0,
        Z.PartitionState(s.leader, s.leader_epoch, (*s.isr, 3), s.controller_epoch, s.version),
    )
    done = wait_for("reassigned", lambda: (a := reg.topic("move")) and not a.adding and a)
    assert done.partitions[0] == [2, 3] and not done.removing
    s = _state(reg, "move")
    assert s.leader == 2 and s.isr == (2, 3)
