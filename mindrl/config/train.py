"""The training config of `mindrl train`: its aliases, derived defaults, cross-key rules and file checks.

Standard library, yaml and numpy only (the estimator registry is read to know what each estimator needs):
msrun's scheduler process loads configs before ``init()``.
"""
from __future__ import annotations

import os

from mindrl.algorithms import ADVANTAGE_ESTIMATORS, get_advantage_estimator
from mindrl.config import mindspeed_rl
from mindrl.config.loader import (ConfigKind, Errors, PathChecks, _fmt_num, _show, check_lora, check_optimizer,
                                  check_recompute, config_from_dict, load_config, raw_config)
from mindrl.config.batch_plan import update_split_errors
from mindrl.config.plan import critic_start, eval_metric_names
from mindrl.config.schema import TrainConfig
from mindrl.models.config import megatron_training_keys

# alias dotted key -> canonical dotted key (mindrl's own alternative spellings; MindSpeed-RL's keys, aliases
# included, are read by mindrl/config/mindspeed_rl.py)
ALIASES: dict[str, str] = {
    "seed": "runtime.seed",
    "rl_config.algorithm": "rl_config.adv_estimator",
}

# hints for top-level sections of other frameworks' configs
SECTION_HINTS: dict[str, str] = {
    "ref_config": "mindrl's reference model is the section `ref` (ref_model_load_path, model)",
}


# GSPO's clip range (Zheng et al. 2025, sec. 5.1): the sequence-level ratio moves far less than a token's
_GSPO_CLIP = (3e-4, 4e-4)


def _resolve_defaults(cfg: TrainConfig, explicit: set[str], name: str) -> None:
    rl = cfg.rl_config
    if rl.mini_batch_size is None:
        rl.mini_batch_size = rl.global_batch_size
    gspo = rl.policy_loss == "gspo" and "rl_config.clip_ratio" not in explicit
    if rl.clip_ratio_low is None:
        rl.clip_ratio_low = _GSPO_CLIP[0] if gspo else rl.clip_ratio
    if rl.clip_ratio_high is None:
        rl.clip_ratio_high = _GSPO_CLIP[1] if gspo else rl.clip_ratio
    if rl.policy_loss == "gspo" and "rl_config.loss_agg_mode" not in explicit:
        rl.loss_agg_mode = "seq-mean-token-mean"
    if rl.adv_estimator == "dr_grpo" and "rl_config.norm_adv_by_std" not in explicit:
        rl.norm_adv_by_std = False
    # `use_kl_in_loss: false` is mindrl's older spelling of "KL as a reward penalty"
    if ("rl_config.use_kl_in_loss" in explicit and rl.use_kl_in_loss is False
            and "rl_config.use_kl_in_reward" not in explicit):
        rl.use_kl_in_reward = True
    if rl.use_kl_in_loss is None:
        rl.use_kl_in_loss = not rl.use_kl_in_reward
    if rl.verifier_function is None:  # a reward model scores on its own unless rule rewards are named too
        rl.verifier_function = [] if cfg.reward_config is not None or rl.rule_reward is False else ["math_acc"]
    if rl.verifier_weight is None:
        rl.verifier_weight = [1.0] * len(rl.verifier_function)
    critic, actor = cfg.critic_config, cfg.actor_config
    if critic is not None:
        if critic.finetune is None:
            critic.finetune = actor.finetune
        if critic.no_load_rng is None:
            critic.no_load_rng = actor.no_load_rng
        if critic.micro_batch_size is None:
            critic.micro_batch_size = rl.micro_batch_size
    if cfg.reward_config is not None and cfg.reward_config.micro_batch_size is None:
        cfg.reward_config.micro_batch_size = rl.micro_batch_size
    if cfg.data.seed is None:
        cfg.data.seed = cfg.runtime.seed
    gen = cfg.generate_config
    if gen.max_num_seqs is None:
        gen.max_num_seqs = gen.micro_batch_size
    if cfg.eval.max_tokens is None and cfg.eval.path is not None:
        cfg.eval.max_tokens = cfg.generate_config.max_tokens
    if cfg.logging.name is None:
        cfg.logging.name = name
    cfg.meta.templates = {"logging.log_dir": cfg.logging.log_dir}  # as written, for to_dict
    cfg.logging.log_dir = cfg.logging.log_dir.replace("<name>", cfg.logging.name)


