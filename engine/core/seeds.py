"""Many seeds at once: how often each continuation comes, from one point of a text, under one set of settings.

Each seed continues the text as a session would with that seed (`Session.update_settings(seed=s)`, then
`run()`): same draws, same steps, bit for bit. The seeds are not run one after another. They walk the tree of
what they draw together with one context: at each node the model's scores are computed once (fed one token, as a
session feeds it, so the numbers are a session's own), every seed there draws from them with its own random
stream, and the seeds are grouped by the token each drew. A prefix many seeds share costs one forward pass, not
one per seed. On llama.cpp the walk goes level by level, every path of a level read in one llama_decode (each
path a sequence of its own: engine/backends/llamacpp/lockstep.py); elsewhere depth first, going back up the tree
by truncating the cache (O(1)).

    SeedRun.nodes        the tree: (id, parent id, token id, token, how many seeds passed through), root first
    SeedRun.steps        per seed, the steps it took
    SeedRun.completions  the distinct continuations, most frequent first, with their counts

Rules do not act here, and token healing and grammars are refused (their state follows each seed's own text).
"""

import random
from dataclasses import dataclass, replace

import numpy as np

from engine.core.settings import Settings, known_settings
from engine.core.steps import Step

MAX_SEEDS = 10_000


@dataclass(frozen=True)
class SeedNode:
    id: int
    parent: int | None  # None: the text the seeds start from
    token_id: int | None
    token: str
    count: int  # the seeds whose continuation passes through here


@dataclass(frozen=True)
class SeedRun:
    text: str  # where the seeds started
    seeds: tuple[int, ...]
    steps: dict[int, tuple[Step, ...]]  # seed -> its steps
    nodes: tuple[SeedNode, ...]
    at: int | None = None  # Session.run_seeds: the session's steps the seeds continued (what they kept)

    def continuation(self, seed: int) -> str:
        return "".join(step.token for step in self.steps[seed])

    def completions(self, n: int | None = None) -> list[tuple[str, int]]:
        """The distinct continuations with how many seeds wrote each, most frequent first (ties: first seen)."""
        counts: dict[str, int] = {}
        for seed in self.seeds:
            text = self.continuation(seed)
            counts[text] = counts.get(text, 0) + 1
        return sorted(counts.items(), key=lambda item: -item[1])[:n]


def checked_seeds(seeds) -> tuple[int, ...]:
    from engine.core.settings import MAX_SEED

    if isinstance(seeds, (str, bytes, dict)) or not hasattr(seeds, "__iter__"):
        raise ValueError(f"seeds must be a list (or range) of ints from 0 to {MAX_SEED}, got {seeds!r:.40}")
    seeds = tuple(seeds)
    if not 1 <= len(seeds) <= MAX_SEEDS:
        raise ValueError(f"give 1 to {MAX_SEEDS:,} seeds, not {len(seeds):,}")
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in seeds):
        raise ValueError(f"seeds must be ints from 0 to {MAX_SEED}")
    if len(set(seeds)) != len(seeds):
        raise ValueError("each seed once: a seed repeated writes the same text again")
    return seeds


def run_seeds(context, model, ids: list[int], text: str, settings: Settings, seeds, limit: int, stream_of) -> SeedRun:
    """The seeds' continuations of `ids` (whose scores `context` holds up to len(ids)), each at most `limit`
    new tokens, stopping where a session stops (an end token, the context full); stream_of(seed): the
    random.Random it draws from. The context is truncated back to len(ids) after.

    Where the backend reads many paths in one pass (llama.cpp's sequences: context.lockstep), the seeds go
    level by level, a group of as many seeds as it has sequences at a time, every path's next row in one pass;
    else depth first, one path at a time. The rows, and so the steps, are the same either way."""
    seeds = checked_seeds(seeds)
    steps: dict[int, list[Step]] = {seed: [] for seed in seeds}
    streams = {seed: stream_of(seed) for seed in seeds}
    walk = Walk(context, model, settings, limit, streams, steps)
    lockstep = context.lockstep(ids, limit)
    if lockstep is None:
        walk.depth_first(ids, list(seeds))
    else:
        group = lockstep.sequences
        for first in range(0, len(seeds), group):
            walk.level_by_level(lockstep, ids, list(seeds[first : first + group]))
            if first + group < len(seeds):
                lockstep = context.lockstep(ids, limit)
    return SeedRun(text, seeds, {seed: tuple(steps[seed]) for seed in seeds}, seed_tree(seeds, steps))


