"""A trained reward model scoring rollouts: one number per sequence, read at its last real token, in the reward
model's own layout. Each data-parallel replica scores its share of the batch."""
from __future__ import annotations

import logging
from typing import List

import numpy as np

from mindrl.models.config import reward_statistics
from mindrl.trainer.layer_graphs import scoring_cell
from mindrl.trainer.roles.base import Stage, build_net, compile_scorer, load_weights, score_in_shares

log = logging.getLogger("mindrl.train")


class RewardScorer:
    name = "reward_model"

    def __init__(self, run, spec):
        self.run, self.spec, self.layout = run, spec, run.topo[spec.stage]
        self.model_config = spec.model.load()
        self.net = build_net(spec, "reward", self.layout, self.model_config, rename="rm", train=False)
        log.info("reward model loaded from %s", load_weights(self.net, spec.weights))
        self.stats = reward_statistics(spec.weights.path) if run.plan.reward.rm_normalize else None
        self.scorer = scoring_cell(self.net, self.net.model, spec.layer_graphs)

    def score(self, exp) -> np.ndarray:
        """The reward model's score of every sequence (prompt + response) of ``exp``, normalised with the stored
        statistics when ``reward_config.normalize``; float32 [N] on every rank."""
        out = score_in_shares(self.scorer, exp, self.layout, self.run.exchange, self.spec.micro_batch)
        out = out.astype(np.float32)
        if self.stats is not None:
            mean, std = self.stats
            out = (out - mean) / max(std, 1e-8)
        return out

    def stages(self) -> List[Stage]:
        return [Stage("infer_reward", self.net, self.layout)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        compile_scorer(self.scorer, self.spec.micro_batch, prompt_width, response_width)
