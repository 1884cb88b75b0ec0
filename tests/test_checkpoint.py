import json
import shutil

import numpy as np
import pytest

import engine
from engine.story import checkpoint
from engine.story import corpus as stories
from engine.story.checkpoint import TOKENIZER_FILE, WEIGHTS_FILE


@pytest.fixture
def copy_of_shipped(tmp_path):
    for name in (WEIGHTS_FILE, TOKENIZER_FILE):
        shutil.copy(checkpoint.resources_dir() / name, tmp_path / name)
    return tmp_path


def rewrite_npz(path, change):
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    change(arrays)
    np.savez(path, **arrays)


def test_shipped_checkpoint_loads_and_records_its_training():
    model = engine.load_model()
    assert model.name == "story model"
    assert len(model.weights_sha256) == 64
    with np.load(checkpoint.resources_dir() / WEIGHTS_FILE) as npz:
        header = json.loads(str(npz["header"]))
    assert set(header["signature"]) == {"config", "tokenizer", "corpus"}
    assert header["training"]["seconds"] <= 300


def test_a_copy_loads_by_directory_or_file(copy_of_shipped):
    by_dir = engine.load_model(copy_of_shipped)
    by_file = engine.load_model(copy_of_shipped / WEIGHTS_FILE)
    assert by_dir.weights_sha256 == by_file.weights_sha256 == engine.load_model().weights_sha256


def test_truncated_checkpoint_is_refused(copy_of_shipped):
    path = copy_of_shipped / WEIGHTS_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="truncated or corrupted"):
        engine.load_model(copy_of_shipped)


def test_flipped_bytes_are_refused(copy_of_shipped):
    path = copy_of_shipped / WEIGHTS_FILE
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(16)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        engine.load_model(copy_of_shipped)


def test_changed_weights_are_refused_by_the_recorded_hash(copy_of_shipped):
    def nudge(arrays):
        arrays["head.b"] = arrays["head.b"] + np.float32(0.001)

    rewrite_npz(copy_of_shipped / WEIGHTS_FILE, nudge)
    with pytest.raises(ValueError, match="weights do not match the hash"):
        engine.load_model(copy_of_shipped)


def test_weights_of_the_wrong_shape_are_refused(copy_of_shipped):
    def shrink(arrays):
        arrays["head.b"] = arrays["head.b"][:50]

    rewrite_npz(copy_of_shipped / WEIGHTS_FILE, shrink)
    with pytest.raises(ValueError, match=r"weight head.b is float32\[50\], the config needs float32\[96\]"):
        engine.load_model(copy_of_shipped)


def test_a_different_tokenizer_is_refused(copy_of_shipped):
    path = copy_of_shipped / TOKENIZER_FILE
    data = json.loads(path.read_text())
    data["merges"][-1], data["merges"][-2] = data["merges"][-2], data["merges"][-1]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="trained with a different tokenizer"):
        engine.load_model(copy_of_shipped)


def test_a_different_config_in_the_header_is_refused(copy_of_shipped):
    def edit(arrays):
        header = json.loads(str(arrays["header"]))
        header["config"]["n_heads"] = 4
        arrays["header"] = np.array(json.dumps(header))

    rewrite_npz(copy_of_shipped / WEIGHTS_FILE, edit)
    with pytest.raises(ValueError, match="trained with a different config"):
        engine.load_model(copy_of_shipped)


def test_a_changed_corpus_is_refused(copy_of_shipped, monkeypatch):
    train, dev, test = stories.split()
    monkeypatch.setattr(stories, "split", lambda: (train[1:], dev, test))
    with pytest.raises(ValueError, match="trained with a different corpus"):
        engine.load_model(copy_of_shipped)


def test_missing_files_and_other_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint"):
        engine.load_model(tmp_path)
    (tmp_path / WEIGHTS_FILE).write_text("hello")
    with pytest.raises(ValueError, match="truncated or corrupted"):
        engine.load_model(tmp_path)


def test_saving_is_atomic_and_round_trips(tmp_path, story_model):
    checkpoint.save_story_model(
        tmp_path, story_model.params, story_model.config, story_model.tokenizer, checkpoint.corpus_signature()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [WEIGHTS_FILE, TOKENIZER_FILE]  # no temp files left
    assert engine.load_model(tmp_path).weights_sha256 == story_model.weights_sha256
