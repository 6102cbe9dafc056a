"""The device's one thread (every load and forward of the process runs on it), an ``Executor`` whose
batch hand-off skips ``concurrent.futures``.

``loop.run_in_executor`` on a ``ThreadPoolExecutor`` makes a ``concurrent.futures.Future`` (a lock and
a condition of its own) and a work item, wraps the future in an asyncio one and chains the two with a
callback each way, whose answer then crosses back through two more calls; a lone query pays all of it
for one forward. ``run`` puts the call on the thread's queue and answers the event loop's own future
from the thread with one ``call_soon_threadsafe``. ``submit`` (the ``Executor`` interface: loads,
housekeeping, ``run_in_executor``) keeps the concurrent future; both share the one queue, so every
call runs in the order it was queued, as on a one-thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class _Call:
    """One queued call and where its answer goes."""

    __slots__ = ("args", "fn", "future", "kwargs", "loop")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        future: Future[Any] | asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.fn, self.args, self.kwargs, self.future, self.loop = fn, args, kwargs, future, loop

    def run(self) -> None:
        if self.loop is None:
            self._run_concurrent()
            return
        future = self.future
        if future.done():  # cancelled while it waited: its caller is gone
            return
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # the caller's to handle, as a pool's future holds it
            self._answer(_reject, exc)
        else:
            self._answer(_resolve, result)

    def _run_concurrent(self) -> None:
        future = self.future
        assert isinstance(future, Future)
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def _answer(self, how: Callable[[Any, Any], None], value: Any) -> None:
        assert self.loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            self.loop.call_soon_threadsafe(how, self.future, value)

    def cancel(self) -> None:
        if self.loop is None:
            self.future.cancel()
            return
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.future.cancel)


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        if isinstance(error, StopIteration):  # an asyncio future refuses to hold one
            wrapped = RuntimeError(f"StopIteration raised on the device thread: {error}")
            wrapped.__cause__ = error
            error = wrapped
        future.set_exception(error)


class DeviceThread(Executor):
    def __init__(self, name: str = "sie-device") -> None:
        self._queue: SimpleQueue[_Call | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._shut = False
        # A daemon, as a pool's worker is joined only by its shutdown: the process may exit under a
        # forward it no longer waits for.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> asyncio.Future[R]:
        """``fn(*args, **kwargs)`` on the thread, answered on ``loop`` (whose thread calls this)."""
        future: asyncio.Future[R] = loop.create_future()
        self._put(_Call(fn, args, kwargs, future, loop))
        return future

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        future: Future[R] = Future()
        self._put(_Call(fn, args, kwargs, future, None))
        return future

    def _put(self, call: _Call) -> None:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put(call)

    def _serve(self) -> None:
        while (call := self._queue.get()) is not None:
            call.run()
            del call  # its arguments (a batch) are not kept alive until the next call comes

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if not self._shut:
                self._shut = True
                if cancel_futures:
                    while not self._queue.empty():
                        pending = self._queue.get_nowait()
                        if pending is not None:
                            pending.cancel()
                self._queue.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()
