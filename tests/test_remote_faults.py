"""A server that misbehaves (issue 11): a small threaded HTTP server on loopback that answers like a good
OpenAI-compatible server (llama-server's /tokenize, vLLM's aligned echo) until a test sets its fault, then
answers /v1/completions wrongly. Every fault is a ValueError naming the server and what was wrong, within
the model's timeout and the size cap, and a session is exactly as it was before the step that failed."""

import http.server
import json
import math
import threading
import time
import tracemalloc
from dataclasses import replace

import pytest

import engine
from engine import Session
from engine.backends.remote import MAX_ANSWER_BYTES, RemoteModel

PROMPT = "The capital of France is"


def top(after: int) -> dict[int, float]:
    """The fake model's top 20 after a token (ids are printable ASCII codes): the next characters, each
    half as likely as the one before."""
    return {32 + (after - 32 + 1 + k) % 95: (k + 1) * math.log(0.5) for k in range(20)}


def completions_form(entries) -> dict:
    """(token id, the id it followed or None) -> the completions form of logprobs."""
    tops = [None if prev is None else top(prev) for _, prev in entries]
    return {"tokens": [chr(t) for t, _ in entries],
            "token_logprobs": [None if d is None else d.get(t) for (t, _), d in zip(entries, tops)],
            "top_logprobs": [None if d is None else {chr(k): v for k, v in d.items()} for d in tops]}  # fmt: skip


def answer(payload) -> dict:
    """A good completion: greedy (the next character), echoing the prompt (as vLLM does) where asked."""
    prompt = payload["prompt"]
    ids = [ord(c) for c in prompt] if isinstance(prompt, str) else list(prompt)
    entries = [(ids[0], None), *zip(ids[1:], ids)] if payload.get("echo") else []
    last = ids[-1]
    for _ in range(payload["max_tokens"]):
        entries.append((max(top(last), key=top(last).get), last))
        last = entries[-1][0]
    choice = {
        "text": "".join(chr(t) for t, _ in entries),
        "logprobs": completions_form(entries),
        "finish_reason": "length",
    }
    return {"choices": [choice], "usage": {"completion_tokens": payload["max_tokens"]}}


def named(good: dict) -> dict:
    """The answer as vLLM gives it with return_tokens_as_token_ids: every token and alternative as "token_id:N"."""
    logprobs = good["choices"][0]["logprobs"]
    logprobs["tokens"] = [f"token_id:{ord(t)}" for t in logprobs["tokens"]]
    logprobs["top_logprobs"] = [None if top is None else {f"token_id:{ord(t)}": v for t, v in top.items()}
                                for top in logprobs["top_logprobs"]]  # fmt: skip
    return good


def _set(path, value):
    def change(a):
        target = a
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value(target[path[-1]]) if callable(value) else value
        return a

    return change


