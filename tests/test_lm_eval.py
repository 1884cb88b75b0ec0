"""lm-evaluation-harness against the server (issue 44): `lm_eval --model local-completions` runs a loglikelihood
task from a small JSON file this test writes (no download) on `python -m engine serve`'s SmolLM2, and every
log-likelihood it reports equals engine.score's on the same model to 1e-4.

lm-eval asks for a context and a continuation tokenized apart, sends them as token ids with `echo`, `logprobs` 1
and `max_tokens` 1, and sums the continuation's prompt log-probabilities. It lives in a virtualenv of its own
(tests/own_venv.py: <user cache>/lm-eval-venv/<version>, built on first use in ~1 min), as vLLM does. It needs the
model's tokenizer as a Hugging Face folder: written here from the GGUF file's (the `tokenizers` object the numpy
engine reads it with)."""

import json
import os
import subprocess

import pytest
from own_venv import install
from test_serve import served

import engine

LM_EVAL = ("lm-eval[api]==0.4.13", "transformers>=4.45")  # local-completions' HF tokenizer needs transformers
QUESTIONS = [
    {"question": "The capital of France is", "choices": ["Paris", "London", "Rome"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["four", "five"], "answer": 0},
    {"question": "The sky on a clear day is", "choices": ["blue", "green", "made of cheese"], "answer": 0},
]
TASK = """task: tiny_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def lm_eval_python():
    return install("lm-eval-venv", LM_EVAL[0].split("==")[1], LM_EVAL, ("lm_eval", "transformers"))


def written_task(folder, model) -> None:
    """The task's data and YAML, and the model's tokenizer as a Hugging Face folder, in `folder` (the numpy
    engine's tokenizer of the same file: llama.cpp's has no `tokenizers` object to save)."""
    tokenizer = engine.load_model("smollm2", backend="numpy").tokenizer
    assert tokenizer.encode(QUESTIONS[0]["question"]) == model.tokenizer.encode(QUESTIONS[0]["question"])
    (folder / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in QUESTIONS))
    (folder / "tiny.yaml").write_text(TASK.format(data=folder / "data.jsonl"))
    (folder / "tokenizer").mkdir()
    tokenizer.hf.save(str(folder / "tokenizer" / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model.context_length}
    (folder / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config))


def test_lm_eval_loglikelihoods_equal_engine_score(lm_eval_python, smollm2_llamacpp, tmp_path):
    model = smollm2_llamacpp
    written_task(tmp_path, model)
    with served(model, model_id="smollm2") as url:
        arguments = (f"model=smollm2,base_url={url}/completions,tokenizer_backend=huggingface,"
                     f"tokenizer={tmp_path / 'tokenizer'},num_concurrent=1,max_retries=1")  # fmt: skip
        offline = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
        done = subprocess.run([str(lm_eval_python), "-m", "lm_eval", "--model", "local-completions", "--model_args",
                               arguments, "--tasks", "tiny_choice", "--include_path", str(tmp_path), "--log_samples",
                               "--output_path", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=600, env=offline)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    paths = list((tmp_path / "out").rglob("samples_*.jsonl"))
    samples = [json.loads(line) for path in paths for line in path.read_text().splitlines()]
    assert len(samples) == len(QUESTIONS)
    compared = 0
    for sample in samples:
        for key, response in zip(sorted(sample["arguments"]), sample["resps"]):
            context, continuation = sample["arguments"][key]["arg_0"], sample["arguments"][key]["arg_1"]
            reported = float(response[0][0])
            head = list(model.tokenizer.encode(context))
            scored = engine.score(model, head + list(model.tokenizer.encode(continuation)))
            ours = -sum(step.surprisal for step in scored.steps[len(head) - 1 :])
            assert reported == pytest.approx(ours, abs=1e-4), (context, continuation)
            compared += 1
    assert compared == sum(len(question["choices"]) for question in QUESTIONS)
    assert "tiny_choice" in done.stdout and "acc" in done.stdout
