"""Train layout -> infer layout, in place, every step: no file, no new storage for the infer weights.

The plan is computed once from the two layouts and replayed as one compiled graph. Per parameter it
moves the fewest bytes the platform allows:
- same object (equal layouts: the policy rolls out with its train network, adapters included): nothing at all;
- the train rank already holds what the infer rank needs (train tp=1, or the same shard): a local
  slice and copy, no communication;
- otherwise: gather the train shards over the train tp group (padded all-reduce), then slice.
Each infer Parameter is written with ``ops.assign``, which keeps its storage.
"""
from __future__ import annotations

from typing import Dict, Optional

import mindspore as ms
from mindspore import nn, ops

from mindrl.models.lora import is_lora_name
from mindrl.parallel.comm import GatherAxis
from mindrl.parallel.layout import split_axes
from mindrl.parallel.state import _STATE


def _slice(x, axis, size, rank):
    if axis is None or size == 1:
        return x
    n = x.shape[axis] // size
    begin = [0] * len(x.shape)
    end = list(x.shape)
    begin[axis] = rank * n
    end[axis] = (rank + 1) * n
    return ops.strided_slice(x, tuple(begin), tuple(end), (1,) * len(x.shape))


class _FusedGather(nn.Cell):
    """Gather many sharded tensors with ONE all-reduce: each rank writes its flattened shards at its offset in
    a zero buffer; after the sum every rank rebuilds the full tensors. One collective instead of one per
    parameter matters on CPU, where each collective has a fixed cost of milliseconds."""

    def __init__(self, group, rank, size, shapes, axes, world_group=False):
        super().__init__(auto_prefix=False)
        # AllGather (half the bytes of a padded all-reduce) works on CPU on the world group only
        self.use_gather = world_group
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM, group)
        self.all_gather = ops.AllGather(group) if world_group else None
        self.rank, self.size = rank, size
        self.shapes, self.axes = tuple(tuple(x) for x in shapes), tuple(axes)
        self.numels = tuple(int(_prod(x)) for x in shapes)

    def construct(self, xs):
        if self.use_gather:  # rank-major: [rank 0's flat shards | rank 1's | ...]
            flat = self.all_gather(ops.concat(tuple(x.reshape(-1) for x in xs), 0))
            total = flat.shape[0] // self.size
        else:  # parameter-major: [param 0 of every rank | param 1 of every rank | ...]
            pieces = ()
            for i in range(len(xs)):
                n = self.numels[i]
                pieces = pieces + (ops.pad(xs[i].reshape(-1), (self.rank * n, (self.size - 1 - self.rank) * n)),)
            flat = self.all_reduce(ops.concat(pieces, 0))
            total = 0
        out = ()
        offset = 0
        for i in range(len(xs)):
            n, shape, axis = self.numels[i], self.shapes[i], self.axes[i]
            if self.use_gather:
                stacked = flat.reshape(self.size, total)[:, offset:offset + n].reshape((self.size,) + shape)
                offset = offset + n
            else:
                stacked = flat[offset:offset + n * self.size].reshape((self.size,) + shape)
                offset = offset + n * self.size
            # [tp, d0, .., da, ..] -> [d0, .., tp, da, ..] -> merge (tp, da): shards concatenated along axis a
            perm = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, len(shape) + 1))
            full_shape = shape[:axis] + (shape[axis] * self.size,) + shape[axis + 1:]
            out = out + (stacked.transpose(perm).reshape(full_shape),)
        return out


def _prod(shape):
    out = 1
    for d in shape:
        out *= int(d)
    return out


class _Copy(nn.Cell):
    def __init__(self, params, plan, fused, adapters=(), lora_scale=0.0):
        super().__init__(auto_prefix=False)
        self.src = ms.ParameterTuple([s for s, _ in params])
        self.dst = ms.ParameterTuple([d for _, d in params])
        self.plan = plan              # per parameter: (gathered index or -1, dst axis, dst size, dst rank, adapter)
        self.fused = fused
        self.gathered_src = tuple(i for i, item in enumerate(plan) if item[0] >= 0)
        # LoRA: the train weight W and its adapter (A, B), whose product is split like W (models/lora.py), so the
        # merged W + s A B is formed on each rank's own shard, before any gather
        self.lora_a = ms.ParameterTuple([a for a, _ in adapters])
        self.lora_b = ms.ParameterTuple([b for _, b in adapters])
        self.lora_scale = float(lora_scale)
        self.matmul = ops.MatMul()

    def _source(self, i):
        j = self.plan[i][4]
        if j < 0:
            return self.src[i]
        w = self.src[i]
        delta = self.matmul(self.lora_a[j], self.lora_b[j]) * self.lora_scale
        return w + ops.cast(delta, w.dtype)

    def construct(self):
        full = ()
        if self.fused is not None:
            full = self.fused(tuple(self._source(i) for i in self.gathered_src))
        done = ()
        for i in range(len(self.plan)):
            g, axis, size, rank, _ = self.plan[i]
            x = self._source(i) if g < 0 else full[g]
            done = done + (ops.assign(self.dst[i], _slice(x, axis, size, rank)),)
        return len(done)


