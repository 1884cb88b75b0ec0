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
