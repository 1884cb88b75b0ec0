"""A request's steps, handed to the event loop as they come: on a worker thread of its own (Stepper), or, for a
model whose steps are quicker than a thread's hand-offs, on the loop itself between its turns (InlineStepper;
`stepper_for` chooses).

The thread takes the next steps while the loop sends the last ones: up to AHEAD steps ahead of what the loop
took, so a token's sending overlaps the next tokens' inference passes. When sending is slower than the model
(the story model writes a token in ~1 ms; an SSE event costs about as much), the loop sends what has piled up
as one event (`waiting()`), so a stream runs at the model's speed, not the socket's. The thread wakes the loop
only when it waits for a step (a wake-up is a write to the loop's pipe and a fight for the GIL: 30% of the
story model's thread when it woke the loop for every step). A client that goes away stops the generation after
the step in flight (the steps already taken stay in its trace, at most AHEAD unsent)."""

import asyncio
import collections
import threading
import time

AHEAD = 8  # steps the thread may take before the loop takes them: a few ms of the story model, one of SmolLM2


class Stepper:
    """`async for piece in Stepper(run)`: run.step()'s pieces until it returns None (an error it raises is
    raised here); `waiting()`: the pieces already taken and not yet handed out; `await stepper.close()` stops
    it and waits for the step in flight."""

    def __init__(self, run, ahead: int = AHEAD, executor=None):
        self.run = run
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()  # guards _items and _waiter between the thread and the loop
        self._items: collections.deque = collections.deque()  # ("piece", Piece | None) or ("error", exception)
        self._waiter: asyncio.Future | None = None  # set while the loop waits for an item: the thread wakes it
        self._room = threading.Semaphore(ahead)  # released by the loop as it takes each piece
        self._stop = threading.Event()
        self._done = self._loop.run_in_executor(executor, self._work)

    def __aiter__(self):
        return self

    async def __anext__(self):
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    break
                waiter = self._waiter = self._loop.create_future()
            await waiter
        return self._taken(item)

    def waiting(self) -> list:
        """The pieces the thread has already handed over, without waiting (up to an end or an error)."""
        out = []
        while True:
            with self._lock:
                if not self._items or self._items[0][0] == "error" or self._items[0][1] is None:
                    return out
                item = self._items.popleft()
            out.append(self._taken(item))

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
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            try:
                self._loop.call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # the loop has closed (the server is shutting down): nobody takes it
                pass


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():  # (a waiter whose request was cancelled is done already)
        waiter.set_result(None)


QUICK = 0.002  # s per step: a model quicker than this steps on the loop itself
FRAME = 1 / 60  # s: the steps the loop runs in one frame go out as one event (no client shows more frames)
FRAME_STEPS = 32  # at most, in one frame (what a client that went away may not have been sent)


def stepper_for(run, pace: float | None, executor=None):
    """The stepper for a request: on the loop where the model's last request took under QUICK per step (pace;
    None: not measured yet) and no rule runs a tool (a command may take seconds), else on a thread. On a
    machine whose cores are busy each hand-off between threads waits for a core: the story model's 1-token
    request took 10-15 ms through the thread, its 48 tokens streamed 0.5-0.65x the Session in-process (with
    the loop stepping: ~0.8x; bench/serve_speed.py). executor: the threads steppers run on (None: the loop's
    default, 4 + the cores: too few for --parallel's requests, which each wait on a thread for their rows)."""
    quick = pace is not None and pace < QUICK and not any(rule.tool for rule in run.session.rules)
    return InlineStepper(run) if quick else Stepper(run, executor=executor)


class InlineStepper:
    """Stepper's interface, run.step() called on the event loop itself, a frame's steps at a time (up to FRAME,
    at most FRAME_STEPS), the loop's other work (other clients, a disconnect) done between two frames; a
    frame's steps are handed out together, so that waiting() has them."""

    def __init__(self, run):
        self.run = run
        self._held: collections.deque = collections.deque()
        self._ended = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self._held:
            await self._frame()
        if not self._held:
            raise StopAsyncIteration
        return self._held.popleft()

    def waiting(self) -> list:
        held = list(self._held)
        self._held.clear()
        return held

    async def close(self) -> None:
        self._ended = True

    async def _frame(self) -> None:
        started = time.perf_counter()
        while (
            not self._ended
            and len(self._held) < FRAME_STEPS
            and (not self._held or time.perf_counter() - started < FRAME)
        ):
            piece = self.run.step()
            if piece is None:
                self._ended = True
            else:
                self._held.append(piece)
        await asyncio.sleep(0)  # the loop's turn between two frames: other clients, a disconnect