class _Rules:
    """What every rule reads: the config, the keys the user wrote, every key's value and the error list."""

    def __init__(self, cfg: TrainConfig, explicit: set[str], err: Errors):
        self.cfg, self.explicit, self.err = cfg, explicit, err
        self.rl, self.actor, self.gen = cfg.rl_config, cfg.actor_config, cfg.generate_config
        self.critic, self.rm = cfg.critic_config, cfg.reward_config
        self.est = get_advantage_estimator(self.rl.adv_estimator)
        self.values = {f"{s}.{k}": v for s, sec in cfg.resolved_dict().items() if sec for k, v in sec.items()}

    def inert(self, key: str, why: str, switch: str | None = None) -> None:
        """A key the run would not act on: refused when the user set it to something other than its default,
        unless the user also set the ``switch`` that turns it off (then they know, e.g. a DAPO yaml run with
        ``rl_config.dynamic_sampling=false`` keeps its max_num_gen_batches)."""
        if key in self.explicit and self.values[key] != TRAIN.default(key) and switch not in self.explicit:
            self.err.add(key, f"{_show(self.values[key])} has no effect: {why}; remove it")


def _check_rules(cfg: TrainConfig, explicit: set[str], err: Errors) -> None:
    """The rules that involve several keys, by theme; each adds its refusals to ``err``."""
    r = _Rules(cfg, explicit, err)
    for check in (_check_estimator, _check_critic, _check_rewards, _check_ptx, _check_kl, _check_policy_loss,
                  _check_actor, _check_lora, _check_generation, _check_eval_and_runtime):
        check(r)
    _check_batches(cfg, explicit, err)
    _check_run_dir_keys(cfg, err)


def _check_estimator(r: "_Rules") -> None:
    """The advantage estimator's needs: groups, a critic, the options it reads."""
    rl, critic, est = r.rl, r.critic, r.est
    if est.needs_groups and rl.n_samples_per_prompt < 2:
        r.err.add("rl_config.n_samples_per_prompt",
                  f"must be >= 2 for adv_estimator {rl.adv_estimator!r} (the group baseline needs "
                  f"more than one response per prompt), got {rl.n_samples_per_prompt}")
    if est.needs_critic and critic is None:
        r.err.add("rl_config.adv_estimator",
                  f"{rl.adv_estimator!r} needs a critic (a value model), and this config has no critic_config "
                  f"section; add one, or pick an estimator without a critic: grpo, dr_grpo, rloo, "
                  f"reinforce_plus_plus, reinforce_plus_plus_baseline")
    if critic is not None and not est.needs_critic:
        r.err.add("critic_config", f"only adv_estimator gae trains a critic; {rl.adv_estimator!r} would ignore it "
                                   f"(remove the section, or set rl_config.adv_estimator: gae)")
    users = lambda key: ", ".join(sorted(n for n, e in ADVANTAGE_ESTIMATORS.items() if key in e.options))  # noqa: E731
    for key in ("gamma", "lam", "advantage_whiten"):
        if key not in est.options:
            r.inert(f"rl_config.{key}", f"adv_estimator {rl.adv_estimator!r} does not use it (used by: {users(key)})")
    if rl.adv_estimator not in ("grpo", "dr_grpo"):
        r.inert("rl_config.norm_adv_by_std", f"only grpo scales advantages by the group std, not "
                                             f"{rl.adv_estimator!r}")
    if rl.dynamic_sampling and not est.needs_groups:
        r.err.add("rl_config.dynamic_sampling",
                  f"drops prompts whose samples all scored the same, which needs groups of samples; "
                  f"adv_estimator {rl.adv_estimator!r} has none")

    if rl.adv_estimator == "dr_grpo" and rl.norm_adv_by_std:
        r.err.add("rl_config.norm_adv_by_std",
                  "must be false with adv_estimator 'dr_grpo' (Dr. GRPO does not scale advantages "
                  "by the group std); remove the key or set it to false")


def _check_critic(r: "_Rules") -> None:
    """The critic section agrees with the policy's (one run, one save directory) and its batches."""
    rl, actor, critic = r.rl, r.actor, r.critic
    if critic is None:
        for key in ("cliprange_value", "critic_warmup"):
            r.inert(f"rl_config.{key}", "there is no critic (no critic_config section)")
    else:
        if critic.save is not None and critic.save != actor.save:
            r.err.add("critic_config.save", f"{critic.save!r} differs from actor_config.save = {_show(actor.save)}: "
                                            f"the critic is saved with the policy, in <save>/iter_*/critic")
        if critic.finetune != actor.finetune:
            r.err.add("critic_config.finetune", f"{_show(critic.finetune)} differs from actor_config.finetune = "
                                                f"{_show(actor.finetune)}: a run resumes (or starts) as a whole")
        if critic.no_load_rng != actor.no_load_rng:
            r.err.add("critic_config.no_load_rng", f"{_show(critic.no_load_rng)} differs from "
                                                   f"actor_config.no_load_rng: the run has one RNG state")
        if critic.finetune:
            for key in ("critic_config.no_load_optim",):
                if key in r.explicit and r.values[key] is False:
                    r.err.add(key, "false has no effect: finetune: true starts a new run and restores no "
                                   "optimizer state; set finetune: false to resume")
        if not critic.finetune and critic.load is not None:
            r.err.add("critic_config.load", "finetune is false: the critic resumes from actor_config.load's "
                                            "checkpoint (its critic/ part); remove critic_config.load")
        _check_optimizer(r, "critic_config")
        if rl.critic_warmup >= rl.train_iters:
            r.err.add("rl_config.critic_warmup", f"{rl.critic_warmup} >= train_iters = {rl.train_iters}: the actor "
                                                 f"would never be updated")