LOGPROBS = ("choices", 0, "logprobs")
MALFORMED = {  # fault -> (what it does to a good answer, what the error says)
    "no choices": (_set(("choices",), []), r"choices = \[\], expected one completion"),
    "choice not an object": (_set(("choices", 0), "a"), r"choices\[0\] = 'a', expected a JSON object"),
    "no logprobs": (lambda a: a["choices"][0].pop("logprobs") and a, r"choices\[0\]\.logprobs = nothing, expected the tokens' log"),
    "logprobs null": (_set(LOGPROBS, None), r"choices\[0\]\.logprobs = None, expected the tokens' log-probabilities"),
    "tokens [null]": (_set(LOGPROBS + ("tokens",), lambda t: t[:-1] + [None]), r"logprobs\.tokens\[\d+\] = None, expected a string"),
    "logprob as text": (_set(LOGPROBS + ("token_logprobs",), lambda v: v[:-1] + ["-0.5"]), r"token_logprobs\[\d+\] = '-0.5', expected a log-prob"),
    "logprob NaN": (_set(LOGPROBS + ("token_logprobs",), lambda v: v[:-1] + [math.nan]), r"token_logprobs\[\d+\] = nan, expected a log-probability: a finite"),
    "top as a list": (_set(LOGPROBS + ("top_logprobs",), lambda v: v[:-1] + [[["a", -1]]]), r"top_logprobs\[\d+\] = \[\['a', -1\]\], expected an object"),
    "lengths differ": (_set(LOGPROBS + ("token_logprobs",), lambda v: v[:-1]), r"token_logprobs = .*, expected a list with one entry per token"),
    "huge id": (_set(LOGPROBS, {"content": [{"id": 10**30, "token": "a", "logprob": -1.0, "top_logprobs": []}]}),
                r"content\[0\]\.id = 10{30}, expected a token id, an int from 0 to 2147483647"),
    "two tokens for one": (_set(LOGPROBS, lambda lp: {k: v * 2 for k, v in lp.items()}), r"logprobs = '2 tokens', expected at most the 1 asked"),
    "no token, no reason": (_set(("choices", 0), {"text": "", "logprobs": {"tokens": [], "token_logprobs": [], "top_logprobs": []}, "finish_reason": None}),
                            r"finish_reason = None, expected why it sent 0 of the 1 tokens asked"),
    "unknown finish reason": (_set(("choices", 0, "finish_reason"), "abort"), r"finish_reason = 'abort', expected null or one of stop, length"),
    "token id as text": (_set(("choices", 0), lambda c: {**c, "token_ids": ["65"]}), r"choices\[0\]\.token_ids\[0\] = '65', expected a token id"),
    "more ids than tokens": (_set(("choices", 0), lambda c: {**c, "token_ids": list(range(65, 265))}), r"choices\[0\]\.token_ids = .*, expected at most one id per token"),
    "short echo": (lambda a: a, r"choices\[0\]\.logprobs = '\d+ entries', expected the prompt's \d+ tokens, then up to 1 more"),
}  # fmt: skip


