"""The log store: topic-partitions as segment files whose bytes are exactly Apache Kafka's.

`records` (batch views), `compression`, `index`, `segment`, `log` (one partition), `log_manager`
(all partitions of a broker), and the files Kafka keeps beside them (`checkpoints`,
`leader_epochs`, `producer_state`, `producer_ids`).
"""
