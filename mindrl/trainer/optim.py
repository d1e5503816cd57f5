"""AdamW (PyTorch semantics, bias-corrected); the learning-rate schedule is the run plan's (config/plan.py: OptimSpec).

Why our own AdamW: ``nn.AdamWeightDecay`` has no bias correction, which changes the first updates of
an RL run (where lr is tiny and warm-up matters). Its state is plain Parameters named ``adam_m.<p>``,
``adam_v.<p>`` and ``global_step``, so checkpoints list it explicitly.
"""
from __future__ import annotations

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
        self.hyper_map = ops.HyperMap()
        self.adam = ops.Adam()  # ApplyAdam; on CPU 6x faster than the AdamWeightDecay kernel (docs/performance.md)

    def state_parameters(self):
        return list(self.exp_avg) + list(self.exp_avg_sq) + [self.global_step]

    def construct(self, grads, lr, scale):
        """``scale``: a float32 scalar every gradient is multiplied by first (a global-norm clip's factor; 1.0 for
        none). Folded into each tensor's step, so that no scaled copy of the whole gradient is ever held (a model's
        size for this graph alone; a training process's peak did not move: docs/performance.md#real-model)."""
        # PyTorch's step  p = p*(1 - lr*wd) - lr * (m/bc1) / (sqrt(v/bc2) + eps)  is the decay (matrices only) and
        # then the Adam kernel's  p = p - lr' * m / (sqrt(v) + eps')  with  lr' = lr*sqrt(bc2)/bc1,
        # eps' = eps*sqrt(bc2), the kernel's own bias correction off (beta powers 0): one in-place kernel per tensor,
        # no temporaries the size of the model
        step = self.global_step + 1.0
        ops.assign(self.global_step, step)
        bc1 = 1.0 - ops.pow(self.beta1, step)
        root_bc2 = ops.sqrt(1.0 - ops.pow(self.beta2, step))
        done = self.hyper_map(ops.partial(_adamw_update, self.adam, self.beta1, self.beta2, lr * root_bc2 / bc1,
                                          self.eps * root_bc2, lr, ops.zeros((), ms.float32), scale),
                              self.decay, self.params, self.exp_avg, self.exp_avg_sq, grads)
        return ops.depend(step, done)


# One tensor's step, mapped over all of them by HyperMap: the graph's depth stays the same however many tensors there
# are (a Python loop chaining ops.depend nests one level per tensor, and MindSpore refuses graphs nested deeper than
# 1000 calls: a 24-layer model's 290 tensors already are).
_adamw_update = ops.MultitypeFuncGraph("adamw_update")


@_adamw_update.register("Function", "Number", "Number", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Number",
                        "Tensor", "Tensor", "Tensor", "Tensor")
def _adamw_one(adam, beta1, beta2, lr, eps, plain_lr, zero, scale, decay, p, m, v, g):
    g = g * scale  # one tensor's scaled copy at a time, never the whole gradient's
    if decay > 0:  # decoupled weight decay first, from the weights before the step (PyTorch's order)
        g = ops.depend(g, ops.assign(p, p * (1.0 - plain_lr * decay)))
    adam(p, m, v, zero, zero, lr, beta1, beta2, eps, g)
    return True  # not the kernel's outputs: returned, they would be copied out of the graph (3x the model)
