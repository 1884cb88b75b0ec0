"""A server on loopback that answers exactly as SGLang's native API does, backed by the real SmolLM2 through
llama-cpp-python (logits_all: every position's logits), so the numbers are a real model's. SGLang itself needs
CUDA and has no CPU package; its shapes are recorded here from its source (sgl-project/sglang, python/sglang/srt):

- entrypoints/http_server.py: GET /get_model_info {"model_path", "tokenizer_path", "is_generation", ...};
  POST /generate answers {"text", "output_ids", "meta_info"}, or with "stream": true server-sent events
  "data: {...}\\n\\n" per chunk, then "data: [DONE]\\n\\n" (a failure mid-stream: data {"error": {"message"}}).
- entrypoints/openai/serving_tokenize.py, protocol.py: POST /tokenize {"model", "prompt", "add_special_tokens"}
  -> {"tokens", "count", "max_model_len"}; POST /detokenize {"model", "tokens", "skip_special_tokens"} ->
  {"text"}; GET /v1/models {"object": "list", "data": [{"id", "object", "created", "owned_by", "root",
  "max_model_len"}]}.
- managers/io_struct.py GenerateReqInput (input_ids or text, sampling_params, return_logprob, logprob_start_len
  default -1 = the last prompt token, top_logprobs_num, token_ids_logprob, return_text_in_logprobs, stream);
  sampling/sampling_params.py (max_new_tokens 128, temperature 1.0 where below 1e-6 means greedy, top_p 1.0,
  top_k -1, min_p 0.0, sampling_seed; an unknown field is refused).
- managers/tokenizer_manager.py: meta_info {"id", "finish_reason", "prompt_tokens", "completion_tokens",
  "cached_tokens", "input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs",
  "input_token_ids_logprobs", "output_token_ids_logprobs"} with [logprob, id, text or null] triples; streamed
  chunks repeat everything so far (cumulative: the default) or only the new tokens (incremental).
- managers/scheduler_output_processor (logprob result processor): the prompt's entries from logprob_start_len
  on, the first with a null log-probability, the rest each the token's log-probability after the tokens
  before it; input_top_logprobs and input_token_ids_logprobs the same, null first.
- managers/schedule_batch.py: finish_reason {"type": "stop", "matched": id} (its stop token is in output_ids
  and the logprobs), {"type": "length", "length": n}.
- layers/sampler.py: all greedy -> log_softmax(logits); otherwise log(softmax(logits / T)) unless
  SGLANG_RETURN_ORIGINAL_LOGPROB (here: original_logprob=True); prompt log-probabilities are never scaled.
"""

import http.server
import json
import threading

import numpy as np

import engine

SERVED = "HuggingFaceTB/SmolLM2-135M-Instruct"
CONTEXT = 512
SAMPLING_DEFAULTS = {"max_new_tokens": 128, "stop": None, "stop_token_ids": None, "temperature": 1.0, "top_p": 1.0,
                     "top_k": -1, "min_p": 0.0, "min_new_tokens": 0, "ignore_eos": False, "skip_special_tokens": True,
                     "sampling_seed": None}  # fmt: skip


def log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


class SmolLM2:
    """llama.cpp on the pip package's GGUF, every position's logits kept; one request at a time."""

    def __init__(self):
        import llama_cpp

        # flash attention as llama.cpp's own default (the engine's backend): without it the numbers move by ~0.02
        self.llm = llama_cpp.Llama(str(engine.smollm2_path()), n_ctx=CONTEXT, n_threads=1, logits_all=True,
                                   flash_attn=True, verbose=False)  # fmt: skip
        self.lock = threading.Lock()
        self.eos = self.llm.token_eos()

    def rows(self, ids) -> np.ndarray:
        """The logits at each position after evaluating `ids` from the start."""
        self.llm.reset()
        self.llm.eval(list(ids))
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32)

    def next_row(self, token_id: int) -> np.ndarray:
        """The logits after one more token, on the cache (bit for bit what the whole text in one batch gives)."""
        self.llm.eval([token_id])
        return np.array(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float32)

    def text(self, ids, special=True) -> str:
        return self.llm.detokenize(list(ids), special=special).decode("utf-8", "replace")

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)


