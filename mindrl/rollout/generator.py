"""KV-cache generation with static shapes: one prefill graph per (batch, prompt bucket), one decode graph
per batch bucket, all compiled once and reused step after step.

Where the speed comes from (see docs/rollout.md):
- GRPO's n samples of one prompt share its prefill: the prompt is run once and its cache rows are copied n times.
- Finished rows stop costing compute: when the live rows fit a smaller batch bucket, they are compacted into
  the first rows of the cache and the smaller decode graph runs.
- The cache is preallocated Parameters written in place (one ScatterNdUpdate of the new token's K/V).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from mindrl.rollout.sampling import SamplingParams, Sampler


class _Cache(nn.Cell):
    def __init__(self, lm, batch, length):
        super().__init__()
        cfg, tp = lm.config, lm.tp
        kv = cfg.n_kv_heads // tp.size
        shape = (batch, kv, length, cfg.head_dim)
        dt = ms.float16 if lm.model.compute_dtype == "float16" else ms.float32
        zeros = lambda: Tensor(np.zeros(shape, np.float32), dt)  # noqa: E731
        self.k = ParameterTuple([Parameter(zeros(), name=f"kv_cache.k.{i}", requires_grad=False)
                                 for i in range(cfg.num_layers)])
        self.v = ParameterTuple([Parameter(zeros(), name=f"kv_cache.v.{i}", requires_grad=False)
                                 for i in range(cfg.num_layers)])
        # a tied head's [H, V_local] copy for prefill/decode, refreshed from the embedding before each generate()
        self.head_t = None
        if lm.tied:
            emb = lm.model.embed_tokens.weight
            self.head_t = Parameter(Tensor(np.zeros(emb.shape[::-1], np.float32), emb.dtype), name="kv_cache.head_t",
                                    requires_grad=False)


class _RefreshHead(nn.Cell):
    """head_t = embed_tokens.weight^T: the tied head the decode graphs read, from the weights as they are now."""

    def __init__(self, lm, cache):
        super().__init__(auto_prefix=False)
        self.weight, self.cache = lm.model.embed_tokens.weight, cache

    def construct(self):
        return ops.assign(self.cache.head_t, ops.transpose(self.weight, (1, 0)))


class _Prefill(nn.Cell):
    def __init__(self, lm, cache):
        super().__init__(auto_prefix=False)
        self.lm, self.cache = lm, cache

    def construct(self, input_ids, attention_mask, rows):
        return self.lm.prefill(input_ids, attention_mask, self.cache.k, self.cache.v, rows, self.cache.head_t)


class _Decode(nn.Cell):
    def __init__(self, lm, cache):
        super().__init__(auto_prefix=False)
        self.lm, self.cache = lm, cache

    def construct(self, tokens, pos, start):
        return self.lm.decode(tokens, pos, start, self.cache.k, self.cache.v, self.cache.head_t)


class _Reorder(nn.Cell):
    """cache[:m] = cache[idx] for every layer (expanding n copies, or compacting live rows)."""

    def __init__(self, cache):
        super().__init__(auto_prefix=False)
        self.cache = cache

    def construct(self, idx, dest):
        out = idx
        for buf in self.cache.k:
            out = ops.depend(out, ops.scatter_nd_update(buf, dest, ops.gather(buf, idx, 0)))
        for buf in self.cache.v:
            out = ops.depend(out, ops.scatter_nd_update(buf, dest, ops.gather(buf, idx, 0)))
        return out


@dataclass
class RolloutOutput:
    """Per sequence (prompt-major: prompt i's samples are rows i*n .. i*n+n-1)."""
    prompt_index: np.ndarray                 # [N] which prompt each sequence came from
    tokens: List[List[int]]                  # new token ids (ending at a stop id inclusive when produced)
    log_probs: List[np.ndarray]              # log p(token) under logits / temperature, float32
    finished: np.ndarray                     # [N] bool: stopped on eos/stop id (False = hit max_tokens)
    stats: dict = field(default_factory=dict)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(t) for t in self.tokens], np.int64)


