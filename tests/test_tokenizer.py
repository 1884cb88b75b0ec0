import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.story.tokenizer import ALPHABET, Tokenizer, pieces


@pytest.fixture(scope="module")
def tokenizer(story_model):
    return story_model.tokenizer


def test_vocabulary_has_96_tokens_with_the_whole_alphabet(tokenizer):
    assert tokenizer.vocab_size == 96
    for char in ALPHABET:
        assert tokenizer.encode(char) == [tokenizer.ids[char]]


def test_punctuation_and_newline_stay_tokens_of_their_own(tokenizer):
    for token in tokenizer.tokens:
        if len(token) > 1:
            assert not set(token) & set(".,\n"), token
    ids = tokenizer.encode("mia has a red ball.\n")
    assert ids[-2:] == [tokenizer.ids["."], tokenizer.newline_id]


def test_pieces_cut_words_with_their_leading_space():
    assert pieces("at the park, mia.\n") == ["at", " the", " park", ",", " mia", ".", "\n"]
    assert pieces("  a") == [" ", " a"]


def test_corpus_words_are_single_tokens(tokenizer):
    assert len(tokenizer.encode(" the")) == 1
    assert len(tokenizer.encode(" gives")) == 1


@given(text=st.text(alphabet=ALPHABET, max_size=80))
def test_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_unseen_word_falls_back_to_smaller_pieces(tokenizer):
    ids = tokenizer.encode(" xylophone")
    assert len(ids) > 1 and tokenizer.decode(ids) == " xylophone"


def test_unknown_character_is_named_with_its_position(tokenizer):
    with pytest.raises(ValueError, match=r"^'M' at position 0 is not in the story model's alphabet: "):
        tokenizer.encode("Mia has a red ball.")
    with pytest.raises(ValueError, match=r"'!' at position 3 "):
        tokenizer.encode("mia!")


def test_decode_rejects_ids_outside_the_vocabulary(tokenizer):
    with pytest.raises(ValueError, match="token id 96 is outside the vocabulary"):
        tokenizer.decode([1, 96])


def test_json_round_trip_and_refusal_of_bad_files(tokenizer):
    again = Tokenizer.from_json(tokenizer.to_json())
    assert again.tokens == tokenizer.tokens
    for bad in ("not json", "[]", '{"schema": "other"}', tokenizer.to_json().replace('"merges"', '"m"')):
        with pytest.raises(ValueError):
            Tokenizer.from_json(bad)
