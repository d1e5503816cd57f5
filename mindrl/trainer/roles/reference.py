"""The reference policy: frozen weights in the train layout, giving the log-probs the KL term compares with."""
from __future__ import annotations

import logging
from typing import List

import numpy as np

from mindrl.config import ConfigError
from mindrl.trainer.roles.base import Stage, build_net, load_weights, score_in_shares

log = logging.getLogger("mindrl.train")


class Reference:
    name = "reference"

    def __init__(self, run):
        from mindrl.models.config import load_model_config
        from mindrl.trainer.actor_graphs import ResponseLogProbs
        cfg = run.cfg
        self.run, self.layout = run, run.topo.train
        config = load_model_config(cfg.ref.model)
        if config.vocab_size != run.model_config.vocab_size:
            raise ConfigError(f"ref.model: {cfg.ref.model} has vocab_size {config.vocab_size}, the policy "
                             f"{run.model_config.vocab_size}; the KL compares the two token by token")
        if cfg.actor_config.compute_dtype:
            config = config.replace(compute_dtype=cfg.actor_config.compute_dtype)
        self.model_config = config
        path = cfg.ref.ref_model_load_path
        # no weights given: the policy's own random initialisation (same seed), i.e. the policy at step 0
        self.net = build_net(config, "causal_lm", self.layout, seed=run.seed, init=path is None)
        if path is not None:
            log.info("reference weights loaded from %s", load_weights(self.net, path, "policy"))
        from mindrl.parallel.reshard import rename_parameters
        rename_parameters(self.net, "ref")
        self.net.set_train(False)
        self.scorer = ResponseLogProbs(self.net, cfg.generate_config.temperature)

    def log_probs(self, exp) -> np.ndarray:
        return score_in_shares(self.scorer, exp, self.layout, self.run.exchange,
                               self.run.cfg.rl_config.micro_batch_size,
                               lambda e: (e.input_ids, e.attention_mask, e.loss_mask))

    def stages(self) -> List[Stage]:
        return [Stage("train_ref", self.net, self.layout)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        from mindspore import Tensor
        mb = self.run.cfg.rl_config.micro_batch_size
        ids = np.full((mb, prompt_width + response_width), self.run.pad_id, np.int32)
        self.scorer.compile(Tensor(ids), Tensor(np.ones_like(ids)), Tensor(np.zeros((mb, response_width), np.float32)))
