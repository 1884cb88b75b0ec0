"""Expanding the tree: from where the text is, the most probable continuations, level by level.

Every node of a level gets its children: its top_k most probable next tokens, or as many as it takes to
hold `coverage` of its probability (both: whichever stops first), under the chain's final probabilities or
the raw model's (`raw`). Then the next level, down to `depth`, until the `budget` of nodes is spent: where
a level's children would overrun it, its most probable sequences are kept (ties: the order they were made).
A child that ends the text (an end token) or fills the context gets no children.

Breadth first, so a budget spends itself on the likeliest near continuations rather than on one deep
line. Within a level the nodes are visited in the tree's order, so the next one shares all but its last
token or two with the cache: the cache is truncated to the shared prefix (O(1)) and only the new tokens
are fed, in one pass. Each node's children are read from its one row of scores, as a forced step's record
is (engine/backends/local.py `alternatives`); nothing is drawn, so expanding uses no random draw.

Where the backend keeps many sequences (llama.cpp), each node read keeps its path's cells as a sequence of its
own (NodeCells), so a child's row costs one token, its own: up to the context's node sequences, then as above;
each such pass runs on a thread of its own while the last pass's children are made.

A level joins the tree only once it is complete: Cancel keeps the finished levels, and the session logs
the expansion with the levels it finished, so replay makes the very same nodes.
"""

import heapq
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace

import numpy as np

from engine.core.settings import known_settings

MAX_EXPANSION = 10_000  # nodes one expansion may add
MAX_CHILDREN = 1_000  # top_k's ceiling


