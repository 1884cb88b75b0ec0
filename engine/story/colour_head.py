"""Which of the story model's heads copies the first sentence's colour (issue 17's question).

A story ends "now leo has the gold toy.", the colour and object of its first sentence. Where the model is
about to write that colour (the text up to "now leo has the"), each head's attention weights over the text
are read (engine.attention_weights) and the weight it puts on the first sentence's colour (every token that
spells it) is averaged over the 60 dev stories. The head with the most is the one that copies the colour.

Ablating that head (Session.steer_heads, its output scaled by 0) while the 60 dev stories are written from
their first sentences shows what it does: how many stories still end with the first sentence's colour.

    python -m engine.story.colour_head
"""

import re

import numpy as np

from engine.core.inside import attention_weights
from engine.core.session import Session
from engine.story.corpus import COLORS, first_sentence, follows_story, split

LAST_COLOUR = re.compile(r"now \w+ has the (\w+)")


def colour_positions(tokenizer, ids, first_sentence: str, colour: str) -> list[int]:
    """The positions of the tokens that spell the colour's letters in the first sentence."""
    start = first_sentence.index(f" {colour} ") + 1
    stop, end, positions = start + len(colour), 0, []
    for position, token_id in enumerate(ids):
        begin, end = end, end + len(tokenizer.decode([token_id]))
        if begin < stop and end > start:
            positions.append(position)
        if end >= stop:
            break
    return positions


def weight_on_colour(model, stories) -> np.ndarray:  # -> [layers, heads] mean weight on the first colour
    """Each head's weight on the first sentence's colour where the model is about to write it again."""
    total = None
    for story in stories:
        first = story[: story.index(".") + 1]
        colour = next(c for c in COLORS if f" {c} " in first)
        text = story[: story.rindex(" has the") + len(" has the")]
        ids = model.tokenizer.encode(text)
        weights = attention_weights(model, ids)  # [layers, heads, T]
        on_colour = weights[:, :, colour_positions(model.tokenizer, ids, first, colour)].sum(axis=-1)
        total = on_colour if total is None else total + on_colour
    return total / len(stories)


def ablated(model, stories, scales) -> dict[str, int]:
    """The stories written greedily from their first sentences with these head scales (Session.steer_heads):
    how many are well formed, keep the colour and object, and name the first sentence's colour at the end."""
    counts = {"well_formed": 0, "keeps_color_and_object": 0, "keeps_colour": 0}
    for story in stories:
        first = first_sentence(story)
        colour = next(c for c in COLORS if f" {c} " in first)
        session = Session(model, first, max_new_tokens=60)
        session.steer_heads(scales)
        session.run()
        for key, value in follows_story(first, session.generated_text).items():
            counts[key] += value
        last = LAST_COLOUR.search(session.text.split("\n", 1)[0])
        counts["keeps_colour"] += last is not None and last.group(1) == colour
    return counts


def main() -> None:
    from engine.loading import load_model

    model = load_model()
    _train, dev, _test = split()
    means = weight_on_colour(model, dev)
    layer, head = np.unravel_index(int(means.argmax()), means.shape)
    print("mean attention weight on the first sentence's colour, where the model writes it again (60 dev stories):")
    for index, value in enumerate(means[0]):
        print(f"  head {index + 1}: {value:.3f}")
    print(f"the colour-copying head: layer {layer + 1}, head {head + 1} ({means[layer, head]:.2f} of its weight)")
    print("the 60 dev stories written greedily from their first sentences, each head ablated in turn:")
    print("  ablated   well formed   colour and object kept   colour named at the end")
    for index in [None, *range(means.shape[1])]:
        counts = ablated(model, dev, [] if index is None else [(0, index, 0.0)])
        name = "none" if index is None else f"head {index + 1}"
        print(f"  {name:8s}  {counts['well_formed']:11d}   {counts['keeps_color_and_object']:22d}   "
              f"{counts['keeps_colour']:23d}")  # fmt: skip


if __name__ == "__main__":
    main()
