"""The Inside tab on llama.cpp (issue 28): the residual stream and attention through llama.cpp's graph callback,
the lens through the GGUF file's own final norm and output matrix; on SmolLM2 (checked against the numpy
engine's lens) and Gemma 3 270M (an architecture the numpy engine does not read)."""

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import engine
from engine.core.inside import softmax_rows
from tests.test_llamacpp import gemma3_path

TEXT = "The old lighthouse keeper opened the door and"
TEXTS = (TEXT, "Paris is the capital of", "def fibonacci(n):\n    return")


@pytest.fixture(scope="module")
def gemma3():
    loaded = engine.load_model(gemma3_path(), backend="llama.cpp", threads=1, context_length=512)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def smollm2_numpy():
    return engine.load_model("smollm2", backend="numpy")


def plain_scores(model, ids, flash: bool) -> np.ndarray:
    """The last position's scores from a context of llama.cpp's own, no callback: flash attention on (as a
    session's context) or off (as the inspection's)."""
    llama = model.llama
    params = llama.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = len(ids)
    params.n_threads = params.n_threads_batch = model.threads
    params.swa_full = True
    params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = llama.llama_init_from_model(model.handle, params)
    tokens = (ctypes.c_int32 * len(ids))(*ids)  # referenced until the decode is done
    batch = llama.llama_batch_get_one(tokens, len(ids))
    try:
        assert llama.llama_decode(ctx, batch) == 0
        return np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx, -1), shape=(model.vocab_size,)).copy()
    finally:
        llama.llama_free(ctx)


def check_inside(model, ids):
    inside = model.inside(ids)
    layers, heads = model.heads_shape
    t, d = len(ids), inside.residuals.shape[-1]
    assert inside.residuals.shape == (layers + 1, t, d) and inside.attention.shape == (layers, heads, t)
    assert inside.scores.shape == (model.vocab_size,)
    assert {a.dtype for a in (inside.residuals, inside.attention, inside.scores)} == {np.dtype(np.float32)}
    np.testing.assert_allclose(inside.attention.sum(axis=-1), 1, atol=1e-5)  # the last position sees them all
    view = engine.inside_view(model, ids)
    assert view.probs.shape == (layers + 1, model.vocab_size) and view.attention.shape == (layers, heads, t)
    np.testing.assert_allclose(view.probs.sum(axis=-1), 1, atol=1e-4)
    # the last row is the inspected forward's own distribution: llama.cpp's scores with flash attention off,
    # the callback reading (and changing) nothing
    own = softmax_rows(plain_scores(model, ids, flash=False))
    np.testing.assert_allclose(view.probs[-1], own, atol=1e-5)
    # the final layer's stream through the lens's head (float32 weights) gives the forward's own top token
    assert int(model.unembed(inside.residuals[-1, -1]).argmax()) == int(own.argmax())
    return inside, view


def test_smollm2_on_llamacpp_shows_its_layers(smollm2_llamacpp):
    assert smollm2_llamacpp.capabilities.inside
    ids = smollm2_llamacpp.tokenizer.encode(TEXT)
    inside, view = check_inside(smollm2_llamacpp, ids)
    assert inside.residuals.shape == (31, len(ids), 576) and inside.attention.shape == (30, 9, len(ids))
    assert engine.logit_lens(smollm2_llamacpp, ids).shape == (31, smollm2_llamacpp.vocab_size)
    np.testing.assert_array_equal(engine.attention_weights(smollm2_llamacpp, ids), inside.attention)


def test_gemma3_on_llamacpp_shows_its_layers_with_its_embedding_scaled(gemma3):
    from engine.backends.gguf.metadata import read_header
    from engine.backends.llamacpp.inside import ggml, read_tensor

    ids = gemma3.tokenizer.encode(TEXT)
    inside, view = check_inside(gemma3, ids)
    assert inside.residuals.shape == (19, len(ids), 640) and inside.attention.shape == (18, 4, len(ids))
    # row 0 is the stream the first layer reads: Gemma's embedding times sqrt(d), not the raw embedding
    embedding = read_tensor(ggml(gemma3.llama), gemma3_path(), read_header(gemma3_path()), "token_embd.weight")
    np.testing.assert_allclose(inside.residuals[0], embedding[ids] * np.sqrt(640), rtol=1e-4, atol=1e-4)
    # the lens's head: the file's output_norm as stored (llama.cpp's converter stores Gemma's 1 + w) gives llama.cpp's
    # own distribution from the last stream within its quantised head's noise (0.003 here; 0.12 with w = stored - 1)
    own = softmax_rows(inside.scores)
    assert np.abs(softmax_rows(gemma3.unembed(inside.residuals[-1, -1])) - own).max() < 0.02


