"""Strategy files and per-rank checkpoints in the format MindSpore's offline tools read.

mindrl shards parameters by hand (Megatron style), so MindSpore never writes a strategy file for us.
We write one ourselves, in the JSON schema that ``mindspore.parallel.transform_checkpoints`` (and
``transform_checkpoint_by_rank``, ``load_distributed_checkpoint``) accept, so per-rank checkpoints
can be merged into one full checkpoint, or re-split for another layout, without mindrl.

Layout of one parameter: ``dev_matrix = [dp, tp]`` (ranks are row-major over it, so
``tp_rank = rank % tp`` and ``dp_rank = rank // tp``, matching mindrl's rank numbering);
``tensor_map[i] = k`` splits axis ``i`` over device-matrix dimension ``k`` counted from the right.
tp is the rightmost dimension, so a tensor-parallel split axis maps to 0 and every other axis to -1
(replicated, which includes replication over dp).

On disk (what ``transform_checkpoints`` expects)::

    <dir>/rank_<r>/checkpoint_<r>.ckpt        one file per rank (with several, the last by name is used)
    ./strategy/<stage>_<model>_strategy/strategy_<r>.json

No mindspore import at module level: writing strategy files must stay cheap.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from mindrl.io import write_text
from mindrl.parallel.layout import take_shard

Axes = Mapping[str, Tuple[Sequence[int], Optional[int]]]

OPTIMIZER_PREFIXES = ("adam_m.", "adam_v.")
GLOBAL_STEP = "global_step"


class StrategyError(ValueError):
    """A layout that cannot be described, or per-rank checkpoints that cannot be merged."""


def _layout_item(shape: Sequence[int], axis: Optional[int], dp: int, tp: int) -> dict:
    # a 0-d tensor comes back from a .ckpt as shape (1,), and transform_checkpoints indexes tensor_map
    # by the stored shape: describe scalars as 1-element vectors
    ndim = max(len(shape), 1)
    tensor_map = [-1] * ndim
    if axis is not None and tp > 1:
        tensor_map[axis] = 0
    return {
        "dev_matrix": [int(dp), int(tp)],
        "tensor_map": tensor_map,
        "param_split_shape": [],
        "indices_offset": [],
        "field": 0,
        "opt_weight_shard_step": 0,
        "opt_weight_shard_size": 0,
    }


def _check_axes(axes: Axes, tp: int) -> None:
    for name, (shape, axis) in axes.items():
        if "-" in name:
            # MindSpore reads "<stage>-<name>" as a pipeline-stage prefix; such a name would be misparsed
            raise StrategyError(f"parameter {name!r}: names with '-' cannot be written to a strategy file")
        if axis is None:
            continue
        if not 0 <= axis < len(shape):
            raise StrategyError(f"parameter {name!r}: split axis {axis} out of range for shape {list(shape)}")
        if shape[axis] % tp:
            raise StrategyError(f"parameter {name!r}: axis {axis} of shape {list(shape)} is not divisible by tp={tp}")


def strategy_json(axes: Axes, dp: int, tp: int, include_optimizer: bool = True) -> dict:
    """The strategy document for a ``(dp, tp)`` layout.

    ``axes`` maps every parameter name to ``(full_shape, split_axis or None)``. With
    ``include_optimizer`` each parameter also gets ``adam_m.<name>`` / ``adam_v.<name>`` entries with
    the same layout, and ``global_step`` is listed as a replicated scalar.
    """
    if dp < 1 or tp < 1:
        raise StrategyError(f"dp and tp must be >= 1, got dp={dp}, tp={tp}")
    _check_axes(axes, tp)
    items = {}
    for name, (shape, axis) in axes.items():
        item = _layout_item(shape, axis, dp, tp)
        items[name] = item
        if include_optimizer:
            for prefix in OPTIMIZER_PREFIXES:
                items[prefix + name] = dict(item, tensor_map=list(item["tensor_map"]))
    if include_optimizer and GLOBAL_STEP not in items:
        items[GLOBAL_STEP] = _layout_item((), None, dp, tp)
    return {"current_stage": 0, "parallel_strategy_item": {}, "parallel_layout_item": items}


def strategy_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"strategy_{rank}.json")


def write_strategy_files(directory: str, axes: Axes, dp: int, tp: int, world: int,
                         include_optimizer: bool = True) -> list:
    """Write ``strategy_<rank>.json`` for every rank in ``range(world)`` (same content); returns the paths.

    The trainer passes ``./strategy/<stage>_<model>_strategy/`` (e.g. ``train_policy``).
    """
    if dp * tp != world:
        raise StrategyError(f"layout dp={dp} x tp={tp} = {dp * tp} does not match world size {world}")
    text = json.dumps(strategy_json(axes, dp, tp, include_optimizer), indent=1, sort_keys=True)
    paths = []
    for rank in range(world):
        path = strategy_path(directory, rank)
        write_text(path, text)
        paths.append(path)
    return paths


def shard_state(full: Mapping[str, np.ndarray], axes: Axes, dp: int, tp: int, rank: int) -> Dict[str, np.ndarray]:
    """One rank's local tensors from a full state.

    Optimizer moments ``adam_m.<p>``/``adam_v.<p>`` are sliced like ``<p>``; names not in ``axes``
    (``global_step``, extras) are replicated.
    """
    if not 0 <= rank < dp * tp:
        raise StrategyError(f"rank {rank} out of range for dp={dp} x tp={tp}")
    tp_rank = rank % tp
    out = {}
    for name, value in full.items():
        base = name
        for prefix in OPTIMIZER_PREFIXES:
            if name.startswith(prefix):
                base = name[len(prefix):]
                break
        axis = axes[base][1] if base in axes else None
        out[name] = np.ascontiguousarray(take_shard(np.asarray(value), axis, tp, tp_rank))
    return out


def rank_checkpoint_path(directory: str, rank: int, fmt: str = "ckpt") -> str:
    return os.path.join(directory, f"rank_{rank}", f"checkpoint_{rank}.{fmt}")


def save_rank_checkpoint(directory: str, rank: int, tensors: Mapping[str, np.ndarray], fmt: str = "ckpt",
                         append: Optional[dict] = None) -> str:
    """Write ``directory/rank_<rank>/checkpoint_<rank>.<fmt>`` (temp file + rename); returns the path.

    ``fmt`` is ``"ckpt"`` or ``"safetensors"``. ``transform_checkpoints`` takes either, but not a mix
    in one directory.
    """
    from mindrl.models.weights import save_ms_checkpoint
    if fmt not in ("ckpt", "safetensors"):
        raise ValueError(f"fmt must be 'ckpt' or 'safetensors', got {fmt!r}")
    path = rank_checkpoint_path(directory, rank, fmt)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_ms_checkpoint(dict(tensors), path, append=append)
    return path


def _rank_dirs(src_dir: str) -> Dict[int, list]:
    found = {}
    for d in glob.glob(os.path.join(src_dir, "rank_*")):
        suffix = os.path.basename(d)[len("rank_"):]
        if os.path.isdir(d) and suffix.isdigit():
            found[int(suffix)] = sorted(glob.glob(os.path.join(d, "*.ckpt")) + glob.glob(os.path.join(d, "*.safetensors")))
    return found


def _strategy_world(strategy_file: str) -> int:
    with open(strategy_file) as fh:
        doc = json.load(fh)
    items = doc.get("parallel_layout_item") or {}
    if not items:
        raise StrategyError(f"{strategy_file}: no parallel_layout_item entries")
    return int(np.prod(next(iter(items.values()))["dev_matrix"]))


def merge_rank_checkpoints(src_dir: str, strategy_file: str, dst_dir: str, prefix: str = "checkpoint_",
                           dst_strategy_file: Optional[str] = None) -> str:
    """Merge ``src_dir/rank_<r>/*.ckpt`` (written under ``strategy_file``) into one full checkpoint.

    Thin wrapper around ``mindspore.parallel.transform_checkpoints``. Returns the merged file's path,
    ``dst_dir/rank_0/<prefix>0.ckpt``. With ``dst_strategy_file`` it re-splits instead and returns
    ``dst_dir`` (one ``rank_<r>`` subdirectory per destination rank).
    """
    if not os.path.isdir(src_dir):
        raise StrategyError(f"{src_dir}: per-rank checkpoint directory not found")
    if not os.path.isfile(strategy_file):
        raise StrategyError(f"{strategy_file}: strategy file not found")
    from mindspore.parallel import rank_list_for_transform, transform_checkpoints
    src_file = os.path.abspath(strategy_file)
    dst_file = os.path.abspath(dst_strategy_file) if dst_strategy_file else None
    world = _strategy_world(strategy_file)
    dst_world = _strategy_world(dst_strategy_file) if dst_strategy_file else 1
    # data-parallel replicas are redundant: only the ranks MindSpore will read must exist
    needed = sorted({r for dst in range(dst_world) for r in rank_list_for_transform(dst, src_file, dst_file)})
    found = _rank_dirs(src_dir)
    missing = [r for r in needed if not found.get(r)]
    if missing:
        raise StrategyError(f"{src_dir}: rank(s) {missing} have no checkpoint (expected {src_dir}/rank_<r>/*.ckpt); "
                            f"the strategy {strategy_file} describes {world} ranks and the merge needs ranks {needed}")
    kinds = {os.path.splitext(f)[1] for r in needed for f in found[r]}
    if len(kinds) > 1:
        raise StrategyError(f"{src_dir}: mixes .ckpt and .safetensors rank checkpoints; keep one format")
    os.makedirs(dst_dir, exist_ok=True)
    try:
        transform_checkpoints(os.path.abspath(src_dir), os.path.abspath(dst_dir), prefix,
                              src_strategy_file=src_file, dst_strategy_file=dst_file)
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise StrategyError(f"merging {src_dir} with {strategy_file}: {err}") from err
    if dst_strategy_file:
        return dst_dir
    return os.path.join(dst_dir, "rank_0", f"{prefix}0.ckpt")
