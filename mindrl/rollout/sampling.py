"""Token sampling on the host, from a seeded numpy generator we control.

MindSpore's CPU random ops ignore ``set_rng_state``, so randomness comes from
``numpy.random.Generator(PCG64(seed))``: a run is reproducible from its seed and resumable by
re-deriving the seed from (run seed, step). One uniform number per row drives an inverse-CDF draw.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence

import numpy as np


@dataclass
class SamplingParams:
    n: int = 1                      # samples per prompt
    max_tokens: int = 128           # new tokens at most
    min_tokens: int = 0             # stop ids are banned before this many new tokens
    do_sample: bool = True          # False: greedy
    temperature: float = 1.0
    top_k: int = 0                  # 0: off
    top_p: float = 1.0              # 1.0: off
    repetition_penalty: float = 1.0
    stop_token_ids: List[int] = field(default_factory=list)  # eos ids and any extra stop ids

    def validate(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens], got {self.min_tokens}")
        if self.do_sample and not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        return self


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


class Sampler:
    def __init__(self, params: SamplingParams, vocab_size: int, seed: int):
        self.p = params.validate()
        self.vocab_size = vocab_size
        self.stop = np.array(sorted(set(int(t) for t in params.stop_token_ids)), np.int64)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.inv_t = 1.0 / params.temperature if params.do_sample else 1.0

    def is_stop(self, token: int, step: int) -> bool:
        return self.stop.size > 0 and token in self.stop

    def _penalise(self, logits, histories: Sequence[Sequence[int]]):
        rp = self.p.repetition_penalty
        for i, hist in enumerate(histories):
            seen = np.unique(np.asarray(hist, np.int64))
            vals = logits[i, seen]
            logits[i, seen] = np.where(vals < 0, vals * rp, vals / rp)

    def sample(self, logits: np.ndarray, histories: Sequence[Sequence[int]], step: int):
        """logits [b, V] float32 -> (tokens [b], log-probs [b] of them under logits * (1/temperature))."""
        logits = logits[:, :self.vocab_size].astype(np.float32, copy=False)
        logp_full = log_softmax(logits * self.inv_t)  # what the trainer recomputes: no penalty, no filter
        work = logits.copy()
        if self.p.repetition_penalty != 1.0:
            self._penalise(work, histories)
        # step: tokens each row has produced so far (one int for all rows, or one per row)
        early = np.flatnonzero(np.broadcast_to(np.asarray(step) < self.p.min_tokens, (len(work),)))
        if early.size and self.stop.size:
            work[np.ix_(early, self.stop)] = -np.inf
        if not self.p.do_sample:
            tokens = work.argmax(-1)
        else:
            work = work * self.inv_t
            if self.p.top_k and self.p.top_k < work.shape[-1]:
                kth = np.partition(work, -self.p.top_k, axis=-1)[:, -self.p.top_k][:, None]
                work = np.where(work < kth, -np.inf, work)
            probs = np.exp(work - work.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            if self.p.top_p < 1.0:
                order = np.argsort(-probs, axis=-1, kind="stable")
                sorted_p = np.take_along_axis(probs, order, -1)
                # keep the smallest prefix whose mass reaches top_p (the first token always stays)
                drop_sorted = (np.cumsum(sorted_p, -1) - sorted_p) >= self.p.top_p
                drop = np.zeros_like(drop_sorted)
                np.put_along_axis(drop, order, drop_sorted, -1)
                probs = np.where(drop, 0.0, probs)
                probs /= probs.sum(-1, keepdims=True)
            cdf = np.cumsum(probs, -1)
            u = self.rng.random(len(probs))[:, None] * cdf[:, -1:]
            tokens = np.minimum((cdf <= u).sum(-1), probs.shape[-1] - 1)
            # never land on a zero-probability token through float round-off
            bad = probs[np.arange(len(tokens)), tokens] == 0
            if bad.any():
                tokens[bad] = probs[bad].argmax(-1)
        lp = logp_full[np.arange(len(tokens)), tokens]
        return tokens.astype(np.int64), lp.astype(np.float32)
