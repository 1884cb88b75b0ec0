"""A GGUF file's header (its metadata and tensor list) read within fixed bounds, before anything else parses it.

Every count and length the header declares is checked before it is acted on: against what is left of the
file (a string of n bytes needs n bytes; an array of n strings at least 8n) and against caps no real model
comes near. A sparse file of 1 GB whose header claims 2**62 strings is refused at once, instead of being
walked for minutes (by this reader, the gguf package's or llama.cpp's). read_header raises ValueError
without the file's name; the caller prefixes it.
"""

import os
import struct
from dataclasses import dataclass, field

import numpy as np

MAX_KEYS = 1 << 16  # real files hold tens
MAX_TENSORS = 1 << 20  # the largest mixtures of experts hold tens of thousands
MAX_STRING = 1 << 24  # a chat template is kilobytes; a token a few bytes
MAX_ARRAY = 1 << 21  # the largest vocabularies (and merge lists) are about 260,000 long
MAX_ITEMS = 1 << 22  # array items in a whole header: bounds the time a hostile one takes (about a second)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
VERSIONS = (2, 3)  # version 1 wrote 32-bit counts; llama.cpp reads 2 and 3
_CHUNK = 1 << 20
_LENGTH = struct.Struct("<Q")

STRING, ARRAY = 8, 9
_NUMBERS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
            12: "<f8"}  # fmt: skip
TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
              8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}  # fmt: skip


@dataclass
class GGUFHeader:
    """fields: key -> value (a Python int, float, bool or str; a list of str; a numpy array of numbers);
    types: key -> (GGUF value type, item type for an array, else None); tensors: name -> (dims, ggml type,
    offset), empty when not read."""

    version: int
    fields: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)
    tensors: dict = field(default_factory=dict)
    data_start: int = 0  # where the tensor data begins (the offsets count from there), once the tensors are read


class _Cursor:
    """Reads a file forward through a buffer, never past the file's end: take(n) checks n first."""

    def __init__(self, f, size: int):
        self.f, self.size = f, size
        self.data, self.base, self.pos = bytearray(), 0, 0  # data[0] is the file's byte `base`
        self.items = 0  # array items read so far (MAX_ITEMS)

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def left(self) -> int:
        return self.size - self.offset

    def _ensure(self, n: int, what: str) -> None:
        """The next n bytes are in the buffer (read now if not): ValueError when the file has fewer."""
        if self.pos + n <= len(self.data):
            return
        if n > self.left():
            raise ValueError(f"{what} needs {n:,} bytes at byte {self.offset:,}, but the file ends "
                             f"{self.left():,} bytes later (cut short, or a count that is not true)")  # fmt: skip
        if self.pos > _CHUNK:  # forget what was read: the buffer holds about a chunk ahead
            del self.data[: self.pos]
            self.base, self.pos = self.base + self.pos, 0
        self.data += self.f.read(max(n - (len(self.data) - self.pos), _CHUNK))
        if self.pos + n > len(self.data):
            raise ValueError(f"the file ended while reading {what} at byte {self.offset:,}")

    def take(self, n: int, what: str) -> memoryview:
        self._ensure(n, what)
        self.pos += n
        return memoryview(self.data)[self.pos - n : self.pos]

    def unpack(self, fmt: str, what: str):
        values = struct.unpack(fmt, self.take(struct.calcsize(fmt), what))
        return values[0] if len(values) == 1 else values

    def string(self, what: str) -> str:
        return self.strings(1, what)[0]

    def strings(self, n: int, what: str) -> list[str]:
        """n strings, each a length and its bytes (one loop with no calls it can avoid: a vocabulary and its
        merges are 100,000 strings and more)."""
        out, unpack, data = [], _LENGTH.unpack_from, self.data
        for _ in range(n):
            if self.pos + 8 > len(data):
                self._ensure(8, what)
                data = self.data
            (length,) = unpack(data, self.pos)
            if length > MAX_STRING:
                raise ValueError(f"{what} claims a string of {length:,} bytes; at most {MAX_STRING:,} are read")
            start, self.pos = self.pos + 8, self.pos + 8
            if start + length > len(data):
                self._ensure(length, what)
                data, start = self.data, self.pos
            # surrogateescape: bytes that are not UTF-8 stay distinct (llama.cpp compares bytes, not text)
            out.append(data[start : start + length].decode("utf-8", "surrogateescape"))
            self.pos = start + length
        return out

    def count(self, n: int, what: str, least: int, cap: int) -> int:
        """A declared count of items of at least `least` bytes each, checked before any is read."""
        if n > cap:
            raise ValueError(f"{what} claims {n:,} items; at most {cap:,} are read")
        if n * least > self.left():
            raise ValueError(f"{what} claims {n:,} items, which need at least {n * least:,} bytes, but only "
                             f"{self.left():,} are left in the file")  # fmt: skip
        return n


