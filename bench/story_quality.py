"""The shipped story model's greedy quality on the 60 dev stories (and, for reference, the test split).

    python bench/story_quality.py

For each story, greedy decoding continues its first sentence; `follows_story` judges the result.
"""

import time

import engine
from engine.story import corpus as stories


def score(model, split):
    well_formed = keeps = 0
    for story in split:
        first = stories.first_sentence(story)
        verdict = stories.follows_story(first, engine.generate(model, first).text)
        well_formed += verdict["well_formed"]
        keeps += verdict["keeps_color_and_object"]
    return well_formed, keeps


def main():
    model = engine.load_model()
    _train, dev, test = stories.split()
    started = time.perf_counter()
    for name, split in (("dev", dev), ("test", test)):
        well_formed, keeps = score(model, split)
        print(
            f"{name:4s} {len(split):3d} stories: well formed {well_formed}/{len(split)}, "
            f"keeps color and object {keeps}/{len(split)}"
        )
    print(f"({time.perf_counter() - started:.1f} s)  command: python bench/story_quality.py")


if __name__ == "__main__":
    main()
