"""PPO's critic: a value head on the backbone, a separate model with its own layout, optimizer and schedule.

Where its first weights come from is the run plan's decision (config/plan.py: critic_weights). A source without a
value/score head gets a zero head, so every value starts at 0.
"""
from __future__ import annotations

import logging
from typing import List

import numpy as np
import mindspore as ms

from mindrl.models.weights import TensorSource, load_into, weights_path
from mindrl.parallel.topology import shard_rows
from mindrl.trainer.critic_graphs import CriticLossCell, CriticValuesLossCell
from mindrl.trainer.layer_graphs import scoring_cell
from mindrl.trainer.roles.base import (Stage, TrainedNetwork, base_weights, build_net, compile_scorer,
                                       score_in_shares)

log = logging.getLogger("mindrl.train")


class Critic(TrainedNetwork):
    name = "critic"
    rename = "critic"

    def __init__(self, run, spec):
        super().__init__(run, spec)
        weights = base_weights(spec)  # with LoRA on resume: the base the checkpoint's adapter names
        self.net = build_net(spec, "value", self.layout, self.model_config, rename=self.rename,
                             init=weights.path is None)
        head, path = False, None
        if weights.path is not None:
            source = TensorSource(weights_path(weights.path, weights.part, verify=True))
            load_into(self.net, source, allow_missing=("score.",))
            head, path = "score.weight" in source, source.path
            log.info("critic weights loaded from %s%s", source.path, "" if head else " (backbone; zero value head)")
        if not head:
            self.net.score.weight.set_data(ms.Tensor(np.zeros(self.net.score.weight.shape, np.float32)))
        self._attach_lora(path)  # on a LoRA resume the value head comes back with the adapters
        # one update per step: the update's forward gives the step's values (no value pass, one graph fewer)
        self.values_in_update = run.plan.batch.critic_values_in_update
        if self.values_in_update:
            options = run.plan.estimator_options
            self.loss_cell = CriticValuesLossCell(self.net, spec.loss.cliprange_value, spec.loss.loss_agg_mode,
                                                  options.get("gamma", 1.0), options.get("lam", 0.95))
        else:
            self.loss_cell = CriticLossCell(self.net, spec.loss.cliprange_value, spec.loss.loss_agg_mode)
        self.values_cell = scoring_cell(self.loss_cell.values, self.net.model, spec.layer_graphs)
        self._train_with(self.loss_cell, step_name=f"{self.rename}.global_step")

    def values(self, exp) -> np.ndarray:
        """V of every response token of ``exp``, [N, R] on every rank (a pass of its own; see ``update``)."""
        return score_in_shares(self.values_cell, exp, self.layout, self.run.exchange, self.spec.micro_batch)

    def update(self, exp, step: int) -> dict:
        """The plan's passes of clipped value regression towards ``exp.returns``; metrics ``critic/*``.

        With ``values_in_update`` it runs before the advantages, on ``exp.token_rewards``: the returns are computed
        in the graph, and ``exp.values`` is set to the values its forward read (before its update)."""
        arrays = {"input_ids": exp.input_ids, "attention_mask": exp.attention_mask, "loss_mask": exp.loss_mask}
        if not self.values_in_update:
            arrays.update(old_values=exp.values, returns=exp.returns)
            out = self._update(arrays, exp.loss_mask, step, seed_salt=(7,))
        else:
            m = exp.loss_mask
            if (m[:, 1:] > m[:, :-1]).any():  # the graph's GAE is exact for a response then padding only
                raise RuntimeError("critic update: a loss mask has a hole inside a response; the returns computed "
                                   "in the critic's graph assume a response's tokens, then padding")
            rows = {}
            out = self._update({**arrays, "token_rewards": exp.token_rewards}, m, step, seed_salt=(7,),
                               row_outputs=rows)
            values = rows["values"]
            if self.layout.dp > 1:  # each replica computed its share of the rows (one update: in rollout order)
                values = self.run.exchange.from_each(values[shard_rows(len(exp), self.layout)], self.layout)
            exp.values = values.astype(np.float32)
        return {**{f"critic/{k}": v for k, v in out.items()}, "critic/lr": self.lr_at(step)}

    def hf_config(self) -> dict:
        return value_model_hf_config(self.model_config, self.run.pad_id)

    def stages(self) -> List[Stage]:
        return [Stage("train_critic", self.net, self.layout, with_optimizer=True)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        self._compile_update(prompt_width, response_width)
        if not self.values_in_update:
            compile_scorer(self.values_cell, self.spec.micro_batch, prompt_width, response_width)


def value_model_hf_config(model_config, pad_id: int, extra: dict = None) -> dict:
    """config.json of a one-output sequence-classification model (a value or reward model): transformers'
    AutoModelForSequenceClassification loads the directory, and mindrl takes it as a critic or reward model."""
    doc = model_config.to_hf_dict()
    arch = {"qwen2": "Qwen2", "qwen3": "Qwen3", "llama": "Llama"}[model_config.model_type]
    doc.update({"architectures": [f"{arch}ForSequenceClassification"], "num_labels": 1,
                "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "pad_token_id": int(pad_id)})
    doc.update(extra or {})
    return doc
