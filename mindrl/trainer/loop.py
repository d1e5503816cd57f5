"""The one RL loop. PPO, GRPO, DAPO, Dr.GRPO, RLOO, REINFORCE++ and GSPO are this step with other registry
entries and roles:

    exp = make_experience()              rollout, rewards (rules, reward model), old/reference log-probs, values
    exp = advantages(exp)                KL in the reward (if so configured), then rl_config.adv_estimator
    [critic.update(exp)]                 when the estimator needs a critic (gae)
    policy.update(exp); policy.reshard() clipped policy loss, weights into the rollout model in place

Every msrun worker runs this same code; the roles (roles/) own the networks and their layouts, the stages
(experience_maker.py, algorithms/) own the math, and this file only orders and times them.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from mindrl.config import TrainConfig
from mindrl.trainer.guard import NumericalGuard, TrainingDiverged  # noqa: F401 (TrainingDiverged: callers' name)
from mindrl.trainer.metrics import Timers, memory_metrics, rollout_metrics, throughput

log = logging.getLogger("mindrl.train")


class RLTrainer:
    def __init__(self, cfg: TrainConfig, reward_funcs=None, run_dir: bool = True):
        """``run_dir``: claim a run directory (logging.log_dir); False for work that writes no run (evaluate)."""
        from mindrl.algorithms import get_advantage_estimator, make_kl_controller
        from mindrl.rewards.computer import build_reward_computer
        from mindrl.trainer.checkpointer import BestCheckpoint, Checkpointer, restore_run_state
        from mindrl.trainer.context import RunContext
        from mindrl.trainer.evaluation import Evaluator
        from mindrl.trainer.experience_maker import ExperienceMaker
        from mindrl.trainer.roles import Critic, Policy, Reference, RewardScorer
        from mindrl.trainer.preflight import preflight
        started = time.perf_counter()
        self.cfg, rl = cfg, cfg.rl_config
        preflight(cfg)  # files that do not fit the config are refused before anything is built
        self.rewards = build_reward_computer(rl, reward_funcs)  # a bad verifier fails before any model is built
        self.run = run = RunContext.create(cfg, run_dir)
        self.estimator = get_advantage_estimator(rl.adv_estimator)
        self.policy = Policy(run)
        self.reference = Reference(run) if rl.kl_coef > 0 else None
        self.critic = Critic(run) if self.estimator.needs_critic else None
        self.reward_model = RewardScorer(run) if cfg.reward_config is not None else None
        self.kl_ctrl = make_kl_controller(rl.kl_ctrl_type, rl.kl_coef, rl.kl_target, rl.kl_horizon) \
            if rl.use_kl_in_reward else None
        self.maker = ExperienceMaker(run, self.policy, self.rewards, self.reference, self.critic, self.reward_model)
        self.evaluate = Evaluator(run, self.policy, self.rewards, self.maker.sampling.stop_token_ids)
        self.checkpointer = Checkpointer(run, [r for r in (self.policy, self.critic) if r is not None])
        self.best = BestCheckpoint.create(cfg.actor_config, run.topo.is_main)  # None without actor_config.save_best
        self.step = 0
        self.guard = NumericalGuard(rl.max_bad_steps, run.topo.is_main)
        restore_run_state(self, self.checkpointer.resume())
        self.policy.reshard()  # the infer model starts from the loaded (or resumed) train weights
        if run.static_shapes:
            self.compile_all()
        if run.topo.is_main:
            log.info("start-up took %.2f s (build, load, %s)", time.perf_counter() - started,
                     "compile all graphs" if run.static_shapes else "graphs compile on first use")

    def train_step(self) -> dict:
        rl, timers = self.cfg.rl_config, Timers()
        lr = self.policy.lr_at(self.step)
        skipped_before = self._skipped()
        with timers("all"):
            exp, metrics = self.maker.make(timers)
            reward_ok = bool(np.isfinite(exp.scores).all())
            if reward_ok:  # a non-finite reward would poison every advantage: no update at all this step
                with timers("adv"):
                    metrics.update(self.compute_advantages(exp))
                if self.critic is not None:
                    with timers("update_critic"):
                        metrics.update(self.critic.update(exp, self.step))
                if self.step >= rl.critic_warmup:  # during the critic's warm-up the actor waits for useful values
                    with timers("update"):
                        metrics.update(self.policy.update(exp, lr, self.step))
                    with timers("reshard_to_infer"):
                        self.policy.reshard()
        metrics.update(rollout_metrics(exp, self.cfg.generate_config.max_tokens, self.estimator.needs_groups))
        metrics.update(timers.values, **{"actor/lr": lr})
        metrics.update(throughput(metrics, rl.global_batch_size, rl.n_samples_per_prompt, self.run.topo.world))
        metrics["train/skipped_updates"] = self._skipped() - skipped_before
        metrics.update(memory_metrics())
        self.step += 1
        self.guard.check(self.step, metrics, reward_ok, self.checkpointer.newest)
        return metrics

    def _skipped(self) -> int:
        return sum(r.updater.skipped for r in (self.policy, self.critic) if r is not None)

    def compute_advantages(self, exp) -> dict:
        """Sequence totals (score - KL penalty with KL in the reward), token rewards only for a token-level estimator
        (None otherwise), then rl_config.adv_estimator. Fills exp.token_rewards/advantages/returns."""
        from mindrl.algorithms import AdvantageInputs, kl_penalized_token_rewards, kl_reward_penalty
        rl, metrics, tokens, totals = self.cfg.rl_config, {}, None, exp.scores
        if self.kl_ctrl is not None:  # steps the controller: needed whatever the estimator reads
            tokens, kl, metrics = kl_reward_penalty(exp.scores, exp.old_log_probs, exp.ref_log_probs,
                                                    exp.response_mask, self.kl_ctrl, rl.kl_penalty)
            totals = exp.scores - metrics["actor/reward_kl_penalty_coeff"] * kl.sum(-1)
        elif self.estimator.token_level:
            tokens = kl_penalized_token_rewards(exp.scores, np.zeros_like(exp.response_mask), exp.response_mask, 0.0)
        exp.token_rewards = tokens if self.estimator.token_level else None
        if exp.token_rewards is None:  # else rollout_metrics sums the token rewards the estimator read
            metrics["critic/rewards/mean"] = float(np.mean(totals))
        options = {k: getattr(rl, k) for k in self.estimator.options}
        inputs = AdvantageInputs(totals, exp.token_rewards, exp.loss_mask, exp.group, exp.values, options)
        exp.advantages, exp.returns = self.estimator.compute(inputs)
        return metrics

    # -- the run ------------------------------------------------------------------------------------
    def fit(self) -> dict:
        from mindrl.trainer.run_log import RunLog
        rl, actor, ev = self.cfg.rl_config, self.cfg.actor_config, self.cfg.eval
        out = RunLog(self.cfg, self.run.topo.is_main, start=self.step, compiled=self.run.static_shapes)
        if ev.path and self.step == 0:  # a resumed run measured its start already
            out.eval("before", self.step, self.evaluate())
        while self.step < rl.train_iters:
            metrics = self.train_step()
            last = self.step == rl.train_iters
            if ev.path and (last or ev.interval and self.step % ev.interval == 0):
                metrics.update(self.evaluate())  # in the step's own row: every step is one line of metrics.jsonl
            out.step(self.step, metrics)
            saved = self.save() if actor.save and (last or actor.save_interval and self.step % actor.save_interval
                                                   == 0) else None
            if self.best is not None and self.best.better(metrics):  # actor_config.save_best
                self.best.keep(saved or self.save(), self.step, metrics[actor.save_best])
        if ev.path:
            last_row = out.summary.get("last") or self.evaluate()
            out.eval("after", self.step, {k: v for k, v in last_row.items() if k.startswith("eval/")}, record=False)
        self.rewards.close()
        return out.close()

    def save(self) -> str:
        from mindrl.trainer.checkpointer import run_state
        NumericalGuard.refuse_non_finite([r for r in (self.policy, self.critic) if r is not None], self.step)
        return self.checkpointer.save(self.step, run_state(self))

    def roles(self):
        return [r for r in (self.policy, self.reference, self.critic, self.reward_model) if r is not None]

    def compile_all(self) -> None:
        """Every graph of the run, role by role in a fixed order (the compile cache matches entries by order)."""
        log.info("compiling every graph of the run (a warm runtime.compile_cache_path loads them instead)")
        for role in self.roles():
            role.compile(*self.run.static_widths())


GRPOTrainer = RLTrainer  # the name TRL and MindSpeed-RL users look for; the loop serves every estimator
