"""Supervised next-token loss on masked positions: `mindrl sft` (sft_training.py), PPO-ptx's term (trainer/ptx.py)
and the supervised steps of the learning benchmark's control run (bench/learning.py)."""
from __future__ import annotations

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.data.widths import bucket
from mindrl.models.decoder import RecomputingCell
from mindrl.models.scoring import LogProbsAndEntropy
from mindrl.trainer.optim import AdamW
from mindrl.trainer.updater import _square_sum


def loss_positions(mask, k: int = 0) -> np.ndarray:
    """0/1 loss masks [B, W] -> the positions their loss scores [B, K] (int32): row i's j >= 1 with mask[i, j] = 1
    (token j, predicted from the tokens before it), in order, then 0 (position 0 is never predicted, so 0 marks
    padding). K is ``k``, or the bucket (from 4) of the most positions a row has, so few shapes compile."""
    hits = [np.flatnonzero(np.asarray(m)[1:] > 0) + 1 for m in mask]
    most = max((len(h) for h in hits), default=0)
    k = k or bucket(most, 4)
    if most > k:
        raise ValueError(f"a row has {most} loss positions, more than the {k} asked for")
    out = np.zeros((len(hits), k), np.int32)
    for i, h in enumerate(hits):
        out[i, :len(h)] = h
    return out


class SummedResponseLogProbs(nn.Cell):
    """(ids [B, W], positions [B, K]) -> [B]: each row's summed log-probs of the tokens at ``positions`` (from
    :func:`loss_positions`; 0 = none), each given the tokens before it: what SFT's loss and DPO's log-ratios
    (dpo_training.py) are made of.

    Only the hidden states that predict a scored token go through the LM head (TRL's chunked NLL does the same):
    for a prompt of 50 tokens and an answer of 4, the vocabulary-sized logits of 4 positions per row, not 64, in
    the forward and the backward. Rows are right-padded, so a causal model's real tokens never attend to the
    padding: no attention mask needed. The vocabulary may be split over tensor-parallel ranks
    (LogProbsAndEntropy)."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.stats = LogProbsAndEntropy(lm.tp)

    def construct(self, ids, positions):
        return self.summed(ids, positions, ops.ones_like(ids))

    def summed(self, ids, positions, segments):
        """``segments`` as the backbone's attention mask: all ones for plain rows; each token's segment for packed
        rows (models/decoder.py, segment_attention)."""
        b, w = ids.shape
        k = positions.shape[1]
        h = self.lm.model(ids, segments)
        # the hidden state at j - 1 predicts token j; rows flattened so one Gather (backward: one scatter-add) serves
        row_start = ops.arange(0, b * w, w, dtype=ms.int32).reshape(b, 1)
        source = ops.maximum(positions - 1, 0) + row_start
        picked = ops.gather(h.reshape(b * w, h.shape[-1]), source.reshape(b * k), 0).reshape(b, k, h.shape[-1])
        log_prob, _ = self.stats(self.lm.head(picked), ops.gather_elements(ids, 1, positions))
        return (log_prob.astype(ms.float32) * (positions > 0).astype(ms.float32)).sum(-1)


class NextTokenNLL(nn.Cell):
    """(sft_ids [B, W], sft_positions [B, K], denominator) -> the summed negative log-likelihood of the tokens at
    ``sft_positions`` (:func:`loss_positions` of the loss mask) given the tokens before them, over the denominator."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.logps = SummedResponseLogProbs(lm)

    def construct(self, sft_ids, sft_positions, denom):
        return -self.logps(sft_ids, sft_positions).sum() / denom


class SFTLossCell(nn.Cell):
    """(sft_ids, sft_positions, denominator) -> (nll, nll): `mindrl sft`'s loss for the Updater (trainer/updater.py),
    the masked next-token NLL over the denominator (the global batch's masked token count, so micro-batches and
    data-parallel replicas add up to the batch's token mean)."""

    METRICS = (("loss", "sum"),)

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.nll = NextTokenNLL(lm)

    def construct(self, sft_ids, sft_positions, denom):
        nll = self.nll(sft_ids, sft_positions, denom)
        return nll, ops.stop_gradient(nll)


class PackedSFTLossCell(nn.Cell):
    """(sft_ids, sft_positions, sft_segments, denominator) -> (nll, nll): SFTLossCell on packed rows (`mindrl sft` with
    data.packing): several rows share a sequence, told apart by ``sft_segments`` (1, 2, ... ; 0 = padding), each
    attending only to itself with positions from 0, so the loss and gradient are the unpacked rows'. ``nll``
    scores plain rows (held-out eval), as SFTLossCell's does."""

    METRICS = SFTLossCell.METRICS

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        lm.model.segment_attention = True  # plain rows (all ones) are one segment each: the same as before
        self.nll = NextTokenNLL(lm)

    def construct(self, sft_ids, sft_positions, sft_segments, denom):
        nll = -self.nll.logps.summed(sft_ids, sft_positions, sft_segments).sum() / denom
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


class SFTStep(RecomputingCell):
    """One supervised AdamW step on a batch: the token-mean NLL (the batch's masked token count as denominator)."""

    def __init__(self, lm, lr_weight_decay=0.0, clip_grad=1.0):
        super().__init__(auto_prefix=False)
        self.loss = NextTokenNLL(lm)
        self.params = ms.ParameterTuple(lm.trainable_params())
        self.grad_fn = ms.value_and_grad(self.loss, None, self.params)
        self.opt = AdamW(self.params, weight_decay=lr_weight_decay)
        self.clip = float(clip_grad)
        self.hyper_map = ops.HyperMap()

    def construct(self, sft_ids, sft_positions, lr):
        denom = ops.clamp((sft_positions > 0).astype(ms.float32).sum(), min=1.0)
        loss, grads = self.grad_fn(sft_ids, sft_positions, denom)
        scale = ops.ones((), ms.float32)
        if self.clip > 0:  # clip_by_global_norm's factor, applied inside the optimizer's per-tensor step
            norm = ops.sqrt(ops.addn(self.hyper_map(_square_sum, grads)))
            scale = self.clip / ops.maximum(norm, self.clip)
        return ops.depend(loss, self.opt(grads, lr, scale))


def run_sft_step(step_cell, ids, loss_mask, lr):
    return float(step_cell(Tensor(ids, ms.int32), Tensor(loss_positions(loss_mask)), Tensor(np.float32(lr))).asnumpy())
