"""The sampler chain run here on a server's top N, where its log-probabilities are raw (before its sampler), so that
the stage view shows what each stage does to them, as on a local model.

The server samples with its own sampler; it reports one distribution per token. Its top N raw log-probabilities are
the model's own scores for those N tokens (up to a constant), so the engine's chain (engine/core/sampling.py) runs on
them as if they were the whole vocabulary: each stage's numbers are renormalized over the N, the rest of the
vocabulary (the probability the top N leave out) left out. Where a truncation keeps only tokens among them (top-k
up to N, top-p or min-p that end inside them), the later stages are what the full chain gives; a stage before it that
renormalizes (temperature first, the contract's order) is an approximation by the mass left out. The chart says so.
Left out: DRY (its repeats need every token's id in the text) and XTC (its draw is the server's).
"""

from dataclasses import replace

import numpy as np

from engine.core.sampling import ChainInput, chain, run_chain, softmax
from engine.core.step_maker import stage_records
from engine.core.steps import Candidates

NOT_HERE = ("dry", "xtc")


def with_stages(candidates: Candidates, settings, history) -> Candidates:
    """The candidates (the server's top N, most likely first) with the chain's stages run on them; history: the
    token ids so far (for the penalties), those outside the top N left out (their scores are not known)."""
    if not candidates.raw:
        return candidates
    position = {token_id: k for k, token_id in enumerate(candidates.token_ids) if token_id >= 0}  # id -> [N] index
    here = replace(settings, samplers=tuple(name for name in settings.samplers if name not in NOT_HERE),
                   logit_bias=tuple((position[i], bias) for i, bias in settings.logit_bias if i in position))  # fmt: skip
    scores = np.log(np.asarray(candidates.raw, dtype=np.float32))  # [N]: log-probabilities are scores
    known = np.asarray([position[int(i)] for i in history if int(i) in position], dtype=np.int64)
    rows = run_chain(chain(here), scores, softmax(scores), ChainInput(history=known))
    stages, removed_by = stage_records(rows, np.arange(len(scores)))
    return replace(candidates, stages=stages, removed_by=removed_by)