@dataclass(frozen=True)
class Expansion:
    top_k: int | None = 3  # children per node, most probable first; None: no count limit (coverage decides)
    coverage: float | None = None  # children until they hold this share of the node's probability; None: off
    depth: int = 3  # levels below the starting point
    budget: int = 200  # nodes added at most
    raw: bool = False  # choose and weigh by the raw model's probabilities, not the chain's final ones

    def __post_init__(self):
        def whole(value, low, high):
            return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

        if self.top_k is not None and not whole(self.top_k, 1, MAX_CHILDREN):
            raise ValueError(f"top_k must be an int from 1 to {MAX_CHILDREN:,} or None, not {self.top_k!r:.40}")
        if self.coverage is not None and not (
            isinstance(self.coverage, (int, float)) and not isinstance(self.coverage, bool) and 0 < self.coverage <= 1
        ):
            raise ValueError(
                f"coverage must be a probability above 0 and at most 1, or None, not {self.coverage!r:.40}"
            )
        if self.top_k is None and self.coverage is None:
            raise ValueError("give top_k (children per node) or coverage (their share of the probability), or both")
        if not whole(self.depth, 1, 1_000_000):
            raise ValueError(f"depth must be an int >= 1, not {self.depth!r:.40}")
        if not whole(self.budget, 1, MAX_EXPANSION):
            raise ValueError(f"budget must be an int from 1 to {MAX_EXPANSION:,} nodes, not {self.budget!r:.40}")
        if not isinstance(self.raw, bool):
            raise ValueError(f"raw must be True or False, not {self.raw!r:.40}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ExpandResult:
    nodes: tuple[int, ...]  # the tree's nodes the expansion reached (made, or already there), level by level
    leaves: tuple[tuple[int, float], ...]  # (node, its sequence's probability from the start), most probable first
    levels: int  # levels finished
    cancelled: bool
    new: int = 0  # nodes the tree did not have before (the others were there: the text's own, an earlier expansion's)


def children(token_ids, probs, top_k: int | None, most: int, coverage: float | None = None) -> list[tuple[int, float]]:
    """[n] ids, [n] probabilities -> (token id, probability) of the children: the most probable first (ties:
    lower id), top_k of them, or as many as hold `coverage` (whichever is fewer), and never more than `most`
    (what the budget has room for); never a token of p 0."""
    inside = probs > 0
    token_ids, probs = token_ids[inside], probs[inside]
    limit = min(len(probs), most) if top_k is None else min(top_k, len(probs), most)
    if coverage is not None and limit > 256:  # a likely case: the few best hold the coverage
        best = np.argpartition(-probs, 255)[:256]
        if float(probs[best].sum(dtype=np.float64)) >= coverage:
            token_ids, probs = token_ids[best], probs[best]
            limit = min(limit, 256)
    if limit < len(probs):
        best = np.argpartition(-probs, limit - 1)[:limit]
        cut = probs[best].min()  # every token tied with the last kept competes on its id
        keep = probs >= cut
        token_ids, probs = token_ids[keep], probs[keep]
    order = np.lexsort((token_ids, -probs))[:limit]  # most probable first, ties to the lower id
    chosen = list(zip(token_ids[order].tolist(), probs[order].tolist()))
    if coverage is not None:
        total = np.cumsum(probs[order], dtype=np.float64)
        chosen = chosen[: int(np.searchsorted(total, coverage)) + 1]
    return chosen


def expand(context, model, ids: list[int], start: int, settings, expansion: Expansion,
           add: Callable, progress: Callable | None = None, cancelled: Callable | None = None,
           healing: bytes | None = None, advance: Callable | None = None) -> ExpandResult:  # fmt: skip
    """Expand below tree node `start`, whose text is `ids` (`context` holds it). add(parent node, step,
    healing before the step) -> the child's node id; progress(nodes made, nodes expected); cancelled() -> True
    to stop (the finished levels stay). healing: token healing's bytes still to spell at `start` (a prompt
    whose end was cut): children keep to them as a step would, raw ones too, and advance(bytes, token id) says
    what is left after a child (None: spelled). The context's cache ends truncated to len(ids)."""
    frontier = [(start, list(ids), 1.0, healing)]  # (node, its ids, its sequence's probability, its healing)
    held = [list(ids)]  # what the cache holds (boxed: each level's reading moves it)
    cells = NodeCells(context, ids, expansion.budget)
    reached, leaves = [], {}
    expected = _expected(expansion)
    levels, per_parent = 0, float(expansion.top_k or 1)  # children a parent gives (coverage: the last level's)

    def made(kept: int):
        if progress is not None:
            progress(len(reached) + kept, expected)

    try:
        for _level in range(expansion.depth):
            room = expansion.budget - len(reached)
            kept, read = _level_children(
                context, settings, expansion, frontier, room, per_parent, held, cancelled, made, cells
            )
            if kept is None:
                return _result(reached, leaves, levels, True)
            if expansion.top_k is None:
                per_parent = max(1.0, len(kept) / max(read, 1))
            frontier = []
            for key, parent, path, token_id, step, spelling in sorted(kept, key=lambda e: (-e[0][1], -e[0][2])):
                node = add(parent, step, spelling)
                reached.append(node)
                leaves[node] = key[0]
                leaves.pop(parent, None)
                if token_id not in model.end_token_ids and len(path) + 1 < model.context_length:
                    after = None if spelling is None else advance(spelling, token_id)
                    frontier.append((node, [*path, token_id], key[0], after))
            levels += 1
            if progress is not None:
                progress(len(reached), expected)
            if not frontier or len(reached) >= expansion.budget:
                break
    finally:
        cells.close()
        context.truncate(len(ids))
    return _result(reached, leaves, levels, False)


def _level_children(context, settings, expansion: Expansion, frontier, room: int, per_parent: float, held: list,
                    cancelled, made: Callable, cells: "NodeCells") -> tuple[list | None, int]:  # fmt: skip
    """The level's likeliest `room` children as a heap of (key, parent, ids, token, step, healing), and the
    parents whose rows were read; (None, read) when cancelled. A child's key is (sequence probability,
    -parent's index, -its rank among the parent's children): ties go to the one the tree's order makes first,
    whatever order the rows are read in, so the kept children are the same in any order.

    Once the heap is full, a parent whose own probability does not beat the heap's least is skipped unread:
    its children's p * q <= p, a probability q being at most 1. The likeliest parents are read first, to
    raise that cut early."""
    kept = []
    read = 0
    order = iter(_reading_order(frontier, room, per_parent))

    def next_pass():  # -> (the next group, a call giving its rows): its pass started, or read now
        group = _unskipped(order, frontier, kept, room, cells.per_pass)
        return group, _pass(context, cells, held, [frontier[index][1] for index in group])

    group, rows = next_pass()
    while group:
        if cancelled is not None and cancelled():
            return None, read
        read += len(group)
        # on the node sequences' thread, the next pass is chosen and started now, to run while this one's children
        # are made (the heap a little behind: a row it would have skipped may be read; the same children are kept)
        rows_now, ahead = rows(), cells.lockstep is not None
        if ahead:
            following = next_pass()
        for index, row in zip(group, rows_now):
            _add_children(context, settings, expansion, frontier, index, row, kept, room)
            made(len(kept))
        group, rows = following if ahead else next_pass()
    return kept, read


def _pass(context, cells: "NodeCells", held: list, paths: list[list[int]]) -> Callable[[], list]:
    """The rows at the end of each path, read now (the context, branches_per_pass a pass) or started on the
    node sequences' thread (NodeCells) -> a call that gives them."""
    if not paths:
        return list
    started = cells.start(paths)
    if started is not None:
        return started
    per_pass, rows = context.branches_per_pass, []
    for first in range(0, len(paths), per_pass):
        rows += context.rows_at(held[0], paths[first : first + per_pass])
        held[0] = paths[min(first + per_pass, len(paths)) - 1]
    return lambda: rows


class NodeCells:
    """Each node read keeps its path's cells in a sequence of its own (context.lockstep with nodes: llama.cpp), so
    its children's rows cost a token each, theirs, all in one pass; the cache's own text stays as it was. Never
    given back mid-expansion (a sequence's cells removed leave holes that change the others' rows): once the
    sequences are spent, or a path's parent is not held, start() says None for good and the context reads."""

    PER_PASS = 32  # nodes read in one pass: a token each, so more than the trie's 16 fit (measured: 16-64 alike)

    def __init__(self, context, ids: list[int], most: int):
        self._open = context.branches_per_pass > 1  # (one branch a pass: the one-by-one reading asked for)
        self.context, self.ids, self.most, self.lockstep = context, list(ids), most, None
        self.seq_of = {tuple(ids): 0}  # a path -> the sequence holding its cells
        self._thread, self._pending = None, None  # the passes' thread; the last pass started (a Future)

    @property
    def per_pass(self) -> int:
        """The nodes the next pass may read: PER_PASS while the sequences may be used, else the context's."""
        return self.PER_PASS if self._open else self.context.branches_per_pass

    def start(self, paths: list[list[int]]) -> Callable[[], list[np.ndarray]] | None:
        """The pass reading these paths' rows started on a thread of its own (the caller makes the last pass's
        children meanwhile) -> a call that waits for the rows; None: the context is to read them."""
        parents = [self.seq_of.get(tuple(path[:-1])) for path in paths]
        if self.lockstep is None and self._open and None not in parents:
            self.lockstep = self.context.lockstep(self.ids, self.most, nodes=True)
            self._open = self.lockstep is not None
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="expansion pass") if self._open else None
        if self.lockstep is None or None in parents or len(self.lockstep.free) < len(paths):
            self.close()  # (the text's own row, read first, is the context's)
            return None
        seqs = [self.lockstep.split(parent) for parent in parents]
        self.seq_of.update((tuple(path), seq) for seq, path in zip(seqs, paths))
        self._pending = self._thread.submit(self.lockstep.read, [(s, p[-1], len(p) - 1) for s, p in zip(seqs, paths)])
        return lambda pending=self._pending: list(pending.result())

    def close(self) -> None:
        """The pass in flight waited for, and the cache holding the text alone again; later reads are the
        context's."""
        if self.lockstep is not None:
            if self._pending is not None:
                wait([self._pending])
            self._thread.shutdown()
            self.lockstep.close()
            self._open, self.lockstep = False, None