def test_smollm2_lens_on_llamacpp_agrees_with_the_numpy_engines(smollm2_llamacpp, smollm2_numpy):
    """Every layer's top token is the numpy engine's (but where numpy's two first are within 0.05: a near tie);
    the probabilities differ by llama.cpp's quantised activations (Q8_0 products): at most 0.065 here, 0.1
    allowed (bench/inside_speed.py --llamacpp prints the figures per layer)."""
    for text in TEXTS:
        ids = smollm2_llamacpp.tokenizer.encode(text)
        ours, theirs = engine.logit_lens(smollm2_llamacpp, ids), engine.logit_lens(smollm2_numpy, ids)
        ranked = np.sort(theirs, axis=-1)
        clear = ranked[:, -1] - ranked[:, -2] > 0.05
        assert (ours.argmax(-1) == theirs.argmax(-1))[clear].all(), text
        assert np.abs(ours - theirs).max() < 0.1, text
        np.testing.assert_allclose(ours[0], theirs[0], atol=1e-4)  # the embedding row: no product of activations


def test_the_inspection_differs_from_a_sessions_row_only_by_flash_attention(smollm2_llamacpp):
    """A session's context runs flash attention; the inspection's cannot (the weights must exist): the last
    rows differ by that alone (llama.cpp's own context with flash attention off gives the inspected numbers)."""
    ids = smollm2_llamacpp.tokenizer.encode(TEXT)
    session_row = softmax_rows(smollm2_llamacpp.open_context()._scores(ids))
    inspected = softmax_rows(smollm2_llamacpp.inside(ids).scores)
    np.testing.assert_allclose(session_row, softmax_rows(plain_scores(smollm2_llamacpp, ids, flash=True)), atol=1e-5)
    assert np.abs(session_row - inspected).max() < 0.05  # 0.025 here: bench/inside_speed.py --llamacpp prints it


def test_head_scales_on_llamacpp_act_as_the_numpy_engines(smollm2_llamacpp, smollm2_numpy):
    """Scaling a layer's heads through the callback (kq_soft_max-N changed before kqv reads it) moves the
    distribution as the numpy engine's head_scales move it."""
    ids = smollm2_llamacpp.tokenizer.encode(TEXT)
    table = np.ones(smollm2_llamacpp.heads_shape, dtype=np.float32)
    table[3, :] = 0  # layer 4's heads ablated: " and" -> another top token on both engines
    changed = softmax_rows(smollm2_llamacpp.inside(ids, head_scales=table).scores)
    before = softmax_rows(smollm2_llamacpp.inside(ids).scores)
    expected = softmax_rows(smollm2_numpy.inside(ids, head_scales=table).scores)
    assert changed.argmax() != before.argmax() and changed.argmax() == expected.argmax()
    assert np.abs(changed - before).max() > 0.05 and np.abs(changed - expected).max() < 0.02  # 0.070, 0.008 here
    view = engine.inside_view(smollm2_llamacpp, ids, head_scales=table)
    np.testing.assert_allclose(view.probs[-1], changed, atol=1e-5)


def test_a_session_on_llamacpp_steers_heads_and_replays_bit_for_bit(smollm2_llamacpp):
    """Session.steer_heads on llama.cpp: the next step reads the text through the scaled heads (the numbers of
    inside(ids, head_scales)); [] puts the session's context back as it was (flash attention on, no callback);
    the trace replays identically."""
    session = engine.Session(smollm2_llamacpp, TEXT, max_new_tokens=6, temperature=0.8, seed=3)
    before = session.peek()
    session.steer_heads([(3, head, 0.0) for head in range(9)])
    steered = session.peek()
    inside = smollm2_llamacpp.inside(session.ids, head_scales=session.head_table)
    p = softmax_rows(inside.scores)
    np.testing.assert_allclose([p[i] for i in steered.token_ids], steered.raw, atol=1e-4)
    assert steered.token_ids[0] != before.token_ids[0]
    session.step(), session.step()
    session.steer_heads([])
    session.rewind(2)
    assert session.peek().raw == before.raw  # as trained again: the very numbers of before
    session.run()
    report = engine.replay(session.trace(), smollm2_llamacpp)
    assert report.identical, report.summary()


def test_a_text_longer_than_a_chunk_is_read_in_chunks_with_the_same_numbers(smollm2_llamacpp, monkeypatch):
    """The inspection decodes MAX_UBATCH positions at a time (llama.cpp's logits buffer holds one chunk's): the
    stream and the last position's attention come out as from one chunk, in order."""
    import engine.backends.llamacpp.inside as lc_inside

    ids = smollm2_llamacpp.tokenizer.encode(TEXT * 2)
    whole = smollm2_llamacpp.inside(ids)
    monkeypatch.setattr(lc_inside, "MAX_UBATCH", 5)
    chunked = smollm2_llamacpp.inside(ids)
    assert chunked.residuals.shape == whole.residuals.shape and chunked.attention.shape == whole.attention.shape
    # here: the stream and scores bit for bit, the attention within 3e-7
    np.testing.assert_allclose(chunked.residuals, whole.residuals, atol=1e-5 * np.abs(whole.residuals).max())
    np.testing.assert_allclose(chunked.attention, whole.attention, atol=1e-5)
    np.testing.assert_allclose(softmax_rows(chunked.scores), softmax_rows(whole.scores), atol=1e-5)


