"""A server on loopback that answers as Ollama's native API does (Ollama has no pip package), backed by the real
SmolLM2 through llama-cpp-python so that its numbers are real. Its shapes are Ollama's own, from its source
(github.com/ollama/ollama at v0.12.11-v0.13.0):

- GET /api/version: {"version"}; GET /api/tags: {"models": [{name, model, modified_at, size, digest (the
  manifest's sha256), details}]} (server/routes.go ListHandler, api/types.go ListModelResponse).
- POST /api/generate (GenerateHandler): top_logprobs outside 0-20 is a 400; raw with a template, system or
  context is a 400; an unknown model a 404; errors before any line as {"error"} with a status, after one as
  a line {"error"}. Streamed (the default) as JSON lines (application/x-ndjson), else one object.
- Each line as runner/llamarunner builds it: a token's text is llama.cpp's piece with special tokens as text
  (TokenToPiece); text that ends inside a character is held back until the character is whole, so a line
  may carry several tokens' logprobs; at the end, bytes that make no character are cut from the text (and
  a line left with no text is not sent: its logprobs are lost); the end token gets no logprobs and ends
  with done_reason "stop"; num_predict tokens, or the context's end with shift false, end with "length".
- Logprobs as runner/common/logprob.go computes them: float32 log-softmax of the raw logits (its sum in
  float64), the top K sorted; each as {token, logprob, bytes} (server/logprob.go: bytes left out where the
  text is ""), the text JSON-encoded as Go does (each byte that is not UTF-8 becomes U+FFFD).
- Options: temperature, seed, top_k, top_p, min_p, num_predict (sampled here in numpy; temperature 0 is
  greedy, as llama.cpp's).

This server's own, for the tests: POST /_fault {"fault": name or null} makes /api/generate misbehave (FAULTS);
GET /_drawn says how many tokens it drew in all.
Run: python tests/ollama_shapes.py MODELS_DIR PORT.
"""

import codecs
import datetime
import hashlib
import http.server
import json
import sys
import threading
from pathlib import Path

import numpy as np

VERSION = "0.13.0"
REGISTRY = "registry.ollama.ai"
codecs.register_error("go", lambda error: ("\ufffd", error.start + 1))  # Go: one U+FFFD per byte


def models_folder(root: Path, gguf: Path, model: str = "smollm2", tag: str = "135m") -> Path:
    """An Ollama models folder holding one model as Ollama lays it out: blobs/sha256-HEX (the GGUF file, a
    link; a config) and manifests/registry.ollama.ai/library/MODEL/TAG naming them."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    model_blob = blobs / f"sha256-{digest.hexdigest()}"
    if not model_blob.exists():
        model_blob.symlink_to(gguf)
    config = json.dumps({"model_format": "gguf", "model_family": "llama", "model_families": ["llama"],
                         "model_type": "135M", "file_type": "Q4_1", "architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest.hexdigest()}"]}}).encode()  # fmt: skip
    config_digest = hashlib.sha256(config).hexdigest()
    (blobs / f"sha256-{config_digest}").write_bytes(config)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": f"sha256:{config_digest}", "size": len(config)},
                "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest.hexdigest()}",
                            "size": gguf.stat().st_size}]}  # fmt: skip
    path = root / "manifests" / REGISTRY / "library" / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return root


def go_json(value) -> bytes:
    """JSON as Go's encoding/json writes it (HTML characters escaped)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text.encode("utf-8")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def incomplete_unicode(data: bytes) -> bool:
    """runner/common/stop.go IncompleteUnicode: the bytes end inside a character."""
    for i in range(1, min(4, len(data)) + 1):
        c = data[-i]
        if c & 0xC0 == 0x80:
            continue
        if c & 0xE0 == 0xC0:
            return i < 2
        if c & 0xF0 == 0xE0:
            return i < 3
        if c & 0xF8 == 0xF0:
            return i < 4
        return False
    return False


def valid_prefix(data: bytes) -> bytes:
    """flushPending: bytes cut from the end until the text is valid UTF-8."""
    while data:
        try:
            data.decode("utf-8")
            return data
        except UnicodeDecodeError:
            data = data[:-1]
    return data


