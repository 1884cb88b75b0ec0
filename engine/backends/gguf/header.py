"""A GGUF file's first bytes: whether it is one, and its architecture from the header alone (milliseconds,
before any backend parses or loads it)."""

import struct
from pathlib import Path


def check_gguf_file(path: Path) -> None:
    """ValueError unless path is a readable file that starts with GGUF's magic."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as error:
        raise ValueError(f"no GGUF file at {path}: cannot read it ({error.strerror or error})") from None
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")


def is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


# GGUF metadata value types -> their size in bytes (8: string, 9: array are walked, not sized)
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_architecture(path) -> str | None:
    """general.architecture from a GGUF file's header, reading only the metadata up to that key (the
    writers put it first), so an unsupported file is refused in milliseconds rather than after a full
    parse. None when the header cannot tell (an old version, a cut file): the full loader then decides."""
    try:
        with open(path, "rb") as f:
            magic, version = f.read(4), struct.unpack("<I", f.read(4))[0]
            if magic != b"GGUF" or version < 2:
                return None
            _tensors, count = struct.unpack("<QQ", f.read(16))
            for _ in range(min(count, 100_000)):
                key = _gguf_string(f)
                kind = struct.unpack("<I", f.read(4))[0]
                if key == "general.architecture" and kind == _GGUF_STRING:
                    return _gguf_string(f)
                _skip_gguf_value(f, kind)
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return None
    return None


def _gguf_string(f) -> str:
    (length,) = struct.unpack("<Q", f.read(8))
    if length > 1 << 24:
        raise ValueError("implausible string length")
    return f.read(length).decode("utf-8")


def _skip_gguf_value(f, kind: int) -> None:
    if kind == _GGUF_STRING:
        (length,) = struct.unpack("<Q", f.read(8))
        f.seek(length, 1)
    elif kind == _GGUF_ARRAY:
        item, count = struct.unpack("<IQ", f.read(12))
        if item in _GGUF_SIZES:
            f.seek(_GGUF_SIZES[item] * count, 1)
        else:
            for _ in range(count):
                _skip_gguf_value(f, item)
    elif kind in _GGUF_SIZES:
        f.seek(_GGUF_SIZES[kind], 1)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")
