"""Issue 13: SmolLM2 run in-process by llama.cpp, in the real window offscreen. Its byte-level tokens split
a character such as 🍕 (f0 9f 8d 95) over tokens that each decode to U+FFFD. What a person sees (the token
view, the chart's bars and title, the hover) shows the character once its bytes are complete and the bytes
as hex (‹f0 9f›) until then, never U+FFFD; the steps' ids stay the model's own."""

import threading
import time

import pytest
from conftest import shown_window
from PySide6.QtCore import QMetaObject, Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel, QPlainTextEdit, QPushButton
from test_window import WAIT, click_bar, generate, step, type_prompt

import engine

pytest.importorskip("llama_cpp")
QUEUED = Qt.ConnectionType.QueuedConnection

FFFD = "\ufffd"
# One token of SmolLM2's vocabulary is the character U+FFFD itself: a bar may show that one as it is.
FFFD_TOKEN = FFFD.encode()


@pytest.fixture(scope="module")
def smollm2(smollm2_llamacpp):
    return smollm2_llamacpp


@pytest.fixture
def win(qtbot, smollm2, prefs):
    """The real window on llama.cpp's SmolLM2; win.charts lists every chart it showed: (title, bar labels,
    candidates), the live ones while generating included."""
    window = shown_window(qtbot, smollm2, prefs)
    assert window.controls.samplers.heal.isChecked()  # on by default for a GGUF file...
    window.controls.samplers.heal.setChecked(False)  # ...off here: these tests insert text and read its tokens
    window.charts = []
    show = window.chart.show_candidates

    def recording(candidates, chosen_id, title, labels=None):
        show(candidates, chosen_id, title, labels)
        window.charts.append((title, window.chart.labels(), candidates))

    window.chart.show_candidates = recording
    yield window
    window.close()


