"""What one generation step records: the chosen token and the distribution it came from, at every stage; a step read
back from a trace's JSON, checked; a run's result. Making a step from a row of scores is step_maker.py."""

from dataclasses import dataclass, fields

from engine.core.settings import Settings

TOP_CANDIDATES = 20  # candidates kept per step: the chart's bars
SOURCES = ("model", "forced", "rule", "tool", "expanded")  # expanded: chosen by a tree expansion, not drawn
# what trace schema 3 added to a step (absent from older traces)
V3_STEP_FIELDS = ("stage_ranks", "xtc_draw", "healing", "entropy", "final_entropy", "surprisal", "margin")


@dataclass(frozen=True)
class Candidates:
    """The top tokens of the raw softmax, with their probability after each stage of the chain, by the
    stage's name (0 where the stage removed it), and the stage that removed each (None: none did). A server
    reports no stages: only raw."""

    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    raw: tuple[float, ...]  # softmax of the scores, temperature 1
    stages: tuple[tuple[str, tuple[float, ...]], ...] = ()  # (stage name, probabilities after it), in order
    removed_by: tuple[str | None, ...] = ()  # per token: the first stage that removed it; () = not recorded

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.stages)

    @property
    def final(self) -> tuple[float, ...]:
        """After the last stage: what the draw uses (() where no stage is recorded)."""
        return self.stages[-1][1] if self.stages else ()

    def stage(self, name: str) -> tuple[float, ...]:
        """ "raw", a stage's name, or "final"; () where this record does not have it."""
        if name == "raw":
            return self.raw
        if name == "final":
            return self.final
        return dict(self.stages).get(name, ())

    def removed_by_stage(self, index: int) -> str | None:
        """The stage that removed the index-th candidate (None: it was kept, or it is not recorded)."""
        return self.removed_by[index] if self.removed_by else None

    def to_dict(self) -> dict:
        return {"token_ids": list(self.token_ids), "tokens": list(self.tokens), "raw": list(self.raw),
                "stages": {name: list(values) for name, values in self.stages},
                "removed_by": list(self.removed_by)}  # fmt: skip

    def to_v2_dict(self) -> dict:
        """The record as trace schema 2 wrote it (no removed_by), to compare a replay with a version-2 trace."""
        data = self.to_dict()
        del data["removed_by"]
        return data

    def to_v1_dict(self) -> dict:
        """The record as trace schema 1 wrote it (fixed fields; "final" after top-p and min-p), to compare a
        replay with a version-1 trace."""
        return {"token_ids": list(self.token_ids), "tokens": list(self.tokens), "raw": list(self.raw),
                "temperature": list(self.stage("temperature")), "top_k": list(self.stage("top_k")),
                "final": list(self.final)}  # fmt: skip


@dataclass(frozen=True)
class Step:
    token: str  # the chosen token's text
    token_id: int  # -1: a server reported the token by its text only
    probability: float | None  # in the distribution it was drawn from; None: unknown (outside a server's top N)
    source: str  # "model", "forced", "rule", "tool" or "expanded"
    model_probability: float | None  # in the model's raw softmax, temperature 1, before any filter
    model_rank: int  # 1 = the model's most likely token; 0 = unknown (outside a server's top N)
    model_choice: str  # the token greedy decoding would have picked
    model_choice_id: int
    candidates: Candidates
    draw: float | None = None  # the uniform number in [0, 1) a sampled step used
    options: tuple[tuple[str, float], ...] | None = None  # a constrained choice: (option, probability)
    stage_ranks: tuple[tuple[str, int], ...] = ()  # the token's rank after each stage (1 = best, 0 = removed)
    xtc_draw: float | None = None  # XTC's draw at this step (None: XTC was off, or the step was not sampled)
    healing: str | None = None  # token healing: the text this step had to start with (None: no healing)
    # how unsure the model was (docs/engine.md, "Uncertainty"), in nats, over the whole vocabulary; None: not known
    # (a server reports its top N only)
    entropy: float | None = None  # of the raw distribution (temperature 1, no filter)
    final_entropy: float | None = None  # of the distribution the token was drawn from (after every stage)
    surprisal: float | None = None  # -log of the chosen token's raw probability
    margin: float | None = None  # the raw top-1 probability minus the top-2

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["candidates"] = self.candidates.to_dict()
        data["options"] = None if self.options is None else [list(o) for o in self.options]
        data["stage_ranks"] = [list(r) for r in self.stage_ranks]
        return data

    def to_v1_dict(self) -> dict:
        return dict(self.to_v2_dict(), candidates=self.candidates.to_v1_dict())

    def to_v2_dict(self) -> dict:
        """The record as trace schema 2 wrote it, to compare a replay with a version-2 trace."""
        data = dict(self.to_dict(), candidates=self.candidates.to_v2_dict())
        for name in V3_STEP_FIELDS:
            del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Step":
        """Inverse of to_dict; raises ValueError naming the first field that is missing or malformed."""
        return _step_from_dict(data)


