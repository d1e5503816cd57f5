"""Linear and embedding layers that a tensor-parallel layout can shard (Megatron style).

With ``tp.size == 1`` these are plain layers and build no collective at all (a graph with a
collective but no ``init()`` segfaults on CPU). With ``tp.size > 1``:
- The layers hold weights; a parameterless :class:`Projection` computes with them (one instance can serve many
  layers' weights).
- ColumnLinear holds output features [rank*out/tp, (rank+1)*out/tp); its input enters
  through ``tp.copy_region()`` (placed once per block by the model), whose backward sums the ranks' gradients.
- RowLinear holds input features [rank*in/tp, ...) and sums partial outputs with ``tp.reduce_region()``
  (all-reduce forward, identity backward). The bias is added once, after the sum.
- VocabEmbedding holds a vocab slice; ids outside it look up row 0, are zeroed, then AllReduce sums.

Parameter names follow Hugging Face (``weight``, ``bias``), so weight mapping is a slice (and, for linear
weights stored [in, out], a transpose), not a rename.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from mindrl.models.broadcast import expand
from mindrl.parallel.comm import CopyToTP, ReduceFromTP


@dataclass(frozen=True)
class TPContext:
    """Where this process sits in a tensor-parallel group."""
    size: int = 1
    rank: int = 0
    group: Optional[str] = None  # communication group name; None on a single process

    def reduce_region(self):
        """Forward all-reduce / backward identity over the group; None at tp=1 (no collective built)."""
        if self.size == 1:
            return None
        return ReduceFromTP(self.group)

    def copy_region(self):
        """Forward identity / backward all-reduce; None at tp=1."""
        if self.size == 1:
            return None
        return CopyToTP(self.group)


SINGLE = TPContext()


_SKIP_INIT = [False]


class skip_init:
    """Within this context layers allocate zeros instead of drawing random weights (they are about
    to be overwritten by a checkpoint; drawing 7B normals would take minutes)."""

    def __enter__(self):
        self._prev = _SKIP_INIT[0]
        _SKIP_INIT[0] = True

    def __exit__(self, *exc):
        _SKIP_INIT[0] = self._prev


def _init_normal(shape, std, dtype, seed):
    if _SKIP_INIT[0]:
        return Tensor(np.zeros(shape, np.float32), dtype=dtype)
    rng = np.random.default_rng(seed)
    return Tensor(rng.normal(0.0, std, size=shape).astype(np.float32), dtype=dtype)


def _param_dtype(name: str):
    return {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}[name]


class Projection(nn.Cell):
    """What a linear layer computes, its weights given as inputs: y = x @ W (+ s * x @ A @ B), summed over the
    tensor-parallel group for a row-parallel layer, (+ b). It holds no weight, so one instance computes a projection
    for every decoder layer of a graph (models/decoder.py's layer blocks) and MindSpore compiles it once.

    ``weights``: (W [in, out], bias or None, LoRA A [in, r] or None, LoRA B [r, out] or None, LoRA scale), as
    ``_Linear.weights()`` gives them. Computed in ``compute_dtype``; adapters are float32 whatever the base's dtype
    (as PEFT keeps them) and cast like the base."""

    def __init__(self, compute_dtype="float32", tp: TPContext = SINGLE, row: bool = False):
        super().__init__()
        self.cdt = _param_dtype(compute_dtype)
        self.matmul = ops.MatMul()
        self.reduce = tp.reduce_region() if row else None

    def construct(self, x, weights):
        w, bias, a, b, scale = weights
        y = self.product(x.reshape(-1, x.shape[-1]), w, a, b, scale)
        if self.reduce is not None:
            y = self.reduce(y)
        return self.add_bias(y, bias).reshape(x.shape[:-1] + (y.shape[-1],))

    def product(self, x2, w, a, b, scale):
        """x2 [N, in] -> x2 @ W (+ scale * x2 @ A @ B), [N, out], before any all-reduce and bias."""
        if w.dtype != self.cdt:
            w = ops.cast(w, self.cdt)
        if x2.dtype != self.cdt:
            x2 = ops.cast(x2, self.cdt)
        y = self.matmul(x2, w)
        if a is not None:
            y = y + self._lora(x2, a, b, scale)
        return y

    def _lora(self, x2, a, b, scale):
        if a.dtype != self.cdt:
            a, b = ops.cast(a, self.cdt), ops.cast(b, self.cdt)
        return self.matmul(self.matmul(x2, a), b) * scale

    def add_bias(self, y, bias):
        """On the 2-D product, broadcast explicitly when y is large (models/broadcast.py expand(): a product with
        ones, whose gradient is one more product, a sum over rows; over [B, T] the sum was 7x slower on CPU, 0.76 vs
        5.6 ms at 16 x 192 x 512); decode's few rows add it implicitly, one kernel fewer per projection."""
        if bias is None:
            return y
        if bias.dtype != self.cdt:
            bias = ops.cast(bias, self.cdt)
        return y + expand(bias, y)


class _Linear(nn.Cell):
    """The weights of y = x @ W (+ b), computed in ``compute_dtype`` by a :class:`Projection`.

    W is stored [in, out], the transpose of Hugging Face's [out, in]: on CPU a MatMul with
    ``transpose_b`` ran 2.5-3x slower than a plain one at decode shapes (16x512 @ 512x1408: 1.39 vs
    0.54 ms). The HF orientation is restored at every boundary (see ``parallel/layout.py``).
    """

    transposed = True  # stored weight = HF weight transposed

    def __init__(self, in_features, out_features, bias, compute_dtype, param_dtype, std, seed, tp=SINGLE, row=False):
        super().__init__()
        pdt = _param_dtype(param_dtype)
        self.weight = Parameter(_init_normal((in_features, out_features), std, pdt, seed), name="weight")
        self.bias = Parameter(Tensor(np.zeros(out_features, np.float32), pdt), name="bias") if bias else None
        self.op = Projection(compute_dtype, tp, row)
        self.lora_A = self.lora_B = None  # low-rank adapter factors (models/lora.py attaches them)
        self.lora_scale = 0.0
        self.lora_copy = None

    def attach_lora(self, a, b, scale: float, copy) -> None:
        """Add ``scale * x @ A @ B`` to this projection: ``a`` [in(/tp), r] and ``b`` [r, out(/tp)] are
        :class:`LoraFactor` cells split like the base weight; ``copy`` (CopyToTP, or None at tp=1) sums the
        gradient of the factor every tensor-parallel rank holds whole."""
        self.lora_A, self.lora_B, self.lora_scale, self.lora_copy = a, b, float(scale), copy

    def weights(self):
        """(W, bias, LoRA A, LoRA B, LoRA scale), None for what this projection has not: Projection's input.

        The factor every tensor-parallel rank holds whole passes this projection's own copy region here, not one
        in a Projection shared by many layers: one CopyToTP applied to several weights gave some of them another's
        values (tests/test_parallel.py)."""
        if self.lora_A is None:
            return self.weight, self.bias, None, None, self.lora_scale
        a, b = self.lora_A.weight, self.lora_B.weight
        if self.lora_copy is not None:
            if self.lora_A.split is None:
                a = self.lora_copy(a)
            else:
                b = self.lora_copy(b)
        return self.weight, self.bias, a, b, self.lora_scale

    def construct(self, x):
        return self.op(x, self.weights())

    def _project(self, x):
        """x [..., in] -> x @ W (+ LoRA), [N, out] (the leading axes flattened; ``_shaped`` restores them)."""
        w, _, a, b, scale = self.weights()
        return self.op.product(x.reshape(-1, x.shape[-1]), w, a, b, scale)

    @staticmethod
    def _shaped(y, x):
        return y.reshape(x.shape[:-1] + (y.shape[-1],))


class LoraFactor(nn.Cell):
    """One factor of a low-rank adapter: ``weight`` stored [in, out] like every _Linear here (PEFT's
    ``lora_A.weight`` [r, in] and ``lora_B.weight`` [out, r] transposed). ``split``: the stored axis a
    tensor-parallel rank holds a slice of (None: whole on every rank)."""

    transposed = True

    def __init__(self, value: np.ndarray, split, tp: TPContext):
        super().__init__()
        self.weight = Parameter(Tensor(np.ascontiguousarray(value, np.float32)), name="weight")
        self.split, self.tp = split, tp


class ColumnLinear(_Linear):
    """Output features split across tp ranks; the output stays sharded."""

    def __init__(self, in_features, out_features, bias=False, tp: TPContext = SINGLE,
                 compute_dtype="float32", param_dtype="float32", std=0.02, seed=0):
        if out_features % tp.size:
            raise ValueError(f"out_features={out_features} not divisible by tensor parallel size {tp.size}")
        super().__init__(in_features, out_features // tp.size, bias, compute_dtype, param_dtype, std, seed, tp)
        self.tp = tp


class RowLinear(_Linear):
    """Input features split across tp ranks; partial sums are all-reduced."""

    def __init__(self, in_features, out_features, bias=False, tp: TPContext = SINGLE,
                 compute_dtype="float32", param_dtype="float32", std=0.02, seed=0):
        if in_features % tp.size:
            raise ValueError(f"in_features={in_features} not divisible by tensor parallel size {tp.size}")
        super().__init__(in_features // tp.size, out_features, bias, compute_dtype, param_dtype, std, seed, tp,
                         row=True)
        self.tp = tp


class VocabEmbedding(nn.Cell):
    """Token embedding whose vocabulary rows may be split across tp ranks."""

    def __init__(self, vocab_size, hidden_size, tp: TPContext = SINGLE, param_dtype="float32", std=0.02, seed=0):
        super().__init__()
        if vocab_size % tp.size:
            raise ValueError(f"vocab_size={vocab_size} not divisible by tensor parallel size {tp.size}")
        self.local_vocab = vocab_size // tp.size
        self.start = tp.rank * self.local_vocab
        self.weight = Parameter(_init_normal((self.local_vocab, hidden_size), std, _param_dtype(param_dtype), seed),
                                name="weight")
        self.tp = tp
        self.reduce = tp.reduce_region()
        self.gather = ops.Gather()

    def construct(self, input_ids):
        if self.reduce is None:
            return self.gather(self.weight, input_ids, 0)
        local = input_ids - self.start
        inside = ops.logical_and(local >= 0, local < self.local_vocab)
        local = ops.select(inside, local, ops.zeros_like(local))
        out = self.gather(self.weight, local, 0)
        out = out * ops.broadcast_to(ops.expand_dims(inside, -1).astype(out.dtype), out.shape)  # explicit: see
        # models/broadcast.py
        return self.reduce(out)
