"""The classic group coordinator as a state machine: driven by requests and a ManualClock."""

from __future__ import annotations

import struct

import pytest

from gateway.groups.clock import ManualClock
from gateway.groups.coordinator import GroupCoordinator
from gateway.groups.model import CommitEntry, GroupConfig, JoinRequest, MemoryLog
from gateway.groups.schema import GroupKey, OffsetKey, decode_group_value, decode_key
from gateway.groups.state import GroupState
from rdmalog import errors as E

SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def make(delay: int = 0, **config) -> tuple[GroupCoordinator, ManualClock, MemoryLog]:
    clock = ManualClock()
    log = MemoryLog()
    cfg = GroupConfig(initial_rebalance_delay_ms=delay, **config)
    return GroupCoordinator(clock, log, cfg), clock, log


def join(
    gc: GroupCoordinator,
    member_id: str = "",
    group: str = "g",
    protocols=None,
    version: int = 9,
    instance: str | None = None,
    protocol_type: str = "consumer",
    session: int = SESSION,
):
    return gc.join(
        JoinRequest(
            group_id=group,
            member_id=member_id,
            protocol_type=protocol_type,
            protocols=protocols or [("range", subscription("t"))],
            session_timeout_ms=session,
            rebalance_timeout_ms=REBALANCE,
            group_instance_id=instance,
            client_id="client",
            client_host="/127.0.0.1",
            api_version=version,
        )
    )


def join_new(gc: GroupCoordinator, **kw):
    """KIP-394 two-step join: get a member id, then join with it."""
    first = join(gc, **kw).result()
    assert first.error == E.MEMBER_ID_REQUIRED
    return join(gc, member_id=first.member_id, **kw)


def stable_group(gc: GroupCoordinator, n: int, group: str = "g") -> list[str]:
    """Build a Stable group of n dynamic members (all joined and synced); returns member ids."""
    waiters = []
    ids = []
    for _ in range(n):
        first = join(gc, group=group).result()
        ids.append(first.member_id)
    for mid in ids:
        waiters.append(join(gc, member_id=mid, group=group))
    results = [w.result() for w in waiters]
    generation = results[0].generation_id
    leader = results[0].leader_id
    syncs = [gc.sync(group, generation, mid, {}) for mid in ids if mid != leader]
    gc.sync(group, generation, leader, {mid: f"assign-{mid}".encode() for mid in ids}).result()
    assert all(s.result().error == E.NONE for s in syncs)
    assert gc.groups[group].state is GroupState.STABLE
    return ids


# --- joining -------------------------------------------------------------------------------------


def test_member_id_required_from_v4_then_join_completes_at_once():
    gc, _, _ = make()
    first = join(gc).result()
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
    result = join(gc, member_id=first.member_id).result()
    assert result.error == E.NONE
    assert result.generation_id == 1
    assert result.leader_id == first.member_id
    assert result.protocol_name == "range" and result.protocol_type == "consumer"
    assert [m.member_id for m in result.members] == [first.member_id]
    assert gc.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_v3_joins_without_member_id_round_trip():
    gc, _, _ = make()
    result = join(gc, version=3).result()
    assert result.error == E.NONE and result.generation_id == 1 and result.member_id


def test_unknown_member_and_invalid_requests():
    gc, _, _ = make()
    assert join(gc, member_id="nobody").result().error == E.UNKNOWN_MEMBER_ID
    assert join(gc, group="").result().error == E.INVALID_GROUP_ID
    assert join(gc, session=10).result().error == E.INVALID_SESSION_TIMEOUT
    assert join(gc, protocols=[("x", b"")], protocol_type="").result().error == (
        E.INCONSISTENT_GROUP_PROTOCOL
    )


