"""Answers that grow with the request, built without holding the event loop or a dict per element.

`await answer_each(ctx, path, items, answer)` is `[answer(x) for x in items]` for the response
array at `path` (field names from the top, e.g. ("topics", "partitions")). Past a few dozen
items each answer is encoded as soon as it is built: the response then holds an EncodedArray (the
bytes, about the size of the wire answer) instead of a dict per element, and every few
milliseconds the event loop serves other clients. `answer` may be a coroutine function (for nested
arrays: its answer awaits `answer_each` on the inner path).

`duplicates(keys)` finds the keys named more than once, for the APIs where Kafka answers those with
INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sized
from typing import Any

from gateway.broker import RequestContext
from gateway.protocol import EncodedArray, response_element_encoder
from gateway.request_limits import Turns

SMALL = 64  # answers up to this many stay a plain list (what handler tests look at)


async def answer_each(
    ctx: RequestContext, path: tuple[str, ...], items: Iterable[Any], answer: Callable[[Any], Any]
) -> list | EncodedArray:
    """The answers to `items`, in order: a list when few, else encoded as they are built."""
    if isinstance(items, Sized) and len(items) <= SMALL:
        out = []
        for item in items:
            value = answer(item)
            out.append(await value if asyncio.iscoroutine(value) else value)
        return out
    encode = response_element_encoder(ctx.api_key, ctx.api_version, path)
    data = bytearray()
    parts: list = []
    count = 0
    turns = Turns()
    for item in items:
        value = answer(item)
        if asyncio.iscoroutine(value):
            value = await value
        encode(data, value, parts)
        count += 1
        if turns.due():
            await turns.take()
    return EncodedArray(count, data, parts)


def duplicates(keys: Iterable[Hashable]) -> set:
    """The keys that occur more than once."""
    return {k for k, n in Counter(keys).items() if n > 1}
