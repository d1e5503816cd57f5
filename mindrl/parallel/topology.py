"""Who this process is in a multi-rank run, and each stage's (dp, tp) place.

A stage is one network's layout: ``train`` (the policy and reference updates), ``infer`` (rollout), and for PPO
``critic``. Every msrun worker holds every stage; only the split differs. With one process every layout is
(1, 1) and nothing here builds a collective.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Optional

if TYPE_CHECKING:  # parallel.state imports MindSpore: preflight reads launch_topology and must stay quick
    from mindrl.parallel.state import Layout


@dataclass
class Topology:
    rank: int
    world: int
    layouts: Dict[str, Layout] = field(default_factory=dict)
    scheduler: bool = False  # msrun's scheduler process: it only coordinates init() and runs no stage

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def train(self) -> Layout:
        return self.layouts["train"]

    @property
    def infer(self) -> Layout:
        return self.layouts["infer"]

    def __getitem__(self, stage: str) -> Layout:
        return self.layouts[stage]


def build_topology(stages: Dict[str, tuple]) -> Topology:
    """``stages`` maps a stage name to ``(tp, dp or None, what)``; ``what`` names the config key in errors.

    Initialises communication first when msrun started this process.
    """
    from mindrl.parallel.state import init_distributed, make_layout
    rank, world = init_distributed()
    layouts = {name: make_layout(world, rank, tp, dp, what=what) for name, (tp, dp, what) in stages.items()}
    return Topology(rank, world, layouts)


def launch_topology() -> Topology:
    """This process's place as the launcher announced it (msrun's MS_WORKER_NUM, or RANK_SIZE, RANK_ID and MS_ROLE),
    read without starting communication and without layouts: for what runs before :func:`build_topology`
    (preflight, the compile cache's key). Where msrun numbers the ranks only at init() (several nodes without
    --node_rank) ``rank`` reads 0 here."""
    world = int(os.environ.get("MS_WORKER_NUM") or os.environ.get("RANK_SIZE") or 1)
    return Topology(int(os.environ.get("RANK_ID") or 0), world, scheduler=os.environ.get("MS_ROLE") == "MS_SCHED")


def shard_rows(n: int, layout: Optional[Layout]) -> slice:
    """The contiguous rows ``[r*n/dp, (r+1)*n/dp)`` this rank's data-parallel replica works on."""
    if layout is None or layout.dp == 1:
        return slice(0, n)
    share = n // layout.dp
    return slice(layout.dp_rank * share, (layout.dp_rank + 1) * share)