def _unskipped(order, frontier, kept: list, room: int, most: int) -> list[int]:
    """The next `most` parents in reading order whose rows are to be read: once the heap is full, a parent
    whose own probability does not beat its least is skipped (its children's p * q <= p)."""
    group = []
    for index in order:
        if len(kept) == room and (frontier[index][2], -index) < kept[0][0][:2]:
            continue  # no child of it can be kept: its row is not read
        group.append(index)
        if len(group) == most:
            break
    return group


def _add_children(context, settings, expansion: Expansion, frontier, index: int, row, kept: list, room: int):
    """Parent `index`'s children that beat the heap's least go into it (read from its row)."""
    parent, path, p, spelling = frontier[index]
    if len(kept) == room and (p, -index) < kept[0][0][:2]:
        return  # the heap rose while its group was read: none of its children can be kept
    dists = context.distributions(path, settings, None, spelling, row=row)
    ids_of_row, probs = _weighed(dists, expansion.raw)
    for rank, (token_id, q) in enumerate(
        children(ids_of_row, probs, expansion.top_k, min(room, MAX_CHILDREN), expansion.coverage)
    ):
        key = (p * q, -index, -rank)
        if len(kept) == room and key <= kept[0][0]:
            continue  # it would not be kept: no record is made for it
        (step,) = context.alternatives(path, settings, [token_id], dists, spelling, row=row)
        entry = (key, parent, path, token_id, step, spelling)
        (heapq.heappush if len(kept) < room else heapq.heapreplace)(kept, entry)


