"""Broadcasts and row reductions that run fast and lean on MindSpore's CPU backend (decoder, scoring, layers).

Broadcasts. On MindSpore 2.10's CPU backend an elementwise operation whose operands differ in shape (x * w with
w [H], scores + mask) holds about four extra buffers of its output's size until the whole graph has run, forward
graphs included (measured: six x * r with r [N, 1] on a 134 MB x took 3.3 GB, and 0.4 GB after an explicit
broadcast_to; scalars are free), and autodiff through it keeps more. So every operation on activations gets
operands of equal shapes (expand()), and the tables every layer shares are expanded once per forward. The
8-layer bench model's update at 4 x 1024 tokens peaked at 16.4 GB before these rules. Two operations hold their
output past its last use even at equal shapes, a division (by a tensor or by a constant) and a transpose
(bench/kernel_memory.py): activation-sized tensors are multiplied by reciprocals instead of divided.

Custom bprops call ``expand_in_bprop``, a twin of ``expand``: MindSpore 2.10's graph mode parses a Python function
once and shares that graph between the forward (construct) and the custom bprops. expand's branches on shapes are
constants folded at compile time, and a branch that only a bprop takes comes out as an empty graph: compiling the
update failed with "The func graph is empty ... expand" when the attention scores were big enough for the product
with ones (MaskedSoftmax's backward) but no forward operand was (hidden 64, 4 heads, 32 rows of 24 tokens). A twin
is a function object of its own, so it gets a graph of its own. Shared helpers (RMSNorm's normalisation, TokenStats'
statistics) may call ``expand`` from a bprop: their forward makes the very same calls.
"""
import types

from mindspore import ops

EXPAND_MIN = 1 << 16  # elements; below it an implicit broadcast's extra buffers are small, and a kernel is saved


def expand(small, like):
    """``small`` broadcast to ``like``'s shape, as an operation of its own (see Broadcasts), when ``like`` is big
    enough for that to matter; decode's few rows broadcast implicitly, where every kernel counts."""
    if small.shape == like.shape or like.size < EXPAND_MIN:
        return small
    # The two common cases as a product with ones, exact (one term per output) and 2.5-4x faster than CPU
    # BroadcastTo, which ran at about 2 GB/s (a row statistic [.., 1] along the last axis; a weight [H] over rows).
    last = like.shape[-1]
    if small.shape == like.shape[:-1] + (1,):
        return ops.matmul(small.reshape(-1, 1), ops.ones((1, last), small.dtype)).reshape(like.shape)
    if small.shape == (last,) or small.shape == (1,) * (len(like.shape) - 1) + (last,):
        return ops.matmul(ops.ones((like.size // last, 1), small.dtype), small.reshape(1, last)).reshape(like.shape)
    return ops.broadcast_to(small, like.shape)


# the same code under another function object (see the module's docstring)
expand_in_bprop = types.FunctionType(expand.__code__, expand.__globals__, "expand_in_bprop", expand.__defaults__,
                                     expand.__closure__)


def row_sum(x):
    """Sum over the last axis, keeping it (size 1), as a product with a ones vector. On MindSpore's CPU backend
    ReduceSum/ReduceMean over the last axis ran 5-10x slower than that product (a [3072, 512] row mean: 8.2 vs
    0.96 ms; [2048, 8192]: 52 vs 12 ms), and an RMSNorm takes one per token per norm."""
    n = x.shape[-1]
    out = ops.matmul(x.reshape(-1, n), ops.ones((n, 1), x.dtype))
    return out.reshape(x.shape[:-1] + (1,))


def row_mean(x):
    """Mean over the last axis, keeping it (size 1): row_sum's product with the constant 1/n instead of ones, so
    the division costs no kernel of its own (exact when n is a power of two, equal within rounding otherwise)."""
    n = x.shape[-1]
    out = ops.matmul(x.reshape(-1, n), ops.ones((n, 1), x.dtype) * (1.0 / n))  # a constant: folded at compile
    return out.reshape(x.shape[:-1] + (1,))