def _step_from_dict(data) -> Step:
    if not isinstance(data, dict):
        raise ValueError("a step must be an object")
    expected = {f.name for f in fields(Step)}
    missing = expected - set(data) - set(V3_STEP_FIELDS)
    if missing:
        raise ValueError(f"step field {sorted(missing)[0]!r} is missing")
    values = {"stage_ranks": [], "xtc_draw": None, "healing": None, "entropy": None, "final_entropy": None,
              "surprisal": None, "margin": None, **data}  # fmt: skip
    for name in ("token", "model_choice"):
        if not isinstance(values[name], str):
            raise ValueError(f"step field {name!r} must be a string")
    if values["healing"] is not None and not isinstance(values["healing"], str):
        raise ValueError("step field 'healing' must be null or a string")
    for name, lowest in (("token_id", -1), ("model_rank", 0), ("model_choice_id", -1)):
        if not isinstance(values[name], int) or isinstance(values[name], bool) or values[name] < lowest:
            raise ValueError(f"step field {name!r} must be an int >= {lowest}")
    for name in ("probability", "model_probability"):
        value = values[name]
        if value is not None and (not isinstance(value, (int, float)) or not 0 <= value <= 1):
            raise ValueError(f"step field {name!r} must be a probability in [0, 1] or null")
    if values["source"] not in SOURCES:
        raise ValueError(f"step field 'source' must be one of {SOURCES}, got {values['source']!r}")
    for name in ("entropy", "final_entropy", "surprisal", "margin"):
        value = values[name]
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= -1):
            raise ValueError(f"step field {name!r} must be a number or null")
        values[name] = None if value is None else float(value)
    for name in ("draw", "xtc_draw"):
        if values[name] is not None and not (isinstance(values[name], float) and 0 <= values[name] < 1):
            raise ValueError(f"step field {name!r} must be null or a number in [0, 1)")
    ranks = values["stage_ranks"]
    if not isinstance(ranks, list) or not all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and isinstance(r[1], int) and r[1] >= 0
        for r in ranks
    ):
        raise ValueError("step field 'stage_ranks' must be a list of [stage name, rank >= 0] pairs")
    values["stage_ranks"] = tuple((name, rank) for name, rank in ranks)
    values["candidates"] = _candidates_from_dict(values["candidates"])
    options = values["options"]
    if options is not None:
        if not isinstance(options, list) or not all(
            isinstance(o, list) and len(o) == 2 and isinstance(o[0], str) and isinstance(o[1], (int, float))
            for o in options
        ):
            raise ValueError("step field 'options' must be null or a list of [text, probability] pairs")
        values["options"] = tuple((o[0], float(o[1])) for o in options)
    for name in ("probability", "model_probability"):
        values[name] = None if values[name] is None else float(values[name])
    return Step(**{k: values[k] for k in expected})


V1_STAGES = ("temperature", "top_k", "final")  # trace schema 1's fixed stage fields


def _candidates_from_dict(cand) -> Candidates:
    """Either form: stages by name (schema 2), or schema 1's fixed fields (their empty lists: not reported)."""
    if not isinstance(cand, dict) or not isinstance(cand.get("token_ids"), list):
        raise ValueError("step field 'candidates' must be an object with a list 'token_ids'")
    count = len(cand["token_ids"])
    removed_by = cand.get("removed_by", [])  # schema 3
    if not isinstance(removed_by, list) or not all(r is None or isinstance(r, str) for r in removed_by):
        raise ValueError("step field 'candidates.removed_by' must be a list of stage names or nulls")
    if removed_by and len(removed_by) != count:
        raise ValueError(f"step field 'candidates.removed_by' must be as long as token_ids ({count})")
    if set(cand) - {"removed_by"} == {"token_ids", "tokens", "raw", "stages"}:
        if not isinstance(cand["stages"], dict) or not all(isinstance(n, str) and n for n in cand["stages"]):
            raise ValueError("step field 'candidates.stages' must map stage names to lists")
        stages = list(cand["stages"].items())
    elif set(cand) == {"token_ids", "tokens", "raw", *V1_STAGES}:
        stages = [(name, cand[name]) for name in V1_STAGES if cand[name] != []]
    else:
        raise ValueError("step field 'candidates' must have token_ids, tokens, raw and stages (or schema 1's "
                         f"{', '.join(V1_STAGES)}), got {sorted(map(str, cand))}")  # fmt: skip
    for name, values in [("tokens", cand["tokens"]), ("raw", cand["raw"]), *stages]:
        if not isinstance(values, list) or len(values) != count:
            raise ValueError(f"step field 'candidates.{name}' must be a list as long as token_ids ({count})")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= -1 for i in cand["token_ids"]):
        raise ValueError("step field 'candidates.token_ids' must hold ints >= -1")
    if not all(isinstance(t, str) for t in cand["tokens"]):
        raise ValueError("step field 'candidates.tokens' must hold strings")
    for name, values in [("raw", cand["raw"]), *stages]:
        if not all(isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p <= 1 for p in values):
            raise ValueError(f"step field 'candidates.{name}' must hold probabilities in [0, 1]")
    return Candidates(
        token_ids=tuple(cand["token_ids"]),
        tokens=tuple(cand["tokens"]),
        raw=tuple(cand["raw"]),
        stages=tuple((name, tuple(values)) for name, values in stages),
        removed_by=tuple(removed_by),
    )


@dataclass(frozen=True)
class GenerationResult:
    text: str  # prompt plus generated text
    steps: list[Step]
    stopped: str | None
    settings: Settings

    @property
    def seed(self) -> int:
        return self.settings.seed

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "stopped": self.stopped,
            "settings": self.settings.to_dict(),
            "steps": [step.to_dict() for step in self.steps],
        }
