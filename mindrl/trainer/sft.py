"""Supervised next-token loss on masked positions: `mindrl sft` (sft_training.py), PPO-ptx's term (trainer/ptx.py)
and the supervised steps of the learning benchmark's control run (bench/learning.py)."""
from __future__ import annotations

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.models.scoring import LogProbsAndEntropy
from mindrl.trainer.optim import AdamW


class SummedResponseLogProbs(nn.Cell):
    """(ids [B, W], mask [B, W]) -> [B]: each row's summed log-probs of the tokens whose mask is 1 (the response),
    each given the tokens before it: what SFT's loss and DPO's log-ratios (dpo_training.py) are made of.

    Rows are right-padded, so a causal model's real tokens never attend to the padding: no attention mask needed.
    The vocabulary may be split over tensor-parallel ranks (LogProbsAndEntropy)."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.stats = LogProbsAndEntropy(lm.tp)

    def construct(self, ids, mask):
        return self.summed(ids, mask, ops.ones_like(ids))

    def summed(self, ids, mask, segments):
        """``segments`` as the backbone's attention mask: all ones for plain rows; each token's segment for packed
        rows (models/decoder.py, segment_attention)."""
        h = self.lm.model(ids, segments)[:, :-1]
        log_prob, _ = self.stats(self.lm.head(h), ids[:, 1:])
        return (log_prob.astype(ms.float32) * mask[:, 1:].astype(ms.float32)).sum(-1)


class NextTokenNLL(nn.Cell):
    """(sft_ids [B, W], sft_mask [B, W], denominator) -> the summed negative log-likelihood of every token whose mask
    is 1 given the tokens before it, divided by the denominator."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.logps = SummedResponseLogProbs(lm)

    def construct(self, sft_ids, sft_mask, denom):
        return -self.logps(sft_ids, sft_mask).sum() / denom


class SFTLossCell(nn.Cell):
    """(sft_ids, sft_mask, denominator) -> (nll, nll): `mindrl sft`'s loss for the Updater (trainer/updater.py), the
    masked next-token NLL over the denominator (the global batch's masked token count, so micro-batches and
    data-parallel replicas add up to the batch's token mean)."""

    METRICS = (("loss", "sum"),)

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.nll = NextTokenNLL(lm)

    def construct(self, sft_ids, sft_mask, denom):
        nll = self.nll(sft_ids, sft_mask, denom)
        return nll, ops.stop_gradient(nll)


class PackedSFTLossCell(nn.Cell):
    """(sft_ids, sft_mask, sft_segments, denominator) -> (nll, nll): SFTLossCell on packed rows (`mindrl sft` with
    data.packing): several rows share a sequence, told apart by ``sft_segments`` (1, 2, ... ; 0 = padding), each
    attending only to itself with positions from 0, so the loss and gradient are the unpacked rows'. ``nll``
    scores plain rows (held-out eval), as SFTLossCell's does."""

    METRICS = SFTLossCell.METRICS

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        lm.model.segment_attention = True  # plain rows (all ones) are one segment each: the same as before
        self.nll = NextTokenNLL(lm)

    def construct(self, sft_ids, sft_mask, sft_segments, denom):
        nll = -self.nll.logps.summed(sft_ids, sft_mask, sft_segments).sum() / denom
        return nll, ops.stop_gradient(nll)


def pack_rows(ids_rows, mask_rows, width: int, pad_id: int):
    """Rows (token ids and their 0/1 loss masks, each at most ``width`` long) packed first-fit, longest first, into
    sequences of ``width``: (ids, loss mask, segments), each [n, width], n the number of sequences used rounded up
    to a power of two (empty ones all padding) so that few shapes compile. A row's first token gets loss mask 0: in
    a row of its own it is never predicted, packed it would be predicted from the row before it."""
    bins = _first_fit(ids_rows, width)
    n = 1 << (len(bins) - 1).bit_length()
    ids = np.full((n, width), pad_id, np.int32)
    mask = np.zeros((n, width), np.int32)
    segments = np.zeros((n, width), np.int32)
    for r, members in enumerate(bins):
        at = 0
        for seg, i in enumerate(members, 1):
            k = len(ids_rows[i])
            ids[r, at:at + k] = ids_rows[i]
            mask[r, at:at + k] = np.asarray(mask_rows[i][:k]) > 0
            mask[r, at] = 0
            segments[r, at:at + k] = seg
            at += k
    return ids, mask, segments


def _first_fit(rows, width: int) -> list:
    """Row indices per sequence: longest rows first, each into the first sequence with room (stable for ties)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    bins, room = [], []
    for i in order:
        k = len(rows[i])
        for b, free in enumerate(room):
            if k <= free:
                bins[b].append(i)
                room[b] -= k
                break
        else:
            bins.append([i])
            room.append(width - k)
    return bins


class SFTStep(nn.Cell):
    """One supervised AdamW step on a batch: the token-mean NLL (the batch's masked token count as denominator)."""

    def __init__(self, lm, lr_weight_decay=0.0, clip_grad=1.0):
        super().__init__(auto_prefix=False)
        self.loss = NextTokenNLL(lm)
        self.params = ms.ParameterTuple(lm.trainable_params())
        self.grad_fn = ms.value_and_grad(self.loss, None, self.params)
        self.opt = AdamW(self.params, weight_decay=lr_weight_decay)
        self.clip = float(clip_grad)

    def construct(self, sft_ids, sft_mask, lr):
        denom = ops.clamp(sft_mask[:, 1:].astype(ms.float32).sum(), min=1.0)
        loss, grads = self.grad_fn(sft_ids, sft_mask, denom)
        if self.clip > 0:
            grads = ops.clip_by_global_norm(grads, self.clip)
        return ops.depend(loss, self.opt(grads, lr))


def run_sft_step(step_cell, ids, loss_mask, lr):
    return float(step_cell(Tensor(ids, ms.int32), Tensor(loss_mask, ms.int32), Tensor(np.float32(lr))).asnumpy())
