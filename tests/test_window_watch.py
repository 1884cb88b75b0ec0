"""The window watches a server (issue 29: File > Watch a server...): a request another client makes on a running
`python -m engine serve` appears in the view as it runs, token by token with its chart, and its trace opens when
it is done (Replay then checks it: identical on the same model). A server that is not there is said."""

import json

import openai
from PySide6.QtWidgets import QDialog
from test_serve import served

import engine
from playground.watch.menu import WatchDialog

WAIT = 60000


def test_a_served_request_appears_live_and_its_trace_opens(qtbot, window, story_model, monkeypatch):
    prompt = "mia has a red ball. she goes to the park."
    with served(story_model, api_key="k3y") as url:

        def filled_in(dialog):  # the dialog as a person fills it: the URL, and the server's key
            dialog.url.setText(url)
            dialog.key.setText("k3y")
            return QDialog.DialogCode.Accepted

        monkeypatch.setattr(WatchDialog, "exec", filled_in)
        window.findChild(type(window.replay_action), "watchServerAction").trigger()
        assert window.controller.watching.watching and "Watching" in window.message_label.text()
        qtbot.wait(1500)  # the watch stream is open before the request is made
        client = openai.OpenAI(base_url=url, api_key="k3y", max_retries=0)
        answer = client.completions.create(
            model=story_model.name, prompt=prompt, max_tokens=12, temperature=0.7, seed=9
        )
        qtbot.waitUntil(lambda: window.controller.traces.viewed is not None, timeout=WAIT)
        expected = engine.generate(story_model, prompt, max_new_tokens=12, temperature=0.7, seed=9)
        view = window.token_view
        assert view.step_count() == len(expected.steps)
        assert [view.step(i).token for i in range(view.step_count())] == [s.token for s in expected.steps]
        assert window.controls.prompt.toPlainText() == prompt
        assert window.controls.max_tokens.value() == 12 and window.controls.settings()["temperature"] == 0.7
        assert answer.id in window.message_label.text() and "done" in window.message_label.text()
        assert window.replay_action.isEnabled()
        window.controller.traces.replay()
        qtbot.waitUntil(lambda: "Replay:" in window.message_label.text(), timeout=WAIT)
        assert "identical" in window.message_label.text()
        window.findChild(type(window.replay_action), "stopWatchingAction").trigger()
        assert not window.controller.watching.watching


def test_watching_leaves_the_persons_session_as_it_was(qtbot, window, story_model, monkeypatch):
    """Watching opens the watched requests in a session of their own; Stop watching (the status bar's button)
    brings back the person's own: its text, tree, prompt box and Max new exactly as they were."""
    from test_window import generate, type_prompt

    type_prompt(qtbot, window, "ben has a blue cup.")
    window.controls.max_tokens.setValue(30)
    window.controls.temperature.setValue(1.0)
    window.rules_panel.add_rule(" cup", "insert", " and a hat")
    generate(qtbot, window)
    text, nodes = window.token_view.whole_text(), len(window.tree_panel.nodes)
    settings, title = window.controls.settings(), window.windowTitle()
    with served(story_model) as url:
        window.controller.watching.start(url)
        assert window.controller.documents.parked and window.windowTitle().startswith(f"Watching {url}")
        qtbot.wait(1500)  # the watch stream is open before the request is made
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        client.completions.create(model=story_model.name, prompt="mia has a red ball.", max_tokens=12, seed=9)
        qtbot.waitUntil(lambda: window.controller.traces.viewed is not None, timeout=WAIT)
        assert window.controls.max_tokens.value() == 12 and window.token_view.whole_text() != text
        back = window.controller.watching.back
        assert back.isVisible()
        with qtbot.waitSignal(window.controller.documents.opened, timeout=WAIT) as opened:
            back.click()
    assert opened.args == [True, "back"] and not back.isVisible()
    window.controller.flush()
    assert window.token_view.whole_text() == text and len(window.tree_panel.nodes) == nodes
    assert window.controls.prompt.toPlainText() == "ben has a blue cup." and window.controls.settings() == settings
    assert window.rules_panel.all_rules()[0].when == " cup"
    assert window.windowTitle() == title and not window.controller.watching.watching
    assert window.message_label.text().startswith("Back to your session (Untitled): identical: ")


def test_a_server_that_is_not_there_is_said(qtbot, window):
    window.controller.watching.start("http://127.0.0.1:9/v1")
    qtbot.waitUntil(lambda: "Stopped watching" in window.message_label.text(), timeout=WAIT)
    assert "could not watch" in window.message_label.text() and not window.controller.watching.watching


def test_a_trace_the_server_kept_opens_in_the_window_and_replays_identical(qtbot, window, story_model, tmp_path):
    with served(story_model, traces=tmp_path) as url:
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        answer = client.completions.create(model=story_model.name, prompt="ben has a gold toy.", max_tokens=15,
                                           temperature=1.0, extra_body={"steer": [{"at": "ben", "insert": " and leo"}]})  # fmt: skip
    trace = window.open_trace(tmp_path / f"{answer.id}.json")
    assert window.token_view.step_count() == len(trace["steps"]) and window.replay_action.isEnabled()
    window.replay_action.trigger()
    qtbot.waitUntil(lambda: "Replay:" in window.message_label.text(), timeout=WAIT)
    assert "identical" in window.message_label.text()


def test_a_tool_call_is_watched_as_the_steered_json_it_is(qtbot, window, smollm2_llamacpp, monkeypatch):
    """A request with tools (issue 44): the window shows the tool call as the model wrote it under the grammar,
    token by token, and the client gets it as OpenAI's tool_calls."""
    from test_serve_tools import ADD, ASK

    with served(smollm2_llamacpp, model_id="smollm2") as url:
        monkeypatch.setattr(WatchDialog, "exec", lambda dialog: dialog.url.setText(url) or QDialog.DialogCode.Accepted)
        window.findChild(type(window.replay_action), "watchServerAction").trigger()
        qtbot.wait(1500)  # the watch stream is open before the request is made
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        answer = client.chat.completions.create(model="smollm2", messages=ASK, tools=[ADD], tool_choice="required",
                                                max_tokens=48, temperature=0)  # fmt: skip
        qtbot.waitUntil(lambda: window.controller.traces.viewed is not None, timeout=WAIT)
        call = answer.choices[0].message.tool_calls[0]
        shown = "".join(window.token_view.step(i).token for i in range(window.token_view.step_count()))
        assert call.function.name == "add" and shown.endswith("<|im_end|>")
        written = json.loads(shown.removesuffix("<|im_end|>"))  # what the grammar let the model write, whole
        assert written["tool_call"]["name"] == "add"
        assert written["tool_call"]["arguments"] == json.loads(call.function.arguments)
        assert "<|im_start|>user\nWhat is 2 plus 3?" in window.controls.prompt.toPlainText()  # the template's
        assert (
            "grammar" in window.controller.traces.viewed["settings"]
            and window.controller.traces.viewed["settings"]["grammar"]
        )
        window.findChild(type(window.replay_action), "stopWatchingAction").trigger()
