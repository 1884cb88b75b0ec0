"""The OpenAI-compatible server (FastAPI + sse-starlette; the optional extra `[serve]`): /v1/models,
/v1/completions and /v1/chat/completions, streamed or not, every request a Session whose rules act between
two inference passes.

Requests to the model are queued (an asyncio lock, first come first served): one Session steps at a time, on
a worker thread of its own a few steps ahead of what is sent (stepping.py; what piled up goes out as one
event), so the event loop stays free to accept, refuse and disconnect clients. A request's own work (decoding
token ids, the chat template, tokenizing, checking a grammar) runs on a thread too. A client that goes away
stops its generation after the step in flight, streamed or not (checked every GONE_SECONDS); a stream whose
client stops reading ends after SEND_SECONDS. Keys, body sizes and connection times are checked before any
of this (guard.py). --traces keeps each request's trace, named by its id (the response's `X-Trace` header and
`trace` field say which file; where it could not be written, `trace` is null and `trace_error` says why).
"""

import asyncio
import json
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.exceptions import HTTPException

from engine.core.checks import MAX_TOKEN_CHARS
from engine.core.session import Session
from engine.core.settings import MAX_SEED
from engine.core.trace import save_trace
from engine.serve.answers import choice_chunk, tool_chunk, whole_choice
from engine.serve.checks import BadRequest, checked_model, guarded
from engine.serve.guard import Guard, error_body
from engine.serve.requests import CHAT_MAX_TOKENS, COMPLETION_MAX_TOKENS, MAX_CHOICES, ChatRequest, CompletionRequest
from engine.serve.runs import Run, joined, usage
from engine.serve.stepping import stepper_for
from engine.serve.structured import response_grammar
from engine.serve.tools import takes_tools, template_input, tool_plan
from engine.serve.watch import Watchers

SEND_SECONDS = 30.0  # a stream's event not taken by its client within this ends the request
QUICK_BODY = 64 << 10  # bytes of JSON parsed on the event loop itself; a larger body is parsed on a thread
GONE_SECONDS = 0.25  # how often a request that is not streamed asks whether its client is still there


