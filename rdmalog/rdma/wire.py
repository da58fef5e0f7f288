"""The bit layouts both sides of the RDMA datapaths agree on (KafkaDirect section 4).

- Immediate of a produce WRITE_WITH_IMM: 16-bit file id | 16-bit order (Figure 4). A zero-length
  write tells the broker "my reservation overflowed the file" so no later order waits for it.
- Reservation word of a shared head file: order:16 | position:48 (Figure 5); a producer reserves
  with one FETCH_AND_ADD of (1 << 48) + length. The top bits let it see the position overflow.
- Produce acknowledgements, a SEND from broker to producer: one entry per write (file id, order,
  status, offsets), up to ACKS_PER_SEND entries in one SEND (a run of writes committed together).
- Metadata slot (16 bytes, one 8-byte word carries everything that must change atomically):
  word0 = last readable byte (48 bits) | VALID << 62 | MUTABLE << 63; word1 = file base offset.
"""

from __future__ import annotations

import enum
import struct

from rdmalog.rdma.transport.interface import MAX_SEND_BYTES

ORDER_SHIFT = 48
POSITION_MASK = (1 << ORDER_SHIFT) - 1
ORDER_MASK = 0xFFFF


def imm_encode(file_id: int, order: int) -> int:
    return ((file_id & 0xFFFF) << 16) | (order & ORDER_MASK)


def imm_decode(imm: int) -> tuple[int, int]:
    return imm >> 16, imm & ORDER_MASK


def reservation_add(length: int) -> int:
    """The FETCH_AND_ADD operand that takes one order and `length` bytes."""
    return (1 << ORDER_SHIFT) + length


def word_decode(word: int) -> tuple[int, int]:
    """(order, position) of a reservation word value."""
    return (word >> ORDER_SHIFT) & ORDER_MASK, word & POSITION_MASK


def word_encode(order: int, position: int) -> int:
    return ((order & ORDER_MASK) << ORDER_SHIFT) | (position & POSITION_MASK)


class AckStatus(enum.IntEnum):
    OK = 0
    CORRUPT = 1  # refused (validation, sequence, ...): not committed; access revoked; the
    # ack's base_offset carries the Kafka error code of the refusal
    FULL = 2  # the file is full: it was rolled; ask for access to the new head
    ABORTED = 3  # a predecessor never arrived: not committed; access revoked
    REVOKED = 4  # the grant is gone (rolled by someone else, revoked after an error)
    NOT_REPLICATED = 5  # acks=all: committed by the leader, but the ISR did not take it in time
    # (base_offset carries the Kafka error code: REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    # NOT_LEADER_OR_FOLLOWER); the grant stays


ACK = struct.Struct("<HHIqqq")  # file_id, order, status, base_offset, last_offset, next_position
ACK_SIZE = ACK.size
ACKS_PER_SEND = MAX_SEND_BYTES // ACK_SIZE  # 8: one SEND carries a run of acknowledgements

SLOT_SIZE = 16
SLOT_VALID = 1 << 62
SLOT_MUTABLE = 1 << 63
LRB_MASK = POSITION_MASK


def slot_word(lrb: int, mutable: bool) -> int:
    return (lrb & LRB_MASK) | SLOT_VALID | (SLOT_MUTABLE if mutable else 0)