@dataclass
class Walk:
    """The seeds walking the tree of what they draw: at each node the model's scores are read once and every seed
    there draws from them with its own random stream (one chain for all, unless XTC's draw makes each its own)."""

    context: object
    model: object
    settings: Settings
    limit: int
    streams: dict
    steps: dict

    def goes_on(self, path: list[int], depth: int) -> bool:
        """Whether a path `depth` tokens from the start takes another step (as a session would)."""
        model = self.model
        return (
            depth < self.limit and len(path) < model.context_length and not (depth and path[-1] in model.end_token_ids)
        )

    def draw(self, path: list[int], here: list[int], row=None) -> dict[int, list[int]]:
        """Every seed here draws its step after path (row: its scores, where the caller read them) -> token id ->
        the seeds that drew it."""
        settings, context = self.settings, self.context
        shared = None if settings.active("xtc") else context.distributions(path, settings, row=row)
        drawn: dict[int, list[int]] = {}
        for seed in here:
            step = context.drawn(path, settings, self.streams[seed].random, dists=shared, row=row)
            self.steps[seed].append(step)
            drawn.setdefault(step.token_id, []).append(seed)
        return drawn

    def depth_first(self, ids: list[int], seeds: list[int]) -> None:
        """One path at a time, going back up the tree by truncating the cache (O(1)), each row one token fed."""
        start = len(ids)
        pending = [(list(ids), seeds)]  # depth first, lower token ids first (no recursion: long texts)
        try:
            while pending:
                path, here = pending.pop()
                if not self.goes_on(path, len(path) - start):
                    continue
                if len(path) > start:
                    self.context.truncate(len(path) - 1)  # the cache holds the parent's path: a sibling's tokens go
                drawn = self.draw(path, here)
                pending.extend(reversed([([*path, token_id], drawn[token_id]) for token_id in sorted(drawn)]))
        finally:
            self.context.truncate(start)

    def level_by_level(self, lockstep, ids: list[int], seeds: list[int]) -> None:
        """Every path of the level read in one pass, each path a sequence of lockstep's (a split shares its cells)."""
        start, live = len(ids), [(list(ids), 0, seeds, None)]  # (path, its sequence, its seeds, its row)
        if not self.goes_on(ids, 0):
            live = []
        try:
            while live:
                level = []
                for path, seq, here, row in live:
                    drawn = self.draw(path, here, row)
                    for i, token_id in enumerate(sorted(drawn)):  # the first child keeps the sequence
                        level.append(([*path, token_id], seq if i == 0 else lockstep.split(seq), drawn[token_id]))
                going = []
                for path, seq, here in level:
                    if self.goes_on(path, len(path) - start):
                        going.append((path, seq, here))
                    else:
                        lockstep.end(seq)
                if not going:
                    break
                rows = lockstep.read([(seq, path[-1], len(path) - 1) for path, seq, _here in going])
                if not np.isfinite(rows).all():
                    raise ValueError(f"the model produced non-finite scores (NaN or inf) after position {start}")
                live = [(path, seq, here, row) for (path, seq, here), row in zip(going, rows)]
        finally:
            lockstep.close()


def seed_tree(seeds, steps: dict) -> tuple[SeedNode, ...]:
    """The tree of what the seeds drew: a node per distinct prefix with how many seeds passed through, depth first,
    each node's children in token id order (the token's text as the first seed through it has it)."""
    nodes: list[SeedNode] = [SeedNode(0, None, None, "", len(seeds))]
    pending = [(0, 0, list(seeds))]
    while pending:
        node_id, depth, here = pending.pop()
        groups: dict[int, list[int]] = {}
        for seed in here:
            if len(steps[seed]) > depth:
                groups.setdefault(steps[seed][depth].token_id, []).append(seed)
        children = []
        for token_id in sorted(groups):
            group = groups[token_id]
            nodes.append(SeedNode(len(nodes), node_id, token_id, steps[group[0]][depth].token, len(group)))
            children.append((len(nodes) - 1, depth + 1, group))
        pending.extend(reversed(children))
    return tuple(nodes)


# --- what Session.run_seeds checks first --------------------------------------------------------------------
def checked_seeds_start(model, at, steps: int) -> int:
    """The number of steps the seeds start after (at; None: all `steps`), or ValueError."""
    if not model.capabilities.local_sampling:
        raise ValueError("many seeds need a backend the engine samples for (a server samples itself)")
    keep = steps if at is None else at
    if not isinstance(keep, int) or isinstance(keep, bool) or not 0 <= keep <= steps:
        raise ValueError(f"at must be a number of steps from 0 to {steps}, not {at!r:.40}")
    return keep


def checked_seeds_run(model, here, changes: dict, max_new_tokens) -> tuple[Settings, int]:
    """-> (the seeds' settings: here's with the changes, their token limit), or ValueError saying why seeds
    cannot run from `here` (a Session's Standing)."""
    settings = replace(here.settings, **known_settings(changes)).check_vocab(model.vocab_size)  # validates
    if settings.grammar is not None:
        raise ValueError("many seeds do not follow a grammar: clear the grammar first")
    if here.healing is not None:
        raise ValueError("token healing is still spelling the end of the text: take a step first")
    if here.stopped not in (None, "max_new_tokens"):
        raise ValueError(f"the text has stopped ({here.stopped}): there is nothing to continue")
    limit = settings.max_new_tokens if max_new_tokens is None else max_new_tokens
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, not {limit!r}")
    return settings, limit


def seed_streams(here, settings: Settings):
    """seed -> its random stream, as update_settings(seed=seed, **changes) would leave the session's."""

    def stream_of(seed: int) -> random.Random:
        if replace(settings, seed=seed, max_new_tokens=here.settings.max_new_tokens) == here.settings:
            stream = random.Random()
            stream.setstate(here.random_state)  # nothing but the limit changes: the stream goes on
            return stream
        return random.Random(seed)  # a fresh stream from the seed

    return stream_of