def _check_rewards(r: "_Rules") -> None:
    """Rule verifiers, the reward model, the clip range, the overlong penalty, dynamic sampling."""
    rl, gen, rm = r.rl, r.gen, r.rm
    if rl.reward_clip_range is not None:
        lo_hi = rl.reward_clip_range
        if len(lo_hi) != 2 or not lo_hi[0] < lo_hi[1]:
            r.err.add("rl_config.reward_clip_range", f"expected [low, high] with low < high, got {_show(lo_hi)}")
    if rm is not None and rl.dynamic_sampling:
        r.err.add("rl_config.dynamic_sampling", "decides on the rule rewards before the reward model has scored; "
                                                "it cannot be combined with reward_config")
    if not rl.verifier_function and rm is None:
        r.err.add("rl_config.verifier_function", "must name at least one verifier, e.g. [math_acc], when no reward "
                                                 "model scores (reward_config)")
    if rl.rule_reward is True and not rl.verifier_function:
        r.err.add("rl_config.rule_reward", "true, but rl_config.verifier_function names no verifier to score with")
    if rl.rule_reward is False and rl.verifier_function:
        r.err.add("rl_config.rule_reward", f"false, but rl_config.verifier_function names "
                                           f"{', '.join(rl.verifier_function)}: remove them, or set rule_reward: true")
    dups = sorted({v for v in rl.verifier_function if rl.verifier_function.count(v) > 1})
    if dups:
        r.err.add("rl_config.verifier_function", f"lists {', '.join(dups)} more than once")
    if not rl.verifier_function:
        r.inert("rl_config.reward_fallback", "there is no rule reward (rl_config.verifier_function is empty)")
    if len(rl.verifier_weight) != len(rl.verifier_function):
        r.err.add("rl_config.verifier_weight",
                  f"has {len(rl.verifier_weight)} entries but verifier_function has "
                  f"{len(rl.verifier_function)} ({_show(rl.verifier_function)}); "
                  f"give one weight per verifier")
    if rl.overlong_buffer_len >= gen.max_tokens:
        r.err.add("rl_config.overlong_buffer_len",
                  f"{rl.overlong_buffer_len} must be smaller than generate_config.max_tokens = "
                  f"{gen.max_tokens}")
    if rl.overlong_buffer_len == 0:
        r.inert("rl_config.overlong_penalty_factor", "the overlong penalty is off (rl_config.overlong_buffer_len: 0)",
                "rl_config.overlong_buffer_len")
    if not rl.dynamic_sampling:
        r.inert("rl_config.max_num_gen_batches", "dynamic sampling is off (rl_config.dynamic_sampling: false)",
                "rl_config.dynamic_sampling")


def _check_ptx(r: "_Rules") -> None:
    """PPO-ptx's data key (how its rows split into micro-batches is _check_batches')."""
    if r.rl.pretrain_coef == 0:
        r.inert("data.ptx_path", "only PPO-ptx reads it (rl_config.pretrain_coef > 0)", "rl_config.pretrain_coef")


