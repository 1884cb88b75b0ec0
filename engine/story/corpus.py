"""The story corpus: four-sentence stories, one per line, from a tiny fixed grammar.

    mia has a red ball. mia goes to the park. at the park, mia gives the ball to ben. now ben has the red ball.

The word lists are chosen so that the tokenizer's 96 tokens hold almost every word whole (with its
leading space), and no two words share a first token: a one-block model can then copy a word by
attending to one token.

Every combination of (giver, receiver != giver, color, object, place) is one story; the whole set is
shuffled with a fixed seed and cut into train, dev (exactly 60 stories) and test, so no story is in two
splits and every run of `split()` returns the same lists.
"""

import random
import re

NAMES = ("mia", "ben", "leo", "bob", "kim", "tom")
COLORS = ("red", "blue", "gold", "black", "brown", "tan")
OBJECTS = ("ball", "fan", "toy", "book", "mug", "pen")
PLACES = ("park", "barn", "mall", "garden")

SEED = 2026
DEV_SIZE = 60
TEST_SIZE = 500


def story(giver: str, receiver: str, color: str, obj: str, place: str) -> str:
    return (
        f"{giver} has a {color} {obj}. {giver} goes to the {place}. "
        f"at the {place}, {giver} gives the {obj} to {receiver}. now {receiver} has the {color} {obj}."
    )


def all_stories() -> list[str]:
    """Every story of the grammar, in a fixed shuffled order."""
    stories = [
        story(giver, receiver, color, obj, place)
        for giver in NAMES
        for receiver in NAMES
        if receiver != giver
        for color in COLORS
        for obj in OBJECTS
        for place in PLACES
    ]
    random.Random(SEED).shuffle(stories)
    return stories


def split() -> tuple[list[str], list[str], list[str]]:
    """(train, dev, test): disjoint lists of story strings; dev holds exactly 60."""
    stories = all_stories()
    dev = stories[:DEV_SIZE]
    test = stories[DEV_SIZE : DEV_SIZE + TEST_SIZE]
    train = stories[DEV_SIZE + TEST_SIZE :]
    return train, dev, test


def first_sentence(story_text: str) -> str:
    """'mia has a red ball. mia goes ...' -> 'mia has a red ball.'"""
    return story_text[: story_text.index(".") + 1]


def _alternatives(words) -> str:
    return "(" + "|".join(words) + ")"


_N, _C, _O, _P = (_alternatives(w) for w in (NAMES, COLORS, OBJECTS, PLACES))
# The corpus's shape, one group per slot: the four sentences of a story and nothing else on the line.
_STORY_SHAPE = re.compile(
    rf"{_N} has a {_C} {_O}\. "
    rf"{_N} goes to the {_P}\. "
    rf"at the {_P}, {_N} gives the {_O} to {_N}\. "
    rf"now {_N} has the {_C} {_O}\."
)


def follows_story(first_sentence: str, generated: str) -> dict[str, bool]:
    """Judge the first line of a generated story against the story that `first_sentence` begins.

    `generated` is either the whole text (it starts with `first_sentence`) or only the continuation.
    well_formed: the line is four sentences of the corpus's shape, it begins with `first_sentence`, and
        the first sentence's giver is the one who goes and who gives.
    keeps_color_and_object: well formed, and the last sentence names the first sentence's color and object.
    """
    text = generated if generated.startswith(first_sentence) else first_sentence + generated
    line = text.split("\n", 1)[0]
    match = _STORY_SHAPE.fullmatch(line)
    if match is None or not line.startswith(first_sentence):
        return {"well_formed": False, "keeps_color_and_object": False}
    (giver, color, obj, goer, _place, _place_again, gives, _obj_given, _receiver, _owner, last_color, last_obj) = (
        match.groups()
    )
    well_formed = goer == giver and gives == giver
    keeps = well_formed and last_color == color and last_obj == obj
    return {"well_formed": well_formed, "keeps_color_and_object": keeps}


def story_measure(run, first_sentence: str) -> dict[str, int]:
    """For an engine.SeedRun from a story's first sentence: how many seeds wrote a well-formed first story, and
    how many kept the first sentence's colour and object to its end (follows_story)."""
    judged = [follows_story(first_sentence, run.text + run.continuation(seed)) for seed in run.seeds]
    return {"seeds": len(judged), "well_formed": sum(j["well_formed"] for j in judged),
            "keeps_color_and_object": sum(j["keeps_color_and_object"] for j in judged)}  # fmt: skip