def _bucket(value: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if value <= b:
            return b
    raise ValueError(f"length {value} exceeds the largest bucket {buckets[-1]}")


class Generator:
    """Owns the cache and compiled graphs for one model; call :meth:`generate` many times.

    max_batch: rows decoded together (prompts x n samples). prompt_buckets: padded prompt lengths.
    """

    def __init__(self, lm, max_batch: int, max_prompt_len: int, max_new_tokens: int,
                 prompt_buckets: Optional[Sequence[int]] = None, min_decode_bucket: int = 4, pad_id: int = 0,
                 static_prompt_shape: bool = False):
        self.lm = lm
        self.max_batch = int(max_batch)
        self.max_new_tokens = int(max_new_tokens)
        self.prompt_buckets = sorted(prompt_buckets or _default_buckets(max_prompt_len))
        if self.prompt_buckets[-1] < max_prompt_len:
            self.prompt_buckets.append(max_prompt_len)
        self.length = self.prompt_buckets[-1] + self.max_new_tokens
        self.cache = _Cache(lm, self.max_batch, self.length)
        self.prefill_cell = _Prefill(lm, self.cache)
        self.decode_cell = _Decode(lm, self.cache)
        self.reorder_cell = _Reorder(self.cache)
        self.refresh_head = _RefreshHead(lm, self.cache) if self.cache.head_t is not None else None
        self.pad_id = pad_id
        self.static_prompt_shape = static_prompt_shape  # one prefill graph: a fixed compile order
        b, self.decode_buckets = self.max_batch, []
        while True:  # halving buckets: finished rows are dropped once the live ones fit the next one
            self.decode_buckets.append(b)
            if b <= min_decode_bucket:
                break
            b = max(min_decode_bucket, (b + 1) // 2)
        self.decode_buckets.sort()

    def warmup(self, bucket: int):
        """Compile (and run once on dummy data) the graphs of one decode bucket; the largest bucket also
        compiles the prefill. Used to fix the compile order for the compile cache and strategy export."""
        if bucket == self.decode_buckets[-1]:
            if self.refresh_head is not None:
                self.refresh_head()
            s = self.prompt_buckets[-1]
            rows = self.max_batch
            self.prefill_cell(Tensor(np.full((rows, s), self.pad_id, np.int32)), Tensor(np.ones((rows, s), np.int32)),
                              Tensor(np.arange(rows, dtype=np.int32).reshape(rows, 1)))
        self._reorder(np.arange(bucket, dtype=np.int32), bucket)
        self.decode_cell(Tensor(np.full(bucket, self.pad_id, np.int32)), Tensor(self.prompt_buckets[-1], ms.int32),
                         Tensor(np.zeros(bucket, np.int32)))

    def _reorder(self, src_rows, size):
        idx = np.full(size, src_rows[-1], np.int32)
        idx[:len(src_rows)] = src_rows
        dest = np.arange(size, dtype=np.int32).reshape(size, 1)
        self.reorder_cell(Tensor(idx), Tensor(dest))

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int = 0) -> RolloutOutput:
        n = params.n
        if n > self.max_batch:
            raise ValueError(f"n={n} samples per prompt exceeds the generator's max_batch={self.max_batch}")
        per_chunk = self.max_batch // n
        if self.refresh_head is not None:  # the weights may have changed since the last call (a training step)
            self.refresh_head()
        sampler = Sampler(params, self.lm.config.vocab_size, seed)
        tokens, logps, finished, pindex = [], [], [], []
        stats = {"decode_steps": 0, "decoded_rows": 0, "prefill_tokens": 0}
        for c0 in range(0, len(prompts), per_chunk):
            chunk = [list(p) for p in prompts[c0:c0 + per_chunk]]
            t, lp, fin = self._generate_chunk(chunk, params, sampler, stats)
            tokens += t
            logps += lp
            finished += fin
            pindex += [c0 + i for i in range(len(chunk)) for _ in range(n)]
        return RolloutOutput(np.array(pindex, np.int64), tokens, logps, np.array(finished, bool), stats)

    def _generate_chunk(self, prompts, params: SamplingParams, sampler: "Sampler", stats):
        n, per_chunk = params.n, self.max_batch // params.n
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: every prompt needs at least one token")
        longest = max(len(p) for p in prompts)
        s = self.prompt_buckets[-1] if self.static_prompt_shape else _bucket(longest, self.prompt_buckets)
        rows = per_chunk  # prefill a fixed row count so one graph serves every chunk
        ids = np.full((rows, s), self.pad_id, np.int32)
        mask = np.zeros((rows, s), np.int32)
        for i in range(rows):
            p = prompts[min(i, len(prompts) - 1)]
            ids[i, s - len(p):] = p
            mask[i, s - len(p):] = 1
        start = (s - mask.sum(1)).astype(np.int32)
        logits = self.prefill_cell(Tensor(ids), Tensor(mask), Tensor(np.arange(rows, dtype=np.int32).reshape(rows, 1)))
        stats["prefill_tokens"] += int(mask[:len(prompts)].sum())
        logits = np.repeat(logits.asnumpy()[:len(prompts)], n, axis=0)
        live = len(prompts) * n
        if n > 1:  # share the prefill: copy each prompt's cache row to its n sample rows
            self._reorder(np.repeat(np.arange(len(prompts), dtype=np.int32), n), _bucket(live, self.decode_buckets))
        start = np.repeat(start[:len(prompts)], n)
        history = [list(prompts[i // n]) for i in range(live)]
        out_tok = [[] for _ in range(live)]
        out_lp = [[] for _ in range(live)]
        done = np.zeros(live, bool)
        stopped = np.zeros(live, bool)
        slot_of = np.arange(live)            # sequence -> cache row
        alive = np.arange(live)              # sequences still decoding, in cache-row order
        for step in range(self.max_new_tokens):
            tok, lp = sampler.sample(logits, [history[i] for i in alive], step)
            for j, seq in enumerate(alive):
                out_tok[seq].append(int(tok[j]))
                out_lp[seq].append(lp[j])
                history[seq].append(int(tok[j]))
                if sampler.is_stop(int(tok[j]), step):
                    done[seq] = stopped[seq] = True
            if step == self.max_new_tokens - 1:
                break
            keep = ~done[alive]
            if not keep.any():
                break
            alive_next = alive[keep]
            bucket = _bucket(len(alive_next), self.decode_buckets)
            current = _bucket(len(alive), self.decode_buckets)
            feed = tok[keep]
            if bucket < current:
                self._reorder(slot_of[alive_next].astype(np.int32), bucket)
                slot_of[alive_next] = np.arange(len(alive_next))
            elif not keep.all():
                pass  # rows stay where they are; finished ones are decoded until the next compaction
            alive = alive_next
            rows_tokens = np.full(bucket, self.pad_id, np.int32)
            rows_start = np.zeros(bucket, np.int32)
            rows_tokens[slot_of[alive]] = feed
            rows_start[slot_of[alive]] = start[alive]
            out = self.decode_cell(Tensor(rows_tokens), Tensor(s + step, ms.int32), Tensor(rows_start))
            logits = out.asnumpy()[slot_of[alive]]
            stats["decode_steps"] += 1
            stats["decoded_rows"] += bucket
        return out_tok, [np.asarray(x, np.float32) for x in out_lp], list(stopped)


def _default_buckets(max_len: int) -> List[int]:
    out, b = [], 16
    while b < max_len:
        out.append(b)
        b *= 2
    out.append(max_len)
    return out
