"""Many seeds at once: how often each continuation comes, from one point of a text, under one set of settings.

Each seed continues the text as a session would with that seed (`Session.update_settings(seed=s)`, then
`run()`): same draws, same steps, bit for bit. The seeds are not run one after another. They walk the tree of
what they draw together, depth first, with one context: at each node the model's scores are computed once
(fed one token, as a session feeds it, so the numbers are a session's own), every seed there draws from them
with its own random stream, and the seeds are grouped by the token each drew. A prefix many seeds share costs
one forward pass, not one per seed; going back up the tree truncates the cache (O(1)).

    SeedRun.nodes        the tree: (id, parent id, token id, token, how many seeds passed through), root first
    SeedRun.steps        per seed, the steps it took
    SeedRun.completions  the distinct continuations, most frequent first, with their counts

Rules do not act here, and token healing and grammars are refused (their state follows each seed's own text).
"""

import random
from dataclasses import dataclass, replace

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
    random.Random it draws from. The context is truncated back to len(ids) after."""
    seeds = checked_seeds(seeds)
    start = len(ids)
    nodes: list[SeedNode] = [SeedNode(0, None, None, "", len(seeds))]
    steps: dict[int, list[Step]] = {seed: [] for seed in seeds}
    streams = {seed: stream_of(seed) for seed in seeds}

    def visit(path: list[int], node_id: int, here: list[int]) -> list[tuple]:  # -> the children to visit
        depth = len(path) - start
        if depth >= limit or len(path) >= model.context_length or (depth and path[-1] in model.end_token_ids):
            return []
        if depth:
            context.truncate(len(path) - 1)  # the cache holds the parent's path: a sibling's tokens go
        # one token fed (the path's last, as a session feeds it); one chain for all the seeds here, unless
        # XTC's draw makes each seed's chain its own
        shared = None if settings.active("xtc") else context.distributions(path, settings)
        drawn: dict[int, list[int]] = {}
        for seed in here:
            step = context.drawn(path, settings, streams[seed].random, dists=shared)  # as LocalContext.sample
            steps[seed].append(step)
            drawn.setdefault(step.token_id, []).append(seed)
        children = []
        for token_id in sorted(drawn):
            group = drawn[token_id]
            nodes.append(SeedNode(len(nodes), node_id, token_id, steps[group[0]][-1].token, len(group)))
            children.append(([*path, token_id], len(nodes) - 1, group))
        return children

    pending = [(list(ids), 0, list(seeds))]  # depth first, lower token ids first (no recursion: long texts)
    try:
        while pending:
            pending.extend(reversed(visit(*pending.pop())))
    finally:
        context.truncate(start)
    return SeedRun(text, seeds, {seed: tuple(steps[seed]) for seed in seeds}, tuple(nodes))


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
