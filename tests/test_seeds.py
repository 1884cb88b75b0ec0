"""Many seeds at once (issue 16): Session.run_seeds continues the text with each seed exactly as a session
with that seed would (bit for bit, every step's record), walking the tree of draws once; the tree's counts add
up; the session itself does not change; bad input is refused."""

import pytest

import engine
from engine.core.seeds import MAX_SEEDS
from engine.story.corpus import story_measure

PROMPT = "mia has a red ball."


def records(steps):
    return [step.to_dict() for step in steps]


@pytest.mark.parametrize("settings", [
    dict(temperature=1.0),
    dict(temperature=0.8, top_k=5, top_p=0.9, min_p=0.02),
    dict(temperature=1.2, repeat_penalty=1.3, xtc_probability=0.5, xtc_threshold=0.1),  # XTC: a draw per seed
    dict(temperature=0.0),
])  # fmt: skip
def test_each_seed_writes_what_its_own_session_writes(story_model, settings):
    run = engine.Session(story_model, PROMPT, max_new_tokens=40, **settings).run_seeds(range(20))
    for seed in range(20):
        own = engine.Session(story_model, PROMPT, max_new_tokens=40, seed=seed, **settings).run()
        assert records(run.steps[seed]) == records(own), seed


def test_from_the_current_point_as_a_seed_change_would(story_model):
    session = engine.Session(story_model, PROMPT, temperature=1.0, seed=7, max_new_tokens=60)
    for _ in range(6):
        session.step()
    before = (list(session.ids), records(session.steps))
    run = session.run_seeds([3, 11, 12], max_new_tokens=20)
    assert (list(session.ids), records(session.steps)) == before  # the session is as it was
    for seed in (3, 11, 12):
        other = engine.Session(story_model, PROMPT, temperature=1.0, seed=7, max_new_tokens=60)
        for _ in range(6):
            other.step()
        other.update_settings(seed=seed)
        assert records(run.steps[seed]) == records([other.step() for _ in range(20)])
    assert records([session.step()]) == records([engine.Session(story_model, PROMPT, temperature=1.0, seed=7,
                                                                max_new_tokens=60).run()[6]])  # fmt: skip


def test_the_sessions_own_seed_goes_on_with_its_stream(story_model):
    """Seed 7 on a session of seed 7: update_settings(seed=7) changes nothing, so the stream goes on, and the
    seed writes what the session itself writes next."""
    session = engine.Session(story_model, PROMPT, temperature=1.0, seed=7, max_new_tokens=60)
    for _ in range(4):
        session.step()
    run = session.run_seeds([7, 8], max_new_tokens=15)
    assert records(run.steps[7]) == records([session.step() for _ in range(15)])
    assert records(run.steps[8]) != records(run.steps[7])


def test_other_settings_apply_to_the_seeds_only(story_model):
    session = engine.Session(story_model, PROMPT, temperature=0.0, max_new_tokens=30)
    run = session.run_seeds([4, 5], temperature=1.3, top_k=10)
    assert session.settings.temperature == 0.0 and session.actions == []  # nothing logged, nothing changed
    for seed in (4, 5):
        own = engine.Session(story_model, PROMPT, temperature=1.3, top_k=10, max_new_tokens=30, seed=seed).run()
        assert records(run.steps[seed]) == records(own)
    with pytest.raises(ValueError, match="temperature"):
        session.run_seeds([1], temperature=-1)


def test_the_tree_counts_add_up(story_model):
    run = engine.Session(story_model, PROMPT, temperature=1.0, max_new_tokens=60).run_seeds(range(50))
    nodes = run.nodes
    assert nodes[0].parent is None and nodes[0].count == 50
    children = {}
    for node in nodes[1:]:
        children.setdefault(node.parent, []).append(node)
    ends = {}
    for seed in range(50):  # each seed's tokens are a path of the tree, from the root
        at = 0
        for step in run.steps[seed]:
            at = next(c.id for c in children[at] if c.token_id == step.token_id)
        ends[at] = ends.get(at, 0) + 1
    for node in nodes:  # every seed through a node goes on to one child, or its text ends there
        assert node.count == sum(child.count for child in children.get(node.id, [])) + ends.get(node.id, 0)
    completions = run.completions()
    assert sum(count for _text, count in completions) == 50
    assert [count for _text, count in completions] == sorted((count for _text, count in completions), reverse=True)
    measure = story_measure(run, PROMPT)
    assert measure["seeds"] == 50 and 0 <= measure["keeps_color_and_object"] <= measure["well_formed"] <= 50
    assert len(nodes) < 50 * 30  # shared prefixes are one node, not one per seed


