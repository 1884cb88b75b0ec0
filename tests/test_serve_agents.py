"""The libraries agents use, against `engine serve` on SmolLM2 (llama.cpp), as their own docs set them up for an
OpenAI-compatible server (issue 44): openai-agents runs its tool loop to a final answer, LangChain binds a tool
and gets structured output, pydantic-ai runs a tool-using agent, instructor fills a model in JSON-schema mode.
A small model's judgement is weak; the grammar makes the shapes right, and the tests check the shapes and the
arithmetic the tool did."""

import asyncio

import pytest
from pydantic import BaseModel
from test_serve import served

import engine

PROMPT = "What is 2 plus 3? Use the add tool."
CALLS: list[tuple[int, int]] = []


def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    CALLS.append((a, b))
    return a + b


class Person(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def url():
    """SmolLM2 on llama.cpp with 2,048 positions: pydantic-ai's tool and output schemas take 540 tokens."""
    pytest.importorskip("llama_cpp")
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=2048)
    with served(model, model_id="smollm2") as url:
        yield url
    model.close()


@pytest.fixture(autouse=True)
def no_calls_yet():
    CALLS.clear()


def test_openai_agents_runs_its_tool_loop_to_a_final_answer(url):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # no upload to OpenAI's tracing service

    async def run():
        async with AsyncOpenAI(base_url=url, api_key="x") as client:
            model = agents.OpenAIChatCompletionsModel(model="smollm2", openai_client=client)
            agent = agents.Agent(name="calculator", instructions="You add numbers with the add tool.", model=model,
                                 tools=[agents.function_tool(add)],
                                 model_settings=agents.ModelSettings(temperature=0, max_tokens=48,
                                                                     tool_choice="required"),
                                 tool_use_behavior="stop_on_first_tool")  # fmt: skip
            return await agents.Runner.run(agent, PROMPT, max_turns=3)

    result = asyncio.run(run())
    assert CALLS and str(sum(CALLS[-1])) == str(result.final_output)


def test_langchain_binds_a_tool_and_returns_structured_output(url):
    langchain_openai = pytest.importorskip("langchain_openai")
    chat = langchain_openai.ChatOpenAI(model="smollm2", base_url=url, api_key="x", temperature=0, max_tokens=64)
    message = chat.bind_tools([add], tool_choice="add").invoke(PROMPT)
    (call,) = message.tool_calls
    assert call["name"] == "add" and set(call["args"]) == {"a", "b"}
    assert all(isinstance(value, int) for value in call["args"].values())
    person = chat.with_structured_output(Person, method="json_schema").invoke("Invent a person.")
    assert isinstance(person, Person)


def test_pydantic_ai_runs_a_tool_using_agent(url):
    """The tool is offered until it has been called (pydantic-ai's `prepare`): SmolLM2 135M, offered it again,
    calls it again with the same numbers rather than answer; then it answers in words."""
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    async def until_called(_context, definition):
        return None if CALLS else definition

    async def run():
        async with AsyncOpenAI(base_url=url, api_key="x") as client:
            model = OpenAIChatModel("smollm2", provider=OpenAIProvider(openai_client=client))
            agent = pydantic_ai.Agent(model, tools=[pydantic_ai.Tool(add, prepare=until_called)],
                                      model_settings={"temperature": 0, "max_tokens": 48})  # fmt: skip
            return await agent.run(PROMPT, usage_limits=UsageLimits(request_limit=3))

    result = asyncio.run(run())
    assert CALLS == [(2, 3)] and isinstance(result.output, str) and result.output
    returns = [part for message in result.all_messages() for part in message.parts
               if part.part_kind == "tool-return"]  # fmt: skip
    assert [part.content for part in returns] == [5]


def test_instructor_fills_a_model_in_json_schema_mode(url):
    instructor = pytest.importorskip("instructor")
    from openai import OpenAI

    with OpenAI(base_url=url, api_key="x", max_retries=0) as openai_client:
        client = instructor.from_openai(openai_client, mode=instructor.Mode.JSON_SCHEMA)
        person = client.chat.completions.create(model="smollm2", response_model=Person, max_retries=0, temperature=0,
                                                max_tokens=64, messages=[{"role": "user", "content": "Invent a person."}])  # fmt: skip
    assert isinstance(person, Person) and person.name
