"""What the token view paints and writes, without Qt: the colour modes and where a step sits on each one's
scale (0 red .. 1 green), the legend's marks, the steered tokens' colours and names, a step's ranks by
stage, and whitespace made visible."""

import math

from .chart_rows import stage_label

COLOR_LEVELS = 20
SOURCE_COLORS = {
    "forced": "#e67e22",
    "rule": "#8e44ad",
    "tool": "#16a085",
    "expanded": "#2f80ed",
}  # readable on light and dark
SOURCE_LABELS = {"model": "drawn by the model", "forced": "forced by you", "rule": "inserted by a rule",
                 "tool": "inserted by a tool", "expanded": "chosen by an expansion of the tree"}  # fmt: skip


# what the tokens' backgrounds can show (the "colourBy" switch under the view): the probability the token was
# drawn with (red unlikely, green likely), or how sure the model was, on a fixed scale so colours compare
# across runs: surprisal 0..8 nats, entropy 0..5 nats (green: sure), the model's rank 1..20+ (log scale)
COLOUR_MODES = ("drawn probability", "surprisal", "entropy", "rank")
SURPRISAL_TOP, ENTROPY_TOP, RANK_TOP = 8.0, 5.0, 20


def colour_level(step, mode: str) -> float | None:
    """Where the step sits on the mode's scale, 0 (red: unlikely, unsure) to 1 (green); None: not known
    (a server's step outside its top N, or one that records no entropy)."""
    if mode == "surprisal":
        value = step.surprisal
        return None if value is None else 1.0 - min(max(value, 0.0), SURPRISAL_TOP) / SURPRISAL_TOP
    if mode == "entropy":
        value = step.entropy
        return None if value is None else 1.0 - min(max(value, 0.0), ENTROPY_TOP) / ENTROPY_TOP
    if mode == "rank":
        rank = step.model_rank
        return None if rank <= 0 else 1.0 - min(math.log(rank) / math.log(RANK_TOP), 1.0)
    return step.probability


def legend_marks(mode: str) -> tuple[str, list[tuple]]:
    """(the legend's title, its marks: (the value written, its level)) for a colour mode's scale."""
    if mode == "surprisal":
        title, marks = "nats", [(s, 1 - s / SURPRISAL_TOP) for s in (0, 2, 4, 6, 8)]
        marks[-1] = ("8+", 0.0)
    elif mode == "entropy":
        title, marks = "nats", [(h, 1 - h / ENTROPY_TOP) for h in (0, 1.25, 2.5, 3.75, 5)]
        marks[-1] = ("5+", 0.0)
    elif mode == "rank":
        title = "model's rank"
        marks = [(r, 1 - math.log(r) / math.log(RANK_TOP)) for r in (1, 2, 5, 10)] + [("20+", 0.0)]
    else:
        title, marks = "p", [(p, p) for p in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return title, marks


def rank_text(step) -> str:
    """The chosen token's rank after each stage ("raw 3 → top-k 2 → final 1"; removed: "removed"), or ""
    where the step does not record it (a server's step, an older trace)."""
    if not step.stage_ranks:
        return ""
    last = len(step.stage_ranks) - 1
    ranks = [f"raw {step.model_rank or '?'}"] + [
        f"{'final' if index == last else stage_label(name)} {rank or 'removed'}"
        for index, (name, rank) in enumerate(step.stage_ranks)
    ]
    return " → ".join(ranks)


def visible(token: str) -> str:
    """Make whitespace visible where it matters: a newline shows as ↵ (then breaks the line), a token of
    spaces only as middle dots."""
    if token == "\n":
        return "↵\n"
    if token and token.strip(" ") == "":
        return "·" * len(token)
    return token.replace("\n", "↵\n")
