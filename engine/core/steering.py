"""Steering with a direction (steering vectors): a per-layer direction in the residual stream, made from contrast
prompts, and added to the stream after chosen layers while a session generates (Session.steer_vector).

The direction is read from the very residual stream the logit lens reads (`model.inside(ids).residuals`, row
i + 1 the stream after layer i), so a direction made on the numpy engine applies on llama.cpp running the same
GGUF file: llama.cpp's control vectors (`llama_set_adapter_cvec`) add to the output of layer il, the same place.
Layers are 0-based here, as engine.attention_weights numbers them; layer L's row is what is added after layer L.
"""

import base64
import math
from dataclasses import dataclass

import numpy as np

from engine.core.checks import checked_ids
from engine.core.settings import Settings

MAX_STRENGTH = 100.0  # |strength|: far past where text stays readable, short of overflowing float32
# |strength x a direction's value|, at most: residual streams hold values of ~1 to 1e4; past 1e6 a norm's sum of
# squares nears float32's overflow, and the scores come out NaN (a 3e38 file at strength 100 did)
MAX_ADDITION = 1e6
MAX_PROMPTS = 64  # contrast prompts per side: each is one forward pass


@dataclass(frozen=True)
class SteeringVector:
    """A direction per layer: directions[L] is added (times a strength) to the stream after layer L."""

    directions: np.ndarray  # [layers, d] float32, read-only
    positive: tuple[str, ...]
    negative: tuple[str, ...]
    model_name: str  # the model it was made on (a file's model hint, for one loaded from a file)
    weights_sha256: str  # "" where unknown (loaded from a file)

    @property
    def shape(self) -> tuple[int, int]:
        return self.directions.shape


def steering_vector(model, positive, negative, layer=None) -> SteeringVector:
    """The mean residual stream of the positive texts minus that of the negative texts, after every layer
    (layer=None) or after one layer (layer=L: the other rows are zero).

    Each text's stream is averaged over its positions, less the first: the mean over positions carries what the
    whole text is about (happy, formal, French), where the last position is dominated by the last token itself
    (a full stop, a comma) and by what comes next; the first position sees only itself, and in most models holds
    an outsized "attention sink" vector unrelated to the text, so it is left out (a one-token text keeps it)."""
    check_inside(model)
    positive, negative = _checked_texts(positive, "positive"), _checked_texts(negative, "negative")
    layers, _ = residual_shape(model)
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < layers):
        raise ValueError(f"layer must be None (every layer) or an int from 0 to {layers - 1}, got {layer!r:.40}")
    ids = {text: _encoded(model, text) for text in (*positive, *negative)}
    means = {text: _mean_stream(model, token_ids) for text, token_ids in ids.items()}
    directions = np.mean([means[t] for t in positive], axis=0) - np.mean([means[t] for t in negative], axis=0)
    directions = directions.astype(np.float32)
    if layer is not None:
        keep = directions[layer].copy()
        directions[:] = 0
        directions[layer] = keep
    return make_vector(directions, positive, negative, model.name, model.weights_sha256)


def make_vector(directions, positive=(), negative=(), model_name="", weights_sha256="") -> SteeringVector:
    directions = np.array(directions, dtype=np.float32)  # a copy, made read-only: the vector is a value
    directions.flags.writeable = False
    return SteeringVector(directions, tuple(positive), tuple(negative), model_name, weights_sha256)


def check_inside(model) -> None:
    if not getattr(model.capabilities, "inside", False):
        raise ValueError(f"{model.name} runs in a backend that does not show its layers: a steering vector is read "
                         "from the residual stream, so make it where the model runs on the numpy engine or llama.cpp, "
                         "and apply it there")  # fmt: skip


def residual_shape(model) -> tuple[int, int]:
    """(layers, d): the rows of a steering vector for this model, and each row's size."""
    return tuple(model.residual_shape)


