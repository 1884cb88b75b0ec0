"""Memory grows with the text by the KV cache (issue 42): measured in a child process, a long text costs its steps'
records, not a row of scores a token (engine/backends/kept_rows.py's RECENT_ROWS; bench/long_text_memory.py gives
the figures for Gemma 3 and the server)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


LONG_TEXT_CHILD = """
import json, os, sys
import engine
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=1024)
session = engine.Session(model, "Once upon a time", max_new_tokens=601, temperature=1.0, seed=1,
                         logit_bias=tuple((i, -100) for i in model.end_token_ids))
session.step()
base = rss_mb()
while session.step() is not None:
    pass
print(json.dumps({"steps": len(session.steps), "grown_mb": rss_mb() - base}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_long_text_grows_memory_by_its_records_not_a_row_a_token():
    """600 SmolLM2 tokens in a child process: before, each kept its 49,152 scores (192 KB: +115 MB); now the
    steps' records only (~20 KB a token)."""
    pytest.importorskip("llama_cpp")
    done = subprocess.run([sys.executable, "-c", LONG_TEXT_CHILD], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["steps"] == 601 and measured["grown_mb"] < 50, measured
