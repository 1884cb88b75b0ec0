"""What the uncertainty strip plots and says, without Qt: each step's surprisal and entropy (NaN where not
known), the perplexity, the "least confident" steps, the y axis' top, the hover and the readout."""

import html
import math

import numpy as np

LEAST_CONFIDENT = 10  # rows of the "least confident" list
RANK_BY = ("surprisal", "entropy")
Y_CAP = 16.0  # nats: a forced token far outside the model's choices does not squash the rest
READOUT_TIP = "exp of the mean surprisal of the tokens after the prompt"
OWN_TIP = ("model's own tokens: the same over the tokens the model chose (forced, rule and tool tokens left out: a "
           "token put in the text says nothing about the model's confidence)")  # fmt: skip
INSERTED = ("forced", "rule", "tool")  # steps the model did not choose
PROMPT_TIP = "prompt: the same of the prompt's tokens after its first (the first is read, not scored)"


def measure(steps, name: str) -> list[float]:
    """Each step's surprisal or entropy (`name`), NaN where the step does not know it (a server's)."""
    return [np.nan if getattr(step, name) is None else getattr(step, name) for step in steps]


def perplexity(surprisals: np.ndarray) -> float | None:
    """exp of the mean of the known surprisals; None: none is known."""
    known = surprisals[~np.isnan(surprisals)]
    return math.exp(float(known.mean())) if len(known) else None


def least_confident(values: np.ndarray) -> list[int]:
    """The indexes of the LEAST_CONFIDENT highest values, highest first (ties: the earlier index first); NaN
    ones are left out."""
    known = np.flatnonzero(~np.isnan(values))
    if len(known) > LEAST_CONFIDENT:
        known = known[np.argpartition(-values[known], LEAST_CONFIDENT - 1)[:LEAST_CONFIDENT]]
    return sorted(known.tolist(), key=lambda index: (-values[index], index))


def y_top(shown: list[np.ndarray]) -> float:
    """The y axis' top: the highest value shown (at least 1, at most Y_CAP), and a little room."""
    values = np.concatenate(shown)
    values = values[~np.isnan(values)]
    return min(max(float(values.max()) if len(values) else 1.0, 1.0), Y_CAP) * 1.08


def hover_html(title: str, token: str, values: dict, index: int) -> str:
    """A point's hover: its title ("step 3"), its token and its numbers."""
    numbers = ", ".join(
        f"{name} {value:.2f}" if not np.isnan(value := values[name][index]) else f"{name} unknown" for name in RANK_BY
    )
    return f"<b>{title}: <code>{html.escape(repr(token))}</code></b><br>{numbers} nats"


def readout(generated: float | None, prompt: float | None, prompt_note: str | None, own: float | None = None) -> str:
    """The perplexity of the generated text, over the model's own tokens where some were put in (own), and the
    prompt's once it is scored (or that it was not)."""
    parts = [] if generated is None else [f"perplexity {generated:.2f}"]
    if own is not None:
        parts.append(f"model's own tokens {own:.2f}")
    if prompt is not None:
        parts.append(f"prompt {prompt:.2f}")
    elif prompt_note is not None:
        parts.append("prompt: not scored")
    return " · ".join(parts)


def readout_tip(prompt: float | None, prompt_note: str | None) -> str:
    """The readout's tooltip: what the numbers are, or why the prompt was not scored."""
    if prompt_note is not None:
        return f"{READOUT_TIP}; {OWN_TIP}. The prompt was not scored: {prompt_note}"
    return f"{READOUT_TIP}; {OWN_TIP}" + ("; " + PROMPT_TIP if prompt is not None else "")


def least_row(values: np.ndarray, index: int, token: str, source: str = "model") -> str:
    """A "least confident" list row: the value, the step number, who chose the token where the model did not
    ("forced", "rule", "tool": before the token, so that a narrow list cuts the token's end, never the mark), the
    token."""
    mark = f"{source}  " if source in INSERTED else ""
    return f"{values[index]:5.2f}  {index + 1:>4}  {mark}{token!r}"
