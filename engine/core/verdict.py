"""A replay's verdict: a recorded run against the replayed one, in the three answers a person sharing a trace needs.

    identical        every step (and every node of the tree) bit for bit
    within rounding  the same tokens, ids, texts and ranks; every number within float rounding of the recorded
                     one: the trace was recorded on another kind of CPU (numpy's and OpenBLAS's kernels differ
                     between AVX2 and AVX-512 and sum in another order, so the last bits of a probability differ)
    differs          a token, an id, a text, or a number beyond rounding, at step N (or node N of the tree)

Float rounding here is |recorded - replayed| <= ROUNDING_RELATIVE * max(|recorded|, |replayed|) + ROUNDING_ABSOLUTE:
float32 ulps gathered over a forward pass whose sums run in another order (measured: 1e-7 relative on the story
model between AVX2 and AVX-512; 1.7e-5 on a SmolLM2 probability of 0.14 that vLLM computed once with its prompt
cached and once without), never a setting, a seed or a model changed, which move probabilities by far more.
"""

from dataclasses import dataclass

IDENTICAL, WITHIN_ROUNDING, DIFFERS = "identical", "within rounding", "differs"
ROUNDING_RELATIVE = 1e-4  # float32 (eps 1.2e-7) through tens of layers: ~1,000 ulps
ROUNDING_ABSOLUTE = 1e-6  # a probability near 0, or a margin (a difference of two probabilities)
ANOTHER_CPU = "recorded on another kind of CPU"


def within_rounding(recorded: float, replayed: float) -> bool:
    return abs(recorded - replayed) <= ROUNDING_RELATIVE * max(abs(recorded), abs(replayed)) + ROUNDING_ABSOLUTE


@dataclass(frozen=True)
class ReplayReport:
    identical: bool  # bit for bit
    steps: int  # steps compared
    first_difference: dict | None  # {"step", "field", "token", "recorded", "replayed"} beyond rounding, or None
    notes: tuple[str, ...] = ()
    nodes: int = 0  # nodes of the tree compared besides the steps (a trace with branches)
    rounding: dict | None = None  # the largest difference within rounding: {"step", "field", "difference"}

    @property
    def verdict(self) -> str:
        """IDENTICAL, WITHIN_ROUNDING or DIFFERS (a replay that stopped on an action differs too)."""
        if self.identical:
            return IDENTICAL
        stopped = any(note.startswith("replay stopped") for note in self.notes)
        return WITHIN_ROUNDING if self.first_difference is None and self.rounding and not stopped else DIFFERS

    @property
    def same_tokens(self) -> bool:
        """Identical, or within rounding: the run is the recorded one."""
        return self.verdict != DIFFERS

    def summary(self) -> str:
        if self.identical:
            branches = f", and every branch of the tree ({self.nodes} nodes)" if self.nodes > self.steps else ""
            return f"identical: all {self.steps} steps replayed bit for bit{branches}"
        if self.verdict == WITHIN_ROUNDING:
            r = self.rounding
            where = f"step {r['step']}" if "node" not in r else f"node {r['node']}"
            return (f"the same tokens, probabilities within float rounding: all {self.steps} steps (the largest "
                    f"difference {r['difference']:.2g}, at {where}, {r['field']}); {ANOTHER_CPU}")  # fmt: skip
        d = self.first_difference
        if d is None:  # every step agreed, but an action could not be replayed
            return next(note for note in self.notes if note.startswith("replay stopped"))
        if d["field"] == "prompt_token_ids":
            return (f"differs at step 0: the prompt's token ids: recorded {_ids(d['recorded'])}, this model's "
                    f"tokenizer reads the prompt as {_ids(d['replayed'])}")  # fmt: skip
        token = d["token"]
        tokens = f"{token[0]!r}" if token[0] == token[1] else f"recorded {token[0]!r}, replayed {token[1]!r}"
        where = (
            f"step {d['step']}" if "node" not in d else f"node {d['node']} (branch {'>'.join(map(str, d['branch']))})"
        )
        return (f"differs at {where} ({tokens}), {d['field']}: "
                f"recorded {_shown(d['recorded'])}, replayed {_shown(d['replayed'])}")  # fmt: skip


def _shown(value) -> str:
    """A differing value as a person compares it: floats with every digit that differs."""
    return repr(value) if not isinstance(value, float) else f"{value:.17g}"


def _ids(ids: list) -> str:
    return repr(ids) if len(ids) <= 12 else f"[{', '.join(map(str, ids[:12]))}, ... ({len(ids)} ids)]"


class Comparison:
    """Compares recorded records (a step's or a node's dict) with replayed ones, in order: the first difference
    beyond rounding, and the largest within it."""

    def __init__(self):
        self.rounding: dict | None = None
        self.exact = True  # no difference at all so far

    def differs(self, old, new, where: dict) -> tuple[str, object, object] | None:
        """(field, recorded, replayed) of the first difference beyond rounding between two records, or None;
        `where` ({"step": n} or {"step", "node"}) names them for the largest rounding kept."""
        if old == new:
            return None
        self.exact = False
        for field, was, now in _leaves(old, new):
            if _floats(was, now) and within_rounding(was, now):
                difference = abs(was - now)
                if self.rounding is None or difference > self.rounding["difference"]:
                    self.rounding = {**where, "field": field, "difference": difference}
                continue
            return field, was, now
        return None


def _floats(a, b) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)) and (
        isinstance(a, float) or isinstance(b, float)
    )


def _leaves(old, new, path: str = ""):
    """(where, recorded, replayed) for every leaf that differs, in order, e.g. 'candidates.raw[3]'."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if old[key] != new.get(key):
                yield from _leaves(old[key], new.get(key), f"{path}.{key}" if path else key)
        for key in new:
            if key not in old:
                yield (f"{path}.{key}" if path else key), None, new[key]
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for position, (a, b) in enumerate(zip(old, new)):
            if a != b:
                yield from _leaves(a, b, f"{path}[{position}]")
        return
    yield path, old, new