# faults of an answer to a step's request (the others' echo has more entries); "short echo": of an echo only
ONE_TOKEN_ASKED = {"two tokens for one", "no token, no reason"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as real servers answer
    disable_nagle_algorithm = True  # headers and body go out at once (else ~40 ms a request on loopback)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.send_json(self.server.models)
        self.send_json({"error": "not found"}, 404)

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize" and "content" in payload:  # llama-server's: one token per character
            return self.send_json({"tokens": [ord(c) for c in payload["content"]]})
        if self.path == "/detokenize":
            return self.send_json({"content": "".join(map(chr, payload["tokens"]))})
        if self.path != "/v1/completions":
            return self.send_json({"error": "not found"}, 404)
        if payload.get("return_tokens_as_token_ids") and self.server.names_ids:
            good = named(answer(payload))
            return self.send_json(self.server.names_ids(good) if callable(self.server.names_ids) else good)
        fault = self.server.fault
        mutate = MALFORMED[fault][0] if fault in MALFORMED and (fault != "short echo" or payload.get("echo")) else None
        if fault == "short echo" and mutate:
            mutate = _set(LOGPROBS, lambda lp: {k: v[:-3] for k, v in lp.items()})
        try:
            if fault in TRANSPORT:
                TRANSPORT[fault](self, payload)
            elif payload.get("stream"):
                self.start_chunked()
                self.events(answer(payload), mutate=mutate)
            else:
                self.send_json(mutate(answer(payload)) if mutate else answer(payload))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: that is the test

    def send_json(self, data, status=200):
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_chunked(self, content_type="text/event-stream"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def events(self, good, count=None, mutate=None):
        """The good answer as server-sent events, one token each (`mutate`d), then the end; or only the first
        `count` tokens."""
        lp = good["choices"][0]["logprobs"]
        for i, text in enumerate(lp["tokens"][:count]):
            chunk = {
                "choices": [{"text": text, "logprobs": {k: v[i : i + 1] for k, v in lp.items()}, "finish_reason": None}]
            }
            self.chunk(b"data: " + json.dumps(mutate(chunk) if mutate else chunk).encode() + b"\n\n")
        if count is None:
            end = {"choices": [{"text": "", "logprobs": None, "finish_reason": "length"}]}
            self.chunk(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
            self.chunk(b"")

    def log_message(self, *args):
        pass


def drip(handler, payload):  # headers, then one byte a second of a body that never completes
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    while not handler.server.stopping.wait(1):
        handler.wfile.write(b" ")
        handler.wfile.flush()


def endless(handler, payload):  # an endless chunked body: blanks, valid JSON whitespace, no line ends
    handler.start_chunked("application/json")
    while not handler.server.stopping.is_set():
        handler.chunk(b" " * 65536)


def keep_alive(handler, payload):  # comment lines forever, never a token
    handler.start_chunked()
    while not handler.server.stopping.wait(0.05):
        handler.chunk(b": keep-alive\n\n")


def cut(handler, payload):  # one token, then the connection closes mid-body
    if payload.get("stream"):
        handler.start_chunked()
        handler.events(answer(payload), count=1)
    else:
        body = json.dumps(answer(payload)).encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[: len(body) // 2])
    handler.close_connection = True


def ends_early(handler, payload):  # a stream whose body ends cleanly after one token: no reason, no [DONE]
    handler.start_chunked()
    handler.events(answer(payload), count=1)
    handler.chunk(b"")


def hang(handler, payload):  # one token, then nothing
    handler.start_chunked()
    handler.events(answer(payload), count=1)
    handler.server.stopping.wait()


def html(handler, payload):
    body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


TRANSPORT = {"drip": drip, "endless": endless, "keep-alive": keep_alive, "cut": cut, "ends early": ends_early,
             "hang": hang, "html": html}  # fmt: skip
GOOD_MODELS = {"object": "list", "data": [{"id": "fake", "max_model_len": 512}]}


class FaultyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.fault = None  # what /v1/completions does wrong, once a test says
        self.models = GOOD_MODELS
        self.names_ids = False  # True: answers return_tokens_as_token_ids as vLLM does (a function: changes that)
        self.stopping = threading.Event()
        self.clients = []  # models connected to it, closed with it
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request, client_address):
        pass  # a client that hung up mid-request: the tests make them


@pytest.fixture
def server():
    yield from running()


def running():
    """A FaultyServer on loopback until the generator is closed (the `server` fixture's body)."""
    server = FaultyServer()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    for model in server.clients:
        model.close()
    server.stopping.set()
    server.shutdown()
    server.server_close()


def connect(server, timeout=5.0) -> RemoteModel:
    model = RemoteModel(server.url, timeout=timeout, retries=1)
    server.clients.append(model)
    assert model.protocol == {"tokenize": "llama-server", "token_id_prompts": True, "scoring": "echo",
                              "logprobs": "raw", "alternatives": 20, "ids": "by text"}  # fmt: skip
    assert model.context_length == 512
    return model


def snapshot(session):
    return (session.text, list(session.ids), list(session.steps), json.dumps(session.actions), session._ended_at,
            session.stopped)  # fmt: skip


def resolved(before, session):
    """`before` with the ids an open stream left unknown (-1) as the session now knows them: a failure
    closes the stream, and closing asks the server for them (as any steering does)."""
    text, ids, steps, *rest = before
    ids = [now if was == -1 else was for was, now in zip(ids, session.ids)]
    steps = [now if was.token_id == -1 and replace(now, token_id=-1) == was else was
             for was, now in zip(steps, session.steps)]  # fmt: skip
    return (text, ids, steps, *rest)


def started(model, stream=False) -> Session:
    """A session with sampled, inserted and (optionally) streamed steps on the good server."""
    session = Session(model, PROMPT, max_new_tokens=40, temperature=0)
    session.step()
    session.insert_text("xy")
    if stream:
        session.step(stream=True)
    return session


def unchanged_and_usable(session, before, server, tmp_path):
    """Exactly as before the failed step; its trace saves and loads; with the fault gone, it steps on."""
    assert snapshot(session) == resolved(before, session) and session._context._stream is None
    assert -1 not in session.ids  # the stream was closed, and the ids it left unknown asked for
    engine.save_trace(session.trace(), tmp_path / "trace.json")
    assert engine.load_trace(tmp_path / "trace.json")["actions"] == session.actions
    server.fault = None
    assert session.step() is not None and session.stopped is None


def test_an_insert_is_scored_in_one_request_whatever_its_length(server):
    """Where prompts go as token ids and the echo lines up, an insert costs its tokenizing and one echoing request:
    each new token's text comes from the echo, not from a request of its own (it was 12 more for 12 tokens)."""
    model = connect(server)
    session = Session(model, PROMPT, max_new_tokens=40, temperature=0)
    session.step()
    before = model.connection.requests
    session.insert_text("abcdefghijkl")
    assert model.connection.requests - before == 2
    assert [s.token for s in session.steps[1:]] == list("abcdefghijkl") and session.text == PROMPT + "tabcdefghijkl"
    per_position = connect(server)
    per_position.protocol["scoring"] = "per position"  # one request per token: the numbers the echo must give
    other = Session(per_position, PROMPT, max_new_tokens=40, temperature=0)
    other.step()
    other.insert_text("abcdefghijkl")
    assert session.steps == other.steps


def test_the_fake_server_is_a_good_server(server):
    model = connect(server)
    session = started(model, stream=True)
    session.interrupt()  # ids a stream left unknown are asked for
    assert session.text == PROMPT + "txyz" and [s.token_id for s in session.steps] == [ord(c) for c in "txyz"]
    assert session.steps[1].probability == pytest.approx(0.5**4)  # "x" after "t": the 4th most likely
    assert session.steps[3].candidates.tokens[:2] == ("z", "{") and session.steps[3].model_rank == 1
    assert session.actions == [{"kind": "sample"}, {"kind": "insert", "token_ids": [120, 121], "source": "forced"},
                               {"kind": "stream", "n": 1}]  # fmt: skip


ACTIONS = {"step": lambda s: s.step(), "insert": lambda s: s.insert_text("ab"),
           "choose": lambda s: s.choose(["ab", "cd"]), "force": lambda s: (s.force_token(65), s.step())}  # fmt: skip


@pytest.mark.parametrize(
    "fault, action",
    [(fault, action) for fault in sorted(MALFORMED) for action in sorted(ACTIONS)
     if (action == "step") == (fault in ONE_TOKEN_ASKED) or fault not in ONE_TOKEN_ASKED | {"short echo"}],
)  # fmt: skip
def test_a_malformed_answer_is_refused_and_the_session_stays(server, tmp_path, fault, action):
    model = connect(server)
    session = started(model)
    before = snapshot(session)
    server.fault = fault
    with pytest.raises(
        ValueError, match=rf"^server at {server.url[:-3]} answered /v1/completions with .*{MALFORMED[fault][1]}"
    ):
        ACTIONS[action](session)
    unchanged_and_usable(session, before, server, tmp_path)


@pytest.mark.parametrize("fault", sorted(set(MALFORMED) - {"short echo", "no token, no reason", "two tokens for one"}))
def test_a_malformed_streamed_token_is_refused_and_the_session_stays(server, tmp_path, fault):
    model = connect(server)
    session = started(model, stream=True)
    session.interrupt()  # the next step opens a stream on the faulty server
    before = snapshot(session)
    server.fault = fault
    with pytest.raises(ValueError, match=rf"^server at {server.url[:-3]} answered /v1/completions with "):
        session.step(stream=True)
    unchanged_and_usable(session, before, server, tmp_path)


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
def test_an_html_page_is_not_the_end_of_the_text(server, tmp_path, stream):
    session = started(connect(server), stream)
    session.interrupt()
    before = snapshot(session)
    server.fault = "html"
    match = "answered something that is not JSON: '<html>" if not stream else "ended its stream without a finish reason"
    with pytest.raises(ValueError, match=match):
        session.step(stream=stream)
    unchanged_and_usable(session, before, server, tmp_path)


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
def test_a_connection_cut_mid_answer(server, tmp_path, stream):
    session = started(connect(server), stream)
    server.fault = "cut"
    if stream:
        session.interrupt()
        assert session.step(stream=stream) is not None  # the one token before the cut
    before = snapshot(session)
    with pytest.raises(ValueError, match=r"broke off its answer: RemoteProtocolError"):
        session.step(stream=stream)
    unchanged_and_usable(session, before, server, tmp_path)


def test_a_stream_that_ends_without_a_finish_reason_is_not_the_end_of_the_text(server, tmp_path):
    session = started(connect(server), stream=True)
    session.interrupt()
    server.fault = "ends early"
    assert session.step(stream=True) is not None
    before = snapshot(session)
    with pytest.raises(ValueError, match=r"ended its stream without a finish reason \(expected stop, length"):
        session.step(stream=True)
    assert session.stopped is None
    unchanged_and_usable(session, before, server, tmp_path)


def test_a_server_that_hangs_after_one_token(server, tmp_path):
    session = started(connect(server, timeout=1), stream=True)
    session.interrupt()
    server.fault = "hang"
    assert session.step(stream=True) is not None
    before = snapshot(session)
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"did not finish answering within 1 s"):
        session.step(stream=True)
    assert time.monotonic() - start < 2.5
    assert session.stopped is None  # not "end of text"
    unchanged_and_usable(session, before, server, tmp_path)


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
def test_a_drip_is_cut_at_the_deadline(server, tmp_path, stream):
    """1 byte a second: each read succeeds, the whole answer is cut at the model's timeout (2 s)."""
    session = started(connect(server, timeout=2), stream)
    session.interrupt()
    before = snapshot(session)
    server.fault = "drip"
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"did not finish answering within 2 s"):
        session.step(stream=stream)
    assert time.monotonic() - start < 4
    unchanged_and_usable(session, before, server, tmp_path)


def test_keep_alive_lines_forever_are_cut_at_the_deadline(server, tmp_path):
    session = started(connect(server, timeout=1), stream=True)
    session.interrupt()
    before = snapshot(session)
    server.fault = "keep-alive"
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"did not finish answering within 1 s"):
        session.step(stream=True)
    assert 1 <= time.monotonic() - start < 2
    unchanged_and_usable(session, before, server, tmp_path)