def test_inconsistent_protocols_are_rejected():
    gc, _, _ = make()
    stable_group(gc, 1)
    other = join(gc, protocols=[("roundrobin", b"")]).result()
    assert other.error == E.INCONSISTENT_GROUP_PROTOCOL
    wrong_type = join(gc, protocol_type="connect").result()
    assert wrong_type.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selection_by_votes():
    gc, _, _ = make()
    a = join(gc, protocols=[("cooperative-sticky", b"a"), ("range", b"a")]).result().member_id
    b = join(gc, protocols=[("range", b"b"), ("cooperative-sticky", b"b")]).result().member_id
    c = join(gc, protocols=[("cooperative-sticky", b"c"), ("range", b"c")]).result().member_id
    waiters = [
        join(gc, member_id=a, protocols=[("cooperative-sticky", b"a"), ("range", b"a")]),
        join(gc, member_id=b, protocols=[("range", b"b"), ("cooperative-sticky", b"b")]),
        join(gc, member_id=c, protocols=[("cooperative-sticky", b"c"), ("range", b"c")]),
    ]
    results = [w.result() for w in waiters]
    assert {r.protocol_name for r in results} == {"cooperative-sticky"}
    leader = next(r for r in results if r.members)
    assert {m.member_id: m.metadata for m in leader.members} == {a: b"a", b: b"b", c: b"c"}


def test_initial_delay_holds_the_first_rebalance_of_an_empty_group():
    gc, clock, _ = make(delay=3000)
    a = join_new(gc)
    clock.advance(2000)
    b = join_new(gc)
    assert not a.done() and not b.done()
    clock.advance(1000)  # first delay over, but a member arrived meanwhile: wait once more
    assert not a.done()
    clock.advance(3000)
    assert a.result().generation_id == b.result().generation_id == 1


def test_no_delay_for_rebalances_of_a_non_empty_group():
    gc, clock, _ = make(delay=3000)
    wa = join_new(gc)
    clock.advance(3000)
    first = wa.result()
    a = first.member_id
    gc.sync("g", 1, a, {a: b"A"}).result()
    wb = join_new(gc)
    assert not wb.done()
    ra = join(gc, member_id=a).result()  # everyone is in: no initial delay this time
    assert ra.generation_id == wb.result().generation_id == 2


# --- sync ----------------------------------------------------------------------------------------


def test_sync_distributes_the_leader_assignment():
    gc, _, log = make()
    ids = [join(gc).result().member_id for _ in range(2)]
    first = join(gc, member_id=ids[0])
    assert not first.done()  # waits for the second member
    second = join(gc, member_id=ids[1]).result()
    results = [first.result(), second]
    leader = results[0].leader_id
    follower = next(m for m in ids if m != leader)
    fs = gc.sync("g", 1, follower, {})
    assert not fs.done()
    ls = gc.sync("g", 1, leader, {leader: b"L", follower: b"F"})
    assert ls.result().assignment == b"L"
    assert fs.result().assignment == b"F" and fs.result().protocol_name == "range"
    assert gc.groups["g"].state is GroupState.STABLE
    stored = [decode_group_value(v) for _, k, v in log.records if decode_key(k) == GroupKey("g")]
    assert stored[-1].generation == 1
    assert {m.member_id: m.assignment for m in stored[-1].members} == {leader: b"L", follower: b"F"}


def test_sync_errors():
    gc, _, _ = make()
    (m,) = stable_group(gc, 1)
    assert gc.sync("g", 99, m, {}).result().error == E.ILLEGAL_GENERATION
    assert gc.sync("g", 1, "who", {}).result().error == E.UNKNOWN_MEMBER_ID
    assert gc.sync("nope", 1, m, {}).result().error == E.UNKNOWN_MEMBER_ID
    bad = gc.sync("g", 1, m, {}, protocol_type="consumer", protocol_name="roundrobin")
    assert bad.result().error == E.INCONSISTENT_GROUP_PROTOCOL
    again = gc.sync("g", 1, m, {}, protocol_type="consumer", protocol_name="range")
    assert again.result().assignment == f"assign-{m}".encode()


# --- rebalances ----------------------------------------------------------------------------------


def test_new_member_triggers_rebalance_and_everyone_rejoins():
    gc, _, _ = make()
    (a,) = stable_group(gc, 1)
    b = join_new(gc)
    assert gc.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert gc.heartbeat("g", 1, a) == E.REBALANCE_IN_PROGRESS
    assert gc.commit_offsets("g", 1, a, [CommitEntry("t", 0, 5)]) == {("t", 0): E.NONE}
    assert not b.done()
    ra = join(gc, member_id=a).result()
    rb = b.result()
    assert ra.generation_id == rb.generation_id == 2
    assert ra.leader_id == a and len(ra.members) == 2 and rb.members == []
    assert gc.heartbeat("g", 1, a) == E.ILLEGAL_GENERATION
    assert gc.heartbeat("g", 2, a) == E.NONE  # CompletingRebalance heartbeats are fine
    assert gc.commit_offsets("g", 2, a, [CommitEntry("t", 0, 6)]) == {
        ("t", 0): E.REBALANCE_IN_PROGRESS
    }


