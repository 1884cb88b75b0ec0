"""Watch a server against a server that is hostile (issue 42): each sends what the issue found (an endless line,
a gzip bomb, JSON nested past the parser, a flood of requests, settings of the wrong type, a 10 MB prompt) from
127.0.0.1, and the window stays responsive, bounded, and says why it stopped; it never says "Watching" over a
reader that died."""

import gzip
import json
import socket
import threading
import time

import pytest

from playground.watch import reader

WAIT = 30000


class HostileServer:
    """A one-shot HTTP server on 127.0.0.1: every GET is answered 200 with `headers` and then `body()`'s chunks
    as they come (a generator: it may never end; it stops when the client goes)."""

    def __init__(self, body, headers=b"Content-Type: text/event-stream\r\n"):
        self.body, self.headers = body, headers
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n" + self.headers + b"Connection: close\r\n\r\n")
            for chunk in self.body():
                conn.sendall(chunk)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.listener.close()


def events(*items) -> bytes:
    return b"".join(b"data: " + json.dumps(item).encode() + b"\n\n" for item in items)


def then_pings(*chunks: bytes):
    """The chunks, then a ping every 0.1 s for up to a minute (a server still there, with nothing more to say)."""

    def body():
        yield from chunks
        for _ in range(600):
            time.sleep(0.1)
            yield b": ping\n\n"

    return body


def start(request: str, prompt="mia", **settings) -> dict:
    return {"kind": "start", "request": request, "model": "story model", "prompt": prompt,
            "settings": dict({"max_new_tokens": 5, "temperature": 0.0, "seed": 1}, **settings)}  # fmt: skip


def read_all(url: str, limit_s: float = 60):
    """What reader.read_events makes of a server: its events, or the ValueError it ends with."""
    got, stop = [], threading.Event()
    try:
        for event in reader.read_events(url, {}, stop):
            got.append(event)
    except ValueError as error:
        return got, str(error)
    return got, None


def test_an_endless_line_is_cut_at_the_event_cap(monkeypatch):
    monkeypatch.setattr(reader, "MAX_EVENT_BYTES", 4 << 20)
    server = HostileServer(lambda: (b"data: " + b"x" * 65536 for _ in range(10**6)))
    try:
        started = time.monotonic()
        got, error = read_all(server.url)
        assert got == [] and "a line of more than 4 MB" in error and time.monotonic() - started < 30
    finally:
        server.close()


def test_a_compressed_stream_is_refused_before_it_is_inflated():
    bomb = gzip.compress(b"data: " + b"0" * (50 << 20))  # 50 MB in ~50 KB
    server = HostileServer(lambda: iter([bomb]), b"Content-Type: text/event-stream\r\nContent-Encoding: gzip\r\n")
    try:
        assert read_all(server.url) == ([], "the server sent its stream compressed (gzip), though asked not to")
    finally:
        server.close()


def test_json_nested_past_the_parser_is_a_sentence_not_a_dead_thread():
    server = HostileServer(lambda: iter([b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n"]))
    try:
        got, error = read_all(server.url)
        assert got == [] and error.startswith("an event that is not JSON")
    finally:
        server.close()


@pytest.mark.parametrize("url", ["http://[::1/v1", "http:///v1", "ftp://x/v1"])
def test_a_url_that_is_not_one_is_refused_at_once(window, url):
    with pytest.raises(ValueError):
        window.controller.watching.start(url)
    assert not window.controller.watching.watching


def test_a_flood_of_requests_shows_the_last_one_and_the_window_stays_responsive(qtbot, window):
    flood = events(*[start(f"r{i}", f"mia {i}") for i in range(20_000)])
    server = HostileServer(then_pings(flood))
    try:
        window.controller.watching.start(server.url)
        qtbot.waitUntil(lambda: "r19999" in window.message_label.text(), timeout=WAIT)
        assert "passed over" in window.message_label.text()
        assert window.controls.prompt.toPlainText() == "mia 19999"
        ticks = []
        timer_started = time.monotonic()
        qtbot.waitUntil(lambda: ticks.append(time.monotonic()) or len(ticks) > 5, timeout=5000)
        assert time.monotonic() - timer_started < 5  # the GUI thread answers
    finally:
        window.controller.watching.stop()
        server.close()


@pytest.mark.parametrize("settings, said", [
    ({"max_new_tokens": 10**100}, "max_new_tokens"),
    ({"temperature": "hot"}, "temperature"),
])  # fmt: skip
def test_settings_of_the_wrong_kind_stop_the_watch_with_a_sentence(qtbot, window, settings, said):
    prompt_before = window.controls.prompt.toPlainText()
    server = HostileServer(then_pings(events(start("bad", **settings))))
    try:
        window.controller.watching.start(server.url)
        qtbot.waitUntil(lambda: "Stopped watching" in window.message_label.text(), timeout=WAIT)
        assert said in window.message_label.text() and "Unexpected error" not in window.message_label.text()
        assert not window.controller.watching.watching
        window.controller.watching.stop()
        assert window.controls.prompt.toPlainText() == prompt_before  # the person's session back as it was
    finally:
        server.close()


def test_a_ten_megabyte_prompt_is_shown_cut(qtbot, window):
    server = HostileServer(then_pings(events(start("big", "mia " * 2_500_000))))
    try:
        started = time.monotonic()
        window.controller.watching.start(server.url)
        qtbot.waitUntil(lambda: "request big" in window.message_label.text(), timeout=WAIT)
        assert time.monotonic() - started < 20  # before: the GUI froze 9.3 s for the one event
        assert len(window.controls.prompt.toPlainText()) == 20_000
        assert "10,000,000 characters shows its first 20,000" in window.message_label.text()
    finally:
        window.controller.watching.stop()
        server.close()


def test_a_reader_that_fails_says_so_and_watching_ends(qtbot, window):
    server = HostileServer(lambda: iter([b"data: [1, 2]\n\n"]))
    try:
        window.controller.watching.start(server.url)
        qtbot.waitUntil(lambda: "Stopped watching" in window.message_label.text(), timeout=WAIT)
        assert "not a JSON object" in window.message_label.text()
        assert not window.controller.watching.watching
    finally:
        window.controller.watching.stop()
        server.close()
