"""A replay's three verdicts (identical; the same tokens within float rounding; differs at step N) and a trace of
another model refused with one sentence, in the engine and on the command line."""

import json

import pytest
import tiny_gguf

import engine
from engine.__main__ import main
from engine.core.verdict import DIFFERS, IDENTICAL, WITHIN_ROUNDING

FIRST = "mia has a red ball."


@pytest.fixture(scope="module")
def story_trace(story_model):
    session = engine.Session(story_model, FIRST, temperature=1.0, top_k=8, seed=5, max_new_tokens=12)
    session.run()
    taken = session.steps[-4].token_id
    session.rewind(4)
    session.force_token(next(i for i in range(story_model.vocab_size) if i != taken))
    session.run()  # a tree of two branches: its nodes are compared too
    return session.trace()


def perturbed(trace: dict, by: float) -> dict:
    """The trace with every recorded probability moved by `by` (steps and the tree's nodes), as another CPU's
    kernels move their last bits."""
    copy = json.loads(json.dumps(trace))

    def move(p):  # within [0, 1], as a probability must stay; 0 (removed by a stage) stays 0
        return p if p == 0 else p + by if p + by <= 1 else p - by

    records = [*copy["steps"], *(node["step"] for node in copy["tree"]["nodes"][1:])]
    for step in records:
        step["probability"], step["model_probability"] = move(step["probability"]), move(step["model_probability"])
        candidates = step["candidates"]
        candidates["raw"] = [move(p) for p in candidates["raw"]]
        for name, values in candidates["stages"].items():
            candidates["stages"][name] = [move(p) for p in values]
    return copy


def test_a_trace_replayed_here_is_identical(story_trace, story_model):
    report = engine.replay(story_trace, story_model)
    assert report.verdict == IDENTICAL and report.identical and report.same_tokens
    assert report.rounding is None
    assert report.summary().startswith("identical: all ")


def test_probabilities_moved_by_rounding_are_the_same_tokens_recorded_on_another_cpu(story_trace, story_model):
    report = engine.replay(perturbed(story_trace, 1e-7), story_model)
    assert report.verdict == WITHIN_ROUNDING and not report.identical and report.same_tokens
    assert report.first_difference is None and report.steps == len(story_trace["steps"])
    assert report.rounding["difference"] == pytest.approx(1e-7, rel=1e-3)
    summary = report.summary()
    assert summary.startswith(f"the same tokens, probabilities within float rounding: all {report.steps} steps")
    assert "the largest difference 1e-07" in summary and summary.endswith("recorded on another kind of CPU")


def test_a_probability_beyond_rounding_differs_at_its_step(story_trace, story_model):
    moved = perturbed(story_trace, 1e-7)
    moved["steps"][3]["probability"] -= 1e-3
    report = engine.replay(moved, story_model)
    assert report.verdict == DIFFERS and not report.same_tokens
    assert (report.first_difference["step"], report.first_difference["field"]) == (3, "probability")
    assert report.summary().startswith(f"differs at step 3 ({story_trace['steps'][3]['token']!r}), probability: ")


def test_another_token_differs_however_close_the_numbers(story_trace, story_model):
    moved = perturbed(story_trace, 1e-7)
    moved["steps"][2]["token_id"] += 1
    report = engine.replay(moved, story_model)
    assert report.verdict == DIFFERS and report.first_difference["field"] == "token_id"


def test_a_node_off_the_active_branch_is_compared_within_rounding_too(story_trace, story_model):
    moved = perturbed(story_trace, 1e-7)
    off_path = [node for node in moved["tree"]["nodes"][1:] if node["id"] not in moved["path"]]
    assert off_path, "the fixture's tree has a branch besides the active one"
    off_path[0]["step"]["probability"] -= 0.01
    report = engine.replay(moved, story_model)
    assert report.verdict == DIFFERS and report.first_difference["node"] == off_path[0]["id"]


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    return tiny_gguf.write(tmp_path_factory.mktemp("tiny") / "tiny.gguf", tiny_gguf.random_weights(seed=1))


@pytest.fixture(scope="module")
def tiny_model(tiny_file):
    return engine.load_model(tiny_file, backend="numpy")


def test_another_models_trace_is_refused_with_one_sentence_naming_both(story_trace, story_model, tiny_model):
    with pytest.raises(engine.OtherModelError) as caught:
        engine.replay(story_trace, tiny_model)
    sentence = str(caught.value)
    recorded, loaded = story_model.weights_sha256[:12], tiny_model.weights_sha256[:12]
    assert sentence == (f"This trace was recorded with story model (weights {recorded}), and the loaded model is "
                        f"{tiny_model.name} (weights {loaded}): replay it on story model")  # fmt: skip
    assert caught.value.recorded == story_trace["model"]
    report = engine.replay(story_trace, tiny_model, other_model=True)  # asked for: where that model differs
    assert report.verdict == DIFFERS and report.notes[0].startswith("recorded with story model")


def test_token_ids_the_model_does_not_have_are_refused(story_trace, story_model):
    edited = json.loads(json.dumps(story_trace))
    edited["prompt_token_ids"][1] = story_model.vocab_size + 7
    with pytest.raises(engine.OtherModelError, match=r"its token id \d+ \(prompt_token_ids\) is not in the loaded"):
        engine.replay(edited, story_model)


def test_edited_prompt_ids_the_model_has_differ_at_step_0(story_trace, story_model):
    edited = json.loads(json.dumps(story_trace))
    edited["prompt_token_ids"][1] = (edited["prompt_token_ids"][1] + 1) % story_model.vocab_size
    report = engine.replay(edited, story_model)
    assert report.verdict == DIFFERS and report.first_difference["field"] == "prompt_token_ids"
    assert report.summary().startswith("differs at step 0: the prompt's token ids: recorded [")


def test_the_command_line_says_the_verdict_and_refuses_another_model(
    story_trace, story_model, tiny_file, tmp_path, capsys
):
    path = tmp_path / "moved.json"
    engine.save_trace(perturbed(story_trace, 1e-7), path)
    assert main(["replay", str(path)]) == 0
    assert capsys.readouterr().out.startswith("the same tokens, probabilities within float rounding: ")
    assert main(["replay", str(path), "-m", str(tiny_file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: This trace was recorded with story model (weights ") and err.count("\n") == 1
    assert main(["replay", str(path), "-m", str(tiny_file), "--other-model"]) == 1
