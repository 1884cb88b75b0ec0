"""Issue 24, the defaults: llama.cpp's default thread count, and the speed figures the status bar shows while
a run goes (generation tokens/s without the prompt, the time to the first token, the prompt's evaluation
speed) beside what runs the model (engine, threads, context size)."""

import re
from types import SimpleNamespace

import pytest
from conftest import shown_window
from test_window import WAIT, generate, type_prompt

import engine
from engine.backends.llamacpp import threads
from engine.core.timing import ForwardTiming
from engine.story.model import StoryModel
from playground.run_speed import RunClock, runtime_text


class Clock:
    """A clock of the test's own: it moves only when the model computes (see timed_story)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed_story(model, clock=None, prompt_seconds=2.0, token_seconds=0.1, sleep=0.0):
    """The story model, whose forward passes take `prompt_seconds` on `clock` for more than one token (a
    prompt) and `token_seconds` for one; `sleep`: real seconds each pass takes besides."""
    import time

    class Timed(StoryModel):
        def forward_cached(self, ids, cache, last_only=False, head_scales=None):
            if clock is not None:
                clock.now += prompt_seconds if len(ids) > 1 else token_seconds
            time.sleep(sleep)
            return super().forward_cached(ids, cache, last_only=last_only, head_scales=head_scales)

    return Timed(model.params, model.config, model.tokenizer, model.name, model.weights_sha256)


# --- the figures ---------------------------------------------------------------------------------------------
def test_the_generation_rate_counts_the_tokens_after_the_first_over_the_time_since_it():
    clock = Clock()
    run = RunClock(clock)
    timing = ForwardTiming()
    timing.add(5, 1.0)  # an earlier run's passes are not this run's prompt
    run.start(timing)
    timing.add(40, 0.5)  # the prompt, read before the first token
    clock.now = 2.0
    assert run.stepped()  # the first token is shown at once
    first = run.figures()
    assert first.first_token_seconds == 2.0 and first.generation_rate is None
    assert (first.prompt_tokens, first.prompt_seconds, first.prompt_rate) == (40, 0.5, 80.0)
    clock.now = 2.1
    assert not run.stepped()  # later ones at most every UPDATE_SECONDS
    clock.now = 2.4
    assert run.stepped()
    figures = run.figures()
    assert figures.steps == 3 and figures.generation_rate == pytest.approx(2 / 0.4)
    assert figures.first_token_seconds == 2.0 and figures.prompt_tokens == 40  # the first token's, kept


def test_a_three_token_run_reports_its_generation_rate_without_the_prompt(qtbot, story_model, prefs):
    """The prompt takes 2 s, each later token 0.1 s: 3 tokens are 2 / (t3 - t1) = 10 tokens/s (the window
    said 3 / 2.2 s = 1.4 tokens/s, the prompt counted)."""
    clock = Clock()
    window = shown_window(qtbot, timed_story(story_model, clock), prefs)
    window.controller.worker.run_clock = RunClock(clock)
    window.controls.max_tokens.setValue(3)
    with qtbot.waitSignal(window.controller.worker.finished, timeout=WAIT) as finished:
        generate(qtbot, window)
    assert finished.args[1] == pytest.approx(2 / 0.2)
    assert window.token_view.step_count() == 3
    shown = window.speed_label.text()
    assert re.fullmatch(r"10(\.0)? tokens/s · first token 2\.00 s · prompt [\d,.]+ tokens/s", shown), shown
    prompt = len(story_model.tokenizer.encode(window.controls.prompt.toPlainText()))
    assert f"3 tokens; the model read {prompt} tokens" in window.speed_label.toolTip()
    window.close()


def test_the_status_bar_says_what_runs_and_the_rate_while_generating(qtbot, story_model, prefs):
    window = shown_window(qtbot, timed_story(story_model, sleep=0.02), prefs)  # ~50 tokens/s: a run of ~1 s
    size = window.size()
    assert window.runtime_label.text() == "numpy · story model · ctx 64"
    assert window.runtime_label.isVisible() and window.speed_label.text() == ""
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(40)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        window.controller.generate()
        qtbot.waitUntil(lambda: "tokens/s ·" in window.speed_label.text(), timeout=WAIT)
        assert window.controller.running and window.stop_reason.text() == "Generating..."  # live, not at the end
        live = window.speed_label.text()
    assert re.fullmatch(r"\d+ tokens/s · first token 0\.\d\d s · prompt [\d,.]+ tokens/s", live), live
    after = window.speed_label.text()
    rate = float(after.split(" tokens/s")[0])
    assert 20 < rate < 55, after  # at most one token per 20 ms: the prompt read is not in it
    assert window.runtime_label.text() == "numpy · story model · ctx 64" and window.size() == size
    window.close()


def test_runtime_text_names_the_engine_threads_and_context():
    llama = SimpleNamespace(describe=lambda: {"backend": "llama.cpp"}, threads=2, context_length=512)
    server = SimpleNamespace(describe=lambda: {"url": "http://127.0.0.1:8080"}, context_length=4096)
    gguf = SimpleNamespace(describe=lambda: {}, source="/m/smollm2.gguf", name="smollm2", context_length=2048)
    assert runtime_text(llama) == "llama.cpp · 2 threads · ctx 512"
    assert runtime_text(server) == "server http://127.0.0.1:8080 · ctx 4096"
    assert runtime_text(gguf) == "numpy · GGUF · ctx 2048"


# --- llama.cpp's default threads ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 1), (4, 3), (8, 7)])
def test_the_default_thread_count_leaves_a_core_free(monkeypatch, cores, expected):
    monkeypatch.setattr(threads, "physical_cores", lambda: cores)
    assert threads.default_threads() == expected


def test_the_settings_dialog_says_what_the_default_threads_are_and_why(qtbot):
    from playground.models.settings_dialog import ModelSettingsDialog

    found = SimpleNamespace(name="m", backends=("llama.cpp",), path="/m.gguf", architecture="llama", size=2**20)
    dialog = ModelSettingsDialog(found, {})
    qtbot.addWidget(dialog)
    assert dialog.threads.specialValueText() == f"default: {threads.default_threads()} (every core but one, at least 1)"
    assert "spin" in dialog.threads.toolTip() and dialog.values()["threads"] is None


def test_smollm2_on_llama_cpp_shows_its_default_threads_in_the_window(qtbot, prefs):
    pytest.importorskip("llama_cpp")
    model = engine.load_model("smollm2", backend="llama.cpp")
    try:
        assert model.threads == threads.default_threads()
        window = shown_window(qtbot, model, prefs)
        count = model.threads
        assert window.runtime_label.text() == f"llama.cpp · {count} thread{'s' * (count > 1)} · ctx 8192"
        if threads.physical_cores() <= 2:  # this project's machine
            assert window.runtime_label.text() == "llama.cpp · 1 thread · ctx 8192"
        window.close()
    finally:
        model.close()
