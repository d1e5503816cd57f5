"""Per-parameter layouts: which axis of the full (HF-shaped) tensor a tensor-parallel rank holds.

A layout is derived from the layer types the model was built with, so the model never lists its
parameters twice. ``split_axis is None`` means replicated.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from mindrl.parallel.layers import ColumnLinear, LoraFactor, RowLinear, SINGLE, VocabEmbedding, _Linear


def split_axes(net) -> Dict[str, Optional[int]]:
    """{parameter name: split axis or None} for every parameter of ``net``."""
    axes = {}
    for prefix, cell in net.cells_and_names():  # names relative to net, like parameters_and_names()
        tp = getattr(cell, "tp", None)
        if tp is None or tp.size == 1:
            continue
        if isinstance(cell, ColumnLinear):       # stored [in, out/tp]
            axes[f"{prefix}.weight"] = 1
            if cell.bias is not None:
                axes[f"{prefix}.bias"] = 0
        elif isinstance(cell, RowLinear):        # stored [in/tp, out]
            axes[f"{prefix}.weight"] = 0
        elif isinstance(cell, VocabEmbedding):   # [vocab/tp, hidden]
            axes[f"{prefix}.weight"] = 0
        elif isinstance(cell, LoraFactor) and cell.split is not None:
            axes[f"{prefix}.weight"] = cell.split
    return {name: axes.get(name) for name, _ in net.parameters_and_names()}


def transposed_names(net) -> set:
    """Parameters whose stored tensor is the transpose of the external (HF) one."""
    out = set()
    for prefix, cell in net.cells_and_names():
        if isinstance(cell, (_Linear, LoraFactor)) and getattr(cell, "transposed", False):
            out.add(f"{prefix}.weight" if prefix else "weight")
    return out


def to_external(arr: np.ndarray, transposed: bool) -> np.ndarray:
    return np.ascontiguousarray(arr.T) if transposed else arr


def to_internal(arr: np.ndarray, transposed: bool) -> np.ndarray:
    return np.ascontiguousarray(arr.T) if transposed else arr


def external_axis(axis: Optional[int], transposed: bool) -> Optional[int]:
    """The split axis in the external orientation (2-D weights only are transposed)."""
    if axis is None or not transposed:
        return axis
    return 1 - axis


def external_shape(shape, transposed: bool):
    return tuple(reversed(tuple(shape))) if transposed else tuple(shape)


def tp_of(net):
    for _, cell in net.cells_and_names():
        tp = getattr(cell, "tp", None)
        if tp is not None:
            return tp
    return SINGLE


def full_shape(local_shape, axis: Optional[int], tp_size: int):
    shape = list(local_shape)
    if axis is not None:
        shape[axis] *= tp_size
    return tuple(shape)


def take_shard(full: np.ndarray, axis: Optional[int], tp_size: int, tp_rank: int) -> np.ndarray:
    """This rank's slice of a full tensor."""
    if axis is None or tp_size == 1:
        return full
    n = full.shape[axis] // tp_size
    index = [slice(None)] * full.ndim
    index[axis] = slice(tp_rank * n, (tp_rank + 1) * n)
    return full[tuple(index)]