class Runner:
    """SmolLM2 through llama-cpp-python, one sequence at a time (Ollama's one parallel slot)."""

    def __init__(self, path: Path, n_ctx: int = 2048):
        import llama_cpp

        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=1, verbose=False)
        self.n_ctx, self.n_vocab = n_ctx, self.llm.n_vocab()
        self.lock = threading.Lock()
        self.drawn = 0  # tokens drawn in all (GET /_drawn): a stream closed by the client stops drawing
        self._pieces: dict[int, bytes] = {}

    def piece(self, token: int) -> bytes:
        if token not in self._pieces:
            self._pieces[token] = self.llm.detokenize([token], special=True).rstrip(b"\x00")
        return self._pieces[token]

    def evaluate(self, tokens: list[int]) -> np.ndarray:
        """The raw logits after tokens (float32). Every request reads its prompt afresh (one batch), then one token
        at a time: the same request always gets the same numbers (llama.cpp's differ in the 3rd digit between a
        batch and a token alone, so a cache kept between requests would make them depend on the one before)."""
        llm = self.llm  # reset by generate: the tokens after those it read are new
        llm.eval(tokens[llm.n_tokens :])
        logits = self.lib.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).copy()

    def logprob(self, logits: np.ndarray, token: int, top_k: int) -> dict:
        """runner/common/logprob.go CalculateLogprobs, then server/logprob.go toAPILogprobs."""
        shifted = logits - logits.max()  # float32
        log_sum = np.float32(np.log(np.exp(shifted.astype(np.float64)).sum()))
        logprobs = shifted - log_sum  # float32
        entry = self.entry(token, logprobs[token])
        if top_k > 0:
            order = np.argsort(-logprobs, kind="stable")[:top_k]
            entry["top_logprobs"] = [self.entry(int(i), logprobs[i]) for i in order]
        return entry

    def entry(self, token: int, logprob) -> dict:
        data = self.piece(token)
        entry = {"token": data.decode("utf-8", "go"), "logprob": float(logprob)}
        if data:
            entry["bytes"] = list(data)
        return entry

    def draw(self, logits: np.ndarray, options: dict, rng) -> int:
        temperature = float(options.get("temperature", 0.8))
        if temperature <= 0:
            return int(np.argmax(logits))
        x = logits.astype(np.float64) / temperature
        order = np.argsort(-x, kind="stable")
        if int(options.get("top_k", 40)) > 0:
            order = order[: int(options.get("top_k", 40))]
        p = np.exp(x[order] - x[order].max())
        p /= p.sum()
        keep = np.searchsorted(np.cumsum(p), float(options.get("top_p", 0.9))) + 1
        keep = min(keep, int((p >= float(options.get("min_p", 0.0)) * p[0]).sum()))
        p = p[:keep] / p[:keep].sum()
        return int(order[rng.choice(len(p), p=p)])

    def generate(self, prompt: str, options: dict, logprobs: bool, top_k: int, shift: bool):
        """(text, logprobs) lines as the runner sends them, then ("", None, done_reason)."""
        tokens = self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        if len(tokens) > self.n_ctx:
            raise ValueError("input length exceeds maximum context length")
        num_predict = int(options.get("num_predict", -1))
        self.llm.reset()
        rng = np.random.default_rng(int(options.get("seed", 0)) & 0xFFFFFFFF)
        pending, pending_lp, predicted, reason = b"", [], 0, "stop"
        while True:
            if 0 < num_predict <= predicted or (len(tokens) + 1 > self.n_ctx and not shift):
                reason = "length"
                break
            logits = self.evaluate(tokens)
            token = self.draw(logits, options, rng)
            predicted += 1
            self.drawn += 1
            if self.lib.llama_vocab_is_eog(self.llm._model.vocab, token):
                break
            if logprobs:
                pending_lp.append(self.logprob(logits, token, top_k))
            tokens.append(token)
            pending += self.piece(token)
            if incomplete_unicode(pending):
                continue
            yield pending.decode("utf-8", "go"), pending_lp, None
            pending, pending_lp = b"", []
        text = valid_prefix(pending)
        if text:  # flushPending: a line with no text is not sent
            yield text.decode("utf-8"), pending_lp, None
        yield "", None, reason


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send(self, status: int, value, content_type="application/json; charset=utf-8"):
        body = go_json(value) if not isinstance(value, bytes) else value
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/api/version":
            return self.send(200, {"version": VERSION})
        if self.path == "/_drawn":
            return self.send(200, {"drawn": self.server.runner.drawn})
        if self.path == "/api/tags":
            return self.send(200, {"models": [model for model, _ in self.server.models.values()]})
        self.send(404, b"404 page not found", "text/plain")

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/_fault":
            self.server.fault = payload.get("fault")
            return self.send(200, {})
        if self.path != "/api/generate":
            return self.send(404, b"404 page not found", "text/plain")
        top_k = payload.get("top_logprobs", 0)
        if not 0 <= top_k <= 20:
            return self.send(400, {"error": "top_logprobs must be between 0 and 20"})
        name = payload.get("model", "")
        name = name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"
        if name not in self.server.models:
            return self.send(404, {"error": f"model '{payload.get('model', '')}' not found"})
        if payload.get("raw") and (payload.get("template") or payload.get("system") or payload.get("context")):
            return self.send(400, {"error": "raw mode does not support template, system, or context"})
        if not payload.get("prompt"):
            return self.send(200, {"model": payload["model"], "created_at": now(), "response": "", "done": True,
                                   "done_reason": "load"})  # fmt: skip
        with self.server.runner.lock:
            try:
                self.answer(payload, top_k)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client closed the stream: Ollama stops generating

    def answer(self, payload, top_k):
        runner, fault, stream = self.server.runner, self.server.fault, payload.get("stream", True)
        lines = runner.generate(payload["prompt"], payload.get("options") or {}, bool(payload.get("logprobs")),
                                top_k, payload.get("shift", True))  # fmt: skip
        try:
            first = next(lines)
        except ValueError as error:
            return self.send(500, {"error": str(error)})
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        text, all_logprobs = "", []
        for index, (content, logprobs, reason) in enumerate(_chain(first, lines)):
            line = {"model": payload["model"], "created_at": now(), "response": content, "done": reason is not None}
            if reason is not None:
                line |= {"done_reason": reason, "total_duration": 1000000, "load_duration": 1000,
                         "prompt_eval_count": 5, "prompt_eval_duration": 100000, "eval_count": 1,
                         "eval_duration": 100000}  # fmt: skip
            if logprobs:
                line["logprobs"] = logprobs
            line = FAULTS[fault](line, index) if fault in FAULTS else line
            if not stream:
                text, all_logprobs = text + content, all_logprobs + (logprobs or [])
                if reason is not None:
                    return self.send(
                        200, line | {"response": text} | ({"logprobs": all_logprobs} if all_logprobs else {})
                    )
                continue
            if line is CUT:
                break
            self.chunk(go_json(line) + b"\n")
            if "error" in line:  # streamResponse ends the stream after an error line
                break
        if stream:
            self.wfile.write(b"0\r\n\r\n")

    def chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def _chain(first, rest):
    yield first
    yield from rest


