"""Inside the model: what each layer would predict (the logit lens) and where each head looks (attention).

A model whose layers the engine sees (the story model, GGUF llama/qwen2 in numpy, any GGUF file in llama.cpp
through its graph callback: capabilities.inside)
offers two things: `inside(ids)`, one full forward over the ids that keeps the residual stream at every
position before each layer and after the last, the last position's attention weights in every layer and
its own scores; and `unembed(residuals)`, the model's final norm and output projection. The logit lens
unembeds the residual stream at each layer as if the model ended there. Nothing of this runs while nobody
asks: a generation never keeps these values, so decoding costs the same with or without this module.

Rows are layers: row 0 is the embedding (before the first layer), row i the stream after layer i; the last
row is the model's own distribution, the very numbers of its forward pass (the final layer's lens).
"""

from dataclasses import dataclass

import numpy as np

from engine.core.checks import MAX_INT, checked_int
from engine.core.lens_grid import LensGrid, top_and_p
from engine.core.ranking import top_ids
from engine.core.steps import TOP_CANDIDATES, Candidates

GRID_POSITIONS = 20  # the lens grid's positions: the text's last 20


@dataclass(frozen=True)
class Inside:
    residuals: np.ndarray  # [layers + 1, P, d] the stream before each layer, then after the last (the last P)
    attention: np.ndarray  # [layers, heads, T] the last position's attention over every position
    scores: np.ndarray  # [V] the model's own scores for the next token, from this forward


@dataclass(frozen=True)
class InsideView:
    """What the window shows for one position of a text: the lens at the last position, its grid over the last
    positions, and the attention of the last position."""

    layers: tuple[str, ...]  # "embedding", "layer 1", ... "layer N" (the last: the model's own)
    probs: np.ndarray  # [layers + 1, V] each layer's next-token distribution at the last position
    grid_positions: tuple[int, ...]  # the positions of the grid's columns (the last GRID_POSITIONS)
    grid_top: np.ndarray  # [layers + 1, P] each layer's most probable next token at each of them
    grid_p: np.ndarray  # [layers + 1, P] its probability
    attention: np.ndarray  # [layers, heads, T]

    def ranks(self, token_id: int) -> np.ndarray:  # -> [layers + 1] the token's rank at each layer, 1 = top
        return lens_ranks(self.probs, token_id)


def kept_positions(length: int, last) -> int:
    """How many of a text's last positions inside(ids, last=...) keeps the stream of: last (an int >= 1) or
    None for all of them."""
    if last is None:
        return length
    return min(length, checked_int("last", last, 1, MAX_INT, "None (every position) or an int >= 1"))


def checked_model(model) -> None:
    if not model.capabilities.inside:
        raise ValueError(f"{model.name} runs in a backend that does not show its layers (a server gives the "
                         "scores only): the logit lens and attention need the numpy engine or llama.cpp")  # fmt: skip


def _checked_table(model, table) -> np.ndarray | None:
    """A [layers, heads] table of head factors as Session.steer_heads allows them (-10 to 10), float32, or None:
    a NaN or infinite factor would turn every probability into NaN."""
    if table is None:
        return None
    allowed = f"None or a {model.heads_shape[0]} x {model.heads_shape[1]} table of factors from -10 to 10"
    return _float32_table(table, model.heads_shape, "head_scales", allowed, lambda t: np.abs(t) <= 10)  # NaN fails


def _checked_additions(model, table) -> np.ndarray:
    """A [layers, d] float32 table of finite additions to the residual stream (Session.residual_table)."""
    shape = tuple(getattr(model, "residual_shape", ()))
    allowed = f"None or a {' x '.join(map(str, shape))} table of finite numbers (Session.residual_table)"
    if not getattr(model, "residual_steering", False):
        raise ValueError(f"{model.name} runs in a backend whose residual stream the engine cannot change")
    return _float32_table(table, shape, "residual_add", allowed, np.isfinite)