def test_bad_ids_are_refused_before_llamacpp_sees_them(smollm2_llamacpp):
    for ids in ([], [-1], [smollm2_llamacpp.vocab_size], [1] * 513, "abc"):
        with pytest.raises(ValueError):
            smollm2_llamacpp.inside(ids)


def test_a_stopped_model_is_not_inspected(smollm2_llamacpp):
    smollm2_llamacpp.stop_work()
    try:
        with pytest.raises(ValueError, match="stop its work"):
            smollm2_llamacpp.inside([1, 2, 3])
    finally:
        smollm2_llamacpp.stop_work(False)


def test_a_closed_model_refuses_inspection_in_a_child_process():
    """After close() the model's handle is freed: an inspection must refuse, not reach llama.cpp (a crash)."""
    script = textwrap.dedent("""
        import engine
        model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=64)
        model.inside([1, 2, 3])
        model.close()
        try:
            model.inside([1, 2, 3])
        except ValueError as error:
            print("refused:", error)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "closed" in done.stdout


def serial_grid(model, ids, positions: int):
    """The lens grid as plainly as it is defined: every layer's stream at each of the last positions through
    the lens's head, softmax, argmax; the last cell the forward's own row."""
    inside = model.inside(ids)
    probs = softmax_rows(model.unembed(inside.residuals[:, -positions:]))  # [layers + 1, P, V]
    probs[-1, -1] = softmax_rows(inside.scores)
    top = probs.argmax(-1)
    return top, np.take_along_axis(probs, top[..., None], -1)[..., 0]


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_only_the_kept_positions_are_outputs_and_their_rows_are_the_wholes(which, smollm2_llamacpp, request):
    """inside(ids, last=k): llama.cpp computes the last layer and its output head for the last k positions
    alone; their rows are those of the whole text's inspection (here: equal within 1e-5 of the stream's size)."""
    model = smollm2_llamacpp if which == "smollm2" else request.getfixturevalue("gemma3")
    ids = model.tokenizer.encode(TEXT * 2)
    whole = model.inside(ids)
    for k in (1, 4, len(ids), len(ids) + 5):
        part = model.inside(ids, last=k)
        kept = min(k, len(ids))
        assert part.residuals.shape == (whole.residuals.shape[0], kept, whole.residuals.shape[-1])
        scale = np.abs(whole.residuals).max()
        np.testing.assert_allclose(part.residuals, whole.residuals[:, -kept:], atol=1e-5 * scale)
        np.testing.assert_allclose(softmax_rows(part.scores), softmax_rows(whole.scores), atol=1e-5)
        np.testing.assert_allclose(part.attention, whole.attention, atol=1e-6)
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="last"):
            model.inside(ids, last=bad)


def test_the_layers_are_handed_over_as_llamacpp_computes_them(gemma3, monkeypatch):
    """on_layer gets rows 1..N (the stream after each layer) during the decode, each equal to the result's row,
    the last layer's before the decode returns; row 0 (the embedding) comes with the result. Over chunks
    (MAX_UBATCH 5), with the kept positions spanning two, the same."""
    import engine.backends.llamacpp.inside as lc_inside

    ids = gemma3.tokenizer.encode(TEXT)
    for chunk in (lc_inside.MAX_UBATCH, 5):
        monkeypatch.setattr(lc_inside, "MAX_UBATCH", chunk)
        handed: dict = {}
        inside = gemma3.inside(
            ids, last=7, on_layer=lambda row, stream, into=handed: into.setdefault(row, stream.copy())
        )
        assert sorted(handed) == list(range(1, 19))
        for row, stream in handed.items():
            np.testing.assert_array_equal(stream, inside.residuals[row])


def test_a_failing_receiver_stops_the_inspection_and_the_model_goes_on(smollm2_llamacpp):
    ids = smollm2_llamacpp.tokenizer.encode(TEXT)

    def failing(row, stream):
        if row == 3:
            raise ValueError("the receiver gave up at row 3")

    with pytest.raises(ValueError, match="gave up at row 3"):
        smollm2_llamacpp.inside(ids, last=4, on_layer=failing)
    assert smollm2_llamacpp.inside(ids, last=4).residuals.shape[1] == 4


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_the_grid_made_while_llamacpp_decodes_is_the_plain_grid(which, smollm2_llamacpp, request):
    """inside_view unembeds the grid on a thread of its own while the decode hands layers over (lens_grid.py):
    the same tops and probabilities as the grid made plainly after the forward."""
    model = smollm2_llamacpp if which == "smollm2" else request.getfixturevalue("gemma3")
    ids = model.tokenizer.encode(TEXT * 3)
    view = engine.inside_view(model, ids, grid_positions=6)
    top, p = serial_grid(model, ids, 6)
    assert view.grid_positions == tuple(range(len(ids) - 6, len(ids)))
    np.testing.assert_array_equal(view.grid_top, top)
    np.testing.assert_allclose(view.grid_p, p, atol=1e-5)
    np.testing.assert_allclose(view.probs[:, view.grid_top[:, -1]].diagonal(), view.grid_p[:, -1], atol=1e-6)
