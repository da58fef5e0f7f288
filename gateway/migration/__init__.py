"""Offline migration between Kafka log directories and rdmalog: what a log dir holds, checked
(inventory.py), and an rdmalog data dir written as a Kafka log dir (export.py). `rdmalog import`
and `rdmalog export` drive them; live migration is gateway/mirror."""