def make_app(model, *, model_id: str | None = None, rules=(), traces: Path | None = None,
             api_key: str | None = None, send_seconds: float = SEND_SECONDS, aliases=(), parallel: int = 1) -> FastAPI:  # fmt: skip
    """The server for one model; rules: engine Rules every request runs with (before its own `steer`);
    send_seconds: how long a stream's event may wait for its client to read before the request ends; aliases:
    more names a client may send as `model` (the command line's -m), beside the model's own (served_names);
    parallel: requests generated at once, their tokens decoded together (llama.cpp; 1: one at a time)."""

    app = FastAPI(title="Token Playground", docs_url=None, redoc_url=None)
    app.add_middleware(Guard, api_key=api_key)  # the key before the body, on every path (guard.py)
    app.state.rules = tuple(rules)
    names = served_names(model, model_id, aliases)
    served = names[0]  # what the answers say
    steppers = None  # the threads requests step on: the loop's default, or one for each request let in at once
    if parallel != 1:
        model = shared(model, parallel)
        steppers = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="request steps")
    lock = asyncio.Semaphore(parallel)  # requests admitted to the model at once; the others wait their turn
    app.state.scheduler = getattr(model, "scheduler", None)  # --parallel's (its rounds, tokens and free sequences)
    created = int(time.time())
    watchers = Watchers()
    pace = None  # seconds per step of the model's last request (stepping.stepper_for chooses by it)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, error: RequestValidationError):
        first = error.errors()[0]
        if first.get("type") == "json_invalid":
            return JSONResponse(error_body(f"the body is not JSON: {first.get('ctx', {}).get('error', '')}"), 400)
        field = [str(part) for part in first.get("loc", ()) if part != "body"][:1]  # not pydantic's union tags
        param = field[0] if field else None
        if param == "steer" and first.get("type") == "extra_forbidden" and first["loc"][-1] in ("command", "tool"):
            message = ("steer: a client's rules insert text or choose among options; commands are the server's to "
                       "allow (its --rules file, with --allow-commands)")  # fmt: skip
            return JSONResponse(error_body(message, "steer"), status_code=400)
        return JSONResponse(error_body(f"{param or 'body'}: {first.get('msg')}", param), status_code=400)

    @app.exception_handler(BadRequest)
    async def bad(_request, error: BadRequest):
        kind = "invalid_request_error" if error.status == 400 else "authentication_error"
        return JSONResponse(error_body(error.message, error.param, kind), status_code=error.status)

    @app.exception_handler(HTTPException)
    async def http_error(_request, error: HTTPException):
        return JSONResponse(error_body(str(error.detail)), status_code=error.status_code)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": created,
                                            "owned_by": "token-playground"} for name in names]}  # fmt: skip

    @app.get("/v1/playground/watch")
    async def watch():
        """Every request from now on, live: {"kind": "start" | "step" | "end", "request": id, ...} events."""
        return EventSourceResponse((json.dumps(event) async for event in watchers.events()), ping=1)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parsed_body(request, CompletionRequest)
        checked_model(body, names)
        if body.max_tokens == 0 and not body.echo:
            raise BadRequest(
                "max_tokens: 0 writes nothing; it is for echo (the prompt's log-probabilities)", "max_tokens"
            )

        def prepare() -> list:  # on a thread: decoding ids, tokenizing and checking take time with a big request
            prompt = guarded(lambda: body.prompt_text(model.tokenizer, model.vocab_size), "prompt")
            return new_run(body, prompt, "prompt", body.logprobs, COMPLETION_MAX_TOKENS)

        return await answer(body, await anyio.to_thread.run_sync(prepare), "text_completion", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parsed_body(request, ChatRequest)
        checked_model(body, names)
        render = getattr(model.tokenizer, "messages_prompt", None)
        if render is None or not model.has_chat_template():
            raise BadRequest(f"{served} has no chat template: send the text as it is to /v1/completions", "messages")
        if body.max_completion_tokens is not None:
            body.max_tokens = body.max_completion_tokens
        if body.max_tokens == 0:
            raise BadRequest("max_tokens: a chat answer is at least 1 token", "max_tokens")

        def prepare() -> list:  # on a thread: a long conversation takes the template a while
            native = takes_tools(
                getattr(model.tokenizer, "chat_template", None)
            )  # the template's own tool form, else the generic one
            plan = guarded(lambda: tool_plan(body.tools, body.tool_choice, native), "tools")
            prompt = guarded(lambda: render(*template_input(body.chat_messages(), plan, native)), "messages")
            top = (body.top_logprobs or 0) if body.logprobs else None
            return new_run(body, prompt, "messages", top, CHAT_MAX_TOKENS, plan)

        return await answer(body, await anyio.to_thread.run_sync(prepare), "chat.completion", request)

    async def answer(body, runs: list, kind: str, request: Request):
        """runs: a maker of each choice's Run (`n` of them), made when its turn comes (each opens a context)."""
        request_id = ("cmpl-" if kind == "text_completion" else "chatcmpl-") + uuid.uuid4().hex[:24]
        headers = {"X-Trace": f"{request_id}.json"} if traces is not None else {}
        if body.stream:
            events = streamed(runs, request_id, kind, body)
            return Stream(events, headers=headers, ping=600, send_timeout=send_seconds)
        done, gone = [], False
        for make in runs:
            run = await anyio.to_thread.run_sync(make)
            name = trace_name(request_id, run)  # each choice's own trace and watched request
            async with lock:
                started(run, name)
                stepper = stepper_for(run, pace if parallel == 1 else None, steppers)  # shared: never on the loop
                try:
                    asked = time.monotonic()
                    async for _piece in stepper:
                        stepped(run, name)
                        if time.monotonic() - asked > GONE_SECONDS:  # a client that went away stops its generation
                            if gone := await request.is_disconnected():
                                break
                            asked = time.monotonic()
                except ValueError as error:  # the model failed mid-generation (not the request)
                    return JSONResponse(error_body(f"the generation failed: {error}", None, "server_error"), 500)
                finally:
                    await stepper.close()
                    ended(run, name)
            done.append(run)
            if gone:  # no choice more for a client that is not there
                break
        if any(run.trace_error is not None for run in done):
            headers = {}
        return JSONResponse(whole(done, request_id, kind), headers=headers)

    def new_run(body, prompt: str, prompt_field: str, top_logprobs, default_max: int, plan=None) -> Run:
        if len(prompt) > model.context_length * MAX_TOKEN_CHARS:  # no need to tokenize it to know
            raise BadRequest(f"{prompt_field}: {len(prompt):,} characters cannot fit in the model's context of "
                             f"{model.context_length:,} tokens", prompt_field)  # fmt: skip
        prompt_ids = guarded(lambda: model.tokenizer.encode(prompt), prompt_field)
        room = model.context_length - len(prompt_ids)
        if room < 1:
            raise BadRequest(f"{prompt_field}: {len(prompt_ids):,} tokens leave no room in the model's context of "
                             f"{model.context_length:,} tokens", prompt_field)  # fmt: skip
        structured(body, plan)
        seed = body.seed if body.seed is not None else random.randrange(MAX_SEED - MAX_CHOICES)
        if seed + body.n - 1 > MAX_SEED:
            raise BadRequest(f"seed: choice i takes seed + i, so with n = {body.n} the seed must be at most "
                             f"{MAX_SEED - body.n + 1}", "seed")  # fmt: skip
        make = partial(made_run, body, prompt, top_logprobs, min(default_max, room), plan)
        first = guarded(lambda: make(seed), fields=type(body).model_fields)  # it checks the request: a 400 now
        return [lambda: first, *(partial(make, seed + i, i) for i in range(1, body.n))]  # choice i: seed + i

    def structured(body, plan) -> None:
        """The grammar that response_format or the tools ask for, in the request's `grammar` (one of the three)."""
        asked = [name for name in ("grammar", "response_format") if getattr(body, name) is not None]
        asked += ["tools"] * (plan is not None)
        if len(asked) > 1:
            raise BadRequest(f"{asked[1]}: give one of grammar, response_format and tools, not {' and '.join(asked)}",
                             asked[1])  # fmt: skip
        if asked and asked[0] != "grammar" and not model.capabilities.grammar:
            raise BadRequest(f"{asked[0]} needs a grammar, which {served} cannot run here (the llama.cpp backend "
                             "can)", asked[0])  # fmt: skip
        if plan is not None:
            body.grammar = guarded(plan.grammar, "tools")
        elif body.response_format is not None:
            body.grammar = guarded(lambda: response_grammar(body.response_format), "response_format")

    def made_run(body, prompt: str, top_logprobs, default_max: int, plan, seed: int, index: int = 0) -> Run:
        options = body.session_options(default_max)
        for token_id, _bias in options["logit_bias"]:  # before Settings' own check, which knows no vocabulary
            if model.vocab_size is not None and token_id >= model.vocab_size:
                raise ValueError(f"logit_bias names token id {token_id}, outside the vocabulary (0 to "
                                 f"{model.vocab_size - 1})")  # fmt: skip
        session = Session(model, prompt, seed=seed, rules=tuple(rules) + body.rules(), **options)
        written = len(session.prompt_text) + len(session.healing or "")  # with what healing left to spell
        session.client_spans.append((0, written))  # the client wrote the prompt
        echo = getattr(body, "echo", False)  # completions only
        return Run(session, body.stops(), top_logprobs, plan, index, echo=echo, generate=body.max_tokens != 0)

    async def streamed(runs: list, request_id: str, kind: str, body):
        chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else "text_completion"
        done = []
        for make in runs:  # the choices one after another, each chunk with its index
            run = await anyio.to_thread.run_sync(make)
            async for event in streamed_choice(run, request_id, kind, chunk_kind):
                yield event
            done.append(run)
        if body.stream_options is not None and body.stream_options.include_usage:
            yield json.dumps(dict(envelope(request_id, chunk_kind, []), usage=usage(done)))
        yield "[DONE]"

    async def streamed_choice(run: Run, request_id: str, kind: str, chunk_kind: str):
        first, name = True, trace_name(request_id, run)  # the choice's own trace and watched request
        async with lock:
            started(run, name)
            stepper = stepper_for(run, pace if parallel == 1 else None, steppers)
            try:
                try:
                    async for piece in stepper:
                        piece = joined([piece, *stepper.waiting()])
                        stepped(run, name)
                        if run.tools is not None:  # the JSON form is read whole: the answer comes at the end
                            if piece.finish:
                                yield json.dumps(envelope(request_id, chunk_kind, [tool_chunk(run)]))
                            continue
                        if piece.text or piece.tokens or first or piece.finish:
                            choice = choice_chunk(kind, piece, first, piece.finish, run.index)
                            yield json.dumps(envelope(request_id, chunk_kind, [choice]))
                            first = False
                except ValueError as error:  # the model failed mid-stream: said in the stream, then it ends
                    yield json.dumps(error_body(f"the generation failed: {error}", None, "server_error"))
                await stepper.close()
                ended(run, name)  # its trace written before the end, to say so where it could not be
                if run.trace_error is not None:
                    yield json.dumps(
                        dict(envelope(request_id, chunk_kind, []), trace=None, trace_error=run.trace_error)
                    )
            finally:  # also when the client went away: the generation stops after the step in flight
                if not run.ended:
                    with anyio.CancelScope(shield=True):  # a cancelled stream's scope cancels every await in it again
                        await stepper.close()
                    ended(run, name)

    def envelope(request_id: str, kind: str, choices: list) -> dict:
        out = {"id": request_id, "object": kind, "created": int(time.time()), "model": served, "choices": choices}
        if traces is not None:
            out["trace"] = f"{request_id}.json"
        return out

    def whole(runs: list[Run], request_id: str, kind: str) -> dict:
        failed = next((run.trace_error for run in runs if run.trace_error is not None), None)
        kept = {} if failed is None else {"trace": None, "trace_error": failed}
        if len(runs) > 1 and traces is not None and failed is None:
            kept["traces"] = [f"{trace_name(request_id, run)}.json" for run in runs]
        choices = [whole_choice(run, kind) for run in runs]
        return dict(envelope(request_id, kind, choices), usage=usage(runs), **kept)

    def started(run: Run, request_id: str) -> None:
        if watchers:
            session = run.session
            watchers.publish({"kind": "start", "request": request_id, "model": served, "prompt": session.prompt_text,
                              "settings": session.settings.to_dict()})  # fmt: skip

    def stepped(run: Run, request_id: str) -> None:
        """The steps the session took since the last call, to the watchers."""
        steps = run.session.steps
        if watchers:
            for step in steps[run.watched :]:
                watchers.publish({"kind": "step", "request": request_id, "step": step.to_dict()})
        run.watched = len(steps)

    def ended(run: Run, request_id: str) -> None:
        """The request is over (answered, failed, or its client went away): its trace kept and watched."""
        nonlocal pace
        run.ended = True
        stepped(run, request_id)
        if run.taken:
            pace = run.stepping / run.taken
        written = bool(run.session.steps)  # a request that ended before its first step has no trace
        trace = run.session.trace() if written and (traces is not None or watchers) else None
        if parallel != 1:
            run.session.close()  # its sequence to the next request now
        if traces is not None and written:
            try:
                save_trace(trace, traces / f"{request_id}.json")
            except (OSError, ValueError) as error:  # a full disk loses the trace, never the answer
                run.trace_error = f"the trace was not kept: {error}"
        if watchers:
            watchers.publish({"kind": "end", "request": request_id, "trace": trace})

    return app


def trace_name(request_id: str, run: Run) -> str:
    """A choice's trace: the request's id, then -1, -2... for the choices after the first (`n`)."""
    return request_id if run.index == 0 else f"{request_id}-{run.index}"


async def parsed_body(request: Request, kind):
    """The request's JSON body as `kind` (a pydantic model; its errors as FastAPI's, for the 400 handler), a large
    one parsed on a thread: 7 MB of `logit_bias` keys took the loop 0.4 s."""
    raw = await request.body()

    def parse():  # Python's json, as FastAPI's: a lone surrogate reaches the checks that name its field
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, nested too deep
            reason = getattr(error, "msg", None) or str(error) or type(error).__name__
            raise RequestValidationError(
                [{"type": "json_invalid", "loc": ("body",), "ctx": {"error": reason}}]
            ) from None
        try:
            return kind.model_validate(data)
        except ValidationError as error:
            raise RequestValidationError(error.errors(include_url=False)) from None

    return parse() if len(raw) <= QUICK_BODY else await anyio.to_thread.run_sync(parse)


class Stream(EventSourceResponse):
    """An SSE response whose client stopped reading ends the request quietly (uvicorn closes the connection
    and says so in one line), not with a traceback in the server's log."""

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            pass


def shared(model, parallel: int):
    """The model as `parallel` requests at once see it (engine/backends/llamacpp/scheduler.py), or ValueError."""
    if not hasattr(model, "llama"):
        raise ValueError(f"--parallel {parallel}: decoding several requests together needs the llama.cpp backend")
    from engine.backends.llamacpp.scheduler import Shared

    return Shared(model, parallel)


def served_names(model, model_id: str | None, aliases=()) -> list[str]:
    """The names a client may send as `model`, the one answers say first: --model-id (or the model's own name),
    the model's own name, its short name (smollm2, story), and the aliases (what -m was given: a short name, a
    path, whose file name and stem count too). Compared without regard to case."""
    from engine.loading import SMOLLM2_FILE

    names = [model_id or model.name, model.name]
    if model.name.lower() == Path(SMOLLM2_FILE).stem.lower():
        names.append("smollm2")
    if model.name == "story model":
        names += ["story", "story-model"]
    for alias in aliases:
        names += [str(alias), Path(str(alias)).name, Path(str(alias)).stem]
    unique = []
    for name in names:
        if name and name.lower() not in (n.lower() for n in unique):
            unique.append(name)
    return unique
