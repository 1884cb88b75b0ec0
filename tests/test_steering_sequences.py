"""Any sequence of steer / rewind / step / goto / insert / seeds works on the real story model (issue 24): a step after
any of them is the step a fresh session takes at the same text through the same steered model, and the whole
run replays bit for bit (many seeds, which are not logged, leave the cache as it was).

The wedge this guards against: after steer_heads the text is read again in one batched forward that keeps only
its last row, so a rewind into that range found no row and every later step failed."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine import Session

PROMPT = "mia has a red ball."
INSERTS = (" mia", " the park", " ben has")
SCALES = ((), ((0, 3, 0.0),), ((0, 4, 0.0), (0, 1, 0.5)), ((0, 3, 2.0),))

actions = st.one_of(
    st.tuples(st.just("step"), st.integers(1, 4)),
    st.tuples(st.just("rewind"), st.integers(1, 6)),
    st.tuples(st.just("steer"), st.integers(0, len(SCALES) - 1)),
    st.tuples(st.just("goto"), st.integers(0, 10_000)),
    st.tuples(st.just("insert"), st.integers(0, len(INSERTS) - 1)),
    st.tuples(st.just("seeds"), st.integers(0, 10_000)),
)


def fresh_step(model, session) -> engine.Step:
    """The step a new session takes at the session's text, its heads steered the same way from the start."""
    twin = Session(model, PROMPT, max_new_tokens=64)
    twin.steer_heads(session.head_scales)
    generated = session.ids[len(session.prompt_ids) :]
    if generated:
        twin.insert_tokens(generated)
    return twin.step()


def assert_same_step(step, expected) -> None:
    assert step.candidates.token_ids == expected.candidates.token_ids or _near_tie(expected)
    np.testing.assert_allclose(step.candidates.raw, expected.candidates.raw, rtol=1e-4, atol=1e-6)
    if not _near_tie(expected):
        assert step.token_id == expected.token_id


def _near_tie(step) -> bool:
    raw = sorted(step.candidates.raw, reverse=True)
    return raw[0] - raw[1] < 1e-4


def perform(model, session, kind: str, value: int) -> None:
    """One action; each model step it takes is checked against a fresh session's. A refused action (no room
    left, say) must change nothing."""
    before = (list(session.ids), len(session.actions))
    try:
        if kind == "step":
            for _ in range(value):
                if session.stopped:
                    break
                expected = fresh_step(model, session)
                assert_same_step(session.step(), expected)
        elif kind == "rewind":
            session.rewind(min(value, len(session.steps)))
        elif kind == "steer":
            session.steer_heads(SCALES[value])
        elif kind == "goto":
            session.goto(value % len(session.tree.nodes))
        elif kind == "seeds":  # from an earlier step, at T = 1: the session's cache must come back bit for bit
            session.run_seeds(range(2), max_new_tokens=3, at=value % (len(session.steps) + 1), temperature=1.0)
            assert (list(session.ids), len(session.actions)) == before
        else:
            session.insert_text(INSERTS[value])
    except ValueError:
        assert (list(session.ids), len(session.actions)) == before


def test_the_wedge_from_the_issue_is_gone(story_model):
    session = Session(story_model, PROMPT, max_new_tokens=20)
    session.run()
    session.steer_heads([(0, 3, 0)])
    session.rewind(1)
    session.step()
    session.rewind(3)
    expected = fresh_step(story_model, session)
    assert_same_step(session.step(), expected)


def test_seeds_after_a_steer_leave_the_cache_as_a_session_without_them_has_it(story_model):
    """Found by the sequence test below: after steer_heads the cache is empty; seeds from the end read the whole
    text again (one batch of the prompt and the step), and that read stayed: a rewind then kept its positions and
    the next step differed from replay's (which has no seeds: they are not logged) in the 7th digit."""
    session = Session(story_model, PROMPT, max_new_tokens=64)
    perform(story_model, session, "step", 1)
    session.steer_heads(SCALES[1])
    session.run_seeds(range(2), max_new_tokens=3, temperature=1.0)
    session.rewind(1)
    perform(story_model, session, "step", 1)
    report = engine.replay(session.trace(), story_model)
    assert report.identical, report.summary()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(actions, min_size=1, max_size=12))
def test_any_sequence_steps_as_a_fresh_session_and_replays_bit_for_bit(story_model, sequence):
    session = Session(story_model, PROMPT, max_new_tokens=64)
    for kind, value in sequence:
        perform(story_model, session, kind, value)
    report = engine.replay(session.trace(), story_model)
    assert report.identical, report.summary()
