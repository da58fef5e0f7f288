"""Kafka API handlers, one module per API key (`kNN_<api>.py`), listed in `registry.py`."""
