"""The shipped model's quality under greedy decoding, on the 60 dev stories (the issue's figure)."""

import engine
from engine.story import corpus as stories


def test_greedy_stories_from_the_dev_first_sentences(story_model):
    _train, dev, _test = stories.split()
    well_formed = keeps = 0
    for story in dev:
        first = stories.first_sentence(story)
        result = engine.generate(story_model, first)
        verdict = stories.follows_story(first, result.text)
        well_formed += verdict["well_formed"]
        keeps += verdict["keeps_color_and_object"]
        assert result.stopped == "end of story"
    assert well_formed == 60
    assert keeps >= 57