def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    gc, clock, _ = make()
    a, b = stable_group(gc, 2)
    wa = join(gc, member_id=a, protocols=[("range", subscription("t", "u"))])
    assert not wa.done()
    for _ in range(REBALANCE // 5000):
        assert gc.heartbeat("g", 1, b) == E.REBALANCE_IN_PROGRESS  # alive, but never rejoins
        clock.advance(5000)
    result = wa.result()
    assert result.error == E.NONE and result.generation_id == 2
    assert list(gc.groups["g"].members) == [a]
    assert gc.heartbeat("g", 2, b) == E.UNKNOWN_MEMBER_ID


def test_follower_rejoining_unchanged_in_stable_gets_current_generation():
    gc, _, _ = make()
    a, b = stable_group(gc, 2)
    leader = gc.groups["g"].leader_id
    follower = b if leader == a else a
    result = join(gc, member_id=follower).result()
    assert result.error == E.NONE and result.generation_id == 1 and result.members == []
    assert gc.groups["g"].state is GroupState.STABLE


def test_session_timeout_expires_a_silent_member():
    gc, clock, _ = make()
    a, b = stable_group(gc, 2)
    for _ in range(4):
        clock.advance(SESSION // 2)
        assert gc.heartbeat("g", 1, a) in (E.NONE, E.REBALANCE_IN_PROGRESS)
    group = gc.groups["g"]
    assert b not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    assert join(gc, member_id=a).result().generation_id == 2


def test_pending_member_expires_and_unblocks_the_rebalance():
    gc, clock, _ = make()
    (a,) = stable_group(gc, 1)
    join(gc).result()  # MEMBER_ID_REQUIRED; never comes back
    wa = join(gc, member_id=a, protocols=[("range", subscription("x"))])
    assert not wa.done()  # the pending member may still join
    clock.advance(SESSION)
    assert wa.result().generation_id == 2


def test_members_that_never_sync_are_removed():
    gc, clock, _ = make()
    ids = [join(gc).result().member_id for _ in range(2)]
    results = [w.result() for w in [join(gc, member_id=m) for m in ids]]
    leader = results[0].leader_id
    follower = next(m for m in ids if m != leader)
    gc.sync("g", 1, leader, {leader: b"L", follower: b"F"}).result()
    for _ in range(7):
        clock.advance(SESSION // 2)
        gc.heartbeat("g", gc.groups["g"].generation_id, leader)
    assert follower not in gc.groups["g"].members


def test_leave_group_batched_and_group_goes_empty():
    gc, _, log = make()
    a, b = stable_group(gc, 2)
    top, per = gc.leave("g", [(a, None), ("ghost", None), (b, None)])
    assert top == E.NONE and per == [E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE]
    group = gc.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    last = decode_group_value(log.records[-1][2])
    assert last.members == [] and last.generation == 2 and last.protocol is None
    assert gc.leave("unknown", [("x", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


def test_leaving_member_completes_a_rebalance_waiting_for_it():
    gc, _, _ = make()
    a, b = stable_group(gc, 2)
    wa = join(gc, member_id=a, protocols=[("range", subscription("t", "u"))])
    assert not wa.done()
    gc.leave("g", [(b, None)])
    assert wa.result().generation_id == 2 and wa.result().members[0].member_id == a


# --- static membership ---------------------------------------------------------------------------


def static_group(gc: GroupCoordinator) -> tuple[str, str]:
    """A Stable generation-2 group of static members ia (leader, assignment A) and ib (B)."""
    ra = join(gc, instance="ia").result()
    assert ra.error == E.NONE  # static members skip MEMBER_ID_REQUIRED
    a = ra.member_id
    gc.sync("g", 1, a, {a: b"A"}, group_instance_id="ia").result()
    wb = join(gc, instance="ib")
    ra = join(gc, member_id=a, instance="ia").result()
    rb = wb.result()
    b = rb.member_id
    assert ra.generation_id == rb.generation_id == 2 and ra.leader_id == a
    fb = gc.sync("g", 2, b, {}, group_instance_id="ib")
    gc.sync("g", 2, a, {a: b"A", b: b"B"}, group_instance_id="ia").result()
    assert fb.result().assignment == b"B"
    assert gc.groups["g"].state is GroupState.STABLE
    return a, b


def test_static_member_rejoins_without_rebalance_and_fences_its_old_id():
    gc, _, log = make()
    a, b = static_group(gc)
    records_before = len(log.records)
    result = join(gc, instance="ib").result()
    assert result.error == E.NONE and result.generation_id == 2
    new_b = result.member_id
    assert new_b != b and result.members == []
    group = gc.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == 2
    assert gc.sync("g", 2, new_b, {}, group_instance_id="ib").result().assignment == b"B"
    assert gc.heartbeat("g", 2, b, "ib") == E.FENCED_INSTANCE_ID
    assert gc.heartbeat("g", 2, new_b, "ib") == E.NONE
    assert gc.commit_offsets("g", 2, b, [CommitEntry("t", 0, 1)], group_instance_id="ib") == {
        ("t", 0): E.FENCED_INSTANCE_ID
    }
    assert len(log.records) == records_before + 1  # the new member id is persisted


def test_static_leader_rejoin_v9_skips_assignment_and_old_versions_keep_old_leader_id():
    gc, _, _ = make()
    a, _ = static_group(gc)
    assert gc.groups["g"].leader_id == a
    old = join(gc, instance="ia", version=8).result()
    assert old.leader_id == a and old.leader_id != old.member_id and old.members == []
    new = join(gc, instance="ia", version=9).result()
    assert new.leader_id == new.member_id and new.skip_assignment and len(new.members) == 2
    assert gc.groups["g"].state is GroupState.STABLE


def test_static_member_leave_by_instance_id():
    gc, _, _ = make()
    _, b = static_group(gc)
    assert gc.leave("g", [("", "ib")]) == (E.NONE, [E.NONE])
    assert b not in gc.groups["g"].members
    assert gc.leave("g", [("", "nobody")]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


# --- offsets -------------------------------------------------------------------------------------


def test_commit_and_fetch_offsets():
    gc, clock, log = make()
    (m,) = stable_group(gc, 1)
    entries = [CommitEntry("t", 0, 10, 3, "meta"), CommitEntry("t", 1, 20)]
    assert gc.commit_offsets("g", 1, m, entries) == {("t", 0): E.NONE, ("t", 1): E.NONE}
    error, fetched = gc.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
    assert error == E.NONE
    assert [(f.offset, f.leader_epoch, f.metadata) for f in fetched] == [
        (10, 3, "meta"),
        (20, -1, ""),
        (-1, -1, ""),
    ]
    _, everything = gc.fetch_offsets("g", None)
    assert {(f.topic, f.partition) for f in everything} == {("t", 0), ("t", 1)}
    keys = [decode_key(k) for _, k, _ in log.records]
    assert OffsetKey("g", "t", 0) in keys


def test_commit_validation():
    gc, _, _ = make(offset_metadata_max_bytes=4)
    (m,) = stable_group(gc, 1)
    assert gc.commit_offsets("g", 2, m, [CommitEntry("t", 0, 1)])[("t", 0)] == E.ILLEGAL_GENERATION
    assert gc.commit_offsets("g", 1, "x", [CommitEntry("t", 0, 1)])[("t", 0)] == E.UNKNOWN_MEMBER_ID
    assert gc.commit_offsets("g", -1, "", [CommitEntry("t", 0, 1)])[("t", 0)] == E.UNKNOWN_MEMBER_ID
    big = gc.commit_offsets("g", 1, m, [CommitEntry("t", 0, 1, metadata="12345")])
    assert big[("t", 0)] == E.OFFSET_METADATA_TOO_LARGE
    assert gc.commit_offsets("new", 3, "", [CommitEntry("t", 0, 1)])[("t", 0)] == (
        E.ILLEGAL_GENERATION
    )


def test_simple_consumer_commits_into_an_empty_group():
    gc, _, _ = make()
    assert gc.commit_offsets("solo", -1, "", [CommitEntry("t", 0, 7)]) == {("t", 0): E.NONE}
    assert gc.fetch_offsets("solo", [("t", 0)])[1][0].offset == 7
    assert gc.groups["solo"].state is GroupState.EMPTY


def test_unknown_partitions_are_refused():
    clock = ManualClock()
    gc = GroupCoordinator(clock, MemoryLog(), GroupConfig(), partition_exists=lambda t, p: p < 2)
    result = gc.commit_offsets("g", -1, "", [CommitEntry("t", 1, 1), CommitEntry("t", 5, 1)])
    assert result == {("t", 1): E.NONE, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_failed_log_write_fails_the_commit():
    class Broken(MemoryLog):
        def append(self, group_id, records, timestamp_ms):
            raise OSError("disk gone")

    gc = GroupCoordinator(ManualClock(), Broken(), GroupConfig(initial_rebalance_delay_ms=0))
    result = gc.commit_offsets("g", -1, "", [CommitEntry("t", 0, 1)])
    assert result == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
    assert gc.fetch_offsets("g", [("t", 0)])[1][0].offset == -1


# --- describe, list, delete ----------------------------------------------------------------------


def test_describe_and_list():
    gc, _, _ = make()
    (m,) = stable_group(gc, 1)
    d = gc.describe("g")
    assert (d.state, d.protocol_type, d.protocol_name) == ("Stable", "consumer", "range")
    assert d.members[0].member_id == m and d.members[0].assignment == f"assign-{m}".encode()
    assert d.members[0].metadata == subscription("t")
    assert gc.describe("missing").state == "Dead"
    gc.commit_offsets("solo", -1, "", [CommitEntry("t", 0, 7)])
    listed = {(g.group_id, g.protocol_type, g.state) for g in gc.list_groups()}
    assert listed == {("g", "consumer", "Stable"), ("solo", "", "Empty")}
    assert [g.group_id for g in gc.list_groups(["empty"])] == ["solo"]


def test_delete_groups():
    gc, _, log = make()
    stable_group(gc, 1, group="busy")
    gc.commit_offsets("idle", -1, "", [CommitEntry("t", 0, 7), CommitEntry("t", 1, 8)])
    result = gc.delete_groups(["busy", "idle", "missing"])
    assert result == {"busy": E.NON_EMPTY_GROUP, "idle": E.NONE, "missing": E.GROUP_ID_NOT_FOUND}
    assert "idle" not in gc.groups
    tombstones = [decode_key(k) for g, k, v in log.records if g == "idle" and v is None]
    assert set(tombstones) == {
        OffsetKey("idle", "t", 0),
        OffsetKey("idle", "t", 1),
        GroupKey("idle"),
    }
    assert gc.fetch_offsets("idle", [("t", 0)])[1][0].offset == -1


def test_offset_delete_keeps_subscribed_topics():
    gc, _, _ = make()
    (m,) = stable_group(gc, 1)
    gc.commit_offsets("g", 1, m, [CommitEntry("t", 0, 1), CommitEntry("old", 0, 2)])
    error, results = gc.delete_offsets("g", [("t", 0), ("old", 0)])
    assert error == E.NONE
    assert results == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("old", 0): E.NONE}
    assert gc.fetch_offsets("g", [("old", 0)])[1][0].offset == -1
    assert gc.delete_offsets("missing", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})


# --- retention and loading -----------------------------------------------------------------------


def test_offsets_of_empty_groups_expire_after_retention():
    gc, clock, log = make(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    (m,) = stable_group(gc, 1)
    gc.commit_offsets("g", 1, m, [CommitEntry("t", 0, 1)])
    gc.start_retention()
    for _ in range(24):
        clock.advance(5_000)
        assert gc.heartbeat("g", 1, m) == E.NONE
    assert gc.fetch_offsets("g", [("t", 0)])[1][0].offset == 1  # a live group keeps its offsets
    gc.leave("g", [(m, None)])
    clock.advance(50_000)
    assert gc.fetch_offsets("g", [("t", 0)])[1][0].offset == 1
    clock.advance(20_000)
    assert gc.fetch_offsets("g", [("t", 0)])[1][0].offset == -1
    assert "g" not in gc.groups
    assert (decode_key(log.records[-1][1]), log.records[-1][2]) == (GroupKey("g"), None)
    gc.stop_retention()


def test_reload_restores_groups_offsets_and_static_members():
    gc, clock, log = make()
    a, b = static_group(gc)
    gc.commit_offsets("g", 2, a, [CommitEntry("t", 0, 11, 2, "x")], group_instance_id="ia")
    gc.commit_offsets("solo", -1, "", [CommitEntry("t", 1, 5)])
    gc.commit_offsets("gone", -1, "", [CommitEntry("t", 1, 5)])
    gc.delete_groups(["gone"])

    fresh = GroupCoordinator(clock, log, GroupConfig(initial_rebalance_delay_ms=0))
    assert fresh.load(log.replay()) == 2
    group = fresh.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == 2
    assert set(group.members) == {a, b} and group.protocol_name == "range"
    assert fresh.fetch_offsets("g", [("t", 0)])[1][0].offset == 11
    assert fresh.fetch_offsets("solo", [("t", 1)])[1][0].offset == 5
    assert "gone" not in fresh.groups
    # a static member restarted across the coordinator restart gets its assignment back
    result = fresh.join(
        JoinRequest("g", "", "consumer", [("range", subscription("t"))], SESSION, REBALANCE, "ib")
    ).result()
    assert result.error == E.NONE and result.generation_id == 2
    assert fresh.sync("g", 2, result.member_id, {}, "ib").result().assignment == b"B"
    # members that never come back expire
    for _ in range(3):
        clock.advance(SESSION // 2)
        fresh.heartbeat("g", fresh.groups["g"].generation_id, result.member_id, "ib")
    assert a not in fresh.groups["g"].members


@pytest.mark.parametrize("version", [0, 3])
def test_old_versions_join_directly(version):
    gc, _, _ = make()
    result = join(gc, version=version).result()
    assert result.error == E.NONE and result.generation_id == 1


def test_leader_retrying_join_during_completing_rebalance_gets_the_members_again():
    gc, _, _ = make()
    ids = [join(gc).result().member_id for _ in range(2)]
    first = join(gc, member_id=ids[0])
    join(gc, member_id=ids[1]).result()
    leader = first.result().leader_id
    again = join(gc, member_id=leader).result()  # the first response was lost
    assert again.generation_id == 1 and len(again.members) == 2
    assert gc.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_leader_that_never_syncs_sends_everyone_back_to_join():
    gc, clock, _ = make()
    ids = [join(gc).result().member_id for _ in range(2)]
    first = join(gc, member_id=ids[0])
    second = join(gc, member_id=ids[1]).result()
    leader = first.result().leader_id
    follower = next(m for m in ids if m != leader)
    waiting = gc.sync("g", 1, follower, {})
    assert not waiting.done()
    for _ in range(REBALANCE // 5000):
        clock.advance(5000)
        gc.heartbeat("g", second.generation_id, follower)
    assert waiting.result().error == E.REBALANCE_IN_PROGRESS
    assert list(gc.groups["g"].members) == [follower]
    assert gc.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert join(gc, member_id=follower).result().generation_id == 2


def test_duplicate_join_answers_the_older_request():
    gc, _, _ = make()
    a, b = stable_group(gc, 2)
    old = join(gc, member_id=a, protocols=[("range", subscription("x"))])
    new = join(gc, member_id=a, protocols=[("range", subscription("x"))])
    assert old.result().error == E.UNKNOWN_MEMBER_ID
    assert not new.done()
    join(gc, member_id=b)
    assert new.result().generation_id == 2


def test_new_member_stuck_in_a_long_rebalance_times_out():
    gc, clock, _ = make(new_member_join_timeout_ms=20_000)
    (a,) = stable_group(gc, 1)
    stuck = join_new(gc)  # waits for a, which keeps heartbeating but never rejoins
    for _ in range(4):
        clock.advance(5000)
        gc.heartbeat("g", 1, a)
    assert stuck.result().error == E.UNKNOWN_MEMBER_ID
    assert list(gc.groups["g"].members) == [a]
