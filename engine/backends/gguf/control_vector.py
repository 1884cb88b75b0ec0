"""A steering vector as a file: llama.cpp's control-vector GGUF, which `llama-cli --control-vector` reads too.

The format (llama.cpp's cvector-generator writes it, common's control-vector loader reads it): general.architecture
"controlvector", "controlvector.model_hint" (the model's architecture, for a reader), "controlvector.layer_count"
(int32: the directions written, layers - 1), and one float32 tensor of d values per layer named "direction.N",
N = 1 .. layers - 1, added to the output of layer N (0-based: the stream after layer N, as SteeringVector's row N).
There is no "direction.0": llama.cpp never steers the first layer, so row 0 is not saved and loads as zeros.
"""

import re
import tempfile
from pathlib import Path

import numpy as np

from engine.backends.gguf.metadata import read_header
from engine.core.files import atomic_write_bytes
from engine.core.steering import SteeringVector, make_vector, residual_shape

ARCHITECTURE = "controlvector"
NAME = re.compile(r"direction\.([1-9][0-9]{0,5})")


def save_steering_vector(vector: SteeringVector, path, model_hint: str | None = None) -> None:
    """Write the vector's rows 1.. as a control-vector GGUF, atomically (a reader sees the old file or the new)."""
    import gguf

    if not isinstance(vector, SteeringVector):
        raise ValueError(f"vector must be a SteeringVector (engine.steering_vector), got {type(vector).__name__}")
    layers = vector.shape[0]
    if layers < 2:
        raise ValueError("a control-vector file holds layers 1 and up: this vector has only layer 0 "
                         "(llama.cpp never steers the first layer)")  # fmt: skip
    hint = model_hint or vector.model_name or "unknown"
    with tempfile.TemporaryDirectory() as folder:  # GGUFWriter writes to a path: write there, then move whole
        draft = Path(folder) / "vector.gguf"
        writer = gguf.GGUFWriter(str(draft), ARCHITECTURE)
        writer.add_string("controlvector.model_hint", hint)
        writer.add_int32("controlvector.layer_count", layers - 1)
        for layer in range(1, layers):
            writer.add_tensor(f"direction.{layer}", np.ascontiguousarray(vector.directions[layer], dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        atomic_write_bytes(Path(path), draft.read_bytes())


def load_steering_vector(model, path) -> SteeringVector:
    """A control-vector GGUF for this model, every part checked before use: the architecture, the layer count
    against the model's layers, each tensor's name, type and size, finite values. ValueError naming the file
    and what is wrong."""
    import gguf

    path = Path(path)
    layers, d = residual_shape(model)
    try:
        read_header(path)  # within bounds first: the gguf package walks whatever counts a header claims
        reader = gguf.GGUFReader(str(path))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    except Exception as error:  # noqa: BLE001 - the gguf package raises many kinds on a damaged file
        raise ValueError(f"{path} is not a readable GGUF file: {type(error).__name__}: {error}") from None
    architecture, count, hint = (_field(reader, key) for key in ("general.architecture", "controlvector.layer_count",
                                                                 "controlvector.model_hint"))  # fmt: skip
    if architecture != ARCHITECTURE:
        raise ValueError(f"{path} is not a control vector (its architecture is {architecture!r:.40})")
    if isinstance(count, bool) or not isinstance(count, int) or count not in (layers - 1, layers):
        raise ValueError(f"{path} is for a model of {count!r:.20} layers (controlvector.layer_count); "
                         f"{model.name} has {layers}: it needs {layers - 1}")  # fmt: skip
    directions = np.zeros((layers, d), dtype=np.float32)
    seen = set()
    for tensor in reader.tensors:
        layer = _checked_tensor(path, tensor, layers, d, seen)
        directions[layer] = np.asarray(tensor.data, dtype=np.float32).reshape(d)
    if not seen:
        raise ValueError(f"{path} holds no direction.N tensor")
    return make_vector(directions, model_name=hint if isinstance(hint, str) else "")


def _checked_tensor(path, tensor, layers: int, d: int, seen: set) -> int:
    """The layer a "direction.N" tensor is for, once it is float32, d values, finite, and N a layer 1 .. layers-1."""
    import gguf

    match = NAME.fullmatch(tensor.name)
    if match is None:
        raise ValueError(f"{path}: tensor {tensor.name!r:.60} is not direction.N (N = 1 to {layers - 1})")
    layer = int(match.group(1))
    if not 1 <= layer < layers or layer in seen:
        twice = " twice" if layer in seen else f": {layers - 1} is the last layer a control vector steers"
        raise ValueError(f"{path}: tensor {tensor.name} names layer {layer}{twice}")
    shape = tuple(int(n) for n in tensor.shape if int(n) != 1) or (1,)
    if tensor.tensor_type != gguf.GGMLQuantizationType.F32 or shape != (d,) or tensor.data.size != d:
        raise ValueError(f"{path}: {tensor.name} must be {d} float32 values, got {tensor.tensor_type.name} "
                         f"{tuple(int(n) for n in tensor.shape)}")  # fmt: skip
    if not np.isfinite(tensor.data).all():
        raise ValueError(f"{path}: {tensor.name} holds NaN or infinite values")
    seen.add(layer)
    return layer


def _field(reader, key):
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        value = field.contents()
    except Exception:  # noqa: BLE001 - a damaged value is no value
        return None
    return int(value) if isinstance(value, (np.integer,)) else value
