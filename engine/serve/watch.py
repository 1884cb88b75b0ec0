"""Watchers: who follows the server's requests live (the window's File > Watch a server..., or any client of
`GET /v1/playground/watch`). Each gets every request's start (its prompt and settings), each step (a trace's
step record) and its end (the whole trace), as server-sent events, in order.

A watcher that does not keep up is dropped (its queue is bounded): the server is never slowed for it."""

import asyncio

WATCH_QUEUE = 10_000  # events a watcher may fall behind by before it is dropped


class Watchers:
    def __init__(self):
        self._queues: set[asyncio.Queue] = set()

    def __bool__(self) -> bool:
        return bool(self._queues)

    def publish(self, event: dict) -> None:
        """From the event loop's thread only (asyncio queues are not thread-safe)."""
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                self._queues.discard(queue)  # too far behind: its stream ends

    async def events(self):
        """One watcher's events, until it goes away or is dropped."""
        queue: asyncio.Queue = asyncio.Queue(WATCH_QUEUE)
        self._queues.add(queue)
        try:
            while queue in self._queues or not queue.empty():
                try:
                    yield await asyncio.wait_for(queue.get(), timeout=1.0)
                except TimeoutError:
                    continue
        finally:
            self._queues.discard(queue)
