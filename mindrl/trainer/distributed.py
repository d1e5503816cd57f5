"""What the single controller needs when several msrun workers run it: stage layouts, exchanging
rollouts and log-probs between ranks, summing metrics, barriers. With one process every helper here is
a no-op and builds no collective.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from mindrl.parallel.state import Layout, init_distributed, make_layout


@dataclass
class Topology:
    rank: int
    world: int
    train: Layout
    infer: Layout

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def build_topology(cfg) -> Topology:
    rank, world = init_distributed()
    actor, gen, rl = cfg.actor_config, cfg.generate_config, cfg.rl_config
    train = make_layout(world, rank, actor.tensor_model_parallel_size,
                        what="actor_config.tensor_model_parallel_size")
    infer = make_layout(world, rank, gen.infer_tensor_parallel_size, gen.infer_data_parallel_size,
                        what="generate_config.infer_tensor_parallel_size")
    if rl.global_batch_size % infer.dp:
        raise ValueError(f"rl_config.global_batch_size={rl.global_batch_size} is not divisible by the rollout's "
                         f"data parallel size {infer.dp} (world {world} / infer tp {infer.tp})")
    if rl.mini_batch_size % (train.dp * rl.micro_batch_size):
        raise ValueError(f"rl_config.mini_batch_size={rl.mini_batch_size} must split into train data parallel "
                         f"size {train.dp} x micro_batch_size {rl.micro_batch_size}")
    return Topology(rank, world, train, infer)


class Exchange:
    """Host-side collectives on numpy arrays (world group), built lazily, only when world > 1."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self._gather = None
        self._sum = None

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        """[world, *x.shape] float32: every rank's array (equal shapes on every rank)."""
        if self.topo.world == 1:
            return x[None].astype(np.float32)
        from mindspore import Tensor
        from mindrl.parallel.comm import WorldAllGather
        if self._gather is None:
            self._gather = WorldAllGather()
        return self._gather(Tensor(np.ascontiguousarray(x, np.float32))).asnumpy()

    def all_sum(self, x: np.ndarray) -> np.ndarray:
        """Sum over every rank (float32)."""
        if self.topo.world == 1:
            return np.asarray(x, np.float32)
        from mindspore import Tensor
        from mindrl.parallel.comm import AllReduceSum
        from mindrl.parallel.state import world_group
        if self._sum is None:
            self._sum = AllReduceSum(world_group())
        return self._sum(Tensor(np.ascontiguousarray(x, np.float32))).asnumpy()

    def barrier(self):
        self.all_sum(np.zeros(1, np.float32))

    def from_each(self, x: np.ndarray, layout: Layout) -> np.ndarray:
        """Concatenate, in dp order, one copy of each data-parallel replica's array (its tp rank 0's)."""
        if self.topo.world == 1:
            return x
        stacked = self.all_gather(x)
        return np.concatenate([stacked[d * layout.tp] for d in range(layout.dp)], axis=0)


def pack_rollout(batch: dict, max_prompt: int, max_tokens: int) -> np.ndarray:
    """A float32 matrix of one rank's rollout (token ids are exact in float32 below 2**24)."""
    n = len(batch["tokens"])
    per = list(batch["per"])
    width = 2 + max_prompt + 2 * max_tokens + 4 + len(per)
    out = np.zeros((n, width), np.float32)
    for i in range(n):
        p, t = batch["prompts"][i], batch["tokens"][i]
        out[i, 0], out[i, 1] = len(p), len(t)
        out[i, 2:2 + len(p)] = p
        o = 2 + max_prompt
        out[i, o:o + len(t)] = t
        out[i, o + max_tokens:o + max_tokens + len(t)] = batch["log_probs"][i]
        o += 2 * max_tokens
        out[i, o:o + 4] = [batch["finished"][i], batch["scores"][i], batch["rewards"][i], 0.0]
        for j, name in enumerate(per):
            out[i, o + 4 + j] = batch["per"][name][i]
    return out


def unpack_rollout(mat: np.ndarray, per_names: List[str], max_prompt: int, max_tokens: int, dapo: dict) -> dict:
    batch = {"prompts": [], "tokens": [], "log_probs": [], "finished": []}
    o = 2 + max_prompt
    for row in mat:
        lp, lt = int(row[0]), int(row[1])
        batch["prompts"].append([int(x) for x in row[2:2 + lp]])
        batch["tokens"].append([int(x) for x in row[o:o + lt]])
        batch["log_probs"].append(row[o + max_tokens:o + max_tokens + lt].astype(np.float32))
        batch["finished"].append(bool(row[o + 2 * max_tokens]))
    f = o + 2 * max_tokens
    batch["scores"] = mat[:, f + 1].astype(np.float64)
    batch["rewards"] = mat[:, f + 2].astype(np.float32)
    batch["per"] = {name: mat[:, f + 4 + j].astype(np.float32) for j, name in enumerate(per_names)}
    batch["dapo"] = dapo
    return batch
