"""Commit-slot arithmetic and the consumer's bookkeeping of result words (no transport)."""

from __future__ import annotations

from rdmalog.rdma.client.commit_results import PendingCommits
from rdmalog.rdma.commit_words import (
    COUNT_MASK,
    MAX_OFFSET,
    WORD_MASK,
    add_for,
    next_word,
    offset_of,
    parse_result,
    result_word,
    slot_word,
)


def test_adds_move_a_slot_either_way_modulo_2_64():
    word = 0
    for offset in (10, 3, 2**40, MAX_OFFSET, 0, 0):
        new = next_word(word, offset)
        word = (word + add_for(word, new)) % 2**64
        assert word == new and offset_of(word) == offset


def test_every_commit_changes_the_word_even_of_the_same_offset():
    """The broker folds words that changed: a commit of the offset a slot holds must change it."""
    assert next_word(slot_word(5, 1), 5) == slot_word(5, 2)
    assert next_word(slot_word(5, COUNT_MASK), 5) == slot_word(5, 1)  # the count skips 0


def test_result_words_carry_the_word_and_a_signed_error_code():
    assert parse_result(0) == (0, 0)
    low = slot_word(41) & WORD_MASK
    assert parse_result(result_word(slot_word(41), 0)) == (low, 0)
    assert parse_result(result_word(slot_word(41), 25)) == (low, 25)
    assert parse_result(result_word(slot_word(7), -1)) == (slot_word(7) & WORD_MASK, -1)


def test_a_fold_answers_every_commit_up_to_the_word_it_carried():
    pending = PendingCommits()
    results = {0: 0, 1: 0}
    pending.add("a", {("t", 0): 5}, {0: slot_word(5)})
    pending.add("b", {("t", 0): 6, ("t", 1): 1}, {0: slot_word(6), 1: slot_word(1)})
    pending.add("c", {("t", 0): 8}, {0: slot_word(8)})
    assert pending.indexes() == (0, 2)
    assert pending.settle(results.__getitem__) == []  # nothing folded yet
    results[0] = result_word(slot_word(6), 0)  # a fold carried 6 (5 was superseded by it)
    assert pending.settle(results.__getitem__) == [("a", {("t", 0): 5}, {0: 0})]
    results[1] = result_word(slot_word(1), 25)  # b's other partition was refused
    done = pending.settle(results.__getitem__)
    assert done == [("b", {("t", 0): 6, ("t", 1): 1}, {0: 0, 1: 25})]
    assert pending  # c waits for a fold that carries 8
    results[0] = result_word(slot_word(8), 0)
    assert [d[0] for d in pending.settle(results.__getitem__)] == ["c"] and not pending


def test_the_same_word_again_is_answered_by_a_later_fold_only_once_per_commit():
    pending = PendingCommits()
    results = {0: result_word(slot_word(5), 0)}  # 5 was committed and answered long ago
    pending.add("again", {("t", 0): 5}, {0: slot_word(5)})  # unchanged: already answered
    assert [d[0] for d in pending.settle(results.__getitem__)] == ["again"]
    pending.add("x", {("t", 0): 3}, {0: slot_word(3)})
    assert pending.settle(results.__getitem__) == []  # the old answer is for 5, not 3
    assert pending.drop() == [("x", {("t", 0): 3})] and not pending