class Request:
    """One GenerateReqInput, its defaults filled in as SGLang fills them."""

    def __init__(self, payload: dict, model: SmolLM2):
        unknown = set(payload.get("sampling_params") or {}) - set(SAMPLING_DEFAULTS)
        if unknown:
            raise ValueError(f"SamplingParams.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        self.params = {**SAMPLING_DEFAULTS, **(payload.get("sampling_params") or {})}
        self.ids = payload.get("input_ids") or model.tokenize(payload["text"], add_special=True)
        self.logprobs = bool(payload.get("return_logprob"))
        start = payload.get("logprob_start_len", -1)
        self.start = len(self.ids) - 1 if start == -1 or not self.logprobs else start
        if not 0 <= self.start < len(self.ids):
            raise ValueError(f"logprob_start_len ({start}) is larger than the input length {len(self.ids)}")
        self.top_n = payload.get("top_logprobs_num") or 0
        self.named = payload.get("token_ids_logprob")
        self.with_text = bool(payload.get("return_text_in_logprobs"))
        self.stream = bool(payload.get("stream"))


class SGLangShapes(http.server.ThreadingHTTPServer):
    """The server: `incremental` streams only new tokens (--incremental-streaming-output); `original_logprob`
    reports raw log-probabilities when sampling (SGLANG_RETURN_ORIGINAL_LOGPROB=1); `fault(path, answer)`,
    where set, changes each answer; `log` records (path, payload) of every request."""

    daemon_threads = True

    def __init__(self, model: SmolLM2):
        super().__init__(("127.0.0.1", 0), Handler)
        self.model, self.incremental, self.original_logprob, self.fault, self.log = model, False, False, None, []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address):
        pass  # a client that closed its connection (a stream stopped): SGLang aborts the request, silently


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        self.server.log.append((self.path, None))
        model_path = SERVED
        if self.path in ("/get_model_info", "/model_info"):
            return self.send_json({"model_path": model_path, "tokenizer_path": model_path, "is_generation": True,
                                   "preferred_sampling_params": None, "weight_version": "default",
                                   "has_image_understanding": False, "has_audio_understanding": False,
                                   "model_type": "llama", "architectures": ["LlamaForCausalLM"]})  # fmt: skip
        if self.path == "/v1/models":
            card = {"id": SERVED, "object": "model", "created": 0, "owned_by": "sglang", "root": model_path,
                    "parent": None, "max_model_len": CONTEXT}  # fmt: skip
            return self.send_json({"object": "list", "data": [card]})
        self.send_json({"detail": "Not Found"}, 404)

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.log.append((self.path, payload))
        model = self.server.model
        try:
            if self.path in ("/tokenize", "/v1/tokenize"):
                with model.lock:
                    tokens = model.tokenize(payload["prompt"], payload.get("add_special_tokens", True))
                return self.send_json({"tokens": tokens, "count": len(tokens), "max_model_len": CONTEXT})
            if self.path in ("/detokenize", "/v1/detokenize"):
                with model.lock:
                    text = model.text(payload["tokens"], special=not payload.get("skip_special_tokens", True))
                return self.send_json({"text": text})
            if self.path != "/generate":
                return self.send_json({"detail": "Not Found"}, 404)
            request = Request(payload, model)
        except ValueError as error:
            return self.send_json({"error": {"message": str(error)}}, 400)
        try:
            with model.lock:
                if request.stream:
                    self.start_chunked()
                    for out in generate(model, request, self.server):
                        self.chunk(b"data: " + json.dumps(self.faulty(out)).encode() + b"\n\n")
                    self.chunk(b"data: [DONE]\n\n")
                    self.chunk(b"")
                else:
                    *_, out = generate(model, request, self.server)
                    self.send_json(self.faulty(out))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped the stream: SGLang aborts the request

    def faulty(self, out: dict) -> dict:
        return self.server.fault(self.path, out) if self.server.fault else out

    def send_json(self, data, status=200):
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_chunked(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def log_message(self, *args):
        pass


def generate(model: SmolLM2, request: Request, server: SGLangShapes):
    """The answers to a /generate request: one per token where it streams, else the last one."""
    ids, params = request.ids, request.params
    rows = model.rows(ids)
    triple = lambda lp, i: [None if lp is None else float(lp), int(i), model.text([i]) if request.with_text else None]  # noqa: E731
    top = lambda lps: [triple(lps[i], i) for i in np.argsort(-lps, kind="stable")[: request.top_n]]  # noqa: E731
    named = lambda lps: [triple(lps[i], i) for i in request.named]  # noqa: E731
    prompt = [log_softmax(rows[p - 1]) for p in range(request.start + 1, len(ids))]
    meta_in = {"input_token_logprobs": [triple(None, ids[request.start])]
               + [triple(lps[ids[p]], ids[p]) for p, lps in zip(range(request.start + 1, len(ids)), prompt)],
               "input_top_logprobs": [None] + [top(lps) for lps in prompt],
               "input_token_ids_logprobs": [None] + [named(lps) for lps in prompt]}  # fmt: skip
    greedy = params["temperature"] < 1e-6
    rng = np.random.default_rng(params["sampling_seed"])
    row, out_ids, out_entries, tops, nameds, sent = rows[-1], [], [], [], [], 0
    stops = {model.eos, *(params["stop_token_ids"] or [])}
    while True:
        raw = log_softmax(row)
        scaled = raw if greedy else log_softmax(row / params["temperature"])
        token = int(np.argmax(raw)) if greedy else draw(np.exp(scaled), params, rng)
        reported = raw if greedy or server.original_logprob else scaled
        out_ids.append(token)
        out_entries.append(triple(reported[token], token))
        tops.append(top(reported))
        nameds.append(named(reported) if request.named is not None else [])
        if token in stops and not params["ignore_eos"] and len(out_ids) > params["min_new_tokens"]:
            finish = {"type": "stop", "matched": token}
        elif len(out_ids) >= params["max_new_tokens"]:
            finish = {"type": "length", "length": params["max_new_tokens"]}
        else:
            finish = None
        if request.stream or finish:
            new = slice(sent, None) if request.stream and server.incremental else slice(None)
            yield answer(model, request, meta_in, out_ids, out_entries, tops, nameds, finish, new)
            sent = len(out_ids)
        if finish:
            return
        row = model.next_row(token)


def draw(probs: np.ndarray, params: dict, rng) -> int:
    """SGLang's top-k, top-p, min-p (top_k_top_p_min_p_sampling_from_probs_torch), then one draw."""
    order = np.argsort(-probs, kind="stable")
    kept = probs[order].copy()
    if params["top_k"] not in (-1, None):
        kept[params["top_k"] :] = 0
    kept[(np.cumsum(kept) - kept) > params["top_p"]] = 0
    kept[kept < kept[0] * params["min_p"]] = 0
    return int(order[rng.choice(len(kept), p=kept / kept.sum())])


def answer(model, request, meta_in, out_ids, out_entries, tops, nameds, finish, new: slice) -> dict:
    """{"text", "output_ids", "meta_info"} as tokenizer_manager builds it (`new`: the chunk's slice)."""
    shown = [i for i in out_ids if not (request.params["skip_special_tokens"] and i == model.eos)]
    meta = {"id": "0", "finish_reason": finish, "prompt_tokens": len(request.ids), "weight_version": "default",
            "total_retractions": 0}  # fmt: skip
    if request.logprobs:
        meta.update(input_token_logprobs=meta_in["input_token_logprobs"], output_token_logprobs=out_entries[new],
                    output_token_logprobs_length=len(out_entries[new]))  # fmt: skip
        if request.top_n > 0:
            meta.update(input_top_logprobs=meta_in["input_top_logprobs"], output_top_logprobs=tops[new])
        if request.named is not None:
            meta.update(input_token_ids_logprobs=meta_in["input_token_ids_logprobs"],
                        output_token_ids_logprobs=nameds[new])  # fmt: skip
    meta.update(completion_tokens=len(out_ids), cached_tokens=0)
    return {"text": model.text(shown, special=False)[len(model.text(shown[: new.start or 0], special=False)) :],
            "output_ids": out_ids[new], "meta_info": meta}  # fmt: skip


def start() -> SGLangShapes:
    server = SGLangShapes(SmolLM2())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
