"""Kafka-compatibility scenarios run by real clients against any Kafka-compatible broker."""
