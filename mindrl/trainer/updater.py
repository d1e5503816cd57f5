"""Training a network on an experience batch: shuffled mini-batches, accumulated micro-batches, clip + AdamW.

Micro-batches of one mini-batch all receive the mini-batch's loss denominator, so their summed gradients equal
the mini-batch gradient exactly (see algorithms/denominators.py). A loss cell returns ``(loss, *metrics)`` and
declares each metric's name and how micro-batches combine it: ``sum`` for terms that carry the mini-batch
denominator (they add up to the mini-batch's value), ``token_mean`` for per-token means of one micro-batch
(weighted by its share of the mini-batch's tokens).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.algorithms.denominators import loss_denominator, micro_batch_denominator
from mindrl.models.decoder import RecomputingCell
from mindrl.models.safetensors_io import CheckpointError
from mindrl.trainer.inputs import dummy_inputs, loss_input_names, tensors
from mindrl.trainer.optim import AdamW


# Per-tensor pieces the cells below map over their parameter tuples (HyperMap keeps a graph's depth independent of
# the parameter count; see trainer/optim.py)
_add_into = ops.MultitypeFuncGraph("add_into")
_square_sum = ops.MultitypeFuncGraph("square_sum")
_reduce_in_place = ops.MultitypeFuncGraph("reduce_in_place")
_zero_after = ops.MultitypeFuncGraph("zero_after")
_clear_after = ops.MultitypeFuncGraph("clear_after")


@_add_into.register("Tensor", "Tensor")
def _add_into_one(buf, g):
    ops.assign_add(buf, g)
    return True  # side effects only: a returned tensor is copied out of the graph


_matmul_t = ops.MatMul(transpose_b=True)


def _dot(x, y):
    """sum(x * y) over all entries as one [1, n] x [1, n]^T MatMul: exact to float32 rounding like ReduceSum, and
    on CPU 3x faster than Mul + ReduceSum (docs/performance.md#sft). Not [1, n] x [n, 1]: on CPU the [n, 1] reshape
    of a Parameter is a copy the graph keeps (GradNorm held about twice the gradient's size that way, and took 3.6x
    as long; docs/performance.md#layer-graphs)."""
    return _matmul_t(x.reshape(1, -1), y.reshape(1, -1)).reshape(())


@_square_sum.register("Tensor")
def _square_sum_one(g):
    return _dot(g, g)


@_reduce_in_place.register("Function", "Tensor")
def _reduce_in_place_one(reduce, g):
    reduced = reduce(g)
    return ops.depend(reduced, ops.assign(g, reduced))


@_zero_after.register("Tensor", "Tensor")
def _zero_after_one(after, g):
    """Zero ``g`` once ``after`` (the optimizer step that read it) is done."""
    ops.assign(g, ops.depend(ops.zeros_like(g), after))
    return True


@_clear_after.register("Tensor", "Tensor")
def _clear_after_one(after, g):
    """Zero a finite ``g`` in place (g -= g) once ``after`` is done: no zeros tensor the size of the model, which
    zeros_like would allocate for every buffer at once."""
    ops.assign_sub(g, ops.depend(g, after))
    return True


def _all_finite_one(p):
    # z' (P z) with zero vectors z (P: p as a matrix) is NaN exactly when an entry of p is inf or NaN (inf * 0 = NaN),
    # and 0 otherwise: no overflow, however large p is, and no tensor the size of p (IsFinite + ReduceAll took 2.5x
    # as long on CPU)
    rows = p.reshape(1, -1) if p.ndim < 2 else p.reshape(-1, p.shape[-1])
    per_row = ops.matmul(rows, ops.zeros((rows.shape[1], 1), rows.dtype))
    return ops.isfinite(ops.matmul(ops.zeros((1, rows.shape[0]), rows.dtype), per_row)).astype(ms.float32).reshape(())


_finite_after = ops.MultitypeFuncGraph("finite_after")


@_finite_after.register("Tensor", "Tensor")
def _finite_after_one(after, p):
    """_all_finite of ``p`` as it is once ``after`` (the optimizer step) is done."""
    return _all_finite_one(ops.depend(p, after))


class GradientBuffers:
    """The accumulation buffers of a process's trained networks, shared between networks where shapes agree.

    A buffer holds a gradient only from a mini-batch's first micro-step to its optimizer step (ApplyGrad clears
    it, ResetGrad zeroes it), and the networks of a process update one after the other (PPO: all of one
    network's passes, then all of the other's), so they can add into the same buffers: PPO keeps one model's
    worth of buffers instead of two. Within one network every parameter gets a buffer of its own."""

    def __init__(self):
        self._made = {}  # (shape, dtype) -> the buffers made so far, in order

    def take(self, params, prefix: str = "accum") -> tuple:
        """One zero buffer per parameter of ``params``: a buffer an earlier network took when one of the same
        shape and dtype is left, else a new one named ``prefix.<parameter name>``."""
        used, out = {}, []
        for p in params:
            key = (tuple(p.shape), str(p.dtype))
            pool, i = self._made.setdefault(key, []), used.get(key, 0)
            if i == len(pool):
                buf = p.clone(init="zeros")
                buf.name = f"{prefix}.{p.name}"
                pool.append(buf)
            used[key] = i + 1
            out.append(pool[i])
        return ms.ParameterTuple(out)


def micro_batch_inputs(names, arrays, what: str, denom) -> tuple:
    """A loss cell's inputs for one micro-batch (``arrays``: input name -> rows), then its loss denominator."""
    return tuple(tensors(names, arrays, what)) + (Tensor(np.float32(denom)),)


def host_outputs(outs) -> list:
    """A micro-step's outputs on the host: scalars as floats, row outputs as numpy arrays."""
    return [o.asnumpy() if o.ndim else float(o.asnumpy()) for o in outs]


class AccumulateGrad(RecomputingCell):
    """One micro-batch: forward, backward, add the gradients into ``accum``. ``inputs``: the loss cell's named
    inputs (trainer/inputs.py), which :meth:`run` and :meth:`compile_for` take as a mapping."""

    def __init__(self, loss_cell, params, accum=None):
        super().__init__(auto_prefix=False)
        self.inputs, self.what = loss_input_names(loss_cell), type(loss_cell).__name__
        self.params = ms.ParameterTuple(params)
        self.grad_fn = ms.value_and_grad(loss_cell, None, self.params, has_aux=True)
        self.recomputes(loss_cell)
        # a second loss term of the same update (PPO-ptx) adds into the first one's buffers
        self.accum = GradientBuffers().take(self.params) if accum is None else accum
        self.hyper_map = ops.HyperMap()

    def construct(self, *inputs):
        outs, grads = self.grad_fn(*inputs)
        return ops.depend(outs, self.hyper_map(_add_into, self.accum, grads))

    def run(self, arrays, denom) -> list:
        """Forward + backward of one micro-batch (``arrays``: name -> rows); returns [loss, *metrics] as floats, then
        the loss cell's ``ROW_OUTPUTS`` (one row per input row) as numpy arrays."""
        return host_outputs(self(*micro_batch_inputs(self.inputs, arrays, self.what, denom)))

    def compile_for(self, rows: int, sequence: int, response: int, arrays=None) -> None:
        """For ``rows`` rows of these widths, or for ``arrays`` (input name -> array) when the inputs have other shapes."""
        arrays = dummy_inputs(self.inputs, rows, sequence, response) if arrays is None else arrays
        self.compile(*micro_batch_inputs(self.inputs, arrays, "inputs", 1.0))


class GradNorm(nn.Cell):
    """The accumulated gradient's global norm, after ``grad_reduce`` (data parallel) has all-reduced it in place.

    A separate graph from the step, so that the caller can look at the norm and skip a non-finite update before
    the optimizer touches its state. Under tensor parallelism (``tp_reduce``: a sum over the tp group) the squares
    of the tensors split across the group (``sharded``, one flag per tensor) are summed over it, and those every
    rank holds whole (equal gradients) are counted once, so every rank clips by the same, true, norm."""

    def __init__(self, accum, grad_reduce=None, tp_reduce=None, sharded=()):
        super().__init__(auto_prefix=False)
        self.accum = accum
        self.grad_reduce = grad_reduce
        self.tp_reduce = tp_reduce
        self.sharded = tuple(i for i, s in enumerate(sharded) if s)
        self.whole = tuple(i for i, s in enumerate(sharded) if not s)
        self.hyper_map = ops.HyperMap()

    def construct(self):
        grads = self.accum
        if self.grad_reduce is not None:  # the step (another graph) reads the reduced sums from the buffers
            grads = self.hyper_map(ops.partial(_reduce_in_place, self.grad_reduce), self.accum)
        squares = self.hyper_map(_square_sum, grads)
        if self.tp_reduce is None:
            return ops.sqrt(ops.addn(squares))
        split = self.tp_reduce(ops.addn(tuple(squares[i] for i in self.sharded)))
        if not self.whole:
            return ops.sqrt(split)
        return ops.sqrt(split + ops.addn(tuple(squares[i] for i in self.whole)))


class ApplyGrad(nn.Cell):
    """Global-norm clip of the accumulated gradient (its norm from GradNorm), AdamW step, reset; returns how many
    of the updated tensors hold only finite values (AllFinite's count, in the same graph: one compile and one
    launch fewer than a graph of its own)."""

    def __init__(self, accum, optimizer: AdamW, clip_grad: float):
        super().__init__(auto_prefix=False)
        self.accum = accum
        self.opt = optimizer
        self.all_finite = AllFinite(optimizer.params)
        self.clip = float(clip_grad)
        self.hyper_map = ops.HyperMap()

    def construct(self, lr, norm):
        scale = self.clip / ops.maximum(norm, self.clip) if self.clip > 0 else ops.ones((), ms.float32)
        done = self.opt(self.accum, lr, scale)  # only finite gradients get here (GradNorm's check), so g - g is 0
        return ops.depend(self.all_finite(done), self.hyper_map(ops.partial(_clear_after, done), self.accum))


class ResetGrad(nn.Cell):
    """Drop the accumulated gradient (a skipped, non-finite update)."""

    def __init__(self, accum):
        super().__init__(auto_prefix=False)
        self.accum = accum
        self.hyper_map = ops.HyperMap()

    def construct(self):
        start = ops.zeros((), ms.float32)
        return ops.depend(start, self.hyper_map(ops.partial(_zero_after, start), self.accum))


class AllFinite(nn.Cell):
    """How many of ``params`` hold only finite values once ``after`` is computed (ApplyGrad checks after each
    update: a finite gradient applied by a large enough step can still leave inf or NaN weights)."""

    def __init__(self, params):
        super().__init__(auto_prefix=False)
        self.params = ms.ParameterTuple(params)
        self.hyper_map = ops.HyperMap()

    def construct(self, after):
        return ops.addn(self.hyper_map(ops.partial(_finite_after, after), self.params))


class UpdateLog:
    """What became of one network's optimizer steps in one training step: the numerical guard reports each."""

    def __init__(self, planned: int = 0):
        self.planned = planned     # updates the step was to make
        self.norms = []            # pre-clip gradient norm of each update tried; a non-finite one was skipped
        self.weights_finite = True  # False: an applied update left non-finite weights (the step's updates stop)


class Updater:
    """The graphs of one trained network; ``micro_step`` and ``apply`` run them from numpy inputs.

    ``loss_cell.METRICS``: ((name, "sum" | "token_mean"), ...) for the outputs after the loss; its inputs are
    matched by name (trainer/inputs.py). ``optim``: adam_beta1/2, adam_eps, weight_decay and clip_grad (an
    OptimSpec of the run plan, or a config section with those keys).
    """

    def __init__(self, loss_cell, params, optim, grad_reduce=None, step_name: str = "global_step", tp_reduce=None,
                 sharded=(), buffers: Optional[GradientBuffers] = None, layer_graphs: bool = False):
        """``tp_reduce`` and ``sharded``: see GradNorm (None at tp=1). ``buffers``: the process's shared
        accumulation buffers (None: buffers of its own). ``layer_graphs``: a micro-batch's forward and backward
        one decoder layer per graph call (trainer/layer_graphs.py)."""
        params = list(params)
        self.loss_cell = loss_cell
        self.metrics: Tuple[Tuple[str, str], ...] = tuple(loss_cell.METRICS)
        self.row_outputs: Tuple[str, ...] = tuple(getattr(loss_cell, "ROW_OUTPUTS", ()))
        accum = None if buffers is None else buffers.take(params)
        if layer_graphs:
            from mindrl.trainer.layer_graphs import LayerGraphsAccumulateGrad  # it imports this module
            self.accumulate = LayerGraphsAccumulateGrad(loss_cell, params, accum)
        else:
            self.accumulate = AccumulateGrad(loss_cell, params, accum)
        self.optimizer = AdamW(params, optim.adam_beta1, optim.adam_beta2, optim.adam_eps, optim.weight_decay,
                               step_name=step_name)
        self.norm_cell = GradNorm(self.accumulate.accum, grad_reduce, tp_reduce, sharded)
        self.apply_cell = ApplyGrad(self.accumulate.accum, self.optimizer, optim.clip_grad)
        self.reset_cell = ResetGrad(self.accumulate.accum)
        self.finite = None  # the last applied step's count of finite tensors (ApplyGrad); None: none applied since
        self.skipped = 0  # optimizer steps skipped because the gradient was not finite
        self.log = UpdateLog()  # what update_epochs made of this training step's updates

    def micro_step(self, arrays, denom) -> list:
        """Forward + backward of one micro-batch (``arrays``: input name -> rows); returns [loss, *metrics,
        *row outputs]."""
        return self.accumulate.run(arrays, denom)

    def apply(self, lr: float) -> float:
        """One optimizer step on the accumulated gradient; returns its pre-clip norm. A non-finite norm (NaN or
        inf loss or gradient) skips the step: weights and optimizer state stay as they were."""
        norm = self.norm_cell()
        value = float(norm.asnumpy())
        self.finite = None
        if not np.isfinite(value):
            self.reset_cell()
            self.skipped += 1
            return value
        self.finite = self.apply_cell(Tensor(np.float32(lr)), norm)
        return value

    def weights_finite(self, exchange) -> bool:
        """After an update: do the weights hold only finite values, on every rank (all stop together)?"""
        # a skipped step left the weights as the last check found them
        bad = 0.0 if self.finite is None else len(self.optimizer.params) - float(self.finite.asnumpy())
        ok = float(exchange.all_sum(np.array([bad], np.float32))[0]) == 0
        self.log.weights_finite = self.log.weights_finite and ok
        return ok

    def compile(self, rows: int = 0, sequence: int = 0, response: int = 0, arrays=None) -> None:
        """Compile every graph for micro-batches of ``rows`` rows of these widths, or like ``arrays`` (input name ->
        array: inputs of other shapes, e.g. packed groups), in a fixed order."""
        self.accumulate.compile_for(rows, sequence, response, arrays)
        self.norm_cell.compile()
        self.apply_cell.compile(Tensor(np.float32(0.0)), Tensor(np.float32(1.0)))
        self.reset_cell.compile()

    def load_optimizer_state(self, state: dict, source: str):
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


def update_epochs(updater: Updater, arrays: Dict[str, np.ndarray], loss_mask: np.ndarray, *, epochs: int,
                  mini_batch: int, micro_batch: int, loss_agg_mode: str, layout, exchange, order_seed: Callable,
                  lr: float, extra_terms: Sequence = (), row_outputs: Optional[Dict[str, np.ndarray]] = None
                  ) -> Dict[str, float]:
    """``epochs`` passes of shuffled mini-batches over the rows of ``arrays`` (input name -> [N, ...], the loss
    cell's inputs); every data-parallel replica runs its share of each mini-batch.

    ``order_seed(epoch)`` seeds each pass's shuffle of the rows into mini-batches; None keeps rollout order
    (``rl_config.shuffle_minibatch: false``). ``extra_terms`` (e.g. PPO-ptx) add their own gradients to each mini-batch before its optimizer step:
    ``term.run_chunk(k, count)`` for mini-batch k of count returns partial sums of ``term.metrics``.

    ``row_outputs``: filled with the loss cell's ``ROW_OUTPUTS`` (name -> [N, ...]) of the last pass, this replica's
    rows only (the others stay 0; the caller gathers each replica's rows).

    Returns the mean over mini-batches of each metric and of the gradient norm (``grad_norm``).
    """
    n = len(loss_mask)
    dp, dp_rank = layout.dp, layout.dp_rank
    names = [name for name, _ in updater.metrics] + [name for t in extra_terms for name, _ in t.metrics]
    history = {k: [] for k in names + ["grad_norm"]}
    count = -(-n // mini_batch)
    updater.log = UpdateLog(planned=epochs * count)
    for epoch in range(epochs):
        if order_seed is None or (epochs == 1 and n == mini_batch):  # no shuffle, or nothing it would change
            order = np.arange(n)
        else:
            order = np.random.default_rng(order_seed(epoch)).permutation(n)
        for m0 in range(0, n, mini_batch):
            rows = order[m0:m0 + mini_batch]
            # the whole mini-batch's denominator on every replica: summed gradients are exact
            denom = loss_denominator(loss_mask[rows], loss_agg_mode)
            acc = np.zeros(len(names))
            share = len(rows) // dp
            mine = rows[dp_rank * share:(dp_rank + 1) * share]
            micro_batches = dp * -(-share // micro_batch)
            for u0 in range(0, len(mine), micro_batch):
                r = mine[u0:u0 + micro_batch]
                d = micro_batch_denominator(loss_mask[r], loss_agg_mode, denom, micro_batches)
                outs = updater.micro_step({k: a[r] for k, a in arrays.items()}, d)[1:]
                if updater.row_outputs:
                    at = len(updater.metrics)
                    for name, rows_out in zip(updater.row_outputs, outs[at:] if row_outputs is not None else ()):
                        if name not in row_outputs:
                            row_outputs[name] = np.zeros((n,) + rows_out.shape[1:], rows_out.dtype)
                        row_outputs[name][r] = rows_out
                    outs = outs[:at]
                w = loss_mask[r].sum() / max(loss_mask[rows].sum(), 1.0)  # token share, for the per-token means
                acc[:len(outs)] += [v if kind == "sum" else v * w for v, (_, kind) in zip(outs, updater.metrics)]
            at = len(updater.metrics)
            for term in extra_terms:
                acc[at:at + len(term.metrics)] += term.run_chunk(m0 // mini_batch, count)
                at += len(term.metrics)
            if dp > 1:  # each replica holds a partial sum of the mini-batch's means
                acc = exchange.all_sum(acc) / layout.tp
            for k, v in zip(names, acc):
                history[k].append(v)
            history["grad_norm"].append(updater.apply(lr))
            updater.log.norms.append(history["grad_norm"][-1])
            if not updater.weights_finite(exchange):  # no later update can repair them: the guard stops the run
                break
        if not updater.log.weights_finite:
            break
    return {k: float(np.mean(v)) for k, v in history.items()}