def test_a_gguf_model_in_numpy_gives_the_same_steps():
    model = engine.load_model("smollm2", backend="numpy")
    prompt = "The history of computing"
    run = engine.Session(model, prompt, temperature=1.0, top_k=40, max_new_tokens=6).run_seeds([0, 1, 2, 3])
    for seed in range(4):
        own = engine.Session(model, prompt, temperature=1.0, top_k=40, max_new_tokens=6, seed=seed).run()
        assert records(run.steps[seed]) == records(own)


def test_bad_input_is_refused_and_changes_nothing(story_model):
    session = engine.Session(story_model, PROMPT, temperature=1.0)
    for seeds, message in (([], "give 1 to"), (range(MAX_SEEDS + 1), "give 1 to"), ([1, 1], "each seed once"),
                           ([-1], "seeds must be ints"), (["a"], "seeds must be ints")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            session.run_seeds(seeds)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
        session.run_seeds([1], max_new_tokens=0)
    assert session.steps == [] and session.ids == session.prompt_ids
    ended = engine.Session(story_model, PROMPT, temperature=0.0)
    ended.run()
    with pytest.raises(ValueError, match="the text has stopped"):
        ended.run_seeds([1])


def test_a_server_is_refused():
    from fake_backend import FakeStreamingBackend

    with pytest.raises(ValueError, match="a server samples itself"):
        engine.Session(FakeStreamingBackend(), "ab").run_seeds([1])


def stepped(model, steps, **settings):
    session = engine.Session(model, PROMPT, **{"temperature": 1.0, "seed": 7, "max_new_tokens": 60, **settings})
    for _ in range(steps):
        session.step()
    return session


@pytest.mark.parametrize("changes", [{}, dict(temperature=1.4, top_k=8)])
def test_from_an_earlier_step_as_the_session_would_write_after_rewinding_there(story_model, changes):
    """Issue 24: "Run seeds from here" ignored the selected token. at=k: each seed writes what the session writes
    after keeping its first k steps (Continue from here), bit for bit; the session's text, log and next steps
    stay as they were (the cache positions after k are put back, not recomputed)."""
    session = stepped(story_model, 10)
    before = (list(session.ids), records(session.steps), list(session.actions), list(session.path))
    run = session.run_seeds([3, 7, 11], max_new_tokens=12, at=4, **changes)
    assert (list(session.ids), records(session.steps), list(session.actions), list(session.path)) == before
    assert run.at == 4 and run.text == session.prompt_text + "".join(s.token for s in session.steps[:4])
    for seed in (3, 7, 11):
        rewound = stepped(story_model, 10)
        rewound.rewind(6)
        rewound.update_settings(seed=seed, **changes)
        assert records(run.steps[seed]) == records(rewound.run()[:12]), seed
    if not changes:  # the session's own seed: its stream goes on from there, so it writes the session's steps
        assert records(run.steps[7]) == records(session.steps[4:10]) + records(run.steps[7][6:])
    assert records([session.step()]) == records([stepped(story_model, 11).steps[10]])  # it goes on as it would


def test_from_an_earlier_step_under_the_settings_it_was_taken_with(story_model):
    """A settings change after step k belongs to the steps after it: from k, the seeds draw as the session
    did there (its temperature, its random stream)."""
    session = stepped(story_model, 4)
    session.update_settings(temperature=0.3, seed=99)
    for _ in range(5):
        session.step()
    run = session.run_seeds([7], max_new_tokens=5, at=3)
    assert records(run.steps[7][:1]) == records(session.steps[3:4])  # seed 7 at T 1.0: the step it took
    assert records(run.steps[7]) == records(stepped(story_model, 3).run_seeds([7], max_new_tokens=5).steps[7])


def test_from_an_earlier_step_refuses_what_a_rewind_would_not_allow(story_model):
    session = engine.Session(story_model, PROMPT, temperature=0.0)
    session.run()
    assert session.stopped == "end of story"
    before = (list(session.ids), records(session.steps), list(session.actions))
    for at in (-1, len(session.steps) + 1, True, "3", 2.0):
        with pytest.raises(ValueError, match=f"at must be a number of steps from 0 to {len(session.steps)}"):
            session.run_seeds([1], at=at)
    with pytest.raises(ValueError, match="the text has stopped"):
        session.run_seeds([1], at=len(session.steps))  # after the end token
    run = session.run_seeds([1, 2], temperature=1.0, at=len(session.steps) - 1)  # before it: the seeds go on
    assert run.at == len(session.steps) - 1 and all(run.steps[seed] for seed in (1, 2))
    assert (list(session.ids), records(session.steps), list(session.actions)) == before
    assert records(session.run_seeds([5], temperature=1.0, at=0).steps[5]) == records(
        engine.Session(story_model, PROMPT, temperature=1.0, seed=5).run()
    )


def test_from_an_earlier_step_on_llamacpp(smollm2_llamacpp):
    """llama.cpp copies its memory whole: kept aside and put back, the session goes on bit for bit."""
    prompt = "The history of computing"
    session = engine.Session(smollm2_llamacpp, prompt, temperature=1.0, seed=7, max_new_tokens=40)
    for _ in range(8):
        session.step()
    run = session.run_seeds([1, 2], max_new_tokens=5, at=3)
    rewound = engine.Session(smollm2_llamacpp, prompt, temperature=1.0, seed=7, max_new_tokens=40)
    for _ in range(3):
        rewound.step()
    reference = [rewound.step() for _ in range(6)]
    for seed in (1, 2):
        other = engine.Session(smollm2_llamacpp, prompt, temperature=1.0, seed=7, max_new_tokens=40)
        for _ in range(8):
            other.step()
        other.rewind(5)
        other.update_settings(seed=seed)
        assert records(run.steps[seed]) == records([other.step() for _ in range(5)])
    assert records([session.step()]) == records([reference[-1]])


@pytest.mark.parametrize("settings", [
    dict(temperature=1.0, top_k=40),
    dict(temperature=1.2, repeat_penalty=1.3, xtc_probability=0.5, xtc_threshold=0.1),  # XTC: a draw per seed
])  # fmt: skip
def test_on_llamacpp_the_seeds_go_level_by_level_and_write_what_their_own_sessions_write(smollm2_llamacpp, settings):
    """Issue 45: many sequences in one llama_decode. 20 seeds: a group of 16 (as many as the context's sequences),
    then 4; every path of a level read in one pass; each seed's steps are its own session's, bit for bit, and the
    tree is the one the depth-first walk makes (one path at a time)."""
    model, prompt = smollm2_llamacpp, "The history of computing"
    session = engine.Session(model, prompt, max_new_tokens=10, **settings)
    before = session._context.timing.snapshot()
    run = session.run_seeds(range(20))
    passes = session._context.timing.since(before).passes
    for seed in range(20):
        own = engine.Session(model, prompt, max_new_tokens=10, seed=seed, **settings).run()
        assert records(run.steps[seed]) == records(own), seed
    session._context.lockstep = lambda ids, limit: None  # the depth-first walk: one path at a time
    before = session._context.timing.snapshot()
    alone = session.run_seeds(range(20))
    assert passes <= 2 * 10 < session._context.timing.since(before).passes  # a pass a level, against a pass a node
    assert alone.nodes == run.nodes and all(records(alone.steps[s]) == records(run.steps[s]) for s in range(20))
    assert session.text == prompt and not session.steps  # the session as it was
    assert [s.token for s in session.run()] == [s.token for s in engine.Session(model, prompt, max_new_tokens=10,
                                                                                 **settings).run()]  # fmt: skip


def test_on_llamacpp_seeds_that_end_at_different_lengths_leave_the_others_exact():
    """Paths that end (the model's end token after 2 to 40 tokens) while others go on: their cells stay until the
    walk ends. (Removed mid-walk, the others' next tokens filled the holes out of order and llama.cpp gave other
    rows: 7 of 16 seeds differed.) A context of 2,048: 16 paths of 40 tokens need more than the tests' usual 512."""
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=2048)
    prompt = model.chat_prompt("Answer with one word: yes or no? Is the sky blue?")
    session = engine.Session(model, prompt, max_new_tokens=40, temperature=1.0)
    before = session._context.timing.snapshot()
    run = session.run_seeds(range(16))
    assert session._context.timing.since(before).passes <= 41  # level by level: a pass a level
    lengths = {len(run.steps[seed]) for seed in range(16)}
    assert min(lengths) < 5 and max(lengths) > 10  # some end early, some go on
    for seed in range(16):
        own = engine.Session(model, prompt, max_new_tokens=40, temperature=1.0, seed=seed).run()
        assert records(run.steps[seed]) == records(own), seed
    model.close()