def whole(data: bytes) -> bool:
    """Whether these bytes are whole characters (not a character's start, middle or end)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def insert(qtbot, win, text):
    with qtbot.waitSignal(win.controller.idle, timeout=WAIT):
        win.insert_edit.setText(text)  # QTest cannot type a character outside the BMP
        qtbot.mouseClick(win.insert_button, Qt.MouseButton.LeftButton)
    win.controller.flush()


def select(win, index):
    """Click-select step `index` in the view (-1: none): the chart shows that step (or the next token)."""
    win.token_view.select(index)
    win.controller.token_selected(index)
    win.chart.flush()


def unreadable_bars(win, tokenizer) -> list:
    """(label, token id, bytes) of every bar shown so far with U+FFFD in its text (but the U+FFFD token)."""
    return [
        (label, token_id, tokenizer.token_bytes(token_id))
        for _title, labels, candidates in win.charts
        if candidates is not None
        for label, token_id in zip(labels, candidates.token_ids)
        if FFFD in label and FFFD_TOKEN not in tokenizer.token_bytes(token_id)
    ]


def assert_nothing_shows_fffd(win, tokenizer):
    view = win.token_view
    assert FFFD not in view.toPlainText()
    for index in range(view.step_count()):
        assert FFFD not in view.tooltip_html(index), index
        select(win, index)
    select(win, -1)
    assert win.charts and all(FFFD not in title for title, _labels, _candidates in win.charts)
    assert unreadable_bars(win, tokenizer) == []


def test_an_inserted_emoji_shows_once_complete_and_keeps_its_ids(qtbot, win, smollm2):
    tokenizer, view = smollm2.tokenizer, win.token_view
    type_prompt(qtbot, win, "Name a food.")
    insert(qtbot, win, " pizza 🍕!")
    steps = view.steps()
    ids = [s.token_id for s in steps]
    assert ids == tokenizer.encode(" pizza 🍕!")  # the ids stay exact
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == " pizza 🍕!".encode()
    first = next(i for i, s in enumerate(steps) if FFFD in s.token)  # the engine's text per token has U+FFFD
    assert [view.piece(i) for i in range(first, first + 3)] == [" 🍕", "", ""]  # on the token of its first byte
    assert view.toPlainText().endswith(" pizza 🍕!")
    for index in range(first, first + 3):  # hovering any of its tokens names the character
        assert "🍕" in view.tooltip_html(index)
    select(win, first + 1)  # its candidates are still bytes of the character: shown as hex
    assert "‹f0 9f 8d›" in win.chart.title.text() and "‹f0 9f 8d›" in win.chart.labels()  # the step's own bar
    select(win, first + 2)  # its candidates complete the character: whole emoji on the bars
    assert win.chart.labels()[list(steps[first + 2].candidates.token_ids).index(ids[first + 2])] == "🍕"
    assert sum(len(label) == 1 and ord(label) > 0xFFFF for label in win.chart.labels()) >= 10
    assert_nothing_shows_fffd(win, tokenizer)


def partial_bar(win, tokenizer, pending: bytes) -> tuple[int, int, bytes]:
    """(row, token id, bytes) of the likeliest bar whose token goes on with the character being spelled
    (or, with nothing pending, starts one): bytes that are not whole characters."""
    win.chart.flush()
    for row, token_id in enumerate(win.charts[-1][2].token_ids):
        data = tokenizer.token_bytes(token_id)
        if not whole(data) and (not pending or not whole(data[:1])):
            return row, token_id, data
    raise AssertionError(f"no bar goes on with {pending!r}: {win.chart.labels()}")


def test_clicking_an_emojis_byte_bars_spells_it_one_token_at_a_time(qtbot, win, smollm2):
    """After "🍕!" the model's likeliest next token is an emoji's first bytes: click bar after bar until the
    character is whole. Until then the bar, the view and the hover show its bytes; then the character."""
    tokenizer, view = smollm2.tokenizer, win.token_view
    type_prompt(qtbot, win, "Name a food.")
    insert(qtbot, win, " pizza 🍕!")
    start, clicked, pending = view.step_count(), [], b""
    while True:
        row, token_id, data = partial_bar(win, tokenizer, pending)
        label = win.chart.labels()[row]
        if whole(pending + data):
            assert label == (pending + data).decode().strip()  # the character it completes (not the space before)
        else:
            assert "‹" in label and FFFD not in label  # still bytes: as hex
        with qtbot.waitSignal(win.controller.idle, timeout=WAIT):
            click_bar(qtbot, win, row)
        win.controller.flush()
        clicked.append(token_id)
        pending += data
        assert [s.token_id for s in view.steps()[start:]] == clicked  # the ids stay exact
        assert all(s.source == "forced" for s in view.steps()[start:])
        shown = "".join(view.piece(i) for i in range(start, view.step_count()))
        assert FFFD not in view.toPlainText() and FFFD not in view.tooltip_html(view.step_count() - 1)
        if whole(pending):
            break
        assert shown.endswith("›") and "‹" in shown  # incomplete: its bytes as hex
        assert len(clicked) < 4, "a character has at most 4 bytes"
    character = pending.decode()
    assert len(clicked) >= 2 and any(ord(c) > 0xFFFF for c in character)  # an emoji, split over tokens
    assert shown == character and view.toPlainText().endswith(character)
    assert character.strip() in view.tooltip_html(start)
    assert_nothing_shows_fffd(win, tokenizer)


def test_generated_cjk_text_step_by_step_never_shows_fffd(qtbot, win, smollm2):
    """Chinese text, then the model's own steps one at a time (each its own batch, so a character's bytes
    arrive in separate updates), then a generated run (live charts). Some charts' candidates are a
    character's middle bytes with no character begun (here token 233, byte 8f): shown as hex."""
    tokenizer, view = smollm2.tokenizer, win.token_view
    type_prompt(qtbot, win, "Say hello in Chinese.")
    insert(qtbot, win, " 中文")
    start = view.step_count() - len(tokenizer.encode(" 中文"))
    for _ in range(6):
        step(qtbot, win)
    win.controls.max_tokens.setValue(12)
    with qtbot.waitSignal(win.controller.runFinished, timeout=WAIT * 4):
        qtbot.mouseClick(win.controls.generate, Qt.MouseButton.LeftButton)
    win.controller.flush()
    data = b"".join(tokenizer.token_bytes(s.token_id) for s in view.steps()[start:])
    assert data.startswith(" 中文".encode())
    complete = max(end for end in range(len(data) + 1) if whole(data[:end]))  # the run may stop mid-character
    shown = "".join(view.piece(i) for i in range(start, view.step_count()))
    text = data[:complete].decode()
    assert shown.startswith(text)
    rest = shown[len(text) :]  # a character not complete yet: its bytes as hex
    assert (rest == "") if complete == len(data) else (rest[0] == "‹" and rest[-1] == "›")
    assert any(FFFD in s.token for s in view.steps())  # the tokens themselves do split characters
    assert_nothing_shows_fffd(win, tokenizer)


