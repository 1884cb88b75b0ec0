from engine.story import corpus as stories
from engine.story.corpus import follows_story

FIRST = "mia has a red ball."
GOOD = "mia has a red ball. mia goes to the park. at the park, mia gives the ball to ben. now ben has the red ball."


def test_split_sizes_and_disjointness():
    train, dev, test = stories.split()
    assert len(dev) == 60
    assert len(train) > 1000 and len(test) > 0
    assert not set(train) & set(dev) and not set(train) & set(test) and not set(dev) & set(test)
    assert len(set(train)) == len(train)


def test_split_is_deterministic():
    assert stories.split() == stories.split()


def test_every_story_has_the_corpus_shape():
    for story in sum(stories.split(), []):
        first = stories.first_sentence(story)
        assert follows_story(first, story) == {"well_formed": True, "keeps_color_and_object": True}
        giver, receiver = story.split()[0], story.split()[-4]
        assert giver != receiver


def test_word_lists_are_big_enough():
    assert len(stories.NAMES) >= 6 and len(stories.COLORS) >= 6
    assert len(stories.OBJECTS) >= 6 and len(stories.PLACES) >= 4


def test_good_story_with_or_without_the_prompt_and_after_a_newline():
    assert follows_story(FIRST, GOOD) == {"well_formed": True, "keeps_color_and_object": True}
    assert follows_story(FIRST, GOOD[len(FIRST) :]) == {"well_formed": True, "keeps_color_and_object": True}
    assert follows_story(FIRST, GOOD + "\nben has a tan mug.")["keeps_color_and_object"]


def test_last_sentence_with_another_color_or_object_is_well_formed_but_does_not_keep():
    other_color = GOOD.replace("now ben has the red ball.", "now ben has the blue ball.")
    other_object = GOOD.replace("now ben has the red ball.", "now ben has the red pen.")
    for text in (other_color, other_object):
        assert follows_story(FIRST, text) == {"well_formed": True, "keeps_color_and_object": False}


def test_broken_stories_are_not_well_formed():
    broken = [
        GOOD.replace("mia goes", "ben goes"),  # someone else goes
        GOOD.replace("park, mia gives", "park, tom gives"),  # someone else gives
        GOOD.replace(" now ben has the red ball.", ""),  # three sentences
        GOOD.replace("gives the ball to", "gives ball to"),  # broken grammar
        GOOD + " now ben has the red ball.",  # five sentences
        GOOD.replace("red ball.", "red dragon."),  # not a word of the corpus
        GOOD[:-1],  # no final period
        "ben has a red ball." + GOOD[len(FIRST) :],  # does not begin with the prompt
    ]
    for text in broken:
        assert follows_story(FIRST, text) == {"well_formed": False, "keeps_color_and_object": False}, text
