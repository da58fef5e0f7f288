"""The commit slot's word layouts, which the broker and the native consumer agree on.

A session's commit region (registered by the broker with REMOTE_ATOMIC and REMOTE_READ) holds
MAX_SLOTS **slot words**, then as many **result words** from RESULTS_AT on:

- slot word: (committed offset + 1) << 16 | commit count (1..65535, cycling; 0: nothing committed
  through the slot yet). The consumer, the slot's only writer, commits with one FETCH_AND_ADD of
  `add_for(old, next_word(old, offset))`; the count moves on with every commit, so committing the
  same offset again changes the word too.
- result word: the coordinator's error code (16 bits, two's complement) << 48 | the low 48 bits of
  the slot word the broker folded (0 and code 0: no answer yet).

The broker's side is `rdmalog.rdma.broker.commit_slots`; the consumer's is `Consumer.commit_async`
(`rdmalog.rdma.client.consumer`) with `rdmalog.rdma.client.commit_results`.
"""

from __future__ import annotations

SLOT_BYTES = 8
MAX_SLOTS = 4096  # commit slots per session (one per group partition the consumer commits)
RESULTS_AT = MAX_SLOTS * SLOT_BYTES  # where the result words start in a session's region
WORD_BITS = 48  # of the folded word kept in a result word: its count, the offset's low bits
WORD_MASK = (1 << WORD_BITS) - 1
COUNT_BITS = 16  # a slot word's commit count, below the offset + 1
COUNT_MASK = (1 << COUNT_BITS) - 1
MAX_OFFSET = (1 << 64 - COUNT_BITS) - 2  # the largest offset a slot word holds


def slot_word(offset: int, count: int = 1) -> int:
    """The slot value of the `count`th commit (1..65535, cycling) of `offset` (the next offset
    to read)."""
    return (offset + 1) << COUNT_BITS | count


def offset_of(word: int) -> int:
    """The offset a (nonzero) slot word commits."""
    return (word >> COUNT_BITS) - 1


def next_word(old_word: int, offset: int) -> int:
    """The slot word that commits `offset` after `old_word`: always another word, even for the
    same offset (the count moves on, never to 0), so the broker folds every commit."""
    return slot_word(offset, (old_word & COUNT_MASK) % COUNT_MASK + 1)


def add_for(old_word: int, new_word: int) -> int:
    """The FETCH_AND_ADD operand that moves a slot from `old_word` to `new_word`."""
    return (new_word - old_word) & 0xFFFFFFFFFFFFFFFF


def result_word(word: int, error_code: int) -> int:
    """What the broker writes after folding `word`: the coordinator's error code and the word."""
    return (error_code & 0xFFFF) << WORD_BITS | word & WORD_MASK


def parse_result(result: int) -> tuple[int, int]:
    """(low bits of the folded word, Kafka error code) of a result word; (0, 0): none yet."""
    code = result >> WORD_BITS & 0xFFFF
    return result & WORD_MASK, code - 0x10000 if code & 0x8000 else code