def _check_kl(r: "_Rules") -> None:
    """The KL term goes into the loss, the reward, or nowhere, and its coefficient says which."""
    rl = r.rl
    # KL: in the loss, in the reward, or nowhere
    if rl.use_kl_in_loss and rl.use_kl_in_reward:
        r.err.add("rl_config.use_kl_in_reward",
                  "and rl_config.use_kl_in_loss are both true: the KL would be applied twice; choose one")
    # use_kl_in_loss defaults to true (MindSpeed-RL's default) with kl_coef 0, i.e. no KL: only a placement the
    # user wrote asks for a KL term that kl_coef 0 would silently drop
    loss_asked = rl.use_kl_in_loss and "rl_config.use_kl_in_loss" in r.explicit
    if (rl.use_kl_in_reward or loss_asked) and rl.kl_coef == 0:
        if rl.use_kl_in_reward:
            why = ("rl_config.use_kl_in_loss: false puts the KL into the reward" if "rl_config.use_kl_in_reward"
                   not in r.explicit else "rl_config.use_kl_in_reward is true")
        else:
            why = "rl_config.use_kl_in_loss is true"
        r.err.add("rl_config.kl_coef", f"is 0 but {why}; set kl_coef > 0 (alias init_kl_coef), or drop the KL keys")
    if not rl.use_kl_in_loss and not rl.use_kl_in_reward and rl.kl_coef > 0:
        r.err.add("rl_config.kl_coef", f"{_fmt_num(rl.kl_coef)} but use_kl_in_loss and use_kl_in_reward are both "
                                       f"false: the KL would go nowhere")
    if rl.kl_ctrl_type == "adaptive" and not rl.use_kl_in_reward:
        r.err.add("rl_config.kl_ctrl_type", "adaptive adjusts the coefficient of a KL reward penalty; it needs "
                                            "rl_config.use_kl_in_reward: true")
    if rl.kl_ctrl_type != "adaptive":
        for key in ("kl_target", "kl_horizon"):
            r.inert(f"rl_config.{key}", "only the adaptive KL controller reads it (rl_config.kl_ctrl_type: adaptive)",
                    "rl_config.kl_ctrl_type")
    if rl.kl_coef == 0:
        r.inert("rl_config.kl_penalty", "kl_coef is 0, so there is no KL term; set rl_config.kl_coef",
                "rl_config.kl_coef")


def _check_policy_loss(r: "_Rules") -> None:
    """GSPO's constraints and the clip keys that override each other."""
    rl = r.rl
    if rl.policy_loss == "gspo":
        if rl.clip_ratio_c is not None:
            r.err.add("rl_config.clip_ratio_c", "GSPO clips the sequence ratio and has no dual clip; remove it")
        if rl.loss_agg_mode != "seq-mean-token-mean":
            r.err.add("rl_config.loss_agg_mode", f"{rl.loss_agg_mode!r}: GSPO's sequence-level objective needs "
                                                 f"seq-mean-token-mean (the default with policy_loss gspo)")
    if ("rl_config.clip_ratio_low" in r.explicit and "rl_config.clip_ratio_high" in r.explicit
            and rl.clip_ratio not in (rl.clip_ratio_low, rl.clip_ratio_high)):
        r.inert("rl_config.clip_ratio", "clip_ratio_low and clip_ratio_high are both given")


def _check_optimizer(r: "_Rules", section: str) -> None:
    """The learning-rate schedule of a trained network (actor_config or critic_config)."""
    check_optimizer(getattr(r.cfg, section), section, r.explicit, r.err)


def _check_actor(r: "_Rules") -> None:
    """The policy's schedule, resume, reference weights and saving."""
    rl, actor = r.rl, r.actor
    _check_optimizer(r, "actor_config")  # a run that ends inside its warm-up is legal: the plan print says so
    if not actor.finetune and actor.load is None:
        r.err.add("actor_config.load",
                  "is required when finetune is false (resuming needs the checkpoint directory "
                  "to restore step, optimizer, rng and data position from)")
    if actor.finetune:
        for key in ("no_load_optim", "no_load_rng"):
            if f"actor_config.{key}" in r.explicit and r.values[f"actor_config.{key}"] is False:
                r.err.add(f"actor_config.{key}", "false has no effect: finetune: true starts a new run and restores "
                                                 "no optimizer or RNG state; set finetune: false to resume")
    if not actor.finetune and r.cfg.ref.ref_model_load_path is None and rl.kl_coef > 0 and not actor.lora_rank:
        r.err.add("ref.ref_model_load_path",
                  "is required when actor_config.finetune is false and kl_coef > 0: the resumed "
                  "checkpoint holds the trained actor, so give the original weights for the "
                  "reference model (MindSpeed-RL spelling: "
                  "rl_config.integrated_mode_config.ref_model_load_path)")
    if rl.kl_coef == 0:
        for key in ("ref.ref_model_load_path", "ref.model"):
            if key in r.explicit and r.values[key] is not None:
                r.err.add(key, "has no effect: there is no reference model without a KL term (rl_config.kl_coef "
                               "is 0); remove it")
    if actor.save_best is not None:
        wanted = eval_metric_names(["score"] + list(rl.verifier_function), r.cfg.eval)
        if actor.save is None:
            r.err.add("actor_config.save_best", "needs actor_config.save (the best checkpoint is kept in <save>/best)")
        elif r.cfg.eval.path is None or not r.cfg.eval.interval:
            r.err.add("actor_config.save_best", "needs eval.path and eval.interval > 0: checkpoints are compared by "
                                                "the held-out metric measured every eval.interval steps")
        elif actor.save_best not in wanted:
            r.err.add("actor_config.save_best", f"{actor.save_best!r} is not a held-out metric this run logs; one of "
                                                f"{', '.join(wanted)}")
    if actor.save_interval > 0 and actor.save is None:
        r.err.add("actor_config.save_interval",
                  f"is {actor.save_interval} but actor_config.save is not set; give a save directory")
    if actor.save is None:
        r.inert("actor_config.keep_last", "nothing is saved (actor_config.save is not set)", "actor_config.save")


