"""Classic consumer groups and committed offsets (Kafka's group coordinator).

- `coordinator.py`: the sans-io state machine (join/sync/heartbeat/leave, offsets, retention, load)
- `state.py`: one group and its members; `model.py`: settings, requests, results, the log interface
- `schema.py`: `__consumer_offsets` keys and values in Kafka's bytes; `consumer_protocol.py`:
  topic names of a consumer subscription
- `offsets_topic.py`: the coordinator's log in the store, and its replay
- `clock.py`, `pending.py`: time and deferred answers injected into the state machine
- `service.py`: one coordinator per broker, bound to its store and event loop
"""
