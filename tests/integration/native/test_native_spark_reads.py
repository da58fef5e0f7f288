"""The Spark source's native executor reads against the service (no Spark needed): pooling, data
loss, restarts."""

from __future__ import annotations

import pytest

from rdmalog.rdma import Producer
from rdmalog.rdma.broker.service import RdmaService


def _spark_native_topic(svc: RdmaService, kind: str, topic: str, values: list[bytes]):
    """A one-partition topic holding `values`, and the Spark source's connection options for
    reading it natively (an empty consumer pool)."""
    from rdmalog.spark import native_client
    from rdmalog.spark.options import parse_read

    svc.store.create_topic(topic, 1)
    p = Producer(svc.control_address)
    for v in values:
        p.send(topic, 0, v)
    p.flush()
    p.close()
    opts = {"rdmalog.bootstrap": "127.0.0.1:9", "subscribe": topic}
    native_client._POOL.clear()
    return parse_read(
        opts | {"rdmalog.transport": kind, "rdmalog.control": svc.control_address}, False
    ).conn


def test_spark_native_reads_reuse_a_pooled_consumer(broker, kind):
    """The Spark source's executor reads (no Spark needed): the next range of a partition
    continues on the consumer the previous task left assigned; another start seeks it; a read
    abandoned half-way closes its consumer instead of pooling it."""
    pytest.importorskip("pyspark")
    from rdmalog.spark import native_client
    from rdmalog.spark.offsets import DataLossError

    st, svc = broker
    conn = _spark_native_topic(svc, kind, "sp", [b"v%d" % i for i in range(30)])

    def read(start: int, end: int) -> list[int]:
        return [r[2] for r in native_client.read_range(conn, ("sp", 0), start, end, True, 5000)]

    assert read(0, 10) == list(range(10))
    (first,) = native_client._POOL.values()
    assert read(10, 20) == list(range(10, 20))
    assert list(native_client._POOL.values()) == [first]  # the same consumer, continued
    assert read(5, 8) == [5, 6, 7]  # seeks the pooled consumer
    assert list(native_client._POOL.values()) == [first]
    rows = native_client.read_range(conn, ("sp", 0), 20, 30, True, 5000)
    assert next(rows)[2] == 20
    rows.close()  # abandoned: closed, not pooled
    assert native_client._POOL == {} and not first.ctl.alive()
    assert read(25, 30) == list(range(25, 30))
    # Records deleted under a planned range are data loss, reported: the executors' consumers
    # do not reset (auto.offset.reset=none, as spark-sql-kafka's executors use).
    st.partition("sp", 0).delete_records(12)
    with pytest.raises(DataLossError, match="offset 10"):
        read(10, 15)
    for c in native_client._POOL.values():
        c.close()
    native_client._POOL.clear()


def test_spark_native_reads_skip_lost_records_without_fail_on_data_loss(broker, kind, caplog):
    """failOnDataLoss=false: an executor read whose records are gone warns and goes on from the
    log start, as spark-sql-kafka's executors do (the native read used to fail regardless): a
    range whose start was deleted reads the rest, a range deleted entirely reads nothing, records
    deleted while a read runs are skipped, a deleted topic ends the read. With
    failOnDataLoss=true each of them is a DataLossError."""
    pytest.importorskip("pyspark")
    from rdmalog.spark import native_client
    from rdmalog.spark.offsets import DataLossError

    st, svc = broker
    # ~1 KiB records: a 2 KiB READ holds one or two, so a read takes many polls
    conn = _spark_native_topic(svc, kind, "lost", [b"%04d" % i + b"." * 1000 for i in range(40)])

    def rows(start: int, end: int, fail: bool):
        return native_client.read_range(conn, ("lost", 0), start, end, fail, 5000)

    def read(start: int, end: int, fail: bool = False) -> list[int]:
        return [r[2] for r in rows(start, end, fail)]

    st.partition("lost", 0).delete_records(10)
    with pytest.raises(DataLossError, match="offset 4"):
        read(4, 15, fail=True)
    caplog.clear()
    assert read(4, 15) == list(range(10, 15))
    assert "cannot read from offset 4" in caplog.text and "failOnDataLoss is false" in caplog.text
    assert read(2, 8) == []  # all of it deleted
    assert read(12, 14) == [12, 13]

    # Deleted while the read runs: the records already read come, the deleted ones are skipped.
    it = rows(15, 40, False)
    assert next(it)[2] == 15
    st.partition("lost", 0).delete_records(30)
    rest = [r[2] for r in it]
    kept = [o for o in rest if o < 30]
    assert kept == list(range(16, 16 + len(kept))) and len(kept) < 14
    assert [o for o in rest if o >= 30] == list(range(30, 40))
    it = rows(15, 40, True)
    with pytest.raises(DataLossError, match="offset 15"):
        next(it)

    st.delete_topic("lost")
    assert read(35, 40) == []
    with pytest.raises(DataLossError, match="UnknownTopicOrPartition"):
        read(35, 40, fail=True)
    for c in native_client._POOL.values():
        c.close()
    native_client._POOL.clear()


def _restart(svc: RdmaService) -> RdmaService:
    """The service stopped and started again at its control address (a broker restart)."""
    port = int(svc.control_address.rpartition(":")[2])
    svc.stop()
    return RdmaService(svc.store, svc.kind, order_timeout=0.3, control_port=port).start()


def test_spark_native_reads_ride_a_broker_restart(broker, kind):
    """An executor's read across a broker restart: the next task's pooled consumer, and a read
    the restart interrupted, failed with BrokerDisconnected (on local Spark, which does not
    retry tasks, the query failed); they continue on a new session now, nothing lost or
    repeated, as the Kafka transport's consumers ride a restart."""
    pytest.importorskip("pyspark")
    from rdmalog.spark import native_client

    st, svc = broker
    # ~1 KiB records: a poll returns one or two, so the restart comes between two polls
    conn = _spark_native_topic(svc, kind, "rs", [b"%04d" % i + b"." * 1000 for i in range(30)])

    def rows(start: int, end: int):
        return native_client.read_range(conn, ("rs", 0), start, end, True, 5000)

    assert [r[2] for r in rows(0, 10)] == list(range(10))
    svc = _restart(svc)
    try:
        assert [r[2] for r in rows(10, 20)] == list(range(10, 20))  # its consumer was pooled
        it = rows(20, 30)
        assert next(it)[2] == 20
        svc = _restart(svc)
        assert [r[2] for r in it] == list(range(21, 30))
    finally:
        for c in native_client._POOL.values():
            c.close()
        native_client._POOL.clear()
        svc.stop()
