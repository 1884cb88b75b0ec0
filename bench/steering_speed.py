"""What steering costs on the story model: median step time plain, forced and with rules; inserting k
tokens (one forward over k positions) against k single forced steps; rewind.

    python bench/steering_speed.py
    python bench/steering_speed.py --only plain     # one row of the step table, nothing else
"""

import argparse
import statistics
import time

import engine
from engine import Rule, Session
from engine.story import corpus as stories

COLOR_RULE = Rule(r"now (" + "|".join(stories.NAMES) + r") has the", tool=lambda t: " " + t.split()[3], regex=True)
IDLE_RULES = [Rule("xyz", insert=" a"), Rule(r"q+z", insert=" b", regex=True)]


def step_times(model, prompts, rules=(), force=False):
    """Median-ready list of step times; with force, every step forces the token a plain run took."""
    times = []
    for index, prompt in enumerate(prompts):
        plain = [s.token_id for s in engine.generate(model, prompt, temperature=1.0, seed=index).steps]
        session = Session(model, prompt, temperature=1.0, seed=index, rules=rules)
        while True:
            started = time.perf_counter()
            if force and len(session.steps) < len(plain):
                session.force_token(plain[len(session.steps)])
            step = session.step()
            elapsed = time.perf_counter() - started
            if step is None:
                break
            times.append(elapsed)
    return times


def insert_versus_steps(model, prompt, text, rounds=200):
    ids = model.tokenizer.encode(text)
    batched, single = [], []
    for _ in range(rounds):
        session = Session(model, prompt)
        session.step()
        started = time.perf_counter()
        session.insert_text(text)
        batched.append(time.perf_counter() - started)
        session = Session(model, prompt)
        session.step()
        started = time.perf_counter()
        for token in ids:
            session.force_token(token)
            session.step()
        single.append(time.perf_counter() - started)
    return len(ids), statistics.median(batched), statistics.median(single)


def rewind_times(model, prompt, rounds=200):
    results = {}
    for n in (1, 10, 30):
        times = []
        for _ in range(rounds):
            session = Session(model, prompt, max_new_tokens=40, temperature=1.0)
            session.run()
            started = time.perf_counter()
            session.rewind(min(n, len(session.steps)))
            times.append(time.perf_counter() - started)
        results[n] = statistics.median(times)
    return results


STEP_ROWS = {  # --only's choices: the step table's rows
    "plain": ("plain", {}),
    "forced": ("every step forced", {"force": True}),
    "rules": ("with 3 rules (one fires)", {"rules": [COLOR_RULE, *IDLE_RULES]}),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=STEP_ROWS, help="time only this row of the step table")
    only = parser.parse_args().only
    model = engine.load_model()
    _train, dev, _test = stories.split()
    prompts = [stories.first_sentence(s) for s in dev]
    print("median time per step (60 dev stories, T 1.0)")
    for key, (name, kwargs) in STEP_ROWS.items():
        if only in (None, key):
            times = step_times(model, prompts, **kwargs)
            print(f"  {name:26s} {statistics.median(times) * 1e6:7.0f} us  ({len(times)} steps)")
    if only:
        print(f"command: python bench/steering_speed.py --only {only}")
        return
    k, batched, single = insert_versus_steps(
        model, prompts[0], " mia goes to the park. at the park, mia gives the ball"
    )
    print(
        f"insert {k} tokens: one batched forward {batched * 1e3:.2f} ms, {k} forced steps {single * 1e3:.2f} ms "
        f"({single / batched:.1f}x)"
    )
    rewinds = rewind_times(model, prompts[0])
    print("rewind n steps: " + ", ".join(f"n={n} {t * 1e6:.0f} us" for n, t in rewinds.items()) + " (no forward pass)")
    print("command: python bench/steering_speed.py")


if __name__ == "__main__":
    main()
