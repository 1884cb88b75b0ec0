"""Saving and loading the story model, with a signature of what its weights were trained on.

A checkpoint is a directory (the shipped one is `resources/`) holding
    story-model.npz       the float32 weights and a JSON header: config, signature, weights hash
    story-tokenizer.json  the tokenizer the weights were trained with
The signature records hashes of the config, the tokenizer file and the corpus. Loading recomputes them
and refuses, with a ValueError that names the mismatch, a checkpoint that does not fit this engine or
whose bytes were damaged.
"""

import hashlib
import io
import json
import math
import zipfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from engine.core.files import atomic_write_bytes
from engine.story import corpus as stories
from engine.story.model import Config, StoryModel
from engine.story.tokenizer import Tokenizer

SCHEMA = "token-playground/story-model/1"
WEIGHTS_FILE = "story-model.npz"
TOKENIZER_FILE = "story-tokenizer.json"


def resources_dir() -> Path:
    """The shipped resources: `resources/` beside `engine/` in a checkout, `engine/resources` when installed."""
    engine = Path(__file__).resolve().parent.parent  # engine/story/checkpoint.py -> engine/
    for candidate in (engine.parent / "resources", engine / "resources"):
        if (candidate / WEIGHTS_FILE).is_file():
            return candidate
    raise FileNotFoundError(f"no {WEIGHTS_FILE} next to the engine: the story model is not installed")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def corpus_signature() -> str:
    """A hash of every story in every split: it changes whenever the corpus does."""
    train, dev, test = stories.split()
    return sha256_text("\x1e".join("\n".join(part) for part in (train, dev, test)))


def config_signature(config: Config) -> str:
    return sha256_text(json.dumps(asdict(config), sort_keys=True))


def weights_sha256(params: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(params):
        array = np.ascontiguousarray(params[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def save_story_model(out_dir, params, config: Config, tokenizer: Tokenizer, corpus_sha: str, training=None):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_json = tokenizer.to_json()
    header = {
        "schema": SCHEMA,
        "config": asdict(config),
        "signature": {
            "config": config_signature(config),
            "tokenizer": sha256_text(tokenizer_json),
            "corpus": corpus_sha,
        },
        "weights_sha256": weights_sha256(params),
        "training": training or {},
    }
    buffer = io.BytesIO()
    np.savez(buffer, header=np.array(json.dumps(header)), **params)
    atomic_write_bytes(out_dir / TOKENIZER_FILE, tokenizer_json.encode("utf-8"))
    atomic_write_bytes(out_dir / WEIGHTS_FILE, buffer.getvalue())


def load_story_model(path=None) -> StoryModel:
    """Load a checkpoint directory (or its story-model.npz); default: the shipped story model."""
    path = Path(path) if path is not None else resources_dir()
    weights_path = path / WEIGHTS_FILE if path.is_dir() else path
    tokenizer_path = weights_path.parent / TOKENIZER_FILE
    header, params = _read_npz(weights_path)
    try:
        tokenizer_json = tokenizer_path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the tokenizer {tokenizer_path}: {error.strerror}") from None
    tokenizer = Tokenizer.from_json(tokenizer_json)

    if header.get("schema") != SCHEMA:
        raise ValueError(f"{weights_path} is not a story-model checkpoint (schema {header.get('schema')!r})")
    try:
        config = Config(**header["config"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"{weights_path} has an unreadable config: {error}") from None
    recorded = header.get("signature")
    if not isinstance(recorded, dict):
        raise ValueError(f"{weights_path} has no readable signature")
    expected = {
        "config": config_signature(config),
        "tokenizer": sha256_text(tokenizer_json),
        "corpus": corpus_signature(),
    }
    for what, value in expected.items():
        if recorded.get(what) != value:
            raise ValueError(
                f"{weights_path} does not match: it was trained with a different {what} "
                f"(recorded {str(recorded.get(what))[:12]}..., found {value[:12]}...)"
            )
    shapes = config.param_shapes()
    if set(params) != set(shapes):
        raise ValueError(f"{weights_path} has weights {sorted(set(params) ^ set(shapes))} that the config does not")
    for name, shape in shapes.items():
        if params[name].shape != shape or params[name].dtype != np.float32:
            raise ValueError(
                f"{weights_path}: weight {name} is {params[name].dtype}{list(params[name].shape)}, "
                f"the config needs float32{list(shape)}"
            )
    digest = weights_sha256(params)
    if digest != header.get("weights_sha256"):
        raise ValueError(f"{weights_path} is corrupted: its weights do not match the hash recorded with them")
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens, the model {config.vocab_size}")
    return StoryModel(params, config, tokenizer, name="story model", weights_sha256=digest)


MAX_CHECKPOINT_BYTES = 256 * 2**20  # a story model is about 1 MB: anything near this is not one


def _read_npz(path: Path):
    """-> (header dict, {name: array}); any damage to the file becomes a ValueError. Sizes are checked
    before anything is inflated or allocated: the zip directory's sizes first, then each array's header."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            total = sum(member.file_size for member in members)
            if total > MAX_CHECKPOINT_BYTES:
                raise ValueError(f"it would inflate to {total:,} bytes (at most {MAX_CHECKPOINT_BYTES:,})")
            arrays = {member.filename.removesuffix(".npy"): _read_member(archive, member) for member in members}
        header = json.loads(str(arrays.pop("header")))
    except FileNotFoundError:
        raise ValueError(f"no checkpoint at {path}") from None
    except (OSError, EOFError, ValueError, KeyError, NotImplementedError, zipfile.BadZipFile,
            json.JSONDecodeError, UnicodeDecodeError) as error:  # fmt: skip
        raise ValueError(f"{path} is truncated or corrupted: {error}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} has no readable header")
    return header, arrays


def _read_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> np.ndarray:
    """One .npy member, refused before allocation if its header claims more data than the member holds."""
    with archive.open(member) as file:
        version = np.lib.format.read_magic(file)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read_header(file)
        if dtype.hasobject:
            raise ValueError(f"{member.filename} holds Python objects")
        if math.prod(shape) * dtype.itemsize > member.file_size:
            raise ValueError(f"{member.filename} claims shape {shape} but holds {member.file_size:,} bytes")
    with archive.open(member) as file:
        return np.lib.format.read_array(file, allow_pickle=False)
