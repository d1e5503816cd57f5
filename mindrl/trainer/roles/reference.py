"""The reference policy: frozen weights in the train layout, giving the log-probs the KL term compares with.
Without weights of its own it is the policy's random initialisation (the same seed), i.e. the policy at step 0."""
from __future__ import annotations

import logging
from typing import List

import numpy as np

from mindrl.parallel.reshard import rename_parameters
from mindrl.trainer.actor_graphs import log_prob_scorer
from mindrl.trainer.layer_graphs import scoring_cell
from mindrl.trainer.roles.base import Stage, build_net, compile_scorer, load_weights, score_in_shares

log = logging.getLogger("mindrl.train")


class Reference:
    name = "reference"

    def __init__(self, run, spec, lora_policy=None):
        """``lora_policy``: a LoRA policy whose frozen base this reference is (its adapters off): the network
        shares the policy's base Parameters, so there is no second copy of the weights."""
        self.run, self.spec, self.layout = run, spec, run.topo[spec.stage]
        self.model_config = spec.model.load()
        self.net = build_net(spec, "causal_lm", self.layout, self.model_config,
                             init=False if lora_policy is not None else None)
        if lora_policy is not None:
            share_base(self.net, lora_policy.net)
        else:
            source = load_weights(self.net, spec.weights)
            if source:
                log.info("reference weights loaded from %s", source)
            rename_parameters(self.net, "ref")  # after loading: files name the parameters without the prefix
        self.net.set_train(False)
        self.group = run.plan.batch.shared_group(spec.micro_batch)  # > 0: each prompt once per group (pack_arrays)
        self.scorer = scoring_cell(log_prob_scorer(self.net, run.plan.rollout.temperature, self.group),
                                   self.net.model, spec.layer_graphs)

    def log_probs(self, exp) -> np.ndarray:
        return score_in_shares(self.scorer, exp, self.layout, self.run.exchange, self.spec.micro_batch, self.group)

    def stages(self) -> List[Stage]:
        return [Stage("train_ref", self.net, self.layout)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        compile_scorer(self.scorer, self.spec.micro_batch, prompt_width, response_width, self.group)


def share_base(net, adapted) -> None:
    """Make every Parameter of ``net`` the one of the same name in ``adapted`` (the same model with adapters)."""
    cells = dict(adapted.cells_and_names())
    for name, cell in net.cells_and_names():
        for attr in list(cell._params):
            setattr(cell, attr, getattr(cells[name], attr))
