"""Supervised fine-tuning step (next-token cross-entropy on masked positions), used for warm-up."""
from __future__ import annotations

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.models.scoring import TokenStats
from mindrl.trainer.optim import AdamW


class SFTLoss(nn.Cell):
    """Mean negative log-likelihood of tokens where ``loss_mask`` is 1 (mask aligned with input_ids)."""

    def __init__(self, lm):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.stats = TokenStats()

    def construct(self, input_ids, attention_mask, loss_mask):
        logits = self.lm(input_ids, attention_mask)[:, :-1]
        logp, _ = self.stats(logits, input_ids[:, 1:])
        mask = loss_mask[:, 1:].astype(ms.float32)
        return -(logp * mask).sum() / ops.clamp(mask.sum(), min=1.0)


class SFTStep(nn.Cell):
    def __init__(self, lm, lr_weight_decay=0.0, clip_grad=1.0):
        super().__init__(auto_prefix=False)
        self.loss = SFTLoss(lm)
        self.params = ms.ParameterTuple(lm.trainable_params())
        self.grad_fn = ms.value_and_grad(self.loss, None, self.params)
        self.opt = AdamW(self.params, weight_decay=lr_weight_decay)
        self.clip = float(clip_grad)

    def construct(self, input_ids, attention_mask, loss_mask, lr):
        loss, grads = self.grad_fn(input_ids, attention_mask, loss_mask)
        if self.clip > 0:
            grads = ops.clip_by_global_norm(grads, self.clip)
        return ops.depend(loss, self.opt(grads, lr))


def run_sft_step(step_cell, ids, attn, loss_mask, lr):
    return float(step_cell(Tensor(ids, ms.int32), Tensor(attn, ms.int32), Tensor(loss_mask, ms.int32),
                           Tensor(np.float32(lr))).asnumpy())
