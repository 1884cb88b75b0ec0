"""Models served by an inference server (vLLM, llama.cpp's llama-server, llama-cpp-python's server, TGI...)
through the OpenAI-compatible /v1/completions endpoint with logprobs.

The server samples, with the session's seed and settings; the engine sends the text so far (or its token
ids, where the server takes them), reads back the chosen token and the server's top-N alternatives, and
turns them into Steps. What the chart shows is honest about its source: the server's top-N raw
log-probabilities; tokens outside the top N are unknown (no probability), not zero. Servers do not report their
sampler's stages (after temperature, top-k, ...); where their numbers are raw, the engine's chain runs on the top N
here (stages.py), so the stage view shows what each stage does to them.

What a server supports is detected once, at connect time: its models, a tokenize endpoint (/tokenize on
vLLM and llama-server, /extras/tokenize on llama-cpp-python's server), whether a prompt may be token ids,
and how forced tokens are scored: by one request that echoes the prompt with its log-probabilities (vLLM,
where its entries line up with the prompt's tokens), or by one one-token request per forced position,
reading its top N: llama-server does not echo, and llama-cpp-python's echo is shifted by a position that
depends on the prompt (see Server._find_scoring).

Servers answer logprobs in two forms, both read here: the legacy completions form (tokens, token_logprobs,
top_logprobs as text -> logprob) and llama-server's list form (content[i] with id, token, bytes, logprob and
top_logprobs as a list with ids); where a server names token ids, they are kept (answers.py).

A server that misbehaves is a ValueError naming it and what was wrong, and the session stays as it was:
every request goes through one helper (ServerConnection.request, or .events for a stream) that reads the
answer as it arrives, within the model's timeout for the whole answer and under MAX_ANSWER_BYTES, and every
answer is checked field by field (answers.py) before any of it is used. Only the server's own finish reason
ends the text; a cut connection, a missing field or a stream that stops without a reason is a fault.

    server.py      Server: connecting (what the server supports), tokens, completions, scoring, Steps; the
                   one object the model, the tokenizer and every context hold
    model.py       RemoteModel: a Server with the backend contract's face
    connect.py     load_remote: SGLang's native API where the server is SGLang, else RemoteModel
    sglang.py      SGLangModel: a RemoteModel speaking SGLang's /generate (exact ids, one request per insert)
    sglang_answers.py  SGLang's answers, checked field by field
    context.py     RemoteContext: one session on a server (the backend contract's context)
    tokenizer.py   RemoteTokenizer: the server's own tokenizer, over HTTP
    connection.py  ServerConnection: the one checked request path (deadline, size cap, retries)
    answers.py     TopN and Token, and the answers' shapes, checked field by field
    scoring.py     forced tokens scored: by one echoing request, or one request per position
    exact_ids.py   exact token ids (vLLM: return_tokens_as_token_ids with the model's tokenizer here, return_token_ids)
    stages.py      the sampler chain run on a raw server's top N
    connect.py     load_remote: Ollama (found by /api/version and /api/tags at the root) or the OpenAI path
    ollama.py      OllamaModel: Ollama's native API (/api/generate, raw), what it cannot do said plainly
    ollama_vocab.py   the served model's GGUF file on this machine: its tokenizer, token ids by their bytes
    ollama_answers.py Ollama's answers' shapes, checked field by field
"""

from engine.backends.remote.connect import load_remote
from engine.backends.remote.connection import MAX_ANSWER_BYTES, RETRIES
from engine.backends.remote.context import RemoteContext
from engine.backends.remote.model import TOP_N, RemoteModel

__all__ = ["MAX_ANSWER_BYTES", "RETRIES", "TOP_N", "RemoteContext", "RemoteModel", "load_remote"]
