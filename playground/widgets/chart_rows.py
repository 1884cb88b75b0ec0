"""What the next-token chart writes, without Qt: the stages' names, the numbers at the bars' ends, the bars'
labels, which stage's values the bars show and which candidates a stage removed, and a bar's hover."""

import html
import re

from engine import GREEDY

BYTES_LABEL = re.compile(r"(‹[0-9a-f ]+›)")  # playground/token_text.py's pending_label
ONE_TOKEN_NOTE = ("By this stage one token holds all probability (greedy at temperature 0, or a filter kept only "
                  "it): the bars show the model's raw softmax, that token in orange.")  # fmt: skip
GREEDY_NOTE = (
    "Under greedy decoding (temperature 0) the token taken is the most likely of this distribution, the one after {}."
)


def percent(p: float) -> str:
    """A probability as the bar's end writes it: "0", "0.125", or "3e-04" below a thousandth."""
    if p == 0:
        return "0"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"


STAGE_LABELS = {"logit_bias": "logit bias", "penalties": "penalties", "dry": "DRY", "temperature": "temperature",
                "top_k": "top-k", "top_p": "top-p", "min_p": "min-p", "top_n_sigma": "top-n-σ",
                "typical_p": "typical-p", "xtc": "XTC", GREEDY: "greedy"}  # fmt: skip


def stage_label(name: str) -> str:
    """A stage's name as the window writes it ("top_k" -> "top-k", "dry" -> "DRY")."""
    return STAGE_LABELS.get(name, name.replace("_", "-"))


def stage_keys(names) -> tuple[str, ...]:
    """The switch's keys for a chain's stage names: raw, each stage but the last, and "final" (the last)."""
    return ("raw", *names[:-1], "final") if names else ("raw", "final")


def stage_text(key: str, names) -> str:
    if key == "raw":
        return "raw softmax"
    if key == "final":
        return "final (greedy)" if names and names[-1] == GREEDY else "final"
    return "after " + stage_label(key)


def greedy_source(names) -> str | None:
    """The stage greedy chose from (the one before it), where the chain ends in greedy; else None."""
    return names[-2] if len(names) > 1 and names[-1] == GREEDY else None


def removed_by(candidates, key: str) -> list[str | None]:
    """Per candidate: the stage that removed it by the switch's stage `key` (None: still in, or not recorded)."""
    names = candidates.stage_names
    if not candidates.removed_by or key == "raw":
        return [None] * len(candidates.token_ids)
    ran = set(names if key == "final" or key not in names else names[: names.index(key) + 1])
    return [stage if stage in ran else None for stage in candidates.removed_by]


def bar_label(token: str) -> str:
    """Whitespace made visible, but not inside a byte label (‹f0 9f›: its spaces only separate bytes)."""
    parts = BYTES_LABEL.split(token)  # the byte labels are the odd parts
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("\n", "↵").replace(" ", "·")
    return "".join(parts) or "∅"


def drawn_key(candidates, key: str) -> str:
    """The stage whose values the bars show for the switch's `key`: that one, but for "final" under greedy the
    stage greedy chose from (greedy's one token at 1 would say nothing)."""
    return (greedy_source(candidates.stage_names) or key) if key == "final" else key


def stage_values(candidates, key: str) -> tuple[tuple, int | None]:
    """(the probabilities to draw, the token a one-token stage takes or None): the stage's, or the raw softmax
    where that stage leaves one token (greedy) and a single bar would say nothing. A server reports only raw
    ones (the other stages are empty)."""
    values = candidates.stage(drawn_key(candidates, key))
    if len(values) != len(candidates.tokens):
        return candidates.raw, None
    kept = [row for row, p in enumerate(values) if p > 0]
    if len(kept) == 1 and len(candidates.raw) > 1 and candidates.raw[kept[0]] < 1.0:
        return candidates.raw, candidates.token_ids[kept[0]]
    return values, None


def removed_now(candidates, key: str, only) -> list[str | None]:
    """Per row: the stage that removed it by the stage drawn, where the bars show that stage's own values
    (not the raw softmax a one-token stage is drawn with: `only` is that stage's token)."""
    drawn = drawn_key(candidates, key)
    if only is not None or len(candidates.stage(drawn)) != len(candidates.tokens):
        return [None] * len(candidates.token_ids)
    return removed_by(candidates, drawn)


def greedy_view(candidates, key: str) -> tuple[str | None, int | None]:
    """(the stage greedy chose from, the token it keeps) where "final" shows that stage; else (None, None)."""
    if candidates is None or key != "final" or greedy_source(candidates.stage_names) is None:
        return None, None
    kept = [token_id for token_id, p in zip(candidates.token_ids, candidates.final) if p > 0]
    return greedy_source(candidates.stage_names), (kept[0] if kept else None)


def hover_html(candidates, row: int, text: str, chosen: int | None) -> str:
    """What hovering bar `row` shows: its text, the token id, the stage that removed it, and its probability
    after each stage."""
    token_id = candidates.token_ids[row]
    head = f"<b>{html.escape(repr(text))}</b>"
    if token_id >= 0:
        head += f" &nbsp;token id {token_id}"
    if chosen is not None and token_id == chosen:
        head += " &nbsp;(the token taken)"
    removed = candidates.removed_by_stage(row)
    lines = [head, f"<b>removed by {stage_label(removed)}</b>" if removed
             else ("kept by every stage" if candidates.removed_by else "")]  # fmt: skip
    keys = stage_keys(candidates.stage_names) if candidates.stages else ("raw",)
    cells = "".join(f"<tr><td>{stage_text(key, candidates.stage_names)}</td><td align=right>&nbsp;&nbsp;"
                    f"{percent(candidates.stage(key)[row])}</td></tr>" for key in keys)  # fmt: skip
    return "<br>".join(line for line in lines if line) + f"<table cellspacing=0>{cells}</table>"
