"""A request's steps on a worker thread of its own, handed to the event loop as they come.

The thread takes the next steps while the loop sends the last ones: up to AHEAD steps ahead of what the loop
took, so a token's sending overlaps the next tokens' inference passes. When sending is slower than the model
(the story model writes a token in ~0.3 ms; an SSE event costs ~1 ms of this machine's socket), the loop sends
what has piled up as one event (`waiting()`), so a stream runs at the model's speed, not the socket's. A
client that goes away stops the generation after the step in flight (the steps already taken stay in its
trace, at most AHEAD unsent). One hand-off per token, not a thread-pool round trip per token."""

import asyncio
import threading

AHEAD = 8  # steps the thread may take before the loop takes them: a few ms of the story model, one of SmolLM2


class Stepper:
    """`async for piece in Stepper(run)`: run.step()'s pieces until it returns None (an error it raises is
    raised here); `waiting()`: the pieces already taken and not yet handed out; `await stepper.close()` stops
    it and waits for the step in flight."""

    def __init__(self, run, ahead: int = AHEAD):
        self.run = run
        self._loop = asyncio.get_running_loop()
        self._pieces: asyncio.Queue = asyncio.Queue()
        self._held = None  # an end or an error waiting() came to: __anext__ gives it next
        self._room = threading.Semaphore(ahead)  # released by the loop as it takes each piece
        self._stop = threading.Event()
        self._done = self._loop.run_in_executor(None, self._work)

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = self._held or await self._pieces.get()
        self._held = None
        return self._taken(item)

    def waiting(self) -> list:
        """The pieces the thread has already handed over, without waiting (up to an end or an error)."""
        out = []
        while self._held is None and not self._pieces.empty():
            item = self._pieces.get_nowait()
            if item[0] == "error" or item[1] is None:
                self._held = item
            else:
                out.append(self._taken(item))
        return out

    async def close(self) -> None:
        self._stop.set()
        self._room.release()  # a thread waiting for room sees the stop
        await self._done

    def _taken(self, item):
        kind, value = item
        self._room.release()
        if kind == "error":
            raise value
        if value is None:
            raise StopAsyncIteration
        return value

    def _work(self) -> None:
        while True:
            self._room.acquire()
            if self._stop.is_set():
                return
            try:
                piece = self.run.step()
            except BaseException as error:  # noqa: BLE001 - raised in the loop, by __anext__
                self._hand(("error", error))
                return
            self._hand(("piece", piece))
            if piece is None:
                return

    def _hand(self, item) -> None:
        try:
            self._loop.call_soon_threadsafe(self._pieces.put_nowait, item)
        except RuntimeError:  # the loop has closed (the server is shutting down): nobody takes it
            pass
