"""Mirror topics copied from a running Kafka-compatible cluster with their offsets (service.py), and
the source cluster as the mirror reads it (source.py). `rdmalog mirror` drives them."""
