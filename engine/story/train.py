"""Training the story model: the backward pass in numpy, Adam, and the loop that writes resources/.

`loss_and_grads` runs `model.forward` with an activation record and walks it backwards, one small
function per layer, in the dtype of the parameters (float32 for training, float64 for the gradient check).
"""

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from engine.story import corpus as stories
from engine.story.checkpoint import corpus_signature, save_story_model
from engine.story.model import GELU_C, LAYER_NORM_EPS, Config, forward, init_params, merge_heads, split_heads
from engine.story.tokenizer import Tokenizer, train_merges

# --- the backward pass, one function per forward step ------------------------------------------------


def layer_norm_backward(dy, x, g):  # dL/dy [..., d], input x [..., d], gain [d] -> dx, dg, db
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    xhat = (x - mean) * rstd
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, _sum_rows(dy * xhat), _sum_rows(dy)


def gelu_backward(dy, x):  # dL/dy, input x -> dL/dx, for the tanh approximation
    x2 = x * x
    t = (GELU_C * 0.044715) * x2
    t += GELU_C
    t *= x
    np.tanh(t, out=t)  # t = tanh(c (x + 0.044715 x^3))
    slope = (3 * GELU_C * 0.044715) * x2
    slope += GELU_C
    slope *= x
    slope *= 0.5
    slope *= 1.0 - t * t  # 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)
    t += 1.0
    t *= 0.5
    t += slope
    t *= dy
    return t


def linear_backward(dy, x, w):  # y = x @ w + b: dL/dy [..., o], x [..., i], w [i, o] -> dx, dw, db
    dy_rows = _rows(dy)
    dx = (dy_rows @ w.T).reshape(*dy.shape[:-1], w.shape[0])
    return dx, _rows(x).T @ dy_rows, dy_rows.sum(axis=0)


def attention_backward(d_out, q, k, v, weights):  # out = weights @ v, weights = softmax(q k^T / sqrt(dh))
    d_weights = d_out @ v.swapaxes(-1, -2)  # [..., H, T, T]
    dv = weights.swapaxes(-1, -2) @ d_out
    d_scores = weights * (d_weights - (d_weights * weights).sum(axis=-1, keepdims=True))
    d_scores *= 1.0 / math.sqrt(q.shape[-1])  # masked positions have weight 0, so no gradient
    return d_scores @ k, d_scores.swapaxes(-1, -2) @ q, dv  # dq, dk, dv


def _rows(x):  # [..., n] -> [rows, n]
    return x.reshape(-1, x.shape[-1])


def _sum_rows(x):  # [..., n] -> [n]
    return _rows(x).sum(axis=0)


def loss_and_grads(params, config: Config, ids, targets, mask):
    """Mean cross-entropy of the next tokens and its gradient for every parameter.

    ids, targets [B, T] ints; mask [B, T] says which targets count (padding does not)."""
    acts = {}
    scores = forward(params, config, ids, acts=acts)  # [B, T, vocab]
    shifted = scores - scores.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    n = mask.sum()
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    loss = -(picked * mask).sum() / n

    grads = {}
    d_scores = np.exp(log_probs)  # softmax minus one-hot, weighted by the mask
    np.put_along_axis(d_scores, targets[..., None], np.take_along_axis(d_scores, targets[..., None], -1) - 1, -1)
    d_scores *= (mask / n)[..., None].astype(d_scores.dtype)
    d_hf, grads["head.w"], grads["head.b"] = linear_backward(d_scores, acts["hf"], params["head.w"])
    d_x3, grads["lnf.g"], grads["lnf.b"] = layer_norm_backward(d_hf, acts["x3"], params["lnf.g"])
    d_m, grads["mlp.w_out"], grads["mlp.b_out"] = linear_backward(d_x3, acts["m"], params["mlp.w_out"])
    d_u = gelu_backward(d_m, acts["u"])
    d_h2, grads["mlp.w_in"], grads["mlp.b_in"] = linear_backward(d_u, acts["h2"], params["mlp.w_in"])
    d_x2, grads["ln2.g"], grads["ln2.b"] = layer_norm_backward(d_h2, acts["x2"], params["ln2.g"])
    d_x2 += d_x3
    d_attn, grads["attn.w_out"], grads["attn.b_out"] = linear_backward(d_x2, acts["attn"], params["attn.w_out"])
    dq, dk, dv = attention_backward(
        split_heads(d_attn, config.n_heads), acts["q"], acts["k"], acts["v"], acts["weights"]
    )
    d_qkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)
    d_h, grads["attn.w_qkv"], grads["attn.b_qkv"] = linear_backward(d_qkv, acts["h"], params["attn.w_qkv"])
    d_x, grads["ln1.g"], grads["ln1.b"] = layer_norm_backward(d_h, acts["x"], params["ln1.g"])
    d_x += d_x2
    grads["wpe"] = np.zeros_like(params["wpe"])
    grads["wpe"][: ids.shape[-1]] = d_x.reshape(-1, *d_x.shape[-2:]).sum(axis=0)
    grads["wte"] = np.zeros_like(params["wte"])
    np.add.at(grads["wte"], ids.reshape(-1), _rows(d_x))
    return float(loss), grads


