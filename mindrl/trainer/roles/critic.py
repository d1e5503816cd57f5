"""PPO's critic: a value head on the backbone, a separate model with its own layout, optimizer and schedule.

Its first weights, in this order: the run being resumed (its checkpoint's critic/), ``critic_config.load``, the
reward model (OpenRLHF's default: a critic that starts knowing what is rewarded), else the policy's backbone. A
source without a value/score head gets a zero head, so every value starts at 0.
"""
from __future__ import annotations

import logging
from typing import List

import numpy as np
import mindspore as ms

from mindrl.trainer.roles.base import Stage, TrainedRole, build_net, score_in_shares

log = logging.getLogger("mindrl.train")


def initial_critic_weights(cfg) -> tuple:
    """(path, role inside a mindrl checkpoint) the critic starts from, or (None, None) for random weights."""
    if not cfg.actor_config.finetune:
        return cfg.actor_config.load, "critic"
    if cfg.critic_config.load is not None:
        return cfg.critic_config.load, "critic"
    if cfg.reward_config is not None:
        return cfg.reward_config.load, "policy"  # an HF directory: the role does not apply
    return cfg.actor_config.load, "policy"


class Critic(TrainedRole):
    name = "critic"
    rename = "critic"

    def __init__(self, run):
        from mindrl.models.config import load_model_config
        from mindrl.models.weights import TensorSource, load_into, weights_path
        from mindrl.trainer.critic_graphs import CriticLossCell
        from mindrl.trainer.updater import Updater
        cfg = run.cfg
        cc, rl = cfg.critic_config, cfg.rl_config
        self.run, self.layout = run, run.topo["critic"]
        self.section = cc  # its optimizer, schedule and resume settings
        config = load_model_config(cc.model)
        if cfg.actor_config.compute_dtype:
            config = config.replace(compute_dtype=cfg.actor_config.compute_dtype)
        self.model_config = config
        path, role = initial_critic_weights(cfg)
        self.net = build_net(config, "value", self.layout, seed=run.seed + 7, init=path is None, rename=self.rename)
        head = False
        if path is not None:
            source = TensorSource(weights_path(path, role, verify=True))
            load_into(self.net, source, allow_missing=("score.",))
            head = "score.weight" in source
            log.info("critic weights loaded from %s%s", source.path, "" if head else " (backbone; zero value head)")
        if not head:
            self.net.score.weight.set_data(ms.Tensor(np.zeros(self.net.score.weight.shape, np.float32)))
        self.loss_cell = CriticLossCell(self.net, rl.cliprange_value)
        self.values_cell = self.loss_cell.values
        grad_reduce = None
        if self.layout.dp > 1:
            from mindrl.parallel.comm import AllReduceSum
            grad_reduce = AllReduceSum(self.layout.dp_group())
        self.updater = Updater(self.loss_cell, self.net.trainable_params(), cc, grad_reduce,
                               (ms.int32, ms.int32, ms.float32, ms.float32, ms.float32),
                               step_name=f"{self.rename}.global_step")

    def values(self, exp) -> np.ndarray:
        """V of every response token of ``exp``, [N, R] on every rank."""
        return score_in_shares(self.values_cell, exp, self.layout, self.run.exchange,
                               self.run.cfg.critic_config.micro_batch_size,
                               lambda e: (e.input_ids, e.attention_mask, e.loss_mask))

    def update(self, exp, step: int) -> dict:
        """``ppo_epochs`` passes of clipped value regression towards ``exp.returns``; metrics ``critic/*``."""
        from mindrl.trainer.context import seed_from
        from mindrl.trainer.updater import update_epochs
        cfg = self.run.cfg
        rl = cfg.rl_config
        lr = self.lr_at(step)
        arrays = {"input_ids": exp.input_ids, "attention_mask": exp.attention_mask, "loss_mask": exp.loss_mask,
                  "old_values": exp.values, "returns": exp.returns}
        out = update_epochs(self.updater, arrays, exp.loss_mask, epochs=rl.ppo_epochs, mini_batch=rl.mini_batch_size,
                            micro_batch=cfg.critic_config.micro_batch_size, loss_agg_mode="token-mean",
                            layout=self.layout, exchange=self.run.exchange,
                            order_seed=(lambda epoch: seed_from(self.run.seed, step, epoch, 7))
                            if rl.shuffle_minibatch else None, lr=lr)
        return {**{f"critic/{k}": v for k, v in out.items()}, "critic/lr": lr}

    def lr_at(self, step: int) -> float:
        from mindrl.trainer.optim import lr_at
        cc, rl = self.run.cfg.critic_config, self.run.cfg.rl_config
        warmup = int(round(cc.lr_warmup_fraction * rl.train_iters)) if cc.lr_warmup_fraction else cc.lr_warmup_iters
        return lr_at(step, lr=cc.lr, min_lr=cc.min_lr, warmup=warmup, total=rl.train_iters, style=cc.lr_decay_style)

    def hf_config(self) -> dict:
        return value_model_hf_config(self.model_config, self.run.pad_id)

    def stages(self) -> List[Stage]:
        return [Stage("train_critic", self.net, self.layout, with_optimizer=True)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        from mindspore import Tensor
        mb = self.run.cfg.critic_config.micro_batch_size
        ids = np.full((mb, prompt_width + response_width), self.run.pad_id, np.int32)
        zeros = np.zeros((mb, response_width), np.float32)
        self.updater.compile([ids, np.ones_like(ids), zeros, zeros, zeros])
        self.values_cell.compile(Tensor(ids), Tensor(np.ones_like(ids)), Tensor(zeros))


def value_model_hf_config(model_config, pad_id: int, extra: dict = None) -> dict:
    """config.json of a one-output sequence-classification model (a value or reward model): transformers'
    AutoModelForSequenceClassification loads the directory, and mindrl takes it as a critic or reward model."""
    doc = model_config.to_hf_dict()
    arch = {"qwen2": "Qwen2", "qwen3": "Qwen3", "llama": "Llama"}[model_config.model_type]
    doc.update({"architectures": [f"{arch}ForSequenceClassification"], "num_labels": 1,
                "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "pad_token_id": int(pad_id)})
    doc.update(extra or {})
    return doc
