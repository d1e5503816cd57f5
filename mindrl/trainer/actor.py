"""The actor update as graphs: per micro-batch loss + gradient accumulation, then clip + AdamW.

Micro-batches of one mini-batch all receive the mini-batch's loss denominator, so their summed
gradients equal the mini-batch gradient exactly (see algorithms/denominators.py).
"""
from __future__ import annotations

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.algorithms.losses import ActorLoss
from mindrl.models.scoring import LogProbsAndEntropy
from mindrl.trainer.optim import AdamW, zeros_like_params


class ResponseLogProbs(nn.Cell):
    """(input_ids [B, P+R], attention_mask, R) -> log p and entropy of the R response tokens [B, R].

    Only the response positions go through the LM head: the prompt's logits are never formed.
    """

    def __init__(self, lm, temperature: float):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.inv_t = 1.0 / float(temperature)
        self.stats = LogProbsAndEntropy(lm.tp)

    def construct(self, input_ids, attention_mask, response_mask):
        r = response_mask.shape[1]
        p = input_ids.shape[1] - r
        h = self.lm.model(input_ids, attention_mask)[:, p - 1:p - 1 + r]
        logits = self.lm.head(h)
        if self.inv_t != 1.0:
            logits = logits * self.inv_t
        return self.stats(logits, input_ids[:, p:])


class ActorLossCell(nn.Cell):
    def __init__(self, lm, actor_loss: ActorLoss, temperature: float, entropy_in_loss: bool):
        super().__init__(auto_prefix=False)
        self.scorer = ResponseLogProbs(lm, temperature)
        self.loss = actor_loss
        self.entropy_in_loss = entropy_in_loss

    def construct(self, input_ids, attention_mask, response_mask, old_log_prob, advantages, ref_log_prob, denom):
        log_prob, entropy = self.scorer(input_ids, attention_mask, response_mask)
        if not self.entropy_in_loss:
            entropy = ops.stop_gradient(entropy)
        loss, pg, clipfrac, ppo_kl, kl, ent = self.loss(log_prob, old_log_prob, advantages, response_mask,
                                                         ref_log_prob, entropy, denom)
        return loss, pg, clipfrac, ppo_kl, kl, ent


class AccumulateGrad(nn.Cell):
    """One micro-batch: forward, backward, add the gradients into ``accum``."""

    def __init__(self, loss_cell, params):
        super().__init__(auto_prefix=False)
        self.params = ms.ParameterTuple(params)
        self.grad_fn = ms.value_and_grad(loss_cell, None, self.params, has_aux=True)
        self.accum = zeros_like_params(self.params, "accum")

    def construct(self, *inputs):
        outs, grads = self.grad_fn(*inputs)
        done = outs[0]
        for i in range(len(self.accum)):
            done = ops.depend(done, ops.assign_add(self.accum[i], grads[i]))
        return ops.depend(outs, done)


class ApplyGrad(nn.Cell):
    """Global-norm clip of the accumulated gradient, AdamW step, reset. Returns the pre-clip norm.

    ``grad_reduce`` (data parallel) all-reduces the accumulated gradient first.
    """

    def __init__(self, accum, optimizer: AdamW, clip_grad: float, grad_reduce=None):
        super().__init__(auto_prefix=False)
        self.accum = accum
        self.opt = optimizer
        self.clip = float(clip_grad)
        self.grad_reduce = grad_reduce

    def construct(self, lr):
        grads = ()
        for g in self.accum:
            grads = grads + ((g if self.grad_reduce is None else self.grad_reduce(g)),)
        sq = ops.zeros((), ms.float32)
        for g in grads:
            sq = sq + (g * g).sum()
        norm = ops.sqrt(sq)
        if self.clip > 0:
            scale = self.clip / ops.maximum(norm, self.clip)
            grads = tuple(g * scale for g in grads)
        done = self.opt(grads, lr)
        for g in self.accum:
            done = ops.depend(done, ops.assign(g, ops.zeros_like(g)))
        return ops.depend(norm, done)


class ActorUpdater:
    """Builds the graphs once; ``micro_step`` and ``apply`` run them from numpy inputs."""

    def __init__(self, lm, rl, actor, temperature: float, grad_reduce=None, max_tokens=None):
        loss = ActorLoss(clip_ratio_low=rl.clip_ratio_low, clip_ratio_high=rl.clip_ratio_high,
                         clip_ratio_c=rl.clip_ratio_c, loss_agg_mode=rl.loss_agg_mode,
                         use_kl_in_loss=rl.use_kl_in_loss and rl.kl_coef > 0, kl_penalty=rl.kl_penalty,
                         kl_coef=rl.kl_coef, entropy_coeff=rl.entropy_coeff, norm_len=max_tokens)
        params = [p for p in lm.trainable_params()]
        self.params = params
        self.loss_cell = ActorLossCell(lm, loss, temperature, rl.entropy_coeff > 0)
        self.accumulate = AccumulateGrad(self.loss_cell, params)
        self.optimizer = AdamW(params, actor.adam_beta1, actor.adam_beta2, actor.adam_eps, actor.weight_decay)
        self.apply_cell = ApplyGrad(self.accumulate.accum, self.optimizer, actor.clip_grad, grad_reduce)

    def micro_step(self, input_ids, attention_mask, response_mask, old_log_prob, advantages, ref_log_prob, denom):
        outs = self.accumulate(Tensor(input_ids, ms.int32), Tensor(attention_mask, ms.int32),
                               Tensor(response_mask, ms.float32), Tensor(old_log_prob, ms.float32),
                               Tensor(advantages, ms.float32), Tensor(ref_log_prob, ms.float32),
                               Tensor(np.float32(denom)))
        return [float(o.asnumpy()) for o in outs]

    def apply(self, lr: float) -> float:
        return float(self.apply_cell(Tensor(np.float32(lr))).asnumpy())

    def optimizer_state(self):
        return {p.name: p.asnumpy() for p in self.optimizer.state_parameters()}

    def load_optimizer_state(self, state: dict, source: str):
        from mindrl.models.safetensors_io import CheckpointError
        for p in self.optimizer.state_parameters():
            if p.name not in state:
                raise CheckpointError(f"{source}: optimizer state lacks {p.name!r}")
            arr = state[p.name]
            if arr.size == 1 and p.size == 1:
                arr = arr.reshape(p.shape)  # 0-d step counter: saved as [1] by some writers
            if tuple(arr.shape) != tuple(p.shape):
                raise CheckpointError(f"{source}: optimizer tensor {p.name!r} has shape {list(arr.shape)}, "
                                      f"expected {list(p.shape)}")
            p.set_data(Tensor(arr.astype(np.float32)))
