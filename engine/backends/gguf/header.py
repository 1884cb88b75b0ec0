"""A GGUF file's first bytes: whether it is one, and its architecture from the header alone (milliseconds,
before any backend parses or loads it)."""

from pathlib import Path

from engine.backends.gguf.metadata import read_header


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


def gguf_architecture(path) -> str | None:
    """general.architecture from a GGUF file's header, reading only the metadata up to that key (the
    writers put it first), within metadata.py's bounds, so an unsupported file is refused in milliseconds
    rather than after a full parse. None when the header cannot tell (an old version, a cut file, a count
    out of bounds): the full loader then decides."""
    try:
        header = read_header(path, tensors=False, stop_after="general.architecture")
    except (OSError, ValueError):
        return None
    architecture = header.fields.get("general.architecture")
    return architecture if isinstance(architecture, str) else None


def readable(text: str) -> str:
    """A file name as text that can be shown and written as UTF-8: bytes of a name that were not UTF-8
    (Python keeps them as lone surrogates) become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
