"""KV-cache generation with static shapes: one prefill graph per prompt bucket, one decode graph per batch
bucket, all compiled once and reused step after step.

Where the speed comes from (see docs/rollout.md):
- A fixed pool of decode slots (``max_batch``, generate_config.max_num_seqs) is fed from a queue of requests:
  when rows finish, their slots take the next prompts (continuous batching), so a short response never leaves a
  slot idle while the batch's longest one decodes. Every row keeps its own cache position, so rows admitted later
  decode in the same graph call as rows midway through.
- GRPO's n samples of one prompt share its prefill: the prompt is run once and its cache row is copied n times.
- Finished rows stop costing compute: once the queue is empty and the live rows fit a smaller batch bucket, they
  are compacted into the first rows of the cache and the smaller decode graph runs.
- The cache is preallocated Parameters written in place (one ScatterNdUpdate of the new token's K/V).
- A request can be a paused response (partial rollout): its prefix is prompt + the tokens so far, re-prefilled
  with the current weights, and it continues where it stopped.
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


@dataclass
class Request:
    """A prefix to continue: a prompt whose ``n`` samples share one prefill, or a paused response (partial
    rollout) whose prefix is its prompt and the tokens it has so far (``done_before`` of them: min_tokens counts
    from the response's start). ``max_new``: new tokens at most this time; None = the sampling's max_tokens."""
    prefix: List[int]
    n: int = 1
    max_new: Optional[int] = None
    done_before: int = 0
    keys: Optional[List] = None     # one per sample: names its cache row for Generator.run(park=True)


class Generator:
    """Owns the cache and compiled graphs for one model; call :meth:`generate` (or :meth:`run`) many times.

    max_batch: decode slots (rows decoded together). prompt_buckets: padded prompt lengths. A generator that also
    resumes paused responses (partial rollout) takes prefixes up to ``resume_prefix_len`` tokens, each continued by
    at most ``resume_new_tokens``: the cache is long enough for either kind of request.
    """

    def __init__(self, lm, max_batch: int, max_prompt_len: int, max_new_tokens: int,
                 prompt_buckets: Optional[Sequence[int]] = None, min_decode_bucket: int = 4, pad_id: int = 0,
                 static_prompt_shape: bool = False, resume_prefix_len: int = 0, resume_new_tokens: int = 0,
                 prefill_rows: Optional[int] = None):
        self.lm = lm
        self.max_batch = int(max_batch)
        # prompts per prefill call. Fixed (the trainer passes the rollout's: max_batch // samples per prompt), every
        # call reuses one prefill graph whatever its n: a greedy evaluation (n = 1) would otherwise compile a prefill
        # for max_batch rows, and keep its buffers, beside the rollout's. None: max_batch // n of each call.
        self.prefill_rows = int(prefill_rows) if prefill_rows else None
        self.max_new_tokens = int(max_new_tokens)
        self.max_prompt_len = int(max_prompt_len)
        longest = max(self.max_prompt_len, int(resume_prefix_len))
        self.prompt_buckets = sorted(prompt_buckets or _default_buckets(longest))
        if self.prompt_buckets[-1] < longest:
            self.prompt_buckets.append(longest)
        self.resume_new_tokens = int(resume_new_tokens)
        self.length = max(_bucket(self.max_prompt_len, self.prompt_buckets) + self.max_new_tokens,
                          self.prompt_buckets[-1] + self.resume_new_tokens)
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
        self.last_stats: dict = {}
        self._pool = _Pool(self.max_batch)   # kept across calls for parked rows; empty otherwise

    def warmup(self, bucket: int, n: int = 1):
        """Compile (and run once on dummy data) the graphs of one decode bucket; the largest bucket also compiles
        the prefill (its row count is the prompts of n samples the pool holds). Used to fix the compile order for
        the compile cache and strategy export."""
        if bucket == self.decode_buckets[-1]:
            if self.refresh_head is not None:
                self.refresh_head()
            s = self._prefill_width(self.max_prompt_len)
            rows = self._prefill_rows(n)
            self.prefill_cell(Tensor(np.full((rows, s), self.pad_id, np.int32)), Tensor(np.ones((rows, s), np.int32)),
                              Tensor(np.arange(rows, dtype=np.int32).reshape(rows, 1)))
        self._reorder(list(range(bucket)), list(range(bucket)))
        self.decode_cell(Tensor(np.full(bucket, self.pad_id, np.int32)), Tensor(np.zeros(bucket, np.int32)),
                         Tensor(np.zeros(bucket, np.int32)))

    def _prefill_rows(self, n: int) -> int:
        """The prefill graph's row count for requests of ``n`` samples each."""
        return self.prefill_rows or max(1, self.max_batch // n)

    def _reorder(self, src_rows, dest_rows):
        """cache[dest] = cache[src], padded to a decode bucket by repeating the last pair (same source, same
        value: a repeated destination is harmless)."""
        size = _bucket(len(src_rows), self.decode_buckets)
        idx = np.full(size, src_rows[-1], np.int32)
        idx[:len(src_rows)] = src_rows
        dest = np.full(size, dest_rows[-1], np.int32)
        dest[:len(dest_rows)] = dest_rows
        self.reorder_cell(Tensor(idx), Tensor(dest.reshape(size, 1)))

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int = 0) -> RolloutOutput:
        """``params.n`` samples of every prompt, prompt-major."""
        return self.run([Request(list(p), params.n) for p in prompts], params, seed)

    def run(self, requests: Sequence[Request], params: SamplingParams, seed: int = 0,
            park: bool = False) -> RolloutOutput:
        """Every request's samples, request-major (request i's are rows i*n .. i*n+n-1 when all have n samples).

        Rows are sampled in sequence order, one uniform number each per step: when the pool holds every request at
        once, the draws are those of a cacheless step-by-step generation (tests/test_continuous_batching.py).

        ``park``: a sample with a key (``Request.keys``) that reaches its ``max_new`` without stopping keeps its
        cache row, and a later call's request with that key continues from the cache instead of prefilling its
        prefix again (partial rollout's rounds within one step). Valid while the weights stay the same: call
        :meth:`drop_parked` when they change. A call releases the parked rows its requests do not continue, and
        evicts parked rows when the queue needs their slots (those requests then prefill)."""
        requests = [Request(list(r.prefix), r.n, params.max_tokens if r.max_new is None else r.max_new,
                            r.done_before, None if r.keys is None else list(r.keys)) for r in requests]
        for r in requests:
            if not r.prefix:
                raise ValueError("empty prompt: every prompt needs at least one token")
            if r.n > self.max_batch:
                raise ValueError(f"n={r.n} samples per prompt exceeds the generator's max_batch={self.max_batch}")
            if not 1 <= r.max_new <= self.max_new_tokens:
                raise ValueError(f"max_new={r.max_new} outside [1, {self.max_new_tokens}]")
            if r.keys is not None and len(r.keys) != r.n:
                raise ValueError(f"{len(r.keys)} keys for {r.n} samples")
        if self.refresh_head is not None:  # the weights may have changed since the last call (a training step)
            self.refresh_head()
        sampler = Sampler(params, self.lm.config.vocab_size, seed)
        first = np.cumsum([0] + [r.n for r in requests])      # request i's sequences: first[i] .. first[i+1]-1
        total = int(first[-1])
        req_of = np.repeat(np.arange(len(requests)), [r.n for r in requests])
        history = [list(requests[q].prefix) for q in req_of]
        out_tok = [[] for _ in range(total)]
        out_lp = [[] for _ in range(total)]
        stopped = np.zeros(total, bool)
        # the prefill graph takes a fixed row count: as many prompts as the pool holds at n samples each, or prefill_rows
        rows = self._prefill_rows(params.n)
        pool = self._pool
        for owner in [o for o in pool.slot if o[0] == "seq"]:  # left by a call that raised
            pool.release(owner)
        pending = {}                   # sequence -> its next-token logits, waiting to be sampled
        feed = {}                      # sequence -> the token its row decodes next
        # continued from the cache where its row has room for the new tokens (a row prefilled at a wide bucket may
        # not: it then prefills its prefix again, at a width that fits)
        resumed = {r.keys[0]: i for i, r in enumerate(requests) if r.n == 1 and r.keys and r.keys[0] in pool.parked
                   and pool.pos[pool.slot[("park", r.keys[0])]] + r.max_new <= self.length}
        for key in [k for k in pool.parked if k not in resumed]:
            pool.release(("park", key))
        for key, i in resumed.items():  # continue from the cache: the row decodes its last sampled token next
            feed[int(first[i])] = pool.unpark(key, ("seq", int(first[i])))
        queue = [i for i in range(len(requests)) if not (requests[i].keys and requests[i].keys[0] in resumed)][::-1]
        stats = {"decode_steps": 0, "decoded_rows": 0, "prefill_tokens": 0, "admissions": 0,
                 "resumed_from_cache": len(resumed)}
        bucket = self.max_batch
        idle = 0  # decode slots left empty while prompts waited, since the last prefill call (slot-steps)
        while True:
            if queue and requests[queue[-1]].n > pool.free_count() and not pending and not feed:
                pool.evict_parked(requests[queue[-1]].n)  # nothing decodes: parked rows give their slots
            # free slots take prompts, rows at a time: at once when nothing else decodes, else when worth a call
            while queue:
                taken = _fitting(requests, queue, pool.free_count(), rows)
                if not taken or ((pending or feed) and not self._worth_a_prefill(requests, queue, pool, rows,
                                                                                  len(taken), idle)):
                    break
                del queue[len(queue) - len(taken):]
                logits = self._admit([requests[q] for q in taken],
                                     [[("seq", s) for s in range(first[q], first[q + 1])] for q in taken],
                                     pool, rows, stats)
                for q, lg in zip(taken, logits):
                    for seq in range(first[q], first[q + 1]):
                        pending[seq] = lg
                bucket = self.max_batch
                idle = 0
            if pending:
                seqs = sorted(pending)
                steps = np.array([len(out_tok[q]) + requests[req_of[q]].done_before for q in seqs])
                tok, lp = sampler.sample(np.stack([pending[q] for q in seqs]), [history[q] for q in seqs], steps)
                pending.clear()
                for j, seq in enumerate(seqs):
                    out_tok[seq].append(int(tok[j]))
                    out_lp[seq].append(lp[j])
                    history[seq].append(int(tok[j]))
                    stopped[seq] = sampler.is_stop(int(tok[j]), int(steps[j]))
                    r = requests[req_of[seq]]
                    if stopped[seq]:
                        pool.release(("seq", seq))
                    elif len(out_tok[seq]) >= r.max_new:
                        if park and r.keys is not None:
                            pool.park(("seq", seq), r.keys[seq - first[req_of[seq]]], int(tok[j]))
                        else:
                            pool.release(("seq", seq))
                    else:
                        feed[seq] = int(tok[j])
            if not feed:
                if queue:
                    continue
                break
            live = sorted(feed)
            if not queue:  # nothing left to admit: shrink to the smallest bucket the rows in use fit
                keep = [("seq", q) for q in live] + [("park", k) for k in pool.parked]
                smaller = _bucket(len(keep), self.decode_buckets)
                if smaller < bucket:
                    if max(pool.slot[o] for o in keep) >= smaller:
                        self._reorder([pool.slot[o] for o in keep], list(range(len(keep))))
                        pool.compact(keep)
                    bucket = smaller
            tokens = np.full(bucket, self.pad_id, np.int32)
            slots = np.array([pool.slot[("seq", q)] for q in live])
            tokens[slots] = [feed[q] for q in live]
            feed.clear()
            out = self.decode_cell(Tensor(tokens), Tensor(pool.pos[:bucket]), Tensor(pool.start[:bucket]))
            if queue:
                idle += pool.free_count()
            pool.pos[slots] += 1
            logits = out.asnumpy()
            for q, sl in zip(live, slots):
                pending[q] = logits[sl]
            stats["decode_steps"] += 1
            stats["decoded_rows"] += bucket
        self.last_stats = stats
        return RolloutOutput(req_of.astype(np.int64), out_tok, [np.asarray(x, np.float32) for x in out_lp],
                             stopped, stats)

    def drop_parked(self) -> None:
        """Forget every parked row (the weights changed: their cache is another policy's)."""
        for key in list(self._pool.parked):
            self._pool.release(("park", key))

    def _prefill_width(self, longest: int) -> int:
        """The padded width of a prefill whose longest prefix has ``longest`` tokens: its bucket, or with static
        shapes one width for prompts and one for resumed prefixes."""
        if not self.static_prompt_shape:
            return _bucket(longest, self.prompt_buckets)
        return _bucket(self.max_prompt_len, self.prompt_buckets) if longest <= self.max_prompt_len else \
            self.prompt_buckets[-1]

    def _worth_a_prefill(self, requests, queue, pool: "_Pool", rows: int, now: int, idle: int) -> bool:
        """While rows decode, is it time to prefill the queued prompts that fit the free slots? A prefill call
        computes all ``rows`` of its graph however few prompts it takes, so admitting one prompt as soon as one slot
        frees spent a whole call on it: a greedy evaluation of 200 prompts through a pool of 32 (the real PPO
        example's) made 49 calls of 32 rows for 200 prompts, 3.5 s each, three quarters of its time. Waiting costs
        the empty slots of each decode step instead. So the call waits until the empty slot-steps since the last
        call (``idle``) reach the rows it would leave unused, counted as positions (rows x the prefill's width),
        against the prompts it could take once the decoding rows are done: rent-or-buy, waiting until waiting has
        cost what acting would (both counted in positions, a decode slot as one prefilled position). Deterministic:
        counts, not clocks, so a run samples the same way every time. ``now``: the prompts the free slots take."""
        best = _fitting(requests, queue, pool.size - len(pool.parked), rows)
        width = self._prefill_width(max(len(requests[q].prefix) for q in best))
        return (len(best) - now) * width <= idle

    def _admit(self, reqs: List[Request], seqs, pool: "_Pool", rows: int, stats) -> list:
        """Prefill ``reqs`` (at most ``rows``) into free slots, copy each one's cache row to its n samples' slots;
        returns each request's next-token logits."""
        longest = max(len(r.prefix) for r in reqs)
        s = self._prefill_width(longest)
        if s + max(r.max_new for r in reqs) > self.length:
            raise ValueError(f"a {longest}-token prefix continued by {max(r.max_new for r in reqs)} tokens does "
                             f"not fit the {self.length}-slot cache")
        slots = [pool.take(list(q), s, s - len(r.prefix)) for r, q in zip(reqs, seqs)]
        # rows beyond the requests (the graph's fixed row count) repeat the last prompt; they write where nothing
        # is lost: a sample slot the copy below overwrites, a free slot, or (no other room) the last prompt's own
        spare = [sl for group in slots for sl in group[1:]] + pool.free_slots()
        dest = [group[0] for group in slots]
        dest += [spare[i] if i < len(spare) else dest[-1] for i in range(rows - len(reqs))]
        ids = np.full((rows, s), self.pad_id, np.int32)
        mask = np.zeros((rows, s), np.int32)
        for i in range(rows):
            p = reqs[min(i, len(reqs) - 1)].prefix
            ids[i, s - len(p):] = p
            mask[i, s - len(p):] = 1
        logits = self.prefill_cell(Tensor(ids), Tensor(mask), Tensor(np.array(dest, np.int32).reshape(rows, 1)))
        copies = [(group[0], sl) for group in slots for sl in group[1:]]
        if copies:  # share the prefill: each prompt's cache row goes to its other samples' rows
            self._reorder([a for a, _ in copies], [b for _, b in copies])
        stats["prefill_tokens"] += sum(len(r.prefix) for r in reqs)
        stats["admissions"] += 1
        return list(logits.asnumpy()[:len(reqs)])


def _fitting(requests, queue, room: int, rows: int) -> list:
    """The queued requests (``queue`` is popped from its end) one prefill call of ``rows`` prompts takes into
    ``room`` free slots, in order."""
    taken = []
    for q in reversed(queue):
        if len(taken) == rows or requests[q].n > room:
            break
        room -= requests[q].n
        taken.append(q)
    return taken


class _Pool:
    """Which owner holds which cache row (("seq", i): a sequence of the current call; ("park", key): a parked
    sample), and each row's next write position and first real slot."""

    def __init__(self, size: int):
        self.size = size
        self.slot = {}                                   # owner -> row
        self.pos = np.zeros(size, np.int32)              # where each row's next token's K/V goes
        self.start = np.zeros(size, np.int32)            # each row's first real (unpadded) slot
        self.parked = {}                                 # key -> the token its row decodes next (insertion order)

    def free_slots(self) -> List[int]:
        used = set(self.slot.values())
        return [i for i in range(self.size) if i not in used]

    def free_count(self) -> int:
        return self.size - len(self.slot)

    def take(self, owners: list, pos: int, start: int) -> List[int]:
        rows = self.free_slots()[:len(owners)]
        for o, r in zip(owners, rows):
            self.slot[o] = r
            self.pos[r], self.start[r] = pos, start
        return rows

    def release(self, owner) -> None:
        self.slot.pop(owner, None)
        if owner[0] == "park":
            self.parked.pop(owner[1], None)

    def park(self, owner, key, token: int) -> None:
        self.slot[("park", key)] = self.slot.pop(owner)
        self.parked[key] = token

    def unpark(self, key, owner) -> int:
        self.slot[owner] = self.slot.pop(("park", key))
        return self.parked.pop(key)

    def evict_parked(self, need: int) -> None:
        for key in list(self.parked):
            if self.free_count() >= need:
                break
            self.release(("park", key))

    def compact(self, owners: list) -> None:
        """``owners`` moved to rows 0 .. len-1, in this order (Generator._reorder did the cache)."""
        old = [self.slot[o] for o in owners]
        pos, start = self.pos[old].copy(), self.start[old].copy()
        for i, o in enumerate(owners):
            self.slot[o] = i
        self.pos[:len(owners)], self.start[:len(owners)] = pos, start


def _default_buckets(max_len: int) -> List[int]:
    out, b = [], 16
    while b < max_len:
        out.append(b)
        b *= 2
    out.append(max_len)
    return out