CUT = object()


def _without(key):
    def change(line, index):
        line.pop(key, None) if "logprobs" in line else None
        return line

    return change


def _first_entry(change):
    def apply(line, index):
        if line.get("logprobs"):
            change(line["logprobs"][0])
        return line

    return apply


FAULTS = {  # fault -> what it does to each line of a good answer
    "no logprobs": _without("logprobs"),
    "bytes of no token": _first_entry(lambda entry: entry.update(bytes=[255, 255, 255, 255, 255])),
    "logprob as text": _first_entry(lambda entry: entry.update(logprob="-0.5")),
    "done without a reason": lambda line, index: (line.pop("done_reason", None), line)[1],
    "an error line": lambda line, index: {"error": "llama runner process has terminated"} if index else line,
    "cut": lambda line, index: CUT if index else line,
}


class OllamaShapes(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, models_dir: Path, port: int):
        super().__init__(("127.0.0.1", port), Handler)
        self.fault, self.models, self.runner = None, {}, None
        manifests = models_dir / "manifests" / REGISTRY / "library"
        for path in sorted(manifests.glob("*/*")):
            manifest = json.loads(path.read_bytes())
            layer = next(lay for lay in manifest["layers"] if lay["mediaType"] == "application/vnd.ollama.image.model")
            blob = models_dir / "blobs" / layer["digest"].replace(":", "-")
            name = f"{path.parent.name}:{path.name}"
            self.models[name] = ({"name": name, "model": name, "modified_at": now(), "size": layer["size"],
                                  "digest": hashlib.sha256(path.read_bytes()).hexdigest(),
                                  "details": {"parent_model": "", "format": "gguf", "family": "llama",
                                              "families": ["llama"], "parameter_size": "135M",
                                              "quantization_level": "Q4_1"}}, blob)  # fmt: skip
            self.runner = self.runner or Runner(blob)


if __name__ == "__main__":
    OllamaShapes(Path(sys.argv[1]), int(sys.argv[2])).serve_forever()