def _float32_table(table, shape, name: str, allowed: str, fits) -> np.ndarray:
    """table as float32 of the given shape, every value passing fits (elementwise), or a ValueError naming it."""
    try:
        table = np.asarray(table, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {allowed}") from None
    if table.shape != tuple(shape) or not fits(table).all():
        raise ValueError(f"{name} must be {allowed}")
    return table


def softmax_rows(scores) -> np.ndarray:  # [..., V] -> [..., V], float32
    e = scores - scores.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def lens_scores(model, token_ids) -> np.ndarray:  # [T] ids -> [layers + 1, V] scores for the next token
    """The logit lens at the last position: each layer's stream unembedded; the last row is the model's own."""
    checked_model(model)
    inside = model.inside(token_ids, last=1)
    return np.vstack([model.unembed(inside.residuals[:-1, -1]), inside.scores[None]])


def logit_lens(model, token_ids) -> np.ndarray:  # [T] ids -> [layers + 1, V] probabilities, float32
    """For the last position, the next-token distribution each layer would give if the model ended there:
    row 0 after the embedding, row i after layer i; the last row is the model's own distribution."""
    return softmax_rows(lens_scores(model, token_ids))


def attention_weights(model, token_ids) -> np.ndarray:  # [T] ids -> [layers, heads, T], float32
    """The last position's attention weights over every position (each head's sum to 1 over the causal
    window, which for the last position is the whole text)."""
    checked_model(model)
    return model.inside(token_ids, last=1).attention


def lens_ranks(probs, token_id: int) -> np.ndarray:  # [layers, V] -> [layers] ranks, 1 = most probable
    """The token's rank in each row (ties to the lower id, as the chart ranks)."""
    p = probs[:, token_id][:, None]
    ahead = (probs > p).sum(axis=1) + (probs[:, :token_id] == p).sum(axis=1)
    return ahead + 1


def inside_view(model, token_ids, grid_positions: int = GRID_POSITIONS, head_scales=None,
                residual_add=None) -> InsideView:  # fmt: skip
    """Everything the window's Inside tab shows for the next token after token_ids, from one forward pass
    (head_scales: a session's steered heads, Session.head_table; residual_add: its steering direction's
    [layers, d] additions, Session.residual_table). The grid is unembedded while the forward runs, where the
    backend hands its layers over as they come (lens_grid.py)."""
    checked_model(model)
    grid_positions = checked_int("grid_positions", grid_positions, 1, MAX_INT, "an int >= 1 (the lens grid's columns)")
    head_scales = _checked_table(model, head_scales)
    steering = {} if residual_add is None else {"residual_add": _checked_additions(model, residual_add)}
    grid = LensGrid(model.unembed, model.vocab_size)
    try:
        inside = model.inside(token_ids, head_scales=head_scales, last=grid_positions, on_layer=grid.add, **steering)
    except BaseException:
        grid.cancel()
        raise
    lens, top, top_p = grid.finish(inside.residuals)  # the grid's last column is the lens
    lens[-1] = inside.scores  # the last cell is the model's own row: that forward's numbers
    top[-1, -1], top_p[-1, -1] = top_and_p(inside.scores.copy())
    t = inside.attention.shape[-1]
    return InsideView(
        layers=("embedding", *(f"layer {i}" for i in range(1, len(lens)))),
        probs=softmax_rows(lens),
        grid_positions=tuple(range(t - top.shape[1], t)),
        grid_top=top,
        grid_p=top_p,
        attention=inside.attention,
    )


def layer_candidates(view: InsideView, text_of) -> tuple[Candidates, ...]:
    """Each layer's own top tokens as a chart shows candidates (text_of(id) -> the token's text): what that
    layer would predict, its probabilities as both the raw row and the one stage, named after the layer."""
    out = []
    for name, row in zip(view.layers, view.probs):
        top = top_ids(row, TOP_CANDIDATES).tolist()
        p = tuple(row[top].tolist())
        out.append(Candidates(tuple(top), tuple(text_of(i) for i in top), p, ((name, p),), (None,) * len(top)))
    return tuple(out)


# --- steering heads (Session.steer_heads) ------------------------------------------------------------------
def head_scale_table(model, scales) -> tuple[tuple[tuple[int, int, float], ...], np.ndarray | None]:
    """-> (the checked (layer, head, factor) entries, their [layers, heads] float32 table or None where every
    head is as trained); ValueError where the engine does not run the model's layers, or an entry is wrong."""
    if not model.capabilities.inside:
        raise ValueError(f"{model.name} runs in a backend whose layers the engine does not run: "
                         "steering its heads needs the numpy engine or llama.cpp")  # fmt: skip
    layers, heads = model.heads_shape
    checked = _checked_scales(scales, layers, heads)
    table = None
    if checked:
        table = np.ones((layers, heads), dtype=np.float32)
        for layer, head, factor in checked:
            table[layer, head] = factor
    return checked, table


def _checked_scales(scales, layers: int, heads: int) -> tuple[tuple[int, int, float], ...]:
    """(layer, head, factor) entries, each head once, sorted; a factor of 1 is no change and is dropped."""
    if isinstance(scales, (str, bytes, dict)) or not hasattr(scales, "__iter__"):
        raise ValueError(f"scales must be a list of (layer, head, factor), got {type(scales).__name__}")
    checked = {}
    for entry in scales:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"each scale is (layer, head, factor), got {entry!r:.60}")
        layer, head, factor = entry
        for name, value, count in (("layer", layer, layers), ("head", head, heads)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
                raise ValueError(f"{name} must be an int from 0 to {count - 1}, got {value!r:.40}")
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not -10 <= factor <= 10:
            raise ValueError(f"a head's factor must be a number from -10 to 10 (0 ablates it), got {factor!r:.40}")
        if (layer, head) in checked:
            raise ValueError(f"layer {layer}, head {head} is scaled twice")
        checked[layer, head] = float(factor)
    return tuple((layer, head, factor) for (layer, head), factor in sorted(checked.items()) if factor != 1.0)
