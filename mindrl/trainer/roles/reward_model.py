"""A trained reward model scoring rollouts: one number per sequence, read at its last real token, in the reward
model's own layout. Each data-parallel replica scores its share of the batch."""
from __future__ import annotations

import json
import logging
import os
from typing import List

import numpy as np

from mindrl.trainer.roles.base import Stage, build_net, load_weights, score_in_shares

log = logging.getLogger("mindrl.train")


def reward_statistics(path: str):
    """(mean, std) that `mindrl train-rm` (or OpenRLHF) stored in the model's config.json, or None."""
    cfg = os.path.join(path, "config.json") if os.path.isdir(path) else None
    if cfg is None or not os.path.exists(cfg):
        return None
    with open(cfg) as fh:
        doc = json.load(fh)
    if "mean" in doc and "std" in doc:
        return float(doc["mean"]), float(doc["std"])
    return None


class RewardScorer:
    name = "reward_model"

    def __init__(self, run):
        from mindrl.models.config import load_model_config
        rc = run.cfg.reward_config
        self.run, self.layout = run, run.topo["reward"]
        self.model_config = load_model_config(rc.model)
        self.net = build_net(self.model_config, "reward", self.layout, init=False, rename="rm", train=False)
        log.info("reward model loaded from %s", load_weights(self.net, rc.load))
        self.weight = rc.weight
        self.stats = reward_statistics(rc.load) if rc.normalize else None

    def score(self, exp) -> np.ndarray:
        """The reward model's score of every sequence (prompt + response) of ``exp``, normalised with the stored
        statistics when ``reward_config.normalize``; float32 [N] on every rank."""
        rm = self.run.cfg.reward_config
        out = score_in_shares(self.net, exp, self.layout, self.run.exchange, rm.micro_batch_size,
                              lambda e: (e.input_ids, e.attention_mask)).astype(np.float32)
        if self.stats is not None:
            mean, std = self.stats
            out = (out - mean) / max(std, 1e-8)
        return out

    def stages(self) -> List[Stage]:
        return [Stage("infer_reward", self.net, self.layout)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        from mindspore import Tensor
        mb = self.run.cfg.reward_config.micro_batch_size
        ids = np.full((mb, prompt_width + response_width), self.run.pad_id, np.int32)
        self.net.compile(Tensor(ids), Tensor(np.ones_like(ids)))
