"""The policy: ``ppo_model_train`` (updated, in the train layout) and ``ppo_model_infer`` (rollout with a KV cache,
in the infer layout). After each update the train weights are copied into the infer model in place; when the two
layouts are equal they are one network and the copy costs nothing.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import List

import numpy as np

from mindrl.algorithms.losses import ActorLoss
from mindrl.parallel.reshard import Resharder
from mindrl.rollout.generator import Generator
from mindrl.trainer.actor_graphs import ActorLossCell, log_prob_scorer, pack_arrays
from mindrl.trainer.layer_graphs import scoring_cell
from mindrl.trainer.roles.base import Stage, TrainedNetwork, build_net, compile_scorer, score_in_shares

log = logging.getLogger("mindrl.train")


class Policy(TrainedNetwork):
    name = "policy"

    def __init__(self, run, spec, ptx=None):
        """``ptx``: a PtxTerm factory (PPO-ptx's supervised term shares this network's gradient buffers)."""
        super().__init__(run, spec)
        plan, topo = run.plan, run.topo
        self._build("causal_lm")
        # the rollout model: the train network itself when the layouts match, LoRA's adapters included (decoding
        # adds their two rank-r products per projection, and the base is held once); else a copy in the infer
        # layout whose weights come from the train model by reshard (merged with the adapters, W + s A B)
        lora = spec.lora
        self.infer_net = self.net if topo.infer.tp == topo.train.tp else \
            build_net(spec, "causal_lm", topo.infer, self.model_config, rename="infer", train=False, init=False)
        self.resharder = Resharder(self.net, self.infer_net, topo.train.tp_context(), topo.infer.tp_context(),
                                   lora.scale if lora else 0.0)
        ro = plan.rollout
        partial = ro.max_split > 1  # paused responses come back as prompt + their tokens so far
        self.generator = Generator(self.infer_net, max_batch=plan.batch.rollout_batch,
                                   max_prompt_len=ro.max_prompt_length, max_new_tokens=ro.max_tokens,
                                   pad_id=run.pad_id, static_prompt_shape=run.static_shapes,
                                   resume_prefix_len=ro.max_prompt_length + (ro.max_split - 1) * ro.round_tokens
                                   if partial else 0, resume_new_tokens=ro.round_tokens if partial else 0,
                                   prefill_rows=max(1, plan.batch.rollout_batch // plan.batch.samples_per_prompt))
        loss = spec.loss
        # shared prompts: the update's rows are packed groups (actor_graphs.pack_groups), one prompt per group
        self.group = plan.batch.shared_group(spec.micro_batch)
        self.loss_cell = ActorLossCell(self.net, ActorLoss(**dataclasses.asdict(loss)), ro.temperature,
                                       loss.entropy_coeff > 0, self.group)
        self.scoring_group = plan.batch.shared_group(spec.scoring_micro_batch)
        self.scorer = scoring_cell(self.loss_cell.scorer if self.scoring_group == self.group else
                                   log_prob_scorer(self.net, ro.temperature, self.scoring_group),
                                   self.net.model, spec.layer_graphs)
        self._train_with(self.loss_cell)
        self.ptx = ptx(run, self.net, self.net.trainable_params(), self.updater.accumulate.accum) if ptx else None

    # -- the RL step ------------------------------------------------------------------------------------
    def generate(self, prompts, sampling, seed: int):
        return self.generator.generate(prompts, sampling, seed=seed)

    def continue_requests(self, requests, sampling, seed: int):
        """Prompts and paused responses (rollout.generator.Request), for partial rollout."""
        return self.generator.run(requests, sampling, seed=seed, park=True)

    def log_probs(self, exp) -> np.ndarray:
        """Log-probs of ``exp``'s response tokens under the current train weights, [N, R] on every rank."""
        return score_in_shares(self.scorer, exp, self.layout, self.run.exchange, self.spec.scoring_micro_batch,
                               self.scoring_group)

    def update_arrays(self, exp):
        """(the loss cell's inputs, the loss mask) for ``exp``: one row per response, or with shared prompts one
        packed row per group (actor_graphs.pack_groups) and the per-response arrays as [groups, n, R]."""
        ref = exp.ref_log_probs if exp.ref_log_probs is not None else np.zeros_like(exp.old_log_probs)
        arrays = {"input_ids": exp.input_ids, "attention_mask": exp.attention_mask, "loss_mask": exp.loss_mask,
                  "old_log_probs": exp.old_log_probs, "ref_log_probs": ref,
                  # TIS weights a token's clipped loss; the loss is homogeneous in the advantage (algorithms/tis.py)
                  "advantages": exp.advantages if exp.tis_weight is None else exp.advantages * exp.tis_weight}
        if not self.group:
            return arrays, exp.loss_mask
        arrays = pack_arrays(arrays, self.group)
        return arrays, arrays["loss_mask"]

    def update(self, exp, step: int) -> dict:
        """The plan's passes of clipped policy-gradient updates over ``exp``; metrics ``actor/*``."""
        if self.ptx is not None:
            self.ptx.begin_step()
        arrays, loss_mask = self.update_arrays(exp)
        out = self._update(arrays, loss_mask, step, extra_terms=[self.ptx] if self.ptx is not None else [],
                           group=self.group)
        return {f"actor/{k}": v for k, v in out.items()}

    def reshard(self) -> None:
        self.resharder()

    # -- graphs and layouts ---------------------------------------------------------------------------
    def stages(self) -> List[Stage]:
        return [Stage("infer_policy", self.infer_net, self.run.topo.infer),
                Stage("train_policy", self.net, self.layout, with_optimizer=True)]

    def compile(self, prompt_width: int, response_width: int) -> None:
        """Prefill, every decode and reorder bucket, then the update and scoring graphs, always in this order."""
        for b in self.generator.decode_buckets:
            self.generator.warmup(b, self.run.plan.batch.samples_per_prompt)
        self._compile_update(prompt_width, response_width, self.group)
        if self.ptx is not None:
            self.ptx.compile()
        compile_scorer(self.scorer, self.spec.scoring_micro_batch, prompt_width, response_width, self.scoring_group)
