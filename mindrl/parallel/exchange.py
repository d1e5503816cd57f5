"""Host-side collectives on numpy arrays: how ranks share rollouts, log-probs and metrics.

Every rank runs the same controller, so after a stage that each data-parallel replica did on its share
(rollout, scoring), ``from_each`` gives every rank the global result in replica order. The world group is used
because AllGather works only there on CPU. With one process every method is a no-op and builds no collective.
"""
from __future__ import annotations

import numpy as np

from mindrl.parallel.comm import AllReduceSum, WorldAllGather
from mindrl.parallel.state import Layout, world_group


class Exchange:
    def __init__(self, world: int):
        self.world = world
        self._gather = None
        self._sum = None

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        """[world, *x.shape] float32: every rank's array (equal shapes on every rank)."""
        if self.world == 1:
            return x[None].astype(np.float32)
        from mindspore import Tensor
        if self._gather is None:
            self._gather = WorldAllGather()
        return self._gather(Tensor(np.ascontiguousarray(x, np.float32))).asnumpy()

    def all_sum(self, x: np.ndarray) -> np.ndarray:
        """Sum over every rank (float32)."""
        if self.world == 1:
            return np.asarray(x, np.float32)
        from mindspore import Tensor
        if self._sum is None:
            self._sum = AllReduceSum(world_group())
        return self._sum(Tensor(np.ascontiguousarray(x, np.float32))).asnumpy()

    def barrier(self):
        self.all_sum(np.zeros(1, np.float32))

    def from_each(self, x: np.ndarray, layout: Layout) -> np.ndarray:
        """Concatenate, in dp order, one copy of each data-parallel replica's array (its tp rank 0's)."""
        if self.world == 1:
            return x
        stacked = self.all_gather(x)
        return np.concatenate([stacked[d * layout.tp] for d in range(layout.dp)], axis=0)
