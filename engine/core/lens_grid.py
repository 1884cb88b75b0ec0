"""The logit lens grid: each layer's most probable next token, and its probability, at the text's last positions,
unembedded on a thread of its own while the forward pass hands its layers over.

The grid is most of the Inside tab's work: Gemma 3's 19 layers x 20 positions through its 262,144 x 640 output
matrix are 64 G multiply-adds, ~2 s of one core; its forward is ~1 s more. A backend that hands each layer's
stream over as soon as it is computed (llama.cpp, through its graph callback: `inside(..., on_layer=add)`) lets
the two run side by side on two cores, one thread each. Neither waits on the other, so a busy machine slows
them as it slows any single thread (not the collapse of threads that spin for each other: blas_threads.py).
A backend that hands nothing over gets its whole grid after its forward, on the same code.
"""

import queue
import threading

import numpy as np

GRID_VALUES = 1 << 25  # scores unembedded at once: at most 128 MB of float32
MIN_ROWS = 100  # rows per product: OpenBLAS ran a [20, 640] operand at half the rate of a [120, 640] one


def top_and_p(scores) -> tuple[np.ndarray, np.ndarray]:  # [..., V] -> the top id [...] and its probability [...]
    """softmax's argmax and its value, without the softmax (scores is overwritten). Four rows at a time: the
    passes over a row then stay in the cache (25% faster on 120 rows of 262,144)."""
    flat = scores.reshape(-1, scores.shape[-1])  # [R, V], a view
    top = flat.argmax(axis=-1)
    p = np.empty(len(flat), dtype=np.float32)
    for first in range(0, len(flat), 4):
        block = flat[first : first + 4]
        block -= np.take_along_axis(block, top[first : first + 4, None], axis=-1)
        np.exp(block, out=block)
        p[first : first + 4] = 1 / block.sum(axis=-1)
    return top.reshape(scores.shape[:-1]), p.reshape(scores.shape[:-1])


class LensGrid:
    """add(row, stream [P, d]) as the layers arrive (from any thread); finish(residuals) -> (lens [rows, V], the
    last position's scores at each row; top [rows, P]; p [rows, P]). cancel() where the forward failed."""

    def __init__(self, unembed, vocab: int):
        self._unembed, self._vocab = unembed, vocab
        self._arrived: queue.SimpleQueue = queue.SimpleQueue()
        self._added: set[int] = set()
        self._results: dict[int, tuple] = {}  # row -> (last-position scores [V], top [P], p [P])
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread: threading.Thread | None = None  # started by the first row handed over during the forward

    def add(self, row: int, stream) -> None:
        self._added.add(row)
        self._arrived.put((row, np.asarray(stream, dtype=np.float32)))
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="lens grid", daemon=True)
            self._thread.start()

    def finish(self, residuals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        for row in range(len(residuals)):
            if row not in self._added:
                self._arrived.put((row, residuals[row]))
        self._arrived.put(None)  # nothing more: unembed what is left
        if self._thread is None:
            self._work()  # nothing was handed over early: all of it here, no thread
        else:
            self._thread.join()
        if self._error is not None:
            raise self._error
        rows = [self._results[row] for row in range(len(residuals))]
        return tuple(np.stack(part) for part in zip(*rows))

    def cancel(self) -> None:
        self._cancelled = True
        self._arrived.put(None)
        if self._thread is not None:
            self._thread.join()

    def _work(self) -> None:
        pending, finished = [], False
        try:
            while not finished:
                item = self._arrived.get()
                finished = item is None or self._cancelled
                if item is not None:
                    pending.append(item)
                columns = len(pending[0][1]) if pending else 1
                most = max(1, GRID_VALUES // (columns * self._vocab))  # layers per product, by memory
                while pending and not self._cancelled and (finished or len(pending) * columns >= MIN_ROWS):
                    self._unembedded(pending[:most])
                    del pending[:most]
        except BaseException as error:  # noqa: BLE001 - kept for finish(), which raises it in the caller
            self._error = error

    def _unembedded(self, group: list) -> None:
        streams = np.stack([stream for _row, stream in group])  # [k, P, d]
        k, columns, d = streams.shape
        scores = self._unembed(streams.reshape(-1, d)).reshape(k, columns, -1)  # one [k x P, d] product
        for (row, _stream), rows in zip(group, scores):
            last = rows[-1].copy()  # the lens at the last position, before top_and_p overwrites it
            self._results[row] = (last, *top_and_p(rows))
