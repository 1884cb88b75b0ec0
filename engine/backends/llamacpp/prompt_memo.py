"""PromptMemo: the last prompt a model read from the start of an empty context, kept so that the next context
given the same tokens takes its memory and scores instead of reading them again (llama-server's cache_prompt:
a server's requests, a window's runs again and the settings trace's sessions repeat a prompt).

Only a whole prompt read for generation is kept (its last position's row: a text scored reads every row, up to
hundreds of MB, and is not kept), and only the same ids read with nothing steered (no head scaled, no control
vector) take it. Its memory is llama.cpp's own sequence state put back (LlamaCppCache.put_back: the same cells,
so the next tokens' numbers are the same, bit for bit), and its row is the one that read returned. A prompt that shares only a beginning is read again in full: its first chunk read alone would not
give the same numbers as its whole read in one batch.
"""

import threading

import numpy as np

MAX_BYTES = 64 << 20  # the memory kept for one prompt at most (a 1,000-token SmolLM2 prompt's: ~23 MB)


class PromptMemo:
    def __init__(self):
        self._lock = threading.Lock()  # a model may serve several threads' sessions (settings trace workers)
        self._kept = None  # (ids as bytes, the sequence state (length, data), the last position's row)
        self.taken = 0  # prompts taken from here instead of read (what the tests count)

    def recall(self, ids: np.ndarray, last_only: bool, cache) -> np.ndarray | None:
        """The last row of reading ids into the empty cache, its memory now holding them; None: not kept."""
        kept = self._kept
        if kept is None or not last_only or not _plain(cache) or kept[0] != _key(ids):
            return None
        cache.put_back(kept[1])
        with self._lock:
            self.taken += 1
        return kept[2].copy()

    def remember(self, ids: np.ndarray, last_only: bool, cache, rows: np.ndarray) -> None:
        """Keep what reading ids into the empty cache for their last row left (its memory and that row), if its
        memory is small enough."""
        if len(ids) < 2 or not last_only or not _plain(cache):
            return
        if cache.model.llama.llama_state_seq_get_size(cache.opened(), 0) + rows.nbytes > MAX_BYTES:
            return
        kept = (_key(ids), cache.keep_aside(0), rows.copy())
        with self._lock:
            self._kept = kept


def _plain(cache) -> bool:
    """The cache's context reads as a fresh one does: no head scaled, no control vector."""
    return cache.head_scales is None and cache.additions is None


def _key(ids) -> bytes:
    return np.asarray(ids, dtype=np.int64).tobytes()