def check_layer_graphs(sec, section: str, err) -> None:
    """What ``<section>.layer_graphs`` cannot work with (trainer/layer_graphs.py); the reward model's section has
    no adapters or recompute."""
    if not sec.layer_graphs:
        return
    for key, value, why in (
            ("tensor_model_parallel_size", sec.tensor_model_parallel_size > 1, "the layer graphs are built for one "
             "device per model (1)"),
            ("lora_rank", getattr(sec, "lora_rank", 0) > 0, "the layer graphs train every weight (no adapters)"),
            ("recompute_granularity", getattr(sec, "recompute_granularity", None) is not None, "the layer graphs "
             "already run each layer's forward again in its backward")):
        if value:
            err.add(f"{section}.{key}", f"not with {section}.layer_graphs: {why}; remove one of them")


def _check_lora(r: "_Rules") -> None:
    """Adapters: known projections, no dropout, and with a LoRA policy the reference is its frozen base."""
    for section in ("actor_config", "critic_config"):
        if getattr(r.cfg, section) is not None:
            check_lora(getattr(r.cfg, section), section, r.explicit, r.err)
            check_recompute(getattr(r.cfg, section), section, r.err)
            check_layer_graphs(getattr(r.cfg, section), section, r.err)
    if r.cfg.reward_config is not None:
        check_layer_graphs(r.cfg.reward_config, "reward_config", r.err)
    actor, ref = r.actor, r.cfg.ref
    if actor.lora_rank and r.rl.kl_coef > 0:
        same = actor.finetune and ref.ref_model_load_path in (None, actor.load)
        if "ref.ref_model_load_path" in r.explicit and not same:
            r.err.add("ref.ref_model_load_path", "with LoRA (actor_config.lora_rank > 0) the reference model is the "
                      "policy's frozen base weights with the adapters off (no second model); remove it")
        if "ref.model" in r.explicit and ref.model not in (None, actor.model):
            r.err.add("ref.model", "with LoRA the reference model is the policy's own base; remove it")


def _check_generation(r: "_Rules") -> None:
    """Sampling keys a greedy rollout would not read; token bounds."""
    rl, gen = r.rl, r.gen
    if not gen.do_sample:
        if rl.n_samples_per_prompt > 1:
            r.err.add("generate_config.do_sample", f"false (greedy) gives every prompt's {rl.n_samples_per_prompt} samples "
                                                   f"the same response; set rl_config.n_samples_per_prompt: 1")
        for key in ("temperature", "top_k", "top_p"):
            r.inert(f"generate_config.{key}", "a greedy rollout (generate_config.do_sample: false) does not sample")
    slots = "generate_config.micro_batch_size" if "generate_config.max_num_seqs" not in r.explicit else \
        "generate_config.max_num_seqs"
    if "generate_config.micro_batch_size" in r.explicit and gen.micro_batch_size != gen.max_num_seqs:
        r.err.add("generate_config.micro_batch_size", f"{gen.micro_batch_size} differs from max_num_seqs = "
                                                      f"{gen.max_num_seqs}: both name the rollout's decode slots; "
                                                      f"set one of them")
    elif gen.max_num_seqs is not None and gen.max_num_seqs < rl.n_samples_per_prompt:
        r.err.add(slots,
                  f"{gen.max_num_seqs} responses decoded at once cannot hold one prompt's "
                  f"rl_config.n_samples_per_prompt = {rl.n_samples_per_prompt} (a prompt's samples are decoded "
                  f"together, sharing its prefill); set it to at least {rl.n_samples_per_prompt}")
    if rl.partial_rollout_max_split > gen.max_tokens:
        r.err.add("rl_config.partial_rollout_max_split", f"{rl.partial_rollout_max_split} rounds of at least one token "
                                                         f"each exceed generate_config.max_tokens = {gen.max_tokens}")
    if rl.partial_rollout_max_split > 1 and rl.dynamic_sampling:
        r.err.add("rl_config.partial_rollout_max_split", "cannot be combined with rl_config.dynamic_sampling: a "
                                                         "step's groups come from rounds, not from generation "
                                                         "batches to filter; set one of them")
    if gen.min_tokens > gen.max_tokens:
        r.err.add("generate_config.min_tokens",
                  f"{gen.min_tokens} is larger than max_tokens = {gen.max_tokens}")


