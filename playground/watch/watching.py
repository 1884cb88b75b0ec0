"""The window's side of watching a server (File > Watch a server...): every request a running `python -m engine
serve` answers, shown live as a local run is (its prompt, each token into the view with its chart), and its
trace opened when it ends (Replay then checks it against the window's model).

The server's watch stream (GET /v1/playground/watch: engine/serve/watch.py) is read on a thread of its own,
never the GUI's, under caps (reader.py: an event's size, uncompressed, parsed within bounds). Events wait in
a bounded mailbox and the GUI takes them all at once: a flood of requests shows the last one begun, never
each in turn. What the server sends is checked before it is shown (Settings, Step.from_dict, validate_trace):
a malformed event ends the watch with a sentence in the status bar, never a crash."""

import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

import engine

from ..remembered import MAX_REMEMBERED_PROMPT
from .menu import back_button
from .reader import MAX_STEPS, Mailbox, checked_url, read_events


class Watching(QObject):
    eventsArrived = Signal()  # from the reading thread: the mailbox was empty and holds events now
    watchEnded = Signal(str)  # from the reading thread: why the stream ended ("" when asked to stop)

    name = "watching"

    def __init__(self, host):
        super().__init__(host)
        self.host, self.window = host, host.window
        self.url: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._request: str | None = None  # the request shown now
        self._steps = 0  # its steps so far
        self._mailbox = Mailbox()
        self.live = False  # a watched request is running: the feed shows its steps as a local run's
        self.back = back_button(host.window)  # in the status bar while watching: a click brings the session back
        self.back.clicked.connect(self.stop)
        self.stop_action = host.window.findChild(QAction, "stopWatchingAction")  # (the menu is made before this)
        self.stop_action.setEnabled(False)
        self.eventsArrived.connect(self._on_events)
        self.watchEnded.connect(self._on_ended)

    @property
    def watching(self) -> bool:
        return self._thread is not None

    def start(self, url: str, api_key: str | None = None) -> None:
        """Follow the server at url (its /v1 root, e.g. http://127.0.0.1:8000/v1); ValueError for a URL that is
        not http(s)."""
        url = checked_url(url)
        self._end_reading()
        if not self.host.documents.park():  # the person's session set aside, as it is (said if it cannot be)
            return
        self.host.reset()  # the watched requests' session of their own: nothing done here reaches the person's
        self.url, self._stop, self._mailbox = url, threading.Event(), Mailbox()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._thread = threading.Thread(target=self._read, args=(url, headers, self._stop, self._mailbox),
                                        daemon=True, name="watch a server")  # fmt: skip
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

    def _read(self, url: str, headers: dict, stop: threading.Event, mailbox: Mailbox) -> None:
        """The reading thread: the watch stream's events into the mailbox, until stop is set or the stream ends;
        whatever ends it is said (watchEnded), nothing dies silently."""
        why = ""
        try:
            for event in read_events(url, headers, stop):
                if mailbox.put(event):
                    self.eventsArrived.emit()
            if not stop.is_set():
                why = "the server ended the watch"
        except ValueError as error:
            why = f"could not watch {url}: {error}"
        except Exception as error:  # noqa: BLE001 - a reader that dies must say so, not leave "Watching" up
            why = f"the watch stopped: {type(error).__name__}: {error}"
        if not stop.is_set():
            self.watchEnded.emit(why)

    def _on_events(self) -> None:
        """Everything the mailbox holds, from the last request begun on (the ones before it are passed over)."""
        events = self._mailbox.take()
        if not self.watching:
            return
        starts = [i for i, event in enumerate(events) if event.get("kind") == "start"]
        try:
            for event in events[starts[-1] if starts else 0 :]:
                kind = event.get("kind")
                if kind == "start":
                    self._started(event, skipped=len(starts) - 1)
                elif kind == "step" and event.get("request") == self._request:
                    self._stepped(event)
                elif kind == "end" and event.get("request") == self._request:
                    self._ended(event)
        except (ValueError, TypeError, KeyError, OverflowError) as error:  # not what a server should send
            self._end_reading()
            self.host.feed.set_live(False)
            self.host.status(f"Stopped watching {self.url}: it sent {error} (Stop watching brings your session "
                             "back)", error=True)  # fmt: skip

    def _started(self, event: dict, skipped: int = 0) -> None:
        prompt, settings = event.get("prompt"), event.get("settings")
        if not isinstance(prompt, str):
            raise ValueError("a request without its prompt")
        if not isinstance(settings, dict):
            raise ValueError("a request without its settings")
        engine.Settings(**settings)  # checked whole before anything is shown: a ValueError names the field
        self.host.reset()
        self._request, self._steps = event.get("request"), 0
        shown = prompt[:MAX_REMEMBERED_PROMPT]  # a long line takes the window minutes to lay out (remembered.py)
        self.window.controls.prompt.setPlainText(shown)
        self.window.controls.set_settings(settings)  # the request's, as far as the controls can show them
        self.window.token_view.show_session(shown, [])
        self.host.feed.set_live(True)
        self.live = True
        notes = [f"{skipped} requests begun meanwhile were passed over"] if skipped else []
        if len(prompt) > len(shown):
            notes.append(f"its prompt of {len(prompt):,} characters shows its first {len(shown):,}")
        note = f" ({'; '.join(notes)})" if notes else ""
        self.host.status(f"Watching {self.url}: request {self._request} on {event.get('model')}...{note}")

    def _stepped(self, event: dict) -> None:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise ValueError(f"more than {MAX_STEPS:,} steps for one request")
        self.host.feed.pending.append(engine.Step.from_dict(event["step"]))  # shown at the feed's next frame

    def _ended(self, event: dict) -> None:
        self.host.feed.set_live(False)
        self.live = False
        trace = event.get("trace")
        if trace is None:
            self.host.status(f"Watching {self.url}: request {self._request} ended before its first token.")
            return
        engine.validate_trace(trace)
        if len(trace["prompt"]) > MAX_REMEMBERED_PROMPT:  # shown as it ran; its whole trace would take minutes
            self.host.status(f"Watching {self.url}: request {self._request} done ({len(trace['steps'])} tokens); its "
                             f"prompt of {len(trace['prompt']):,} characters is too long to open its trace here.")  # fmt: skip
            return
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
