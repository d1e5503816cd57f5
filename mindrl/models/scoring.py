"""Per-token log-probs (and entropy) of given sequences, one micro-batch of full-vocab logits at a time."""
from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn, ops

from mindrl.models.broadcast import expand, expand_in_bprop, row_sum
from mindrl.parallel.comm import GatherLastAxis


class TokenStats(nn.Cell):
    """(logits [B, T, V] float32, targets [B, T]) -> (log p(target), entropy), each [B, T], on one device.

    Its own backward, from the logits it keeps and p recomputed from them:
        d logp / dz = onehot(target) - p,     d entropy / dz = -p * (z - E_p[z])
    Differentiating logsumexp and the entropy formula op by op kept several vocabulary-sized tensors per row alive
    through the backward (see models/broadcast.py); at a 150k vocabulary those are the largest tensors
    of an update. Row maxima come from ArgMaxWithValue and row sums
    from a product with ones (broadcast.row_sum): MindSpore's CPU ReduceMax/ReduceSum over the vocabulary took
    52-144 ms where these take 6-12 (16 x 128 x 8192 logits). p is e times the rows' reciprocals, not e divided
    by the rows' sums: on MindSpore 2.10's CPU backend a division's output is not reused within the graph
    (bench/kernel_memory.py), and that one [.., V] division, made in the forward and again in the backward, was
    0.9 GiB of the real-model GRPO update's peak at responses of 192 tokens (docs/performance.md, Memory)."""

    def _stats(self, logits):
        """(p, the row maxima m, log of the shifted rows' sums, E_p[z - m]), the last three [.., 1]; [.., 1] columns
        are expanded before they meet the logits (see models/broadcast.py). The entropy is the third minus the
        fourth: taken from log-sum-exp and E_p[z], two numbers of the logits' size, it would lose the digits a
        large logit carries (1e-3 at logits of 1e4)."""
        m = ops.stop_gradient(logits.max(-1, keepdims=True))
        shifted = logits - expand(m, logits)
        e = ops.exp(shifted)
        total = row_sum(e)
        p = e * expand(1.0 / total, e)  # not e / expand(total, e): see the class's docstring
        return p, m, ops.log(total), row_sum(p * shifted)

    def construct(self, logits, targets):
        _, m, log_total, mean_shifted = self._stats(logits)
        picked = ops.gather_elements(logits, -1, ops.expand_dims(targets, -1))
        # picked - m first: two numbers of the logits' size whose difference is exact; then the small log_total
        return (picked - m - log_total).squeeze(-1), (log_total - mean_shifted).squeeze(-1)

    def bprop(self, logits, targets, out, dout):
        d_logp = expand_in_bprop(ops.expand_dims(dout[0], -1), logits)
        d_ent = expand_in_bprop(ops.expand_dims(dout[1], -1), logits)
        p, m, _, mean_shifted = self._stats(logits)
        onehot = ops.one_hot(targets, logits.shape[-1], ops.ones((), logits.dtype), ops.zeros((), logits.dtype))
        mean_z = expand_in_bprop(m + mean_shifted, logits)
        return onehot * d_logp - p * (d_logp + d_ent * (logits - mean_z)), ops.zeros_like(targets)


class LogProbCell(nn.Cell):
    """(input_ids, attention_mask) -> log-probs of each next token [B, T-1] (and entropy).

    ``temperature`` divides the logits, matching the sampler, so rollout and training agree.
    """

    def __init__(self, lm, temperature: float = 1.0, with_entropy: bool = False):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.inv_t = 1.0 / float(temperature)
        self.with_entropy = with_entropy
        self.stats = TokenStats()

    def construct(self, input_ids, attention_mask):
        logits = self.lm(input_ids, attention_mask)[:, :-1, :]
        if self.inv_t != 1.0:
            logits = logits * self.inv_t
        logp, entropy = self.stats(logits, input_ids[:, 1:])
        return logp, entropy if self.with_entropy else ops.zeros_like(logp)


def score_sequences(cell: LogProbCell, input_ids: np.ndarray, attention_mask: np.ndarray, micro_batch_size: int):
    """Run ``cell`` over micro-batches; returns numpy (log_probs [B, T-1], entropy [B, T-1]).

    The last micro-batch is padded to full size so a single graph serves every call.
    """
    b = input_ids.shape[0]
    out_lp, out_ent = [], []
    for start in range(0, b, micro_batch_size):
        ids = input_ids[start:start + micro_batch_size]
        mask = attention_mask[start:start + micro_batch_size]
        n = ids.shape[0]
        if n < micro_batch_size and b > micro_batch_size:
            ids = np.concatenate([ids, np.repeat(ids[-1:], micro_batch_size - n, 0)])
            mask = np.concatenate([mask, np.repeat(mask[-1:], micro_batch_size - n, 0)])
        lp, ent = cell(Tensor(ids.astype(np.int32)), Tensor(mask.astype(np.int32)))
        out_lp.append(lp.asnumpy()[:n])
        out_ent.append(ent.asnumpy()[:n])
    return np.concatenate(out_lp), np.concatenate(out_ent)


class LogProbsAndEntropy(nn.Cell):
    """log p(target) and entropy from logits that may be split over the vocabulary across tp ranks.

    At tp=1 this is the plain formula. Under tensor parallelism each rank holds logits[..., V/tp]; the
    full softmax is never formed: a max m (stop-gradient, gathered as padded all-reduce since AllReduce(MAX)
    has no CPU kernel), the partition sum, the target logit and E_p[z - m] are each all-reduced with an
    identity backward, which gives every shard exactly its own gradient.
    """

    def __init__(self, tp):
        super().__init__(auto_prefix=False)
        self.tp = tp
        self.single = TokenStats()
        self.reduce = tp.reduce_region()
        self.gather = None
        if tp.size > 1:
            self.gather = GatherLastAxis(tp.group, tp.rank, tp.size)

    def construct(self, logits, targets):
        if self.reduce is None:
            return self.single(logits, targets)
        local_v = logits.shape[-1]
        m = ops.stop_gradient(self.gather(logits.max(-1, keepdims=True)).max(-1, keepdims=True))
        shifted = logits - expand(m, logits)
        e = ops.exp(shifted)
        total = self.reduce(e.sum(-1))
        log_total = ops.log(total)
        local = targets - self.tp.rank * local_v
        inside = ops.logical_and(local >= 0, local < local_v)
        local = ops.select(inside, local, ops.zeros_like(local))
        picked = ops.gather_elements(logits, -1, ops.expand_dims(local, -1)).squeeze(-1)
        picked = self.reduce(picked * inside.astype(picked.dtype))
        # the entropy from the shifted logits, as TokenStats takes it: lse - E_p[z] would lose a large logit's digits
        mean_shifted = self.reduce((e * shifted).sum(-1)) / total
        return picked - m.squeeze(-1) - log_total, log_total - mean_shifted
