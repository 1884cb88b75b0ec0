"""The settings trace: how temperature, top-k and top-p change what the story model writes.

For each setting, generate from the first sentence of each of the 60 dev stories (seed = the story's
index) and count well-formed stories, stories that keep the color and object, and stop reasons. Then a
greedy example, a seed comparison, the top-5 next tokens at a color position for three temperatures, and
a context-full example. The test stories are never used here.

    python -m engine trace            print it
    python -m engine trace --write    rewrite resources/generation-trace.json (run time: a separate file)
    python -m engine trace --check    exit 1 when the output differs from the recorded file
"""

import json
import multiprocessing
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from threadpoolctl import threadpool_limits

from engine.core.cpu_load import busy_cores, idle_cores, usable_cores
from engine.core.sampling import next_token_probs
from engine.core.session import generate
from engine.story import corpus as stories

SETTINGS = (
    ("greedy", {"temperature": 0.0}),
    ("T 0.5", {"temperature": 0.5}),
    ("T 1.0", {"temperature": 1.0}),
    ("T 1.5", {"temperature": 1.5}),
    ("T 1.0, top-k 3", {"temperature": 1.0, "top_k": 3}),
    ("T 1.0, top-p 0.9", {"temperature": 1.0, "top_p": 0.9}),
)
DIGITS = 4  # probabilities are rounded so that the recorded file does not depend on the last float bits


def setting_row(model, dev, name: str, kwargs: dict) -> dict:
    well_formed = keeps = 0
    stops = Counter()
    for index, story in enumerate(dev):
        first = stories.first_sentence(story)
        result = generate(model, first, seed=index, **kwargs)
        verdict = stories.follows_story(first, result.text)
        well_formed += verdict["well_formed"]
        keeps += verdict["keeps_color_and_object"]
        stops[result.stopped] += 1
    return {
        "setting": name, **kwargs, "stories": len(dev), "well_formed": well_formed,
        "keeps_color_and_object": keeps, "stopped": dict(sorted(stops.items())),
    }  # fmt: skip


def settings_table(model, dev, workers: int = 2) -> list[dict]:
    """One row per setting. The settings are independent, so `workers` processes share them out: on a
    small model each step is mostly numpy's per-call overhead, which only more cores can divide.

    Workers are forked (they inherit the loaded model at no cost; spawning one costs 0.7 s of imports)
    and run BLAS on one thread each: two BLAS thread pools spinning on two cores halve the speed."""
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [setting_row(model, dev, name, kwargs) for name, kwargs in SETTINGS]
    _worker_state.update(model=model, dev=dev)  # the forked workers find it here
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker) as pool:
        return list(pool.map(_worker_row, SETTINGS))


_worker_state = {}


def _init_worker():
    _worker_state["blas_limit"] = threadpool_limits(limits=1, user_api="blas")


def _worker_row(setting) -> dict:
    return setting_row(_worker_state["model"], _worker_state["dev"], *setting)


def seed_comparison(model, prompt) -> dict:
    texts = {seed: generate(model, prompt, temperature=1.0, seed=seed) for seed in (1, 2)}
    again = generate(model, prompt, temperature=1.0, seed=1)
    first_difference = None
    for index, (a, b) in enumerate(zip(texts[1].steps, texts[2].steps)):
        if a.token_id != b.token_id:
            first_difference = {"step": index, "seed 1": a.token, "seed 2": b.token}
            break
    return {
        "prompt": prompt, "temperature": 1.0,
        "seed 1": texts[1].text, "seed 2": texts[2].text, "seed 1 again": again.text,
        "seed 1 reproduces": again.text == texts[1].text and again.steps == texts[1].steps,
        "first difference": first_difference,
    }  # fmt: skip


def color_position(model, dev) -> dict:
    """Top-5 next tokens where the last sentence names the color, receiver leo, for T 0.5, 1.0, 2.0."""
    story = next(s for s in dev if s.split(". now ")[1].startswith("leo has the ") and " red " not in s)
    prompt = story[: story.index(" now leo has the") + len(" now leo has the")]
    scores = model.scores(model.tokenizer.encode(prompt))[-1]
    top5 = {}
    for temperature in (0.5, 1.0, 2.0):
        probs = next_token_probs(scores, temperature)
        best = sorted(range(len(probs)), key=lambda i: (-probs[i], i))[:5]
        top5[f"T {temperature}"] = [[model.tokenizer.decode([i]), round(float(probs[i]), DIGITS)] for i in best]
    return {"prompt": prompt, "story color": story.split()[3], "top 5": top5}


def context_full_example(model, dev) -> dict:
    """Greedy generation that runs into the end of the context: a dev story followed by the first two
    sentences of the next one leaves too few positions for the rest (the first such pair is used)."""
    for first, second in zip(dev, dev[1:]):
        prompt = first + " " + ". ".join(second.split(". ")[:2]) + "."
        result = generate(model, prompt, max_new_tokens=60)
        if result.stopped == "context full":
            break
    return {
        "prompt": prompt, "prompt_tokens": len(model.tokenizer.encode(prompt)),
        "generated_tokens": len(result.steps), "text": result.text, "stopped": result.stopped,
    }  # fmt: skip


def trace_workers(cores: int, busy: float, most: int = len(SETTINGS)) -> int:
    """Worker processes for the settings table on `cores` cores while other work keeps `busy` cores' worth
    busy: at least one, at most `most`, one per core that is at least a tenth free (engine/core/cpu_load.py).
    The workers do not spin (one BLAS thread each), so a core the other work only partly uses still gives a
    worker its turns: beside 0.6-0.7 busy cores 2 workers took 2.1 s, one 3.7-4.0 s (bench/settings_trace_speed.py);
    a core the other work fills gives none (issue 30 measured 2 workers 1.8x slower than one beside other work)."""
    return max(1, min(idle_cores(cores, busy, free_share=0.1), most))


def machine_workers() -> int:
    """trace_workers for this process's cores and the machine's work now."""
    return trace_workers(usable_cores(), busy_cores())


def settings_trace(model, workers: int | None = None) -> dict:
    """workers: None chooses them from the machine's idle cores (machine_workers)."""
    _train, dev, _test = stories.split()  # the test stories are never looked at here
    workers = machine_workers() if workers is None else workers
    greedy = generate(model, stories.first_sentence(dev[0]))
    return {
        "model": model.name,
        "settings": settings_table(model, dev, workers),
        "greedy example": {"prompt": stories.first_sentence(dev[0]), "text": greedy.text, "stopped": greedy.stopped},
        "seed comparison": seed_comparison(model, stories.first_sentence(dev[0])),
        "color position": color_position(model, dev),
        "context full": context_full_example(model, dev),
    }


def timed_trace(model, workers: int | None = None) -> tuple[dict, float]:
    started = time.perf_counter()
    trace = settings_trace(model, workers)
    return trace, time.perf_counter() - started


def render(trace: dict) -> str:
    return json.dumps(trace, indent=1, ensure_ascii=False) + "\n"


def table_markdown(trace: dict) -> str:
    lines = ["| setting | well formed | keeps color and object | stopped |", "|---|---|---|---|"]
    for row in trace["settings"]:
        stops = ", ".join(f"{k} {v}" for k, v in row["stopped"].items())
        lines.append(f"| {row['setting']} | {row['well_formed']}/60 | {row['keeps_color_and_object']}/60 | {stops} |")
    return "\n".join(lines)
