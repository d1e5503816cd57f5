"""Process groups and layouts: who this process is under msrun, and its (dp, tp) place per stage.

``init_distributed()`` calls ``mindspore.communication.init()`` only when msrun launched us
(a graph with a collective but no init() segfaults, and a single process must build none).
Ranks are row-major over ``[dp, tp]``: ``tp_rank = rank % tp``, ``dp_rank = rank // tp``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional


from mindrl.parallel.layers import TPContext

_STATE = {"initialized": False, "rank": 0, "world": 1, "groups": {}}


def launched_by_msrun() -> bool:
    return int(os.environ.get("MS_WORKER_NUM", os.environ.get("RANK_SIZE", "1")) or 1) > 1


def init_distributed():
    """(rank, world_size); initialises communication once when started by msrun."""
    if _STATE["initialized"]:
        return _STATE["rank"], _STATE["world"]
    if launched_by_msrun():
        from mindspore.communication import get_group_size, get_rank, init
        init()
        _STATE.update(rank=get_rank(), world=get_group_size())
    _STATE["initialized"] = True
    return _STATE["rank"], _STATE["world"]


def world_group() -> str:
    from mindspore.communication import GlobalComm
    return GlobalComm.WORLD_COMM_GROUP


def group_for(ranks) -> Optional[str]:
    """A communication group over ``ranks`` (None for a single rank); created once, by its members."""
    ranks = sorted(int(r) for r in ranks)
    if len(ranks) == 1:
        return None
    if len(ranks) == _STATE["world"]:
        return world_group()
    name = "mindrl_" + "_".join(map(str, ranks))
    if name not in _STATE["groups"]:
        from mindspore.communication import create_group
        create_group(name, ranks)
        _STATE["groups"][name] = ranks
    return name


@dataclass(frozen=True)
class Layout:
    """A stage's layout on ``world`` ranks."""
    dp: int
    tp: int
    rank: int = 0

    @property
    def tp_rank(self):
        return self.rank % self.tp

    @property
    def dp_rank(self):
        return self.rank // self.tp

    def tp_ranks(self):
        return [self.dp_rank * self.tp + i for i in range(self.tp)]

    def dp_ranks(self):
        return [d * self.tp + self.tp_rank for d in range(self.dp)]

    def tp_context(self) -> TPContext:
        if self.tp == 1:
            return TPContext()
        return TPContext(self.tp, self.tp_rank, group_for(self.tp_ranks()))

    def dp_group(self) -> Optional[str]:
        return group_for(self.dp_ranks()) if self.dp > 1 else None


def make_layout(world: int, rank: int, tp: int, dp: Optional[int] = None, what: str = "layout") -> Layout:
    if tp < 1 or world % tp:
        raise ValueError(f"{what}: tensor parallel size {tp} does not divide the world size {world}")
    dp = dp or world // tp
    if dp * tp != world:
        raise ValueError(f"{what}: data parallel {dp} x tensor parallel {tp} != world size {world}")
    return Layout(dp, tp, rank)
