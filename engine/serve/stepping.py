"""A request's steps on a worker thread of its own, handed to the event loop as they come.

The thread takes the next step while the loop sends the last one (one step ahead at most: a `Semaphore(1)` the
loop releases as it takes each piece), so a token's sending overlaps the next token's inference pass, and a
client that goes away stops the generation after the step in flight. One hand-off per token, not a thread-pool
round trip per token (bench/serve_speed.py: ~1 ms of the HTTP path per token on this machine, most of it the
socket's send)."""

import asyncio
import threading


class Stepper:
    """`async for piece in Stepper(run)`: run.step()'s pieces until it returns None (an error it raises is
    raised here); `await stepper.close()` stops it and waits for the step in flight."""

    def __init__(self, run):
        self.run = run
        self._loop = asyncio.get_running_loop()
        self._pieces: asyncio.Queue = asyncio.Queue()
        self._room = threading.Semaphore(1)  # the thread may run one step ahead of what the loop took
        self._stop = threading.Event()
        self._done = self._loop.run_in_executor(None, self._work)

    def __aiter__(self):
        return self

    async def __anext__(self):
        kind, value = await self._pieces.get()
        self._room.release()
        if kind == "error":
            raise value
        if value is None:
            raise StopAsyncIteration
        return value

    async def close(self) -> None:
        self._stop.set()
        self._room.release()  # a thread waiting for room sees the stop
        await self._done

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
