"""Cluster mode (`zookeeper.connect` set): brokers coordinated through ZooKeeper in Kafka's layout,
partitions replicated with Kafka's ISR protocol.

- `znodes`: Kafka's znode paths and JSON; `registry`: typed, conditional operations on them (kazoo);
- `assignment`: Kafka's rack-unaware replica assignment;
- `view`: a broker's picture of the cluster, kept current by ZooKeeper watches;
- `controller`: the elected controller (leaders, ISR on broker failure, topics, reassignments);
- `replica_manager`: this broker's replicas (roles, ISR, high watermark, acks=all waits);
- `fetcher`: followers pulling from leaders (truncation by leader epoch, then Fetch).

Nothing here imports the gateway: the Kafka-protocol connection a follower fetches over is handed in.
"""
