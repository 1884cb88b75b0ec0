"""Reading a server's watch stream without trusting it (no Qt here: the reading thread's half of watching).

The caps are the remote backend's kind (engine/backends/remote/connection.py): asked uncompressed and refused
compressed (a 3 MB gzip body inflated to 2.5 GB), read raw and split into lines here, each event at most
MAX_EVENT_BYTES (an endless line or chunked body is cut there), parsed with its depth bounded (deeply nested
JSON is a ValueError, not a RecursionError that ends the thread), at most MAX_STEPS steps for one request, and
at most MAX_WAITING events waiting for the GUI to take them."""

import collections
import json
import threading

import httpx

MAX_EVENT_BYTES = 64 << 20  # one event: an "end" event carries the whole trace (~5 KB a step)
MAX_STEPS = 65_536  # steps of one watched request (the longest contexts people run are 32k to 128k)
MAX_WAITING = 100_000  # events the GUI has not taken yet
READ_TIMEOUT = 30.0  # s of silence (the server pings every second)


def checked_url(url: str) -> str:
    """The server's /v1 root as httpx reads it; ValueError for what is not an http(s) URL."""
    url = url.strip().rstrip("/") if isinstance(url, str) else ""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"a server's URL starts with http:// or https://, got {url!r:.80}")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as error:
        raise ValueError(f"{url!r:.80} is not a URL: {error}") from None
    if not parsed.host:
        raise ValueError(f"{url!r:.80} names no host")
    return url


def read_events(url: str, headers: dict, stop: threading.Event):
    """Each event of the watch stream (a dict), until the stream ends or stop is set; ValueError for what the
    server did wrong (refused, compressed, too big, not JSON, not an object)."""
    headers = dict(headers, **{"Accept-Encoding": "identity"})
    try:
        with httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT, connect=10.0)) as client:
            with client.stream("GET", f"{url}/playground/watch", headers=headers) as response:
                if response.status_code != 200:
                    body = next(response.iter_raw(), b"")[:200].decode("utf-8", "replace")
                    raise ValueError(f"the server answered {response.status_code}: {body}")
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise ValueError(f"the server sent its stream compressed ({encoding}), though asked not to")
                for line in _lines(response.iter_raw(), stop):
                    if line.startswith(b"data: "):
                        yield parsed(line[len(b"data: ") :])
    except httpx.HTTPError as error:
        raise ValueError(f"{type(error).__name__}: {error}") from None


def _lines(chunks, stop: threading.Event):
    pending = bytearray()
    for chunk in chunks:
        if stop.is_set():
            return
        start = len(pending)
        pending += chunk
        while (end := pending.find(b"\n", start)) >= 0:
            yield bytes(pending[:end]).rstrip(b"\r")
            del pending[: end + 1]
            start = 0
        if len(pending) > MAX_EVENT_BYTES:
            raise ValueError(f"the server sent a line of more than {MAX_EVENT_BYTES >> 20} MB")


def parsed(data: bytes) -> dict:
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an int of 4300+ digits, nested too deep
        raise ValueError(f"an event that is not JSON: {data[:60].decode('utf-8', 'replace')!r}") from None
    if not isinstance(event, dict):
        raise ValueError(f"an event that is {type(event).__name__}, not a JSON object")
    return event


class Mailbox:
    """Events from the reading thread to the GUI: put() says when the GUI must be woken (the box was empty),
    take() hands everything over; more than MAX_WAITING waiting is a ValueError (the GUI cannot keep up)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._events: collections.deque = collections.deque()

    def put(self, event: dict) -> bool:
        with self._lock:
            if len(self._events) >= MAX_WAITING:
                raise ValueError(f"the server sent events faster than the window could take them ({MAX_WAITING:,} "
                                 "waiting)")  # fmt: skip
            self._events.append(event)
            return len(self._events) == 1

    def take(self) -> list[dict]:
        with self._lock:
            events = list(self._events)
            self._events.clear()
        return events
