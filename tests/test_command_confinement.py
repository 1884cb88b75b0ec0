"""Nothing runs that the server's owner did not allow (issue 42): a rule's command runs confined (its own empty
folder, a cleared environment, resource limits, no network and a read-only filesystem where Linux allows it),
and what a client wrote is marked in what the command reads, so that the README's agent example refuses a code
block that a client's `steer` (or prompt) wrote rather than the model."""

import json
import os
import sys
from pathlib import Path

import pytest
from test_serve import served
from test_serve_agent import EXAMPLE, ROOT

import engine
from engine.core.commands import CLIENT_TEXT, CommandTool, confinement, confinement_sentence

CONFINED = confinement()["namespaces"]
needs_linux_namespaces = pytest.mark.skipif(
    "read-only" not in CONFINED, reason=f"this system does not confine commands' files ({confinement_sentence()})"
)


def attack(path: Path) -> str:
    """A code block that passes pytest and writes a file of the attacker's choosing."""
    return f"\n```python\nfrom pathlib import Path\n\ndef test_x():\n    Path({str(path)!r}).write_text('pwned')\n```\n"


def python(code: str, **options) -> CommandTool:
    return CommandTool([sys.executable, "-c", code], **options)


@needs_linux_namespaces
def test_a_command_writes_only_in_its_own_empty_folder(tmp_path):
    outside = tmp_path / "outside.txt"
    code = ("import os, pathlib\nprint(sorted(os.listdir('.')), end=' ')\npathlib.Path('mine.txt').write_text('x')\n"
            "print(sorted(os.listdir('.')), end=' ')\n"
            f"try:\n    pathlib.Path({str(outside)!r}).write_text('x')\nexcept OSError as error:\n"
            "    print('refused', error.errno, end='')")  # fmt: skip
    assert python(code)("") == "[] ['mine.txt'] refused 30"  # EROFS
    assert not outside.exists()


@pytest.mark.skipif("network" not in CONFINED, reason="this system gives commands the network")
def test_a_command_has_no_network():
    code = ("import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=5)\n"
            "except OSError as error:\n    print(type(error).__name__, error.errno)")  # fmt: skip
    assert python(code)("") == "OSError 101\n"  # ENETUNREACH: not even this machine's loopback


def test_a_command_sees_a_cleared_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "secret")
    names = json.loads(python("import os, json; print(json.dumps(sorted(os.environ)))")(""))
    assert "OPENAI_API_KEY" not in names and {"PATH", "HOME", CLIENT_TEXT} <= set(names)


@pytest.mark.skipif(sys.platform == "win32", reason="no resource limits on Windows")
def test_a_command_is_held_by_its_limits():
    grab = python("x = bytearray(600 << 20); print('got it')", limits={"memory_mb": 256})
    assert grab("").startswith("[command exited with status")  # MemoryError, not 600 MB
    write = python("open('big', 'wb').write(bytes(8 << 20)); print('wrote')", limits={"file_mb": 1})
    assert write("") != "wrote\n"
    with pytest.raises(ValueError, match="limits: unknown limit 'gpus'"):
        CommandTool(["true"], limits={"gpus": 1})
    with pytest.raises(ValueError, match="memory_mb"):
        CommandTool(["true"], limits={"memory_mb": 0})


def test_the_client_ranges_reach_the_program_merged():
    echo = python(f"import os; print(os.environ[{CLIENT_TEXT!r}], end='')")
    assert echo("abcdefgh", [(4, 6), (0, 2), (1, 3)]) == "[[0, 3], [4, 6]]"
    assert echo("abcdefgh") == "[]"


def test_a_rules_file_keeps_a_commands_limits(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps([{"when": "R:", "command": ["true"], "limits": {"memory_mb": 512}}]))
    rules = engine.load_rules(path, allow_commands=True)
    assert rules[0].tool.limits["memory_mb"] == 512
    assert engine.rules_to_json(rules)[0]["limits"] == {"memory_mb": 512}


def test_a_clients_steer_cannot_run_its_own_block_through_the_agent_example(smollm2_llamacpp, tmp_path, monkeypatch):
    """The issue's attack: the README's agent example served, a client's steer inserts a block that passes
    pytest and writes a file; the example's runner refuses it (the server marked it the client's), and no file
    is written outside the command's own folder."""
    import httpx

    monkeypatch.chdir(ROOT)
    target = tmp_path / "pwned.txt"
    rules = engine.load_rules(EXAMPLE / "rules.json", allow_commands=True)
    with served(smollm2_llamacpp, rules=rules) as url:
        body = {"model": smollm2_llamacpp.name, "prompt": "Hello", "max_tokens": 160, "temperature": 0,
                "steer": [{"at": "Hello", "insert": attack(target)}]}  # fmt: skip
        text = httpx.post(f"{url}/completions", json=body, timeout=300).json()["choices"][0]["text"]
        assert "Result: refused (the client wrote that block)" in text, text
        prompt = {"model": smollm2_llamacpp.name, "prompt": "Hello" + attack(target), "max_tokens": 8,
                  "temperature": 0}  # fmt: skip
        text = httpx.post(f"{url}/completions", json=prompt, timeout=300).json()["choices"][0]["text"]
        assert text.startswith("\nResult: refused"), text  # the prompt's own block: the client's too
    assert not target.exists()


@needs_linux_namespaces
def test_a_model_written_block_that_writes_outside_is_stopped_by_the_confinement(tmp_path, monkeypatch):
    """Running what the model writes is the point: the block runs (no client wrote it), and the read-only
    filesystem keeps its write inside the command's folder (the test fails, so the rule says " failed")."""
    monkeypatch.chdir(ROOT)
    target = tmp_path / "pwned.txt"
    tool = engine.load_rules(EXAMPLE / "rules.json", allow_commands=True)[1].tool
    assert tool("Write a test." + attack(target)) == " failed"
    assert not target.exists()
    if os.access(tmp_path, os.W_OK):  # the same block, given a path in its own folder, passes
        assert tool("Write a test." + attack(Path("inside.txt"))) == " passed"
