"""What every role shares: a network built in its stage's layout, and for trained roles their checkpoint part.

A role's checkpoint part (``<iter>/<role name>/``) is an HF model directory with the full, gathered weights and
optimizer state (written by the main rank), plus on multi-rank runs each rank's own shards and the strategy
files MindSpore's ``transform_checkpoints`` needs to merge or re-split them offline.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from mindrl.models import lora as lora_io
from mindrl.models.lm import build_network
from mindrl.models.safetensors_io import save_safetensors
from mindrl.models.weights import export_hf, load_into, state_numpy  # export_hf: callers' name too
from mindrl.parallel.comm import AllReduceSum
from mindrl.parallel.layout import (external_axis, external_shape, full_shape, split_axes, take_shard, to_external,
                                    to_internal, tp_of, transposed_names)
from mindrl.parallel.reshard import gather_full_state, rename_parameters
from mindrl.parallel.state import Layout
from mindrl.parallel.strategy import save_rank_checkpoint, write_strategy_files
from mindrl.parallel.topology import shard_rows
from mindrl.trainer import checkpoint as ck
from mindrl.trainer.context import seed_from
from mindrl.trainer.actor_graphs import pack_arrays
from mindrl.trainer.inputs import dummy_inputs, grouped_dummy_inputs, input_names, tensors
from mindrl.trainer.updater import Updater, update_epochs

log = logging.getLogger("mindrl.train")


@dataclass
class Stage:
    """One network of a role in one layout: what a strategy file and the compile order describe."""
    name: str                  # e.g. "train_policy": strategy files go to <dir>/<name>_strategy/
    net: object
    layout: Layout
    with_optimizer: bool = False


def build_net(spec, kind: str, layout: Layout, model_config=None, rename: Optional[str] = None,
              train: Optional[bool] = None, init: Optional[bool] = None):
    """The network of role ``spec`` (a RoleSpec of the run plan) as ``kind`` ("causal_lm", "value", "reward") in
    ``layout``'s tensor-parallel split, randomly initialised (with the spec's seed) only when it has no weights to
    load (``init`` decides otherwise: a copy that receives weights from another network needs none). ``rename`` gives the parameters unique names when several models live in one process (their names inside
    files stay the HF ones)."""
    net = build_network(model_config or spec.model.load(), kind, tp=layout.tp_context(), seed=spec.seed,
                        init=spec.weights.path is None if init is None else init)
    if rename:
        rename_parameters(net, rename)
    if train is not None:
        net.set_train(train)
    return net


def load_weights(net, weights, allow_missing=()) -> Optional[str]:
    """Load a WeightsSpec's ``path`` (an HF directory, a weights file, or a mindrl checkpoint: its ``part``) into
    ``net``; returns the file read, None when the spec has no weights (random initialisation)."""
    if weights.path is None:
        return None
    source = ck.weights_path(weights.path, weights.part, verify=True)
    load_into(net, source, allow_missing=allow_missing)
    return source


def adapter_dir(weights) -> str:
    """The PEFT adapter directory of a resumed LoRA role: ``<iter>/<part>/adapter``."""
    return os.path.join(ck.role_dir(ck.resolve(weights.path), weights.part), "adapter")


def base_weights(spec):
    """Where a role's base weights come from: its spec's weights, or on a LoRA resume the base its checkpoint's
    adapter_config.json names (null there: the run's random initialisation, rebuilt from the seed)."""
    w = spec.weights
    if not w.adapters:
        return w
    config, _ = lora_io.read_peft_adapter(adapter_dir(w), tensors=False)
    base = config.get("base_model_name_or_path")
    return type(w)(base, "policy", f"the base of {w.path}'s adapter" if base else "random initialisation")


def same_weights(path: Optional[str], source: Optional[str]) -> bool:
    """Whether a weights path (an HF directory, a file or a mindrl checkpoint: its policy part) is the file or
    directory ``source`` that was read."""
    if path is None or source is None:
        return path is None and source is None
    try:
        return os.path.realpath(ck.weights_path(path, "policy")) == os.path.realpath(source)
    except ck.CheckpointError:
        return False


def load_adapters(net, directory: str, names) -> None:
    """Set ``net``'s trained LoRA tensors ``names`` (adapters, and a value head) from a PEFT adapter directory,
    each rank taking its tensor-parallel slice; the files are checked against the checkpoint's manifest first."""
    import mindspore as ms
    part = os.path.dirname(directory)
    root = os.path.dirname(part)
    if os.path.isfile(os.path.join(root, ck.MANIFEST)):
        rel = os.path.basename(part) + "/adapter/"
        ck.verify_checkpoint(root, lambda f: f.startswith(rel))
    _, tensors = lora_io.read_peft_adapter(directory)
    missing = sorted(set(names) - set(tensors))
    if missing:
        raise ck.CheckpointError(f"{directory}: the adapter has no tensor {missing[0]!r} (has {len(tensors)})")
    axes, trans, tp = split_axes(net), transposed_names(net), tp_of(net)
    params = dict(net.parameters_and_names())
    for name in names:
        local = take_shard(to_internal(tensors[name], name in trans), axes.get(name), tp.size, tp.rank)
        params[name].set_data(ms.Tensor(np.ascontiguousarray(local, np.float32), dtype=params[name].dtype))


def score_in_shares(cell, exp, layout: Layout, exchange, micro_batch: int, group: int = 0) -> np.ndarray:
    """Run a scoring ``cell`` on this data-parallel replica's rows of ``exp`` in micro-batches, then give every
    rank the whole batch's result (replica order). The cell's inputs are ``exp``'s fields of the same names,
    packed into groups of ``group`` responses to one prompt when ``group`` > 0 (actor_graphs.pack_arrays)."""
    names = input_names(cell)
    mine = exp.select(shard_rows(len(exp), layout))
    out = []
    for s in range(0, len(mine), micro_batch):
        rows = mine.select(slice(s, s + micro_batch))
        arrays = {n: getattr(rows, n) for n in names}
        res = cell(*tensors(names, pack_arrays(arrays, group) if group else arrays, type(cell).__name__))
        out.append((res[0] if isinstance(res, tuple) else res).asnumpy())
    return exchange.from_each(np.concatenate(out), layout)


def compile_scorer(cell, rows: int, prompt_width: int, response_width: int, group: int = 0) -> None:
    """Compile a scoring ``cell`` for micro-batches of ``rows`` rows at these widths (packed groups of ``group``
    when > 0)."""
    names = input_names(cell)
    arrays = grouped_dummy_inputs(names, rows // group, group, prompt_width, response_width) if group else \
        dummy_inputs(names, rows, prompt_width + response_width, response_width)
    cell.compile(*tensors(names, arrays))


def gathered_state(net, layout) -> dict:
    """Every parameter of ``net`` as a full numpy tensor in HF orientation (a collective over the tp group)."""
    trans = transposed_names(net)
    full = gather_full_state(dict(net.parameters_and_names()), split_axes(net), layout.tp_context())
    return {n: to_external(v, n in trans) for n, v in full.items()}


class TrainedNetwork:
    """A network with its optimizer: the policy and the critic. What they share lives here: the model config and
    schedule of their RoleSpec, the data-parallel gradient all-reduce, the updater, the update passes over a step's
    experience, compiling the update, and saving and restoring weights and optimizer.

    Subclasses build ``self.net`` (with :func:`build_net`) and call :meth:`_train_with` with their loss cell."""

    name = "trained"
    rename: Optional[str] = None  # prefix of this role's Parameter names in the process, never in files

    def __init__(self, run, spec):
        self.run, self.spec = run, spec
        self.layout = run.topo[spec.stage]
        self.model_config = spec.model.load()

    def _build(self, kind: str, allow_missing=()) -> Optional[str]:
        """``self.net`` as ``kind`` in this role's layout with its first weights loaded (on a LoRA resume: the base
        the checkpoint's adapter names), then its adapters when the spec has them; returns the weights file read."""
        weights = base_weights(self.spec)
        self.net = build_net(self.spec, kind, self.layout, self.model_config, rename=self.rename,
                             init=weights.path is None)
        source = load_weights(self.net, weights, allow_missing)
        if source is not None:
            log.info("%s weights loaded from %s", self.name, source)
        self._attach_lora(source)
        return source

    def _attach_lora(self, base_source: Optional[str]) -> None:
        """With ``spec.lora``: adapters on ``self.net`` (whose base weights are loaded), the base frozen; on a
        resume, the adapters (and value head) of the checkpoint. ``base_source``: the base weights read (recorded
        in the adapter's config as PEFT's base_model_name_or_path), None for a random base."""
        spec = self.spec
        # the real path: a link such as runs/<name>/latest may later point elsewhere
        self.lora_base = os.path.realpath(base_source) if base_source else None
        self._base_files = None  # its files' checksums as this run read them (main rank), saved with the adapter
        if spec.lora is None:
            return
        lora_io.add_lora(self.net, spec.lora, self.rename or "", trainable=("score.",))
        if spec.weights.adapters:  # the base is the resumed adapter's, whose record the resume checks (preflight)
            directory = adapter_dir(spec.weights)
            load_adapters(self.net, directory, self.trained_names())
            self._base_files = lora_io.read_base_record(directory)
            log.info("%s adapters loaded from %s", self.name, directory)
        elif self.lora_base and self.run.topo.is_main:
            self._base_files = lora_io.base_files(self.lora_base)

    def trained_names(self) -> List[str]:
        """The parameters the optimizer updates (all of them without LoRA; the adapters and a head with it)."""
        return [n for n, p in self.net.parameters_and_names() if p.requires_grad]

    def _train_with(self, loss_cell, step_name: str = "global_step") -> None:
        grad_reduce = None
        if self.layout.dp > 1:  # each replica's gradient is a partial sum of the mini-batch's
            grad_reduce = AllReduceSum(self.layout.dp_group())
        params, tp = self.net.trainable_params(), self.layout.tp_context()
        tp_reduce = sharded = None
        if tp.size > 1:  # the gradient norm sums the split tensors' squares over the tp group
            axes = split_axes(self.net)
            tp_reduce = AllReduceSum(tp.group)
            sharded = [axes.get(self.file_key(p.name)) is not None for p in params]
            if not any(sharded):
                tp_reduce = sharded = None
        self.updater = Updater(loss_cell, params, self.spec.optim, grad_reduce, step_name, tp_reduce, sharded or (),
                               buffers=self.run.grad_buffers, layer_graphs=self.spec.layer_graphs)

    def lr_at(self, step: int) -> float:
        return self.spec.optim.lr_at(step)

    def _update(self, arrays: dict, loss_mask: np.ndarray, step: int, seed_salt: tuple = (),
                extra_terms=(), group: int = 0, row_outputs: Optional[dict] = None) -> dict:
        """The spec's passes of mini-batch updates over ``arrays`` (the loss cell's inputs, one row per response,
        or with ``group`` one row per packed group of that many responses) at step ``step``'s learning rate; the
        mean of each metric and of the gradient norm. ``row_outputs``: see updater.update_epochs."""
        spec, seed, per = self.spec, self.run.seed, group or 1
        order_seed = (lambda epoch: seed_from(seed, step, epoch, *seed_salt)) if spec.shuffle else None
        return update_epochs(self.updater, arrays, loss_mask, epochs=spec.epochs,
                             mini_batch=spec.rows_per_update // per, micro_batch=spec.micro_batch // per,
                             loss_agg_mode=spec.loss.loss_agg_mode, layout=self.layout,
                             exchange=self.run.exchange, order_seed=order_seed, lr=self.lr_at(step),
                             extra_terms=extra_terms, row_outputs=row_outputs)

    def _compile_update(self, prompt_width: int, response_width: int, group: int = 0) -> None:
        """``group``: the update's rows are packed groups of that many responses (Policy)."""
        if not group:
            self.updater.compile(self.spec.micro_batch, prompt_width + response_width, response_width)
            return
        k = self.spec.micro_batch // group
        self.updater.compile(arrays=grouped_dummy_inputs(self.updater.accumulate.inputs, k, group, prompt_width,
                                                         response_width))

    def state_dict(self) -> dict:
        """This rank's trained weights as numpy, HF names and orientation (full tensors at tp=1)."""
        return state_numpy(self.net)

    def non_finite(self) -> list:
        """Names of this rank's weights and optimizer tensors that hold NaN or inf (checked before every save)."""
        tensors = {**self.state_dict(), **{self.file_key(p.name): p.asnumpy()
                                          for p in self.updater.optimizer.state_parameters()}}
        return [k for k, v in tensors.items() if not np.isfinite(v).all()]

    def file_key(self, name: str) -> str:
        """A Parameter's name as files spell it: without the in-process ``rename`` prefix."""
        return name.replace(f"{self.rename}.", "", 1) if self.rename else name

    def _optimizer_spec(self):
        """{optimizer Parameter name: (file key, split axis, transposed)}: a moment is laid out like its parameter."""
        axes, trans = split_axes(self.net), transposed_names(self.net)
        out = {}
        for p in self.updater.optimizer.state_parameters():
            key = self.file_key(p.name)
            base = key.split(".", 1)[1] if key.startswith(("adam_m.", "adam_v.")) else None
            out[p.name] = (key, axes.get(base), base in trans) if base else (key, None, False)
        return out

    def save(self, directory: str) -> None:
        """Write this role's part of a checkpoint into ``directory`` (a collective: every rank calls it)."""
        run, tp = self.run, self.layout.tp_context()
        params = dict(self.net.parameters_and_names())
        trans = transposed_names(self.net)
        full = gathered_state(self.net, self.layout)
        named = {p.name: p for p in self.updater.optimizer.state_parameters()}
        spec = self._optimizer_spec()
        optim = gather_full_state(named, {k: a for k, (_, a, _) in spec.items()}, tp)
        optim = {spec[k][0]: to_external(v, spec[k][2]) for k, v in optim.items()}
        if run.topo.is_main:
            self.export(full, directory)
            save_safetensors(optim, os.path.join(directory, ck.OPTIMIZER))
        run.exchange.barrier()
        if run.topo.world > 1:  # this rank's shards, in the orientation the strategy file describes
            shards = {n: to_external(p.asnumpy(), n in trans) for n, p in params.items()}
            shards.update({spec[p.name][0]: to_external(p.asnumpy(), spec[p.name][2])
                           for p in self.updater.optimizer.state_parameters()})
            save_rank_checkpoint(os.path.join(directory, "rank_checkpoints"), run.topo.rank, shards)
            write_strategy(os.path.join(directory, "strategy"), [s for s in self.stages() if s.with_optimizer],
                           run.topo)

    def export(self, full: dict, directory: str) -> None:
        """(main rank) An HF directory of the model from its gathered tensors (:func:`gathered_state`). With LoRA:
        the merged model (what transformers, `mindrl evaluate` and a new run load) and ``adapter/``, the adapter in
        PEFT's format (with a value or reward model's head as its ``modules_to_save``)."""
        os.makedirs(directory, exist_ok=True)
        lora = self.spec.lora
        model = lora_io.merged(full, lora.scale) if lora else full
        export_hf(model, self.model_config, directory, self.hf_config(), self.run.tokenizer_dir)
        if lora:
            adapter = os.path.join(directory, "adapter")
            lora_io.write_peft_adapter(adapter, {n: full[n] for n in self.trained_names()}, lora, self.lora_base,
                                       "CAUSAL_LM" if self.name == "policy" else "SEQ_CLS")
            lora_io.write_base_record(adapter, self.lora_base, self._base_files)

    def hf_config(self) -> dict:
        return self.model_config.to_hf_dict()

    def load_optimizer(self, checkpoint: str) -> None:
        """Restore the optimizer from checkpoint ``checkpoint`` (full tensors, sliced to this rank)."""
        full = ck.load_optimizer_state(checkpoint, self.name)
        tp = self.layout.tp_context()
        mine = {}
        for name, (key, axis, transposed) in self._optimizer_spec().items():
            if key in full:
                mine[name] = take_shard(to_internal(full[key], transposed), axis, tp.size, tp.rank)
        self.updater.load_optimizer_state(mine, os.path.join(ck.role_dir(checkpoint, self.name), ck.OPTIMIZER))

    def stages(self) -> List[Stage]:
        raise NotImplementedError


def write_strategy(root: str, stages: List[Stage], topo) -> List[str]:
    """MindSpore strategy JSON per rank: ``<root>/<stage>_strategy/strategy_<rank>.json``."""
    written = []
    for stage in stages:
        axes, trans = split_axes(stage.net), transposed_names(stage.net)
        tp = stage.layout.tp_context()
        spec = {n: (external_shape(full_shape(p.shape, axes[n], tp.size), n in trans),
                    external_axis(axes[n], n in trans)) for n, p in stage.net.parameters_and_names()}
        directory = os.path.join(root, f"{stage.name}_strategy")
        if topo.is_main:  # one layout for all ranks: the main rank writes every rank's file
            write_strategy_files(directory, spec, stage.layout.dp, stage.layout.tp, topo.world,
                                 include_optimizer=stage.with_optimizer)
        written.append(directory)
    return written
