"""Which rows of scores a local context keeps, by position, so that a long text costs no row per token (issue 42:
a Gemma 3 row is 1 MB) and every rewind still gives the same numbers bit for bit.

A row made by one token fed alone (every sampled step) can be made again exactly: feed that token alone again on
the same cache. So only the last RECENT_ROWS of those are kept; the older ones are "let go". A row from a batched
pass (a prompt, inserted or forced text, a branch put back) could not be made again the same way (a pass of
another size gives other numbers), so it is kept for as long as its position is. The context (LocalContext)
asks `again_at(cache_length)` before it feeds anything: where the cache stands one short of a row that was let
go, it feeds that one token first, as it was first fed.
"""

import collections

import numpy as np

RECENT_ROWS = 8  # rows of the last tokens fed one at a time kept (a rewind of a few steps reads none again)


class KeptRows:
    def __init__(self):
        self.rows: dict[int, np.ndarray] = {}  # position -> the scores a token at that position was chosen from
        self._alone: collections.deque[int] = collections.deque()  # kept rows made by one token fed alone, ascending
        self._let_go: list[int] = []  # positions whose row was let go, ascending (all below _alone's)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, position: int) -> bool:
        return position in self.rows

    def get(self, position: int) -> np.ndarray | None:
        return self.rows.get(position)

    def put(self, position: int, row: np.ndarray, alone: bool = False) -> None:
        """The row at `position`; alone: one token fed alone made it (then older such rows are let go)."""
        self.rows[position] = row
        if alone:
            self._alone.append(position)
            while self._alone[0] <= position - RECENT_ROWS:
                old = self._alone.popleft()
                self.rows.pop(old, None)
                self._let_go.append(old)

    def again_at(self, cache_length: int) -> int | None:
        """The position whose row was let go and is to be made again by feeding its token alone, where the cache
        stands one short of it (taken off the let-go list: the caller makes it and puts it back), else None."""
        if self._let_go and self._let_go[-1] == cache_length + 1:
            return self._let_go.pop()
        return None

    def cut(self, length: int) -> None:
        """Forget every position after `length`."""
        for position in [p for p in self.rows if p > length]:
            del self.rows[position]
        while self._alone and self._alone[-1] > length:
            self._alone.pop()
        while self._let_go and self._let_go[-1] > length:
            self._let_go.pop()

    def copy(self) -> "KeptRows":
        """A snapshot to put back (LocalContext.rewound): the rows themselves are shared, never changed in place."""
        kept = KeptRows()
        kept.rows, kept._alone, kept._let_go = dict(self.rows), collections.deque(self._alone), list(self._let_go)
        return kept
