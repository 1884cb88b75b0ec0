"""The server answers to the names people use (issue 43, items 13-14): the name it was started with (`-m
smollm2`, a file's path, name or stem), its short names and the model's own, in any case; /v1/models lists them,
the model's own first. A client's `steer` that asks for a command is told that commands are the server's."""

import httpx
from test_serve import served

from engine.serve.app import make_app
from engine.serve.threaded import serving


def names(url: str) -> list[str]:
    return [entry["id"] for entry in httpx.get(f"{url}/models").json()["data"]]


def completes(url: str, name: str) -> httpx.Response:
    return httpx.post(f"{url}/completions", json={"model": name, "prompt": "mia", "max_tokens": 1}, timeout=60)


def test_the_story_model_answers_to_its_short_names(story_model):
    with served(story_model) as url:
        assert names(url) == ["story model", "story", "story-model"]
        for name in ("story model", "story", "Story-Model", "STORY"):
            answer = completes(url, name)
            assert answer.status_code == 200 and answer.json()["model"] == "story model", answer.text
        refused = completes(url, "gpt-9")
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "model"
        assert "also called 'story model', 'story', 'story-model'" in refused.json()["error"]["message"]


def test_smollm2_answers_to_smollm2_and_its_files_names(smollm2_llamacpp, tmp_path):
    path = tmp_path / "my-model.Q4.gguf"
    with serving(make_app(smollm2_llamacpp, aliases=(str(path),))) as url:
        assert names(url)[:2] == ["SmolLM2-135M-Instruct.Q4_1", "smollm2"]
        for name in ("smollm2", "SmolLM2-135M-Instruct.Q4_1", str(path), "my-model.Q4.gguf", "my-model.Q4"):
            assert completes(url, name).status_code == 200, name


def test_a_clients_steer_that_asks_for_a_command_is_told_whose_commands_are(story_model):
    with served(story_model) as url:
        body = {"model": "story", "prompt": "mia", "max_tokens": 1, "steer": [{"at": "mia", "command": ["ls"]}]}
        error = httpx.post(f"{url}/completions", json=body, timeout=60).json()["error"]
        assert error["param"] == "steer" and "commands are the server's to allow" in error["message"]
        assert "--allow-commands" in error["message"]