@pytest.mark.parametrize("stream", [False, True], ids=["request", "stream"])
def test_an_endless_body_is_cut_at_the_size_cap(server, tmp_path, stream):
    session = started(connect(server, timeout=30), stream)
    session.interrupt()
    before = snapshot(session)
    server.fault = "endless"
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(ValueError, match=rf"sent more than {MAX_ANSWER_BYTES >> 20} MB in one answer"):
            session.step(stream=stream)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"endless body ({'stream' if stream else 'request'}): cut after {time.monotonic() - start:.2f} s, "
          f"peak {peak / 2**20:.1f} MiB traced")  # fmt: skip
    assert time.monotonic() - start < 5 and peak < 3 * MAX_ANSWER_BYTES
    unchanged_and_usable(session, before, server, tmp_path)


@pytest.mark.parametrize(
    "models, match",
    [({"data": 5}, r"answered /v1/models with data = 5, expected a list of the models served"),
     ({"data": [{"id": 7}]}, r"answered /v1/models with data\[0\]\.id = 7, expected a string"),
     ({"data": ["fake"]}, r"data\[0\] = 'fake', expected a model: an object with its id"),
     ({"models": []}, r"data = nothing, expected a list"),
     ({"data": []}, r"lists no models")],
)  # fmt: skip
def test_a_bad_list_of_models_at_connect(server, models, match):
    server.models = models
    with pytest.raises(ValueError, match=match):
        RemoteModel(server.url, timeout=2, retries=1)


def test_a_fault_while_connecting(server):
    server.fault = "tokens [null]"
    with pytest.raises(ValueError, match=r"answered /v1/completions with choices\[0\]\.logprobs\.tokens\[0\] = None"):
        RemoteModel(server.url, timeout=2, retries=1)
