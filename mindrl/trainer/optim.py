"""AdamW (PyTorch semantics, bias-corrected) and the learning-rate schedule.

Why our own AdamW: ``nn.AdamWeightDecay`` has no bias correction, which changes the first updates of
an RL run (where lr is tiny and warm-up matters). Its state is plain Parameters named ``adam_m.<p>``,
``adam_v.<p>`` and ``global_step``, so checkpoints list it explicitly.
"""
from __future__ import annotations

import math

import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops


class AdamW(nn.Cell):
    def __init__(self, params, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, step_name="global_step"):
        super().__init__()
        self.params = ParameterTuple(params)
        self.exp_avg = self.params.clone(prefix="adam_m", init="zeros")
        self.exp_avg_sq = self.params.clone(prefix="adam_v", init="zeros")
        # a second optimizer in the process (the critic's) names its step counter apart
        self.global_step = Parameter(Tensor(0.0, ms.float32), name=step_name, requires_grad=False)
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)
        # decay matrices only: biases and norm scales are not shrunk (Megatron / verl convention)
        self.decay = tuple(float(weight_decay) if len(p.shape) >= 2 else 0.0 for p in self.params)

    def state_parameters(self):
        return list(self.exp_avg) + list(self.exp_avg_sq) + [self.global_step]

    def construct(self, grads, lr):
        step = self.global_step + 1.0
        ops.assign(self.global_step, step)
        bc1 = 1.0 - ops.pow(self.beta1, step)
        bc2 = 1.0 - ops.pow(self.beta2, step)
        out = step
        for i in range(len(self.params)):
            p, m, v, g = self.params[i], self.exp_avg[i], self.exp_avg_sq[i], grads[i]
            m_new = self.beta1 * m + (1.0 - self.beta1) * g
            v_new = self.beta2 * v + (1.0 - self.beta2) * g * g
            update = (m_new / bc1) / (ops.sqrt(v_new / bc2) + self.eps)
            p_new = p * (1.0 - lr * self.decay[i]) - lr * update
            out = ops.depend(out, ops.assign(m, m_new))
            out = ops.depend(out, ops.assign(v, v_new))
            out = ops.depend(out, ops.assign(p, p_new))
        return out


def lr_at(step: int, *, lr: float, min_lr: float, warmup: int, total: int, style: str) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warm-up, then constant/cosine/linear decay."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if style == "constant":
        return lr
    span = max(1, total - warmup)
    frac = min(1.0, max(0.0, (step - warmup) / span))
    if style == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
    if style == "linear":
        return lr + (min_lr - lr) * frac
    raise ValueError(f"lr_decay_style {style!r} is not one of constant, cosine, linear")


def zeros_like_params(params, prefix):
    return ParameterTuple(params).clone(prefix=prefix, init="zeros")
