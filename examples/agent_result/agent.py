"""An agent's side of the "Result:" example: one chat completion from the official openai client, against
`python -m engine serve -m smollm2 --rules examples/agent_result/rules.json --allow-commands` (run from the
repository's root). The model writes a test; the server's first rule writes "Result:" once the code block
closes, the second runs the block with pytest and inserts " passed" or " failed" there, between two inference
passes, and the model writes on after the real result.

    python examples/agent_result/agent.py [--url http://127.0.0.1:8000/v1]
"""

import argparse

import openai

QUESTION = "Write a unit test in Python for a function add(a, b). Use assert."


def ask(url: str, model: str | None = None, max_tokens: int = 200):
    client = openai.OpenAI(base_url=url, api_key="none")
    model = model or client.models.list().data[0].id  # the one model the server serves
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}],
                                          max_tokens=max_tokens, temperature=0)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default=None, help="the server's model id (default: the one it serves)")
    args = parser.parse_args()
    print(ask(args.url, args.model).choices[0].message.content)


if __name__ == "__main__":
    main()