def steering_table(model, vector, layers, strength) -> tuple[tuple[int, ...], float, np.ndarray | None]:
    """-> (the checked layers, sorted; the strength; the [layers, d] float32 additions, None where nothing is
    added: strength 0 or no layer). ValueError, naming what is allowed, for anything else."""
    if not getattr(model, "residual_steering", False):
        raise ValueError(f"{model.name} runs in a backend whose residual stream the engine cannot change: "
                         "steering with a direction needs the numpy engine or llama.cpp")  # fmt: skip
    count, d = residual_shape(model)
    if not isinstance(vector, SteeringVector):
        raise ValueError(f"vector must be a SteeringVector (engine.steering_vector), got {type(vector).__name__}")
    if vector.shape != (count, d):
        raise ValueError(f"this vector is {vector.shape[0]} layers x {vector.shape[1]} values, {model.name} needs "
                         f"{count} x {d}: it was made on another model ({vector.model_name or 'unknown'})")  # fmt: skip
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not abs(strength) <= MAX_STRENGTH:
        raise ValueError(f"strength must be a number from {-MAX_STRENGTH:g} to {MAX_STRENGTH:g} (0: no steering), "
                         f"got {strength!r:.40}")  # fmt: skip
    checked = _checked_layers(layers, model.first_steerable_layer, count, model.name)
    strength = float(strength)
    if strength == 0 or not checked:
        return (), 0.0, None
    table = np.zeros((count, d), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below, by name
        table[list(checked)] = np.float32(strength) * vector.directions[list(checked)]
    largest = float(np.max(np.abs(table)))
    if not largest <= MAX_ADDITION:  # NaN too
        what = "is not a number" if np.isnan(largest) else f"reaches {largest:.3g}"
        raise ValueError(f"this steering adds values too large for the residual stream: strength x the direction "
                         f"{what} (at most {MAX_ADDITION:g}); the vector's file may be damaged, or the strength too "
                         "high")  # fmt: skip
    return checked, strength, table


def steering_preview(model, token_ids, vector, layers, strength) -> tuple[np.ndarray, np.ndarray]:
    """The model's next-token distribution after token_ids ([V] float32) without and with this steering: two
    forward passes over the text in contexts of their own (a worker's "before / after" chart); no session
    changes. ValueError as Session.steer_vector's."""
    _, _, table = steering_table(model, vector, layers, strength)
    ids = checked_ids(token_ids, 0, model.vocab_size, model.context_length).tolist()
    rows = []
    for additions in (None, table):
        context = model.open_context()
        if additions is not None:
            context.set_residual_additions(additions)
        rows.append(context.distributions(ids, Settings()).raw)
    return rows[0], rows[1]


def _checked_layers(layers, first: int, count: int, name: str) -> tuple[int, ...]:
    if isinstance(layers, (str, bytes, dict)) or not hasattr(layers, "__iter__"):
        raise ValueError(f"layers must be a list of ints from {first} to {count - 1}, got {type(layers).__name__}")
    checked = []
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not first <= layer < count:
            why = " (llama.cpp's control vectors never steer the first layer)" if first else ""
            raise ValueError(f"each layer must be an int from {first} to {count - 1} on {name}{why}, "
                             f"got {layer!r:.40}")  # fmt: skip
        if int(layer) in checked:
            raise ValueError(f"layer {layer} is listed twice")
        checked.append(int(layer))
    return tuple(sorted(checked))


def _checked_texts(texts, side: str) -> tuple[str, ...]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, (list, tuple)):
        raise ValueError(f"the {side} prompts must be a list of texts, got {type(texts).__name__}")
    if not 1 <= len(texts) <= MAX_PROMPTS:
        raise ValueError(f"give 1 to {MAX_PROMPTS} {side} prompts, got {len(texts)}")
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"each {side} prompt must be a non-empty text, got {text!r:.40}")
    return tuple(texts)


def _encoded(model, text: str) -> list[int]:
    ids = list(model.tokenizer.encode(text))
    if not ids:
        raise ValueError(f"{text!r:.40} has no tokens")
    if len(ids) > model.context_length:
        raise ValueError(f"{text!r:.40} is {len(ids)} tokens, longer than the model's {model.context_length}")
    return ids


def _mean_stream(model, ids) -> np.ndarray:  # -> [layers, d]: the stream after each layer, over positions 1..
    residuals = model.inside(ids).residuals[1:]  # [layers, T, d]: row L is the stream after layer L
    return residuals[:, 1:].mean(axis=1) if residuals.shape[1] > 1 else residuals[:, 0]


# --- the trace's "vector" action ---------------------------------------------------------------------------
def vector_action(vector: SteeringVector, layers, strength) -> dict:
    """What a trace records: the steered layers' rows, bit for bit (float32 bytes in base64), and the prompts."""
    rows = np.ascontiguousarray(vector.directions[list(layers)], dtype="<f4")
    return {"kind": "vector", "layers": list(layers), "strength": strength, "width": int(vector.shape[1]),
            "directions": base64.b64encode(rows.tobytes()).decode("ascii"),
            "positive": list(vector.positive), "negative": list(vector.negative)}  # fmt: skip


def vector_from_action(model, action: dict) -> SteeringVector:
    """The vector a "vector" action recorded (rows outside its layers are zero: they add nothing)."""
    count, d = residual_shape(model)
    layers = action["layers"]
    if action["width"] != d or any(not 0 <= layer < count for layer in layers):
        raise ValueError(f"the vector action is for {action['width']} values per layer and layers {layers}: "
                         f"{model.name} has {count} layers of {d}")  # fmt: skip
    directions = np.zeros((count, d), dtype=np.float32)
    if layers:
        directions[layers] = np.frombuffer(base64.b64decode(action["directions"]), dtype="<f4").reshape(-1, d)
    return make_vector(directions, action["positive"], action["negative"], model.name, model.weights_sha256)


def check_vector_action(action: dict, where: str) -> None:
    """A trace's "vector" action is well formed (its numbers finite, its rows as many as its layers)."""
    layers, width, strength = action.get("layers"), action.get("width"), action.get("strength")
    ok = (
        isinstance(layers, list)
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in layers)
        and isinstance(width, int) and not isinstance(width, bool) and width > 0
        and isinstance(strength, (int, float)) and not isinstance(strength, bool) and math.isfinite(strength)
        and isinstance(action.get("directions"), str)
        and all(isinstance(action.get(side), list) and all(isinstance(t, str) for t in action[side])
                for side in ("positive", "negative"))
    )  # fmt: skip
    if ok:
        try:
            rows = np.frombuffer(base64.b64decode(action["directions"], validate=True), dtype="<f4")
            ok = rows.size == len(layers) * width and bool(np.isfinite(rows).all())
        except ValueError:
            ok = False
    if not ok:
        raise ValueError(f"{where}: a vector action needs 'layers' (ints), 'strength' (a number), 'width', "
                         "'directions' (base64 float32, one row per layer, finite) and the prompts")  # fmt: skip