def _check_eval_and_runtime(r: "_Rules") -> None:
    """Evaluation, compile-cache and strategy keys that only act with their switch."""
    ev = r.cfg.eval
    if ev.path is None:
        for key in ("interval", "num_samples", "max_tokens", "dataset_config", "n_samples", "temperature", "top_p"):
            r.inert(f"eval.{key}", "there is no evaluation without eval.path", "eval.path")
    else:
        if not ev.path.endswith(".jsonl"):
            r.inert("eval.dataset_config", "only a .jsonl eval.path is tokenized by mindrl (a MindRecord already is)")
        if ev.n_samples > 1 and ev.temperature == 0:
            r.err.add("eval.n_samples", f"{ev.n_samples} samples per held-out prompt need eval.temperature > 0 "
                                        f"(0, the default, decodes greedily: every sample would be the same "
                                        f"response); set eval.temperature, e.g. 1.0, or eval.n_samples: 1")
        elif ev.temperature == 0:
            r.inert("eval.top_p", "greedy evaluation (eval.temperature: 0) does not sample", "eval.temperature")
    if not r.cfg.runtime.enable_compile_cache:
        r.inert("runtime.compile_cache_path", "runtime.enable_compile_cache is false", "runtime.enable_compile_cache")
    if not r.cfg.runtime.only_save_strategy:
        r.inert("runtime.strategy_dir", "strategy files go there only with runtime.only_save_strategy (or `mindrl "
                                        "export-strategy`); checkpoints carry their own", "runtime.only_save_strategy")


def _check_batches(cfg, explicit: set, err: Errors) -> None:
    """Batch sizes in MindSpeed-RL's units: prompts per step and per update, responses per micro-batch. (What also
    needs the world size, the data-parallel splits, is checked by config/plan.py.)"""
    rl = cfg.rl_config
    if rl.mini_batch_size > rl.global_batch_size:
        if cfg.meta.peer_file:  # MindSpeed-RL then makes one update of the whole batch
            cfg.meta.notes.append(f"rl_config.mini_batch_size: {rl.mini_batch_size} (more prompts than the step's "
                              f"{rl.global_batch_size}: one update of the whole batch, as MindSpeed-RL does)")
        else:
            err.add("rl_config.mini_batch_size",
                    f"{rl.mini_batch_size} is more than global_batch_size = {rl.global_batch_size}: it counts prompts "
                    f"per update, as MindSpeed-RL and verl do (mindrl 0.1.0 counted responses: {rl.mini_batch_size} "
                    f"responses are {rl.mini_batch_size / rl.n_samples_per_prompt:g} prompts); set it to at most "
                    f"{rl.global_batch_size}")
            return
    mini = min(rl.mini_batch_size, rl.global_batch_size)
    if rl.global_batch_size % mini:
        err.add("rl_config.mini_batch_size", f"{mini} does not divide global_batch_size = {rl.global_batch_size} "
                                             f"(prompts per step are split into equal updates)")
        return
    for key, why in update_split_errors(rl, cfg.critic_config):  # one replica here; the plan checks the world's
        err.add(key, why)
    if rl.gen_batch_size is not None and not rl.dynamic_sampling:
        err.add("rl_config.gen_batch_size", "has no effect: only dynamic sampling draws generation batches of "
                                            "their own size (rl_config.dynamic_sampling: true); remove it")
    if rl.dynamic_sampling_metric is not None:
        if not rl.dynamic_sampling:
            err.add("rl_config.dynamic_sampling_metric", "has no effect without rl_config.dynamic_sampling: true; "
                                                         "remove it")
        elif rl.dynamic_sampling_metric not in rl.verifier_function:
            err.add("rl_config.dynamic_sampling_metric", f"{rl.dynamic_sampling_metric!r} is not in "
                                                         f"verifier_function {_show(rl.verifier_function)}: dynamic "
                                                         f"sampling reads that verifier's own score")
    if rl.kl_coef == 0 and "rl_config.ref_forward_micro_batch_size" in explicit:
        err.add("rl_config.ref_forward_micro_batch_size", "has no effect: there is no reference model without a KL "
                                                          "term (rl_config.kl_coef is 0); remove it")


