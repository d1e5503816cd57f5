"""Who this process is in a multi-rank run, and each stage's (dp, tp) place.

A stage is one network's layout: ``train`` (the policy and reference updates), ``infer`` (rollout), and for PPO
``critic``. Every msrun worker holds every stage; only the split differs. With one process every layout is
(1, 1) and nothing here builds a collective.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from mindrl.parallel.state import Layout, init_distributed, make_layout


@dataclass
class Topology:
    rank: int
    world: int
    layouts: Dict[str, Layout] = field(default_factory=dict)

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
    rank, world = init_distributed()
    layouts = {name: make_layout(world, rank, tp, dp, what=what) for name, (tp, dp, what) in stages.items()}
    return Topology(rank, world, layouts)


def shard_rows(n: int, layout: Optional[Layout]) -> slice:
    """The contiguous rows ``[r*n/dp, (r+1)*n/dp)`` this rank's data-parallel replica works on."""
    if layout is None or layout.dp == 1:
        return slice(0, n)
    share = n // layout.dp
    return slice(layout.dp_rank * share, (layout.dp_rank + 1) * share)
