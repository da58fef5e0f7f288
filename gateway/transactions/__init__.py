"""The transaction coordinator: transactional ids, their producer ids and epochs, and the state of each
transaction, kept in `__transaction_state` in Kafka's format; commit and abort markers written to the
partitions of a transaction as Kafka writes them.

`model` (states, metadata, settings), `schema` (the topic's keys and values), `state_topic` (the topic
in the store and its replay), `coordinator` (the state machine), `markers` (writing markers),
`service` (bound to a broker and its event loop: timers, start-up load).
"""
