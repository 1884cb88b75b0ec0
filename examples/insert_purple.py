"""Demonstration: write " purple" into the story at the color position and watch what the model does next.

    python examples/insert_purple.py [--trace out.json]

The prompt is a dev story up to "... now leo has the". The model expects the first sentence's color; we
insert " purple" (a color it never saw) as if it had written it, then let it continue greedily.
"""

import argparse
import math

import engine
from engine.story import corpus as stories


def run(model=None) -> dict:
    model = model or engine.load_model()
    _train, dev, _test = stories.split()
    story = next(s for s in dev if " now leo has the " in s)
    prompt = story[: story.index(" now leo has the") + len(" now leo has the")]
    session = engine.Session(model, prompt)
    expected = session.step()  # what the model would have written here, then take it back
    session.rewind(1)
    inserted = session.insert_text(" purple")
    continuation = session.run()
    return {
        "prompt": prompt,
        "model would write": expected.token,
        "model probability of its own choice": expected.model_probability,
        "inserted tokens": [step.token for step in inserted],
        "model probability of purple": math.prod(step.model_probability for step in inserted),
        "continuation": "".join(step.token for step in continuation),
        "stopped": session.stopped,
        "trace": session.trace(),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", help="save the run's trace here")
    args = parser.parse_args()
    result = run()
    print(f"prompt:            {result['prompt']!r}")
    print(
        f"model would write: {result['model would write']!r} (p = {result['model probability of its own choice']:.4f})"
    )
    p_purple = result["model probability of purple"]
    print(f"inserted:          {result['inserted tokens']} (the model's p of ' purple' = {p_purple:.3g})")
    print(f"model continues:   {result['continuation']!r} [{result['stopped']}]")
    if args.trace:
        engine.save_trace(result["trace"], args.trace)


if __name__ == "__main__":
    main()