def mean_loss(params, config: Config, batch) -> float:
    ids, targets, mask = batch
    scores = forward(params, config, ids)
    shifted = scores - scores.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    return float(-(picked * mask).sum() / mask.sum())


# --- data and optimiser --------------------------------------------------------------------------------


def make_batch(sequences: list[list[int]]):
    """Token sequences -> (ids, targets, mask) [B, T], each row a story from position 0, padded at the end."""
    t = max(len(s) for s in sequences) - 1
    ids = np.zeros((len(sequences), t), np.int64)
    targets = np.zeros((len(sequences), t), np.int64)
    mask = np.zeros((len(sequences), t), np.float32)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq) - 1] = seq[:-1]
        targets[row, : len(seq) - 1] = seq[1:]
        mask[row, : len(seq) - 1] = 1.0
    return ids, targets, mask


class Adam:
    """Adam with decoupled weight decay on the matrices (AdamW); float32 state."""

    def __init__(self, params, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01):
        self.m = {k: np.zeros_like(p) for k, p in params.items()}
        self.v = {k: np.zeros_like(p) for k, p in params.items()}
        self.beta1, self.beta2 = betas
        self.eps, self.weight_decay, self.t = eps, weight_decay, 0

    def update(self, params, grads, lr: float):
        self.t += 1
        correction1 = 1.0 - self.beta1**self.t
        correction2 = 1.0 - self.beta2**self.t
        for name, p in params.items():
            g = grads[name]
            self.m[name] *= self.beta1
            self.m[name] += (1.0 - self.beta1) * g
            self.v[name] *= self.beta2
            self.v[name] += (1.0 - self.beta2) * g * g
            if p.ndim == 2:
                p -= (lr * self.weight_decay) * p
            p -= (lr / correction1) * self.m[name] / (np.sqrt(self.v[name] / correction2) + self.eps)


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 600  # optimiser steps
    batch_size: int = 64  # stories per step
    lr: float = 3e-3  # peak learning rate, after a linear warm-up, then cosine decay to lr/10
    warmup: int = 50  # warm-up steps
    eval_every: int = 50  # steps between dev-loss checks; the best checkpoint is kept
    seed: int = 0  # initialisation and batch order


def learning_rate(step: int, s: TrainSettings) -> float:
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - s.warmup)
    return s.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(out_dir, config: Config = Config(), settings: TrainSettings = TrainSettings(), log=sys.stderr):  # noqa: B008 - frozen
    """Train the tokenizer and the model on the training stories; write both to out_dir. Returns a summary."""
    started = time.perf_counter()
    train_stories, dev_stories, _test = stories.split()  # the test stories are never looked at here
    lines = [s + "\n" for s in train_stories]
    tokenizer = Tokenizer(train_merges(lines, config.vocab_size))
    train_seqs = [tokenizer.encode(line) for line in lines]
    dev_batch = make_batch([tokenizer.encode(s + "\n") for s in dev_stories])
    longest = max(len(s) for s in train_seqs)
    if longest > config.context_length:
        raise ValueError(f"a training story has {longest} tokens, more than the {config.context_length} positions")

    rng = np.random.default_rng(settings.seed)
    params = init_params(config, rng)
    optimiser = Adam(params)
    best = (math.inf, None, -1)  # dev loss, parameters, step
    tokens_seen, order, cursor = 0, rng.permutation(len(train_seqs)), 0
    for step in range(settings.steps):
        if cursor + settings.batch_size > len(order):
            order, cursor = rng.permutation(len(train_seqs)), 0
        batch = make_batch([train_seqs[i] for i in order[cursor : cursor + settings.batch_size]])
        cursor += settings.batch_size
        loss, grads = loss_and_grads(params, config, *batch)
        optimiser.update(params, grads, learning_rate(step, settings))
        tokens_seen += int(batch[2].sum())
        if step % settings.eval_every == 0 or step == settings.steps - 1:
            dev_loss = mean_loss(params, config, dev_batch)
            if dev_loss < best[0]:
                best = (dev_loss, {k: p.copy() for k, p in params.items()}, step)
            rate = tokens_seen / (time.perf_counter() - started)
            print(
                f"\rstep {step + 1:5d}/{settings.steps}  train loss {loss:.4f}  dev loss {dev_loss:.4f}  "
                f"tokens/s {rate:8.0f}",
                end="",
                file=log,
                flush=True,
            )
    print(file=log)
    dev_loss, best_params, best_step = best
    seconds = time.perf_counter() - started
    summary = {
        "best_dev_loss": round(dev_loss, 5),
        "best_step": best_step + 1,
        "steps": settings.steps,
        "seconds": round(seconds, 1),
        "train_tokens": tokens_seen,
    }
    save_story_model(out_dir, best_params, config, tokenizer, corpus_signature(), training=summary)
    return summary
