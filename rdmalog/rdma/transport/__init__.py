"""The verbs-shaped transport (`interface`) and its implementations: `shm` (same host), `tcp` (a
software RNIC), `verbs` (pyverbs); `_atomic64.c` holds the 64-bit atomics on shared mappings."""
