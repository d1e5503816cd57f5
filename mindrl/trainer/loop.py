"""The one RL loop. PPO, GRPO, DAPO, Dr.GRPO, RLOO, REINFORCE++ and GSPO are this step with other registry
entries and roles:

    exp = make_experience()              rollout, rewards (rules, reward model), old/reference log-probs, values
                                         (a critic's, when it makes more than one update per step)
    exp = advantages(exp)                the estimator's reward (KL in it, if so planned), then its advantages
    [critic.update(exp)]                 when the estimator needs a critic (gae); with one update per step it
                                         runs between the two and its forward gives the values
    policy.update(exp); policy.reshard() clipped policy loss, weights into the rollout model in place

Every msrun worker runs this same code. The trainer turns the config into a run plan (config/plan.py) once; the
roles (roles/) own the networks and their layouts, the stages (experience_maker.py, algorithms/) own the math, and
this file only orders and times them, reading the plan.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from mindrl.algorithms import AdvantageInputs, estimator_rewards, get_advantage_estimator, make_kl_controller
from mindrl.config import TrainConfig
from mindrl.config.plan import plan_reward
from mindrl.io import write_text
from mindrl.rewards.computer import build_reward_computer
from mindrl.trainer.checkpointer import BestCheckpoint, Checkpointer, RunState, resume_keys, resumed_step
from mindrl.trainer.evaluation import Evaluator
from mindrl.trainer.guard import NumericalGuard
from mindrl.trainer.metrics import Timers, memory_metrics, rollout_metrics, throughput
from mindrl.trainer.preflight import preflight
from mindrl.trainer.run_log import RunLog
from mindrl.trainer.stopping import stopper_of

# Inside RLTrainer: the roles, the experience maker and the run context, which load MindSpore; `from mindrl
# import GRPOTrainer` and `mindrl train`'s config checks stay free of it

log = logging.getLogger("mindrl.train")


class RLTrainer:
    """The RL trainer, for every estimator, from a validated config (mindrl.GRPOTrainer, the Python API's name,
    also takes a yaml path or a dict).

    ``reward_funcs``: Python callables ``f(response, label) -> float`` the config's ``verifier_function`` names.
    ``run_dir``: claim a run directory (logging.log_dir); False for work that writes no run (``mindrl evaluate``,
    ``export-strategy``)."""

    def __init__(self, cfg: TrainConfig, reward_funcs=None, run_dir: bool = True):
        # MindSpore starts here, not at import: `from mindrl import GRPOTrainer` runs in msrun's scheduler process,
        # which must not load it before init()
        from mindrl.trainer.context import RunContext
        from mindrl.trainer.experience_maker import ExperienceMaker
        from mindrl.trainer.ptx import PtxTerm
        from mindrl.trainer.roles import Critic, Policy, Reference, RewardScorer
        started = time.perf_counter()
        self.cfg = cfg  # the run log, checkpoints and evaluation files read it; the step reads the plan
        preflight(cfg)  # files that do not fit the config are refused before anything is built
        # a bad verifier fails before any model is built; its workers load while the models build
        self.rewards = build_reward_computer(plan_reward(cfg), reward_funcs)
        self.run = run = RunContext.create(cfg, run_dir)
        plan = run.plan
        if run_dir and run.topo.is_main:
            self._announce()
        self.estimator = get_advantage_estimator(plan.estimator)
        roles = plan.roles
        self.policy = Policy(run, roles["policy"], ptx=PtxTerm if plan.schedule.pretrain_coef > 0 else None)
        self.reference = Reference(run, roles["reference"], self.policy if self.policy.spec.lora else None) \
            if "reference" in roles else None
        self.critic = Critic(run, roles["critic"]) if "critic" in roles else None
        self.reward_model = RewardScorer(run, roles["reward_model"]) if "reward_model" in roles else None
        kl = plan.reward.kl
        self.kl_ctrl = make_kl_controller(kl.controller, kl.coef, kl.target, kl.horizon) \
            if plan.reward.kl_in_reward else None
        self.maker = ExperienceMaker(run, self.policy, self.rewards, self.reference, self.critic, self.reward_model)
        self.evaluate = Evaluator(run, self.policy, self.rewards, self.maker.sampling.stop_token_ids)
        self.checkpointer = Checkpointer(run, [r for r in (self.policy, self.critic) if r is not None], cfg.actor_config)
        self.best = BestCheckpoint.create(plan.schedule, run.topo.is_main)  # None without actor_config.save_best
        self.state = RunState(run, self.maker, self.kl_ctrl, self.policy.ptx, resume_keys(cfg))
        self.guard = NumericalGuard(plan.schedule.max_bad_steps, run.topo.is_main)
        self.state.load_state_dict(self.checkpointer.resume(), restore_seed=not cfg.actor_config.no_load_rng)
        self.policy.reshard()  # the infer model starts from the loaded (or resumed) train weights
        if run.static_shapes:
            self.compile_all()
        if run.topo.is_main:
            log.info("start-up took %.2f s (build, load, %s)", time.perf_counter() - started,
                     "compile all graphs" if run.static_shapes else "graphs compile on first use")

    @property
    def step(self) -> int:
        return self.state.step

    @step.setter
    def step(self, value: int) -> None:
        self.state.step = value

    def _announce(self) -> None:
        """The run directory and the run plan, first, before anything is built; the plan also goes to plan.txt."""
        log_dir, actor = self.cfg.logging.log_dir, self.cfg.actor_config
        resumed = "" if actor.finetune else f" (resumed at step {resumed_step(actor.load)})"
        print(f"run directory: {log_dir}{resumed}", flush=True)
        print(self.run.plan.text(), flush=True)
        write_text(os.path.join(log_dir, "plan.txt"), self.run.plan.text() + "\n")

    def train_step(self) -> dict:
        plan, timers = self.run.plan, Timers()
        lr = self.policy.lr_at(self.step)
        skipped_before, updated = self._skipped(), {}  # updated: the roles that ran their updates (for the guard)
        with timers("all"):
            exp, metrics = self.maker.make(timers)
            reward_ok = bool(np.isfinite(exp.score).all())
            if reward_ok:  # a non-finite reward would poison every advantage: no update at all this step
                # a critic that makes one update per step gives the values its update's forward reads (the
                # estimator's rewards first, its returns in the graph); otherwise it trains on the returns
                critic_first = self.critic is not None and self.critic.values_in_update
                with timers("adv"):
                    metrics.update(self.compute_rewards(exp))
                if critic_first:
                    with timers("update_critic"):
                        metrics.update(self.critic.update(exp, self.step))
                with timers("adv"):
                    self.compute_estimator(exp)
                if self.critic is not None and not critic_first:
                    with timers("update_critic"):
                        metrics.update(self.critic.update(exp, self.step))
                if self.critic is not None:
                    updated["critic"] = self.critic
                if self.step >= plan.schedule.critic_warmup:  # the actor waits for a critic's useful values
                    with timers("update"):
                        metrics.update(self.policy.update(exp, self.step))
                    updated["actor"] = self.policy
                    with timers("reshard_to_infer"):
                        self.policy.reshard()
        metrics.update(rollout_metrics(exp, plan.rollout.max_tokens, self.estimator.needs_groups))
        metrics.update(timers.values, **{"actor/lr": lr})
        metrics.update(throughput(metrics, plan.batch.prompts, plan.batch.samples_per_prompt, self.run.topo.world,
                                  plan.schedule.log_max_throughput))
        metrics["train/skipped_updates"] = self._skipped() - skipped_before
        metrics.update(memory_metrics())
        self.step += 1
        self.guard.check(self.step, metrics, reward_ok, updated, self.checkpointer.newest_intact)
        return metrics

    def _skipped(self) -> int:
        return sum(r.updater.skipped for r in (self.policy, self.critic) if r is not None)

    def compute_advantages(self, exp) -> dict:
        """:meth:`compute_rewards`, then :meth:`compute_estimator`; returns the KL metrics."""
        metrics = self.compute_rewards(exp)
        self.compute_estimator(exp)
        return metrics

    def compute_rewards(self, exp) -> dict:
        """The reward the estimator reads (algorithms/sequence_reward.py: KL in it when so planned): fills exp.reward
        and token_rewards; returns the KL metrics."""
        plan = self.run.plan
        exp.reward, exp.token_rewards, metrics = estimator_rewards(
            exp.score, exp.old_log_probs, exp.ref_log_probs, exp.response_mask, self.kl_ctrl,
            plan.reward.kl.estimator if plan.reward.kl else None, self.estimator.token_level)
        return metrics

    def compute_estimator(self, exp) -> None:
        """rl_config.adv_estimator on the rewards (and a critic's values): fills exp.advantages and returns."""
        inputs = AdvantageInputs(exp.reward, exp.token_rewards, exp.loss_mask, exp.group, exp.values,
                                 self.run.plan.estimator_options)
        exp.advantages, exp.returns = self.estimator.compute(inputs)

    # -- the run ------------------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train to rl_config.train_iters. SIGINT or SIGTERM: the step in progress finishes, is saved and reported, and
        RunInterrupted (a KeyboardInterrupt) is raised after printing the command that resumes (stopping.py)."""
        sched, has_eval = self.run.plan.schedule, self.run.plan.eval is not None
        out = RunLog(self.cfg, self.run.topo.is_main, start=self.step, compiled=self.run.static_shapes)
        with stopper_of(self) as stop:  # listens for SIGINT/SIGTERM until the loop is over, however it ends
            if has_eval and self.step == 0 and not stop.now():  # a resumed run measured its start already
                out.eval("before", self.step, self.evaluate())
            while self.step < sched.steps and not stop.now():
                metrics = self.train_step()
                last = self.step == sched.steps
                if has_eval and (last or sched.eval_interval and self.step % sched.eval_interval == 0):
                    metrics.update(self.evaluate())  # in the step's own row: every step is one line of metrics.jsonl
                out.step(self.step, metrics)
                saved = self.save() if sched.save and (last or sched.save_interval and
                                                       self.step % sched.save_interval == 0) else None
                stop.saved(saved)
                if self.best is not None and self.best.better(metrics):  # actor_config.save_best
                    self.best.keep(saved or self.save(), self.step, metrics[sched.save_best])
            if stop.signum is not None:  # stopped early: no final evaluation, the last step is saved
                checkpoint = stop.checkpoint()
                self.rewards.close()
                out.close()
                raise stop.stopped(checkpoint)
        if has_eval:
            last_row = out.summary.get("last") or self.evaluate()
            out.eval("after", self.step, {k: v for k, v in last_row.items() if k.startswith("eval/")}, record=False)
        self.rewards.close()
        return out.close()

    def save(self) -> str:
        NumericalGuard.refuse_non_finite([r for r in (self.policy, self.critic) if r is not None], self.step)
        return self.checkpointer.save(self.step, self.state.state_dict())

    def roles(self):
        return [r for r in (self.policy, self.reference, self.critic, self.reward_model) if r is not None]

    def compile_all(self) -> None:
        """Every graph of the run, role by role in a fixed order (the compile cache matches entries by order)."""
        log.info("compiling every graph of the run (a warm runtime.compile_cache_path loads them instead)")
        for role in self.roles():
            role.compile(*self.run.static_widths())
