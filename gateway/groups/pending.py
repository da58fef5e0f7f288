"""A minimal future for responses the state machine completes later (JoinGroup, SyncGroup).

The coordinator is given a factory of such objects; handlers pass `loop.create_future`, unit tests use
`Pending`, which needs no event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Waiter(Protocol):
    """The part of a future the coordinator uses."""

    def done(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...


class Pending:
    """A future without a loop: `set_result` once, read with `result()`, observe with callbacks."""

    __slots__ = ("_done", "_result", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._callbacks: list[Callable[[Pending], None]] = []

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Any) -> None:
        if self._done:
            raise RuntimeError("result already set")
        self._done = True
        self._result = result
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def result(self) -> Any:
        if not self._done:
            raise RuntimeError("result not set yet")
        return self._result

    def add_done_callback(self, cb: Callable[[Pending], None]) -> None:
        if self._done:
            cb(self)
        else:
            self._callbacks.append(cb)