def _check_run_dir_keys(cfg, err: Errors) -> None:
    """``logging.run_id`` names one directory; ``<run_dir>`` in a save path needs a run directory to stand for."""
    lg = cfg.logging
    check_run_id(lg, err)
    for section, name in ((cfg.actor_config, "actor_config"), (cfg.critic_config, "critic_config")):
        if section is not None and section.save and "<run_dir>" in section.save and "<run_dir>" not in \
                section.save.split("/")[0]:
            err.add(f"{name}.save", f"{section.save!r}: <run_dir> stands for the run directory and starts the path "
                                    f"(e.g. <run_dir>/ckpt)")


def check_run_id(lg, err: Errors) -> None:
    """Shared with `mindrl train-rm`'s logging section."""
    if not lg.name or "/" in lg.name or lg.name in (".", ".."):  # runs/<name>/: '../x' wrote outside runs/
        err.add("logging.name", f"{lg.name!r} is not a directory name a run can have (one path part, not '.' or "
                                f"'..')")
    if lg.run_id is not None:
        if "<run_id>" not in lg.log_dir:
            err.add("logging.run_id", f"{lg.run_id!r} has no effect: logging.log_dir ({lg.log_dir}) has no <run_id> "
                                      f"to put it in; remove it, or put <run_id> in log_dir")
        elif not lg.run_id or "/" in lg.run_id or lg.run_id in (".", "..", "latest") or lg.run_id.startswith("."):
            err.add("logging.run_id", f"{lg.run_id!r} is not a directory name a run can have (one path part, not "
                                      f"'latest', not starting with '.')")


def _check_paths(cfg: TrainConfig, err: Errors) -> None:
    """Check the files the run needs; expand ``~``; resolve bare model names."""
    actor, ref, rl, critic, rm = cfg.actor_config, cfg.ref, cfg.rl_config, cfg.critic_config, cfg.reward_config
    check = PathChecks(err)
    actor.model = check.model("actor_config.model", actor.model)
    if ref.model is not None:
        ref.model = check.model("ref.model", ref.model)
    actor.tokenizer_name_or_path = check.tokenizer("actor_config.tokenizer_name_or_path", actor.tokenizer_name_or_path)
    if actor.load is not None:
        actor.load = check.weights("actor_config.load", actor.load)
        if not actor.finetune and os.path.isfile(actor.load):
            err.add("actor_config.load", f"finetune is false, so {actor.load!r} must be a mindrl checkpoint "
                                         f"directory to resume from, not a file")
    if actor.save is not None:
        actor.save = check.output_dir("actor_config.save", actor.save)
    if ref.ref_model_load_path is not None:
        found = check.exists("ref.ref_model_load_path", ref.ref_model_load_path, "reference weights")
        ref.ref_model_load_path = found or ref.ref_model_load_path
    if critic is not None:
        if critic.model is not None:
            critic.model = check.model("critic_config.model", critic.model)
        if critic.load is not None:
            critic.load = check.weights("critic_config.load", critic.load)
        if critic.save is not None:
            critic.save = os.path.expanduser(critic.save)
    if not cfg.meta.peer_file:  # a MindSpeed-RL file's translation reads a model file's training arguments as the run's
        seen = set()
        for key, model in (("actor_config.model", actor.model), ("ref.model", ref.model),
                           ("critic_config.model", critic and critic.model), ("reward_config.model", rm and rm.model)):
            extra = megatron_training_keys(model) if model and model not in seen else []
            seen.add(model)
            if extra:
                err.add(key, f"{model} carries Megatron training arguments ({', '.join(extra)}): a mindrl config takes "
                             f"them in its own sections (actor_config, rl_config; docs/configuration.md), so remove "
                             f"them from the model file, or run the MindSpeed-RL config that names it")
    if rm is not None:
        rm.load = check.weights("reward_config.load", rm.load)
        if rm.model is not None:
            rm.model = check.model("reward_config.model", rm.model)
        elif os.path.isfile(rm.load):
            err.add("reward_config.model", f"is required: {rm.load!r} is a weights file without a config.json")

    reward_file_ok = True
    if rl.custom_reward_file is not None:
        # forms the reward loader accepts: file.py, file.py:func, package.module:func (read as the loader reads them)
        from mindrl.rewards.custom import is_file_target, split_spec  # here: the rewards package starts workers
        target, func = split_spec(rl.custom_reward_file)
        reward_file_ok = False
        if is_file_target(target):
            found = check.exists("rl_config.custom_reward_file", target, "reward file")
            if found is not None:
                if not os.path.isfile(found):
                    err.add("rl_config.custom_reward_file", f"expected a .py file, got {rl.custom_reward_file!r}")
                else:
                    reward_file_ok = True
                rl.custom_reward_file = found + (f":{func}" if func else "")
        elif not func:
            err.add("rl_config.custom_reward_file",
                    f"expected file.py, file.py:function or package.module:function, got {rl.custom_reward_file!r}")
        else:
            reward_file_ok = True
    if reward_file_ok:
        _check_verifier_names(rl, err)

    cfg.data.path = check.mindrecord("data.path", cfg.data.path, allow_jsonl=False)
    if cfg.data.ptx_path is not None:
        cfg.data.ptx_path = check.mindrecord("data.ptx_path", cfg.data.ptx_path, allow_jsonl=False)
    if cfg.eval.path is not None:
        cfg.eval.path = check.mindrecord("eval.path", cfg.eval.path, allow_jsonl=True)
    if cfg.eval.dataset_config is not None:
        cfg.eval.dataset_config = check.exists("eval.dataset_config", cfg.eval.dataset_config, "dataset config") \
            or cfg.eval.dataset_config
    for obj, name in ((cfg.logging, "log_dir"), (cfg.runtime, "compile_cache_path"),
                      (cfg.runtime, "strategy_dir")):
        setattr(obj, name, os.path.expanduser(getattr(obj, name)))