def read_header(path, tensors: bool = True, stop_after: str | None = None) -> GGUFHeader:
    """The header of the GGUF file at path, read within bounds (ValueError when it breaks one, is cut short or
    is not GGUF; OSError when it cannot be read). tensors: read the tensor list too; stop_after: stop once
    this key's value is read (the metadata after it, and the tensors, are not read)."""
    with open(path, "rb") as f:
        cursor = _Cursor(f, os.fstat(f.fileno()).st_size)
        magic = bytes(cursor.take(4, "the magic")) if cursor.left() >= 4 else b""
        if magic != b"GGUF":
            raise ValueError(f"not a GGUF file (it starts with {magic!r}, not b'GGUF')")
        version = cursor.unpack("<I", "the version")
        if version not in VERSIONS:
            raise ValueError(f"GGUF version {version} is not supported (supported: {', '.join(map(str, VERSIONS))})")
        n_tensors, n_keys = cursor.unpack("<QQ", "the counts")
        header = GGUFHeader(version)
        cursor.count(n_keys, "the metadata", least=13, cap=MAX_KEYS)  # key length 8, type 4, a 1-byte value
        for index in range(n_keys):
            key = cursor.string(f"metadata key {index}")
            if key in header.fields:  # llama.cpp refuses it too; a header of zeros repeats "" at once
                raise ValueError(f"metadata key {key!r} is there twice")
            kind = cursor.unpack("<I", f"{key}'s type")
            header.fields[key], header.types[key] = _value(cursor, kind, key)
            if key == stop_after:
                return header
        if tensors:
            cursor.count(n_tensors, "the tensor list", least=24, cap=MAX_TENSORS)  # name 8, dims 4, type 4, offset 8
            for index in range(n_tensors):
                name, dims, kind, offset = _tensor(cursor, index)
                if name in header.tensors:
                    raise ValueError(f"tensor {name!r} is listed twice")
                header.tensors[name] = (dims, kind, offset)
            alignment = header.fields.get("general.alignment", 32)
            header.data_start = -(-cursor.offset // alignment) * alignment if isinstance(alignment, int) else 0
        return header


def _value(cursor: _Cursor, kind: int, key: str):
    """-> (value, (kind, item kind or None))."""
    if kind == STRING:
        return cursor.string(key), (kind, None)
    if kind in _NUMBERS:
        dtype = np.dtype(_NUMBERS[kind])
        return np.frombuffer(cursor.take(dtype.itemsize, key), dtype)[0].item(), (kind, None)
    if kind != ARRAY:
        raise ValueError(f"{key} has type {kind}, which GGUF does not define (0 to 12)")
    item, n = cursor.unpack("<IQ", f"{key}'s array header")
    if item == STRING:
        cursor.count(n, key, least=8, cap=MAX_ARRAY)
        _count_items(cursor, n, key)
        return cursor.strings(n, key), (kind, item)
    if item not in _NUMBERS:
        raise ValueError(f"{key} is an array of type {item}; GGUF arrays hold numbers, bools or strings")
    dtype = np.dtype(_NUMBERS[item])
    cursor.count(n, key, least=dtype.itemsize, cap=MAX_ARRAY)
    _count_items(cursor, n, key)
    return np.frombuffer(bytes(cursor.take(n * dtype.itemsize, key)), dtype), (kind, item)


def _count_items(cursor: _Cursor, n: int, key: str) -> None:
    cursor.items += n
    if cursor.items > MAX_ITEMS:
        raise ValueError(f"{key} brings the header's array items to {cursor.items:,}; at most {MAX_ITEMS:,} are read")


def _tensor(cursor: _Cursor, index: int):
    name = cursor.string(f"tensor {index}'s name")
    n_dims = cursor.unpack("<I", f"tensor {name}'s dimensions")
    if n_dims > MAX_DIMS:
        raise ValueError(f"tensor {name} has {n_dims} dimensions; a tensor has at most {MAX_DIMS}")
    dims = struct.unpack(f"<{n_dims}Q", cursor.take(8 * n_dims, f"tensor {name}'s shape"))
    kind, offset = cursor.unpack("<IQ", f"tensor {name}'s type and offset")
    return name, dims, kind, offset