class Resharder:
    """Copies ``train_net``'s parameters into ``infer_net``, a plain network in another tp layout: a LoRA train
    network's weights arrive merged, W + (alpha/r) A B."""

    def __init__(self, train_net, infer_net, train_tp, infer_tp, lora_scale: float = 0.0):
        self.noop = train_net is infer_net
        if self.noop:
            return
        t_axes, i_axes = split_axes(train_net), split_axes(infer_net)
        t_params = dict(train_net.parameters_and_names())
        adapters = {n: p for n, p in t_params.items() if is_lora_name(n)}
        t_params = {n: p for n, p in t_params.items() if n not in adapters}
        i_params = dict(infer_net.parameters_and_names())
        if set(t_params) != set(i_params):
            missing = sorted(set(t_params) ^ set(i_params))[:3]
            raise ValueError(f"train and infer models differ in parameters, e.g. {missing}")
        params, plan, g_shapes, g_axes, pairs = [], [], [], [], []
        self.bytes_moved = 0
        for name in sorted(t_params):
            ta, ia = t_axes[name], i_axes[name]
            src, dst = t_params[name], i_params[name]
            g = -1
            if ta is not None and train_tp.size > 1:
                same_shard = ia == ta and infer_tp.size == train_tp.size and infer_tp.rank == train_tp.rank
                if same_shard:
                    ia = None  # already the right piece
                else:
                    g_shapes.append(tuple(src.shape))
                    g_axes.append(ta)
                    g = len(g_shapes) - 1
                    self.bytes_moved += src.size * 4 * (train_tp.size - 1)
            params.append((src, dst))
            module = name[:-len(".weight")]
            lora = -1
            if f"{module}.lora_A.weight" in adapters:
                pairs.append((adapters[f"{module}.lora_A.weight"], adapters[f"{module}.lora_B.weight"]))
                lora = len(pairs) - 1
            plan.append((g, ia, infer_tp.size if ia is not None else 1, infer_tp.rank, lora))
        fused = None
        if g_shapes:
            fused = _FusedGather(train_tp.group, train_tp.rank, train_tp.size, g_shapes, g_axes,
                                 world_group=train_tp.size == _STATE["world"])
        self.cell = _Copy(params, tuple(plan), fused, pairs, lora_scale)

    def __call__(self):
        if not self.noop:
            self.cell()


def rename_parameters(net, prefix: str):
    """Give ``net``'s Parameters unique names (``prefix.<name>``) so two copies of a model can share a graph.

    Weight I/O uses names relative to the network (``parameters_and_names``), which this does not change.
    """
    for name, p in net.parameters_and_names():
        p.name = f"{prefix}.{name}"


class _GatherAll(nn.Cell):
    def __init__(self, params, gathers):
        super().__init__(auto_prefix=False)
        self.params = ms.ParameterTuple(params)
        self.gathers = nn.CellList(gathers)

    def construct(self):
        out = ()
        for i in range(len(self.params)):
            out = out + (self.gathers[i](self.params[i]),)
        return out


def gather_full_state(named: Dict[str, "ms.Parameter"], axes: Dict[str, Optional[int]], tp) -> Dict[str, "object"]:
    """Full (unsharded) numpy tensors of tensor-parallel parameters; every rank of the tp group gets them.

    ``axes`` maps each name to its split axis (None = replicated). A collective: every tp rank must call it.
    """
    full = {name: p.asnumpy() for name, p in named.items() if axes.get(name) is None or tp.size == 1}
    sharded = [name for name in sorted(named) if name not in full]
    if sharded:
        cell = _GatherAll([named[n] for n in sharded],
                          [GatherAxis(tp.group, tp.rank, tp.size, axes[n], len(named[n].shape)) for n in sharded])
        for name, value in zip(sharded, cell()):
            full[name] = value.asnumpy()
    return full
