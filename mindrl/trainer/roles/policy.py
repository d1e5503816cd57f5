"""The policy: ``ppo_model_train`` (updated, in the train layout) and ``ppo_model_infer`` (rollout with a KV cache,
in the infer layout). After each update the train weights are copied into the infer model in place; when the two
layouts are equal they are one network and the copy costs nothing.
"""
from __future__ import annotations

import logging
from typing import List

import numpy as np
import mindspore as ms

from mindrl.trainer.roles.base import Stage, TrainedRole, build_net, load_weights, score_in_shares

log = logging.getLogger("mindrl.train")


class Policy(TrainedRole):
    name = "policy"

    def __init__(self, run):
        from mindrl.algorithms.losses import ActorLoss
        from mindrl.parallel.reshard import Resharder
        from mindrl.rollout.generator import Generator
        from mindrl.trainer.actor_graphs import ActorLossCell
        from mindrl.trainer.updater import Updater
        cfg, topo = run.cfg, run.topo
        actor, rl, gen = cfg.actor_config, cfg.rl_config, cfg.generate_config
        self.run, self.model_config, self.layout = run, run.model_config, topo.train
        self.section = actor  # its optimizer, schedule and resume settings
        self.net = build_net(self.model_config, "causal_lm", topo.train, seed=run.seed, init=actor.load is None,
                             train=None)
        if actor.load:
            log.info("policy weights loaded from %s", load_weights(self.net, actor.load, "policy"))
        # the rollout model: the train network itself when the layouts match, else a copy in the infer layout
        # whose weights come from the train model by reshard (no checkpoint is read twice)
        self.infer_net = self.net if topo.infer.tp == topo.train.tp else \
            build_net(self.model_config, "causal_lm", topo.infer, init=False, rename="infer", train=False)
        self.resharder = Resharder(self.net, self.infer_net, topo.train.tp_context(), topo.infer.tp_context())
        rows = rl.global_batch_size * rl.n_samples_per_prompt // topo.infer.dp
        self.generator = Generator(self.infer_net, max_batch=gen.micro_batch_size or rows,
                                   max_prompt_len=gen.max_prompt_length, max_new_tokens=gen.max_tokens,
                                   pad_id=run.pad_id, static_prompt_shape=run.static_shapes)
        loss = ActorLoss(clip_ratio_low=rl.clip_ratio_low, clip_ratio_high=rl.clip_ratio_high,
                         clip_ratio_c=rl.clip_ratio_c, loss_agg_mode=rl.loss_agg_mode,
                         use_kl_in_loss=rl.use_kl_in_loss and rl.kl_coef > 0, kl_penalty=rl.kl_penalty,
                         kl_coef=rl.kl_coef, entropy_coeff=rl.entropy_coeff, policy_loss_name=rl.policy_loss,
                         norm_len=gen.max_tokens)
        self.loss_cell = ActorLossCell(self.net, loss, gen.temperature, rl.entropy_coeff > 0)
        self.scorer = self.loss_cell.scorer
        grad_reduce = None
        if topo.train.dp > 1:
            from mindrl.parallel.comm import AllReduceSum
            grad_reduce = AllReduceSum(topo.train.dp_group())
        self.updater = Updater(self.loss_cell, self.net.trainable_params(), actor, grad_reduce,
                               (ms.int32, ms.int32, ms.float32, ms.float32, ms.float32, ms.float32))
        self.ptx = None
        if rl.pretrain_coef > 0:  # PPO-ptx: a supervised term in the same optimizer steps
            from mindrl.trainer.ptx import PtxTerm
            self.ptx = PtxTerm(run, self.net, self.net.trainable_params(), self.updater.accumulate.accum)

    # -- the RL step ------------------------------------------------------------------------------------
    def generate(self, prompts, sampling, seed: int):
        return self.generator.generate(prompts, sampling, seed=seed)

    def log_probs(self, exp) -> np.ndarray:
        """Log-probs of ``exp``'s response tokens under the current train weights, [N, R] on every rank."""
        return score_in_shares(self.scorer, exp, self.layout, self.run.exchange,
                               self.run.cfg.rl_config.micro_batch_size,
                               lambda e: (e.input_ids, e.attention_mask, e.loss_mask))

    def update(self, exp, lr: float, step: int) -> dict:
        """``ppo_epochs`` passes of clipped policy-gradient updates over ``exp``; metrics ``actor/*``."""
        from mindrl.trainer.context import seed_from
        from mindrl.trainer.updater import update_epochs
        rl = self.run.cfg.rl_config
        ref = exp.ref_log_probs if exp.ref_log_probs is not None else np.zeros_like(exp.old_log_probs)
        if self.ptx is not None:
            self.ptx.begin_step()
        arrays = {"input_ids": exp.input_ids, "attention_mask": exp.attention_mask, "loss_mask": exp.loss_mask,
                  "old_log_probs": exp.old_log_probs, "advantages": exp.advantages, "ref_log_probs": ref}
        out = update_epochs(self.updater, arrays, exp.loss_mask, epochs=rl.ppo_epochs, mini_batch=rl.mini_batch_size,
                            micro_batch=rl.micro_batch_size, loss_agg_mode=rl.loss_agg_mode, layout=self.layout,
                            exchange=self.run.exchange, order_seed=(lambda epoch: seed_from(self.run.seed, step, epoch))
                            if rl.shuffle_minibatch else None,
                            lr=lr, extra_terms=[self.ptx] if self.ptx is not None else [])
        return {f"actor/{k}": v for k, v in out.items()}

    def reshard(self) -> None:
        self.resharder()

    def lr_at(self, step: int) -> float:
        from mindrl.trainer.optim import lr_at
        actor, rl = self.run.cfg.actor_config, self.run.cfg.rl_config
        warmup = int(round(actor.lr_warmup_fraction * rl.train_iters)) if actor.lr_warmup_fraction \
            else actor.lr_warmup_iters
        return lr_at(step, lr=actor.lr, min_lr=actor.min_lr, warmup=warmup, total=rl.train_iters,
                     style=actor.lr_decay_style)

    # -- graphs and layouts ---------------------------------------------------------------------------
    def stages(self) -> List[Stage]:
        return [Stage("infer_policy", self.infer_net, self.run.topo.infer),
                Stage("train_policy", self.net, self.layout, with_optimizer=True)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        """Prefill, every decode and reorder bucket, then the update and scoring graphs, always in this order."""
        from mindspore import Tensor
        for b in self.generator.decode_buckets:
            self.generator.warmup(b)
        mb = self.run.cfg.rl_config.micro_batch_size
        ids = np.full((mb, prompt_width + response_width), self.run.pad_id, np.int32)
        zeros = np.zeros((mb, response_width), np.float32)
        self.updater.compile([ids, np.ones_like(ids), zeros, zeros, zeros, zeros])
        if self.ptx is not None:
            self.ptx.compile()
        self.scorer.compile(Tensor(ids), Tensor(np.ones_like(ids)), Tensor(zeros))