def _check_verifier_names(rl, err: Errors) -> None:
    """Every verifier_function entry names a verifier: a built-in, an alias (MindSpeed-RL's included), or one the
    custom_reward_file registers (a plain file.py is executed to learn its names, as the trainer will)."""
    from mindrl.rewards.custom import check_verifier_names  # here: the rewards package loads numpy and its workers
    try:
        problems = check_verifier_names(rl.verifier_function, rl.custom_reward_file)
    except Exception as e:  # noqa: BLE001 - the user's file failed to run: say so under its key
        err.add("rl_config.custom_reward_file", f"cannot load {rl.custom_reward_file!r}: {e!r}")
        return
    for _, why in problems:
        err.add("rl_config.verifier_function", why)


def _finish(cfg: TrainConfig) -> None:
    """Defaults that name other keys' (checked) paths."""
    if cfg.rl_config.kl_coef > 0:  # there is a reference model
        if cfg.ref.model is None:
            cfg.ref.model = cfg.actor_config.model
        if cfg.ref.ref_model_load_path is None:
            cfg.ref.ref_model_load_path = cfg.actor_config.load
    if cfg.rl_config.pretrain_coef > 0 and cfg.data.ptx_path is None:
        cfg.data.ptx_path = cfg.data.path  # MindRLHF's layout: the prompt rows carry their SFT response
    rm = cfg.reward_config
    if rm is not None and rm.model is None:
        rm.model = rm.load if os.path.isdir(rm.load) else None
    critic = cfg.critic_config
    if critic is not None and critic.model is None:
        # the critic's architecture is that of the weights a new run starts it from (one order: config/plan.py)
        start = critic_start(cfg)
        source = None if start.path is None or start.path == cfg.actor_config.load else (
            _critic_part(start.path) if start.part == "critic" else start.path)
        critic.model = source if source is not None and os.path.isdir(source) else cfg.actor_config.model


def _critic_part(load: str) -> str:
    """A mindrl training checkpoint given as critic weights: its critic/ part (which has the config.json)."""
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.models.weights import weights_path
    try:
        return weights_path(load, "critic")
    except CheckpointError:
        return load  # preflight names what is missing


TRAIN = ConfigKind(TrainConfig, ALIASES, SECTION_HINTS, _resolve_defaults, _check_rules, _check_paths, _finish,
                   peer=mindspeed_rl)


def load_train_config(path, overrides=(), *, check_paths: bool = True) -> TrainConfig:
    """A training config (``mindrl train``) from a yaml file and ``section.key=value`` overrides."""
    return load_config(path, overrides, check_paths=check_paths, kind=TRAIN)


def train_config_from_dict(data: dict, overrides=(), *, source: str = "<dict>", name: str = "run",
                           check_paths: bool = True) -> TrainConfig:
    """A training config from an already-parsed mapping (``data`` is not modified)."""
    return config_from_dict(data, overrides, source=source, name=name, check_paths=check_paths, kind=TRAIN)


def raw_train_config(config, overrides=()) -> dict:
    """What a training yaml (or mapping) says after alias spellings and overrides, before defaults and checks."""
    return raw_config(config, overrides, kind=TRAIN)
