"""ServerConnection: the one path every request to a server takes. An answer is read as it arrives, within
the timeout for the whole answer (a stream: for each token's events) and under MAX_ANSWER_BYTES, then parsed
as a JSON object and passed through a checker from answers.py; every fault (refused, silent, cut, too big,
not JSON, malformed) is a ValueError naming the server.
"""

import json
import time
from contextlib import contextmanager

import httpx

from engine.backends.remote.answers import _Malformed

RETRIES = 3  # connection attempts, with backoff 0.25 s, 0.5 s, ...
MAX_ANSWER_BYTES = 8 * 2**20  # one answer (a stream: one token's events); a step's answer is a few KB


class ServerConnection:
    """HTTP to one server: `url` is its /v1 base, `root` the server itself. `requests` counts the requests
    sent (but streams): a stream sees whether others came while it waited."""

    def __init__(self, url: str, timeout: float, retries: int | None = None):
        self.url = url
        self.root = url[: -len("/v1")]
        self.timeout = timeout
        self.retries = RETRIES if retries is None else retries
        # uncompressed answers: the size cap then counts what is kept (a small compressed body can inflate)
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)),
                                   headers={"Accept-Encoding": "identity"})  # fmt: skip
        self.requests = 0

    def get(self, path: str, root: bool = False, check=None):
        return self.request("GET", path, None, root, check)

    def post(self, path: str, payload: dict, root: bool = False, check=None):
        return self.request("POST", path, payload, root, check)

    def request(self, method: str, path: str, payload, root: bool, check):
        """One request's answer, a JSON object, read whole within the timeout (for the whole answer, not
        per read: a server that drips bytes is cut at the deadline) and MAX_ANSWER_BYTES, then passed
        through `check` (which raises _Malformed for a field it cannot use)."""
        url = (self.root if root else self.url) + path
        deadline = time.monotonic() + self.timeout
        self.requests += 1
        body = bytearray()
        with self._open(method, url, payload) as response:
            for chunk in self._chunks(response):
                body += chunk
                self._within(len(body), deadline)
        answer = self.json(bytes(body), url)
        return self.checked(check, answer, url) if check else answer

    def events(self, url: str, payload: dict, prefix: bytes = b"data:"):
        """The data of each server-sent event of a streamed answer, as text (prefix b"": each line of a stream
        of JSON lines, Ollama's). A stream is one step's request per token: each event must come within the
        timeout and MAX_ANSWER_BYTES counted from when the step asks for it (keep-alive comments do not extend
        it), however long the whole generation runs."""
        with self._open("POST", url, payload) as response:
            pending, received, deadline = bytearray(), 0, time.monotonic() + self.timeout
            for chunk in self._chunks(response):
                start = len(pending)
                pending += chunk
                received += len(chunk)
                self._within(received, deadline)
                while (end := pending.find(b"\n", start)) >= 0:
                    line = bytes(pending[:end]).rstrip(b"\r")
                    del pending[: end + 1]
                    start = 0
                    if line.startswith(prefix) and line.strip():
                        yield line[len(prefix) :].strip().decode("utf-8", "replace")
                        received, deadline = len(pending), time.monotonic() + self.timeout

    @contextmanager
    def _open(self, method: str, url: str, payload):
        """The response to a request, its status checked, to read in a with-block (closing it ends the
        server's generation for us)."""
        response = self._send(method, url, payload)
        try:
            if response.status_code >= 400:
                body = next(self._chunks(response), b"")[:200].decode("utf-8", "replace")
                raise ValueError(f"server at {self.root} answered {response.status_code} to {url}: {body}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise ValueError(f"server at {self.root} answered {url} compressed ({encoding}), though asked for "
                                 "an uncompressed answer (Accept-Encoding: identity)")  # fmt: skip
            yield response
        finally:
            response.close()

    def _send(self, method: str, url: str, payload):
        delay = 0.25
        for attempt in range(self.retries):
            try:
                return self.client.send(self.client.build_request(method, url, json=payload), stream=True)
            except httpx.ConnectError:
                if attempt == self.retries - 1:
                    raise ValueError(f"server at {self.root} refused the connection ({self.retries} tries)") from None
                time.sleep(delay)
                delay *= 2
            except httpx.TimeoutException:
                raise ValueError(f"server at {self.root} did not answer within {self.timeout:g} s") from None
            except (httpx.HTTPError, httpx.InvalidURL) as error:
                raise ValueError(f"server at {self.root} failed: {type(error).__name__}: {error}") from None
        raise ValueError(f"server at {self.root} was not asked: retries is {self.retries!r}, expected 1 or more")

    def _chunks(self, response):
        """The body as it arrives; httpx's errors (a silence past the timeout, a cut connection) become
        ValueErrors naming the server."""
        try:
            yield from response.iter_raw()
        except httpx.TimeoutException:
            raise ValueError(f"server at {self.root} did not finish answering within {self.timeout:g} s") from None
        except httpx.HTTPError as error:
            raise ValueError(f"server at {self.root} broke off its answer: {type(error).__name__}: {error}") from None

    def _within(self, received: int, deadline: float) -> None:
        if received > MAX_ANSWER_BYTES:
            raise ValueError(f"server at {self.root} sent more than {MAX_ANSWER_BYTES >> 20} MB in one answer "
                             "(a step's answer is a few KB): it was cut off there")  # fmt: skip
        if time.monotonic() > deadline:
            raise ValueError(f"server at {self.root} did not finish answering within {self.timeout:g} s")

    def json(self, body, url: str) -> dict:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, an int of 4300+ digits, nested too deep
            text = body[:80].decode("utf-8", "replace") if isinstance(body, bytes) else body[:80]
            raise ValueError(f"server at {self.root} answered something that is not JSON: {text!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"server at {self.root} answered {type(data).__name__}, not a JSON object, to {url}")
        return data

    def checked(self, check, answer: dict, url: str):
        try:
            return check(answer)
        except _Malformed as bad:
            raise ValueError(f"server at {self.root} answered {url[len(self.root) :]} with {bad}") from None

    def close(self) -> None:
        self.client.close()
