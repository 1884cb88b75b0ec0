"""Demonstration: a rule that really runs a test script and writes its outcome into the model's text.

    python examples/command_tool.py [--break]

When the text ends with "now ben has the", a CommandTool runs examples/check_sum.py (a list of arguments,
no shell) and inserts " passed" or " failed" from its exit status; then the model continues from there.
"""

import argparse
import sys
from pathlib import Path

import engine

SCRIPT = Path(__file__).with_name("check_sum.py")
PROMPT = "mia has a red ball. mia goes to the park. at the park, mia gives the ball to ben."


def run(model=None, broken=False) -> dict:
    model = model or engine.load_model()
    argv = [sys.executable, str(SCRIPT)] + (["--break"] if broken else [])
    tool = engine.CommandTool(argv, timeout=10.0, on_exit={0: " passed"}, otherwise=" failed", name="check_sum")
    rule = engine.Rule("now ben has the", tool=tool)
    session = engine.Session(model, PROMPT, rules=[rule])
    session.run()
    return {
        "text": session.text,
        "tool steps": [step.token for step in session.steps if step.source == "tool"],
        "stopped": session.stopped,
        "trace": session.trace(),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--break", dest="broken", action="store_true", help="make the script's test fail")
    args = parser.parse_args()
    result = run(broken=args.broken)
    print(result["text"].rstrip())
    print(f"tool inserted {result['tool steps']} [{result['stopped']}]")


if __name__ == "__main__":
    main()
