"""The window's side of watching a server (File > Watch a server...): every request a running `python -m engine
serve` answers, shown live as a local run is (its prompt, each token into the view with its chart), and its
trace opened when it ends (Replay then checks it against the window's model).

The server's watch stream (GET /v1/playground/watch: engine/serve/watch.py) is read on a thread of its own,
never the GUI's; each event reaches the GUI as a queued signal. What the server sends is checked before it is
shown (Step.from_dict, validate_trace): a malformed event ends the watch with a sentence, never a crash."""

import json
import threading

import httpx
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

import engine

from .menu import back_button


class Watching(QObject):
    eventArrived = Signal(object)  # from the reading thread: one event of the watch stream, parsed
    watchEnded = Signal(str)  # from the reading thread: why the stream ended ("" when asked to stop)

    name = "watching"

    def __init__(self, host):
        super().__init__(host)
        self.host, self.window = host, host.window
        self.url: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._request: str | None = None  # the request shown now
        self.live = False  # a watched request is running: the feed shows its steps as a local run's
        self.back = back_button(host.window)  # in the status bar while watching: a click brings the session back
        self.back.clicked.connect(self.stop)
        self.stop_action = host.window.findChild(QAction, "stopWatchingAction")  # (the menu is made before this)
        self.stop_action.setEnabled(False)
        self.eventArrived.connect(self._on_event)
        self.watchEnded.connect(self._on_ended)

    @property
    def watching(self) -> bool:
        return self._thread is not None

    def start(self, url: str, api_key: str | None = None) -> None:
        """Follow the server at url (its /v1 root, e.g. http://127.0.0.1:8000/v1); ValueError for a URL that is
        not http(s)."""
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a server's URL starts with http:// or https://, got {url!r}")
        self._end_reading()
        if not self.host.documents.park():  # the person's session set aside, as it is (said if it cannot be)
            return
        self.host.reset()  # the watched requests' session of their own: nothing done here reaches the person's
        self.url, self._stop = url, threading.Event()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._thread = threading.Thread(target=self._read, args=(url, headers, self._stop), daemon=True,
                                        name="watch a server")  # fmt: skip
        self._thread.start()
        self.back.show()
        self.stop_action.setEnabled(True)
        self.host.documents.show_title()
        self.host.status(f"Watching {url}: its requests appear here as they run; Stop watching brings your session "
                         "back as it was.")  # fmt: skip

    def stop(self) -> None:
        """Stop watching: the window goes back to the person's session exactly as it was."""
        self._end_reading()
        self.host.feed.set_live(False)
        self.back.hide()
        self.stop_action.setEnabled(False)
        self.host.documents.unpark()

    def _end_reading(self) -> None:
        self.live = False
        if self._thread is not None:
            self._stop.set()  # the reader sees it at the server's next ping (every second) or event
            self._thread = None

    def _read(self, url: str, headers: dict, stop: threading.Event) -> None:
        """The reading thread: the watch stream's events, until stop is set or the stream ends."""
        why = ""
        try:
            with httpx.stream("GET", f"{url}/playground/watch", headers=headers, timeout=30) as response:
                if response.status_code != 200:
                    response.read()
                    raise ValueError(f"the server answered {response.status_code}: {response.text[:200]}")
                for line in response.iter_lines():
                    if stop.is_set():
                        break
                    if line.startswith("data: "):
                        self.eventArrived.emit(json.loads(line[len("data: ") :]))
                else:
                    why = "the server ended the watch"
        except (httpx.HTTPError, ValueError) as error:  # json's errors are ValueErrors too
            why = f"could not watch {url}: {error}"
        if not stop.is_set():
            self.watchEnded.emit(why)

    def _on_event(self, event) -> None:
        if not self.watching or not isinstance(event, dict):
            return
        try:
            kind = event.get("kind")
            if kind == "start":
                self._started(event)
            elif kind == "step" and event.get("request") == self._request:
                self._stepped(event)
            elif kind == "end" and event.get("request") == self._request:
                self._ended(event)
        except (ValueError, TypeError, KeyError) as error:  # what the server sent is not what it should be
            self._end_reading()
            self.host.status(f"Stopped watching {self.url}: it sent {error}", error=True)

    def _started(self, event: dict) -> None:
        if not isinstance(event.get("prompt"), str):
            raise ValueError("a request without its prompt")
        self.host.reset()
        self._request = event.get("request")
        self.window.controls.prompt.setPlainText(event["prompt"])
        self.window.controls.set_settings(event["settings"])  # the request's, as far as the controls can show them
        self.window.token_view.show_session(event["prompt"], [])
        self.host.feed.set_live(True)
        self.live = True
        self.host.status(f"Watching {self.url}: request {self._request} on {event.get('model')}...")

    def _stepped(self, event: dict) -> None:
        self.host.feed.pending.append(engine.Step.from_dict(event["step"]))  # shown at the feed's next frame

    def _ended(self, event: dict) -> None:
        self.host.feed.set_live(False)
        self.live = False
        trace = event.get("trace")
        if trace is None:
            self.host.status(f"Watching {self.url}: request {self._request} ended before its first token.")
            return
        engine.validate_trace(trace)
        self.host.traces.open_trace(trace)
        self.host.status(f"Watching {self.url}: request {self._request} done ({len(trace['steps'])} tokens); its "
                         "trace is shown (Replay checks it against this window's model).")  # fmt: skip

    def _on_ended(self, why: str) -> None:
        self._thread = None
        if why:
            self.host.status(f"Stopped watching: {why} (Stop watching brings your session back)", error=True)

    def close(self) -> None:
        """The window closes: the reading ends (the autosave keeps the person's session, set aside as it was)."""
        self._end_reading()
