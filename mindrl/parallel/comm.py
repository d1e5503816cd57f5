"""Collectives that work on MindSpore's CPU backend (and Ascend/GPU), with Megatron's gradients.

Measured on CPU: AllReduce(SUM) works on any group with a gradient; AllGather/Broadcast only on the
world group; AllReduce(MAX), ReduceScatter and send/recv not at all. So every sub-group "gather" here is
an AllReduce of a zero-padded buffer, and the tensor-parallel regions carry custom bprops:

- ``ReduceFromTP``: forward all-reduce, backward identity (the output is replicated, each rank's
  partial input receives the same gradient once).
- ``CopyToTP``: forward identity, backward all-reduce (a replicated input used by every rank's shard
  collects the sum of their gradients).
"""
from __future__ import annotations

from mindspore import nn, ops


class ReduceFromTP(nn.Cell):
    def __init__(self, group):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, group)

    def construct(self, x):
        return self.all_reduce(x)

    def bprop(self, x, out, dout):
        return (dout,)


class CopyToTP(nn.Cell):
    def __init__(self, group):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, group)

    def construct(self, x):
        return x

    def bprop(self, x, out, dout):
        return (self.all_reduce(dout),)


class GatherLastAxis(nn.Cell):
    """Concatenate the ranks' shards along the last axis (no gradient): pad into place, all-reduce."""

    def __init__(self, group, rank, size):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, group)
        self.rank, self.size = rank, size

    def construct(self, x):
        n = x.shape[-1]
        return self.all_reduce(ops.pad(ops.stop_gradient(x), (self.rank * n, (self.size - 1 - self.rank) * n)))


class GatherAxis(nn.Cell):
    """Concatenate shards along ``axis`` over a group (used by reshard and checkpoint export)."""

    def __init__(self, group, rank, size, axis, ndim):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, group)
        pads = [0] * (2 * ndim)
        # ops.pad lists (left, right) pairs from the last axis backwards
        k = ndim - 1 - axis
        self.pads = tuple(pads)
        self.k = k
        self.rank, self.size = rank, size

    def construct(self, x):
        n = x.shape[len(x.shape) - 1 - self.k]
        pads = list(self.pads)
        pads[2 * self.k] = self.rank * n
        pads[2 * self.k + 1] = (self.size - 1 - self.rank) * n
        return self.all_reduce(ops.pad(x, tuple(pads)))


class AllReduceSum(nn.Cell):
    def __init__(self, group):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, group)

    def construct(self, x):
        return self.all_reduce(x)


class WorldAllGather(nn.Cell):
    """Stack every rank's tensor on a new leading axis (AllGather works on the world group on CPU)."""

    def __init__(self):
        super().__init__()
        self.gather = ops.AllGather()

    def construct(self, x):
        return self.gather(ops.expand_dims(x, 0))
