"""Bounded work (issue 25, items 6, 7, 9): how long the hostile inputs of the issue take now, on the story model.

- replay of a trace shaped as the issue's 14 KB one (a tree of 2 nodes; 21 goto + expand pairs of budget 10,000, which built
  191,618 nodes in 42.8 s): refused before any work; and the same pairs naming only nodes the tree holds
  (each expansion cut to the tree's size, the replay stopped once it outgrows it)
- a step under regex trigger rules that backtrack: (a+)+b on 26 "a"s (1.09 s a step at 24 with `re`), (a|aa)+b
  on 34 (past the 0.1 s bound: disabled after its first step), and (\\w+\\s?)*; on 7,500 characters (over 290 s)
- a chat template that loops or recurses, rendered (the worst of several): a ValueError within its 1 s bound

    python bench/bounded_work.py [--rounds 3]
"""

import argparse
import json
import time

import engine
from engine.backends.gguf.chat_template import TemplateLimit, render

PROMPT = "mia has a red ball."
BIG = {"kind": "expand", "top_k": None, "coverage": 1.0, "depth": 40, "budget": 10_000, "raw": True}


def seconds(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def issue_trace(model, gotos) -> dict:
    session = engine.Session(model, PROMPT, max_new_tokens=8, seed=1)
    session.step()
    trace = session.trace()
    trace["actions"] = [*trace["actions"], BIG]
    for node in gotos:
        trace["actions"] += [{"kind": "goto", "node": node}, BIG]
    return trace


def replay_figures(model, rounds: int) -> None:
    trace = issue_trace(model, range(2, 2 + 20 * 9_000, 9_000))
    size = len(json.dumps(trace)) / 1000

    def refused():
        try:
            engine.replay_session(trace, model)
        except ValueError:
            return
        raise AssertionError("the trace was replayed")

    times = [seconds(refused) for _ in range(rounds)]
    print(f"replay of a trace shaped as the issue's ({size:.0f} KB, tree of 2 nodes, 21 goto + expand-10,000 pairs): "
          "refused in "
          f"{min(times) * 1000:.1f}-{max(times) * 1000:.1f} ms")  # fmt: skip
    held = issue_trace(model, [0, 1] * 10)
    times, made = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        session, report = engine.replay_session(held, model)
        times.append(time.perf_counter() - started)
        made = len(session.tree.nodes)
    print(f"  the same pairs naming nodes the tree holds: stopped after {made} nodes in "
          f"{min(times) * 1000:.0f}-{max(times) * 1000:.0f} ms ({report.notes[0]})")  # fmt: skip


def rule_figures(model, rounds: int) -> None:
    for when, prompt in (("(a+)+b", "a" * 26), ("(a|aa)+b", "a" * 34)):
        first, later = [], []
        for _ in range(rounds):
            rule = engine.Rule(when, insert=" ben", regex=True)
            session = engine.Session(model, prompt, max_new_tokens=8, rules=[rule])
            first.append(seconds(session.step))
            later += [seconds(session.step) for _ in range(3)]
        events = f"; event: {session.events[0]}" if session.events else ""
        print(f"step under rule {when} on {len(prompt)} 'a's: first {min(first) * 1000:.1f}-{max(first) * 1000:.1f} "
              f"ms, later steps {min(later) * 1000:.1f}-{max(later) * 1000:.1f} ms{events}")  # fmt: skip
    text = ("mia has a red ball and goes to the park with ben " * 200)[:7_500]
    rule = engine.Rule(r"(\w+\s?)*;", insert=" ben", regex=True)
    times = [seconds(lambda: rule.matches(text)) for _ in range(rounds)]
    print(f"rule (\\w+\\s?)*; matched on 7,500 characters: {min(times) * 1000:.2f}-{max(times) * 1000:.2f} ms")


def template_figures(rounds: int) -> None:
    templates = {
        "nested loops": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "growing output": "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}",
    }
    for name, source in templates.items():
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            try:
                render(source, [{"role": "user", "content": "Hello"}], "", "")
            except TemplateLimit as error:
                why = str(error)
            times.append(time.perf_counter() - started)
        print(f"chat template with {name}: ValueError ({why}) in {min(times):.2f}-{max(times):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = engine.load_model()
    replay_figures(model, args.rounds)
    rule_figures(model, args.rounds)
    template_figures(args.rounds)


if __name__ == "__main__":
    main()