def _reading_order(frontier, room: int, per_parent: float) -> list[int]:
    """The order the level's rows are read in: first the likeliest parents, twice as many as would fill the
    room with children (per_parent each), then the others; each pass in the tree's order, where the next
    node shares all but its last token or two with the cache. (Reading by probability alone would feed
    the cache 3x the tokens; the tree's order alone raises the cut late, on a level the budget cuts.)"""
    first = math.ceil(2 * room / per_parent)
    if first >= len(frontier):
        return list(range(len(frontier)))
    likeliest = sorted(heapq.nlargest(first, range(len(frontier)), key=lambda i: frontier[i][2]))
    chosen = set(likeliest)
    return likeliest + [i for i in range(len(frontier)) if i not in chosen]


def _weighed(dists, raw: bool):  # -> ([n] token ids, [n] probabilities) a node's children are chosen from
    """The chain's final distribution, or the raw model's; while healing spells a cut text, the raw model's
    over the tokens that keep to it (unnormalised: a sequence's probability stays the model's)."""
    if not raw:
        return dists.final.token_ids(), dists.final.probs
    if "healing" in dists.rows:
        allowed = dists.rows["healing"].token_ids()
        return allowed, dists.raw[allowed]
    return np.arange(len(dists.raw)), dists.raw


def _expected(expansion: Expansion) -> int:
    """The nodes an expansion will make at most (top_k^1 + ... + top_k^depth, within the budget)."""
    if expansion.top_k is None:
        return expansion.budget
    total, level = 0, 1
    for _ in range(expansion.depth):
        level *= expansion.top_k
        total += level
        if total >= expansion.budget:
            return expansion.budget
    return total


def _result(reached, leaves: dict, levels: int, cancelled: bool) -> ExpandResult:
    """reached and leaves hold finished levels only (a level joins them once complete)."""
    ranked = sorted(leaves.items(), key=lambda item: -item[1])
    return ExpandResult(tuple(reached), tuple(ranked), levels, cancelled)


def checked_expansion(model, tree, node_id, path_now, ended_here: bool, prompt_length: int, settings, changes: dict,
                      expansion: "Expansion") -> "Expansion":  # fmt: skip
    """The expansion below this node of the tree (path_now: the text's path; ended_here: a server said stop at
    its end) under the settings with these changes, or a ValueError saying why it cannot be."""
    if not model.capabilities.full_distribution:
        raise ValueError("expanding the tree needs every token's score: a server gives only its top few")
    path = tree.path(node_id)  # ValueError: no such node
    room = model.context_length - prompt_length - len(path)
    if expansion.depth > room:
        raise ValueError(f"depth {expansion.depth} goes past the context: {room} of the model's "
                         f"{model.context_length} positions are left after the text")  # fmt: skip
    last = tree.nodes[path[-1]] if path else None
    ended = last is not None and last.step.token_id in model.end_token_ids
    if ended or (path == path_now and ended_here):  # an end token, or the server said stop
        raise ValueError("the text has ended here: expand from a node before its end")
    if changes:
        settings = replace(settings, **known_settings(changes)).check_vocab(model.vocab_size)
    if settings.grammar is not None:
        raise ValueError("expansion does not follow a grammar: clear the grammar first")
    if not expansion.raw and settings.active("xtc"):
        raise ValueError("XTC removes tokens at random: expand under the raw model, or turn XTC off")
    return expansion