@pytest.mark.parametrize("pending", [b"", b"\xc3", b"\xe4", b"\xe4\xb8", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x8d"])
def test_every_partial_token_has_a_readable_label(win, smollm2, pending):
    """Every token of the vocabulary that is not whole characters, as a bar or the hover would show it after
    the bytes of a character begun earlier (or none): the character it completes, or hex; never U+FFFD."""
    tokenizer, view = smollm2.tokenizer, win.token_view
    checked = 0
    for token_id in range(tokenizer.vocab_size):
        data = tokenizer.token_bytes(token_id)
        if whole(data) and not pending:
            continue
        label = view.label(pending, token_id, tokenizer.decode([token_id]))
        assert label and (FFFD not in label or FFFD_TOKEN in data), (token_id, data, label)
        if pending and whole(pending + data):
            assert label == (pending + data).decode(), (token_id, data)
        checked += 1
    assert checked > (100 if not pending else 40_000)


# --- issue 14: healing and grammars in the window (llama.cpp backend) -------------------------------------
def test_a_grammar_from_the_examples_constrains_the_answer_and_the_chart_shows_it(qtbot, win):
    panel = win.controls.samplers
    heal = win.findChild(QCheckBox, "healBox")
    assert heal.isEnabled()
    heal.setChecked(True)
    examples, grammar = win.findChild(QComboBox, "grammarExamples"), win.findChild(QPlainTextEdit, "grammarEdit")
    assert grammar.isEnabled() and win.findChild(QLabel, "grammarNote").isHidden()
    examples.activated.emit(examples.findText("yes or no"))
    assert grammar.toPlainText() == 'root ::= ("yes" | "no") "."' and panel.values()["grammar"] == grammar.toPlainText()
    type_prompt(qtbot, win, "Is the sky blue? Answer yes or no.")
    win.controls.max_tokens.setValue(6)
    assert generate(qtbot, win) == "end of text"
    answer = "".join(step.token for step in win.token_view.steps())
    assert answer.removesuffix("<|im_end|>") in ("yes.", "no.")
    first = win.token_view.steps()[0]
    assert first.candidates.stage_names[0] == "grammar" and first.candidates.removed_by[0] == "grammar"  # "Yes"
    win.chart.set_stage("final")  # under greedy: what the grammar removed, and what greedy chose from
    select(win, 0)
    assert win.chart.value_texts()[0] == "removed by grammar" and 0 in win.chart.removed_rows()
    taken = win.chart._candidates.token_ids.index(first.token_id)
    assert taken not in win.chart.removed_rows() and win.chart.marked() == [taken]
    trace = win.controller.traces.trace()
    assert trace["settings"]["grammar"] == grammar.toPlainText() and trace["settings"]["heal"] is True

    grammar.setPlainText("root ::= (")  # a grammar that does not parse: llama.cpp's message, nothing runs
    with qtbot.waitSignal(win.controller.message, timeout=WAIT) as blocker:
        qtbot.mouseClick(win.findChild(QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
        qtbot.mouseClick(win.findChild(QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    assert "the grammar does not parse" in blocker.args[0] and "expecting ')'" in blocker.args[0]


def test_stop_ends_a_long_grammar_step_at_once_and_the_next_run_works(qtbot, win, smollm2):
    """Issue 25: Stop did nothing until a grammar's step was over (10 s, 90 s for the issue's grammars). Now
    the Stop button tells the model to stop its work, and the step ends between chunks of the vocabulary."""
    grammar = "root ::= (" + " ".join(['"a"?'] * 60) + ' " ")+'  # every step checks each token against ~60 stacks
    win.findChild(QPlainTextEdit, "grammarEdit").setPlainText(grammar)  # 0.3-0.5 s a step here
    type_prompt(qtbot, win, "Write:")
    win.controls.max_tokens.setValue(8)
    stop_button, stepped_at = win.findChild(QPushButton, "stopButton"), []

    def on_step(_step):  # in the worker's thread as each step is done: Stop is clicked a quarter into the 4th
        stepped_at.append(time.perf_counter())
        if len(stepped_at) == 3:
            quarter = (stepped_at[2] - stepped_at[1]) / 4
            threading.Timer(quarter, QMetaObject.invokeMethod, (stop_button, "click", QUEUED)).start()

    win.controller.worker.stepped.connect(on_step, Qt.ConnectionType.DirectConnection)
    try:
        assert generate(qtbot, win) == "stopped by you"
    finally:
        win.controller.worker.stepped.disconnect(on_step)
    step_s = stepped_at[2] - stepped_at[1]
    stopped_s = time.perf_counter() - stepped_at[2] - step_s / 4  # from the click
    assert len(stepped_at) == 3 and stopped_s < step_s / 3, (stopped_s, step_s)  # was the step's rest: 3/4
    assert not smollm2.work_stopped and "failed" not in win.message_label.text()
    generate(qtbot, win)
    assert len(win.session().steps) > 3  # the model works again: the next run went on
    assert engine.replay(win.session().trace(), smollm2).identical


def test_the_story_model_offers_healing_but_no_grammar(qtbot, window):
    assert window.findChild(QCheckBox, "healBox").isEnabled() and not window.findChild(QCheckBox, "healBox").isChecked()
    assert not window.findChild(QPlainTextEdit, "grammarEdit").isEnabled()
    note = window.findChild(QLabel, "grammarNote")
    assert not note.isHidden() and "llama.cpp" in note.text()  # (on the Samplers tab)
    assert window.controls.settings()["grammar"] is None
