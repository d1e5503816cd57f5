"""The training config of `mindrl train`: its aliases, derived defaults, cross-key rules and file checks.

Standard library, yaml and numpy only (the estimator registry is read to know what each estimator needs):
msrun's scheduler process loads configs before ``init()``.
"""
from __future__ import annotations

import logging
import os

from mindrl.config.loader import ConfigKind, Errors, PathChecks, _fmt_num, _show
from mindrl.config.schema import TrainConfig

# alias dotted key -> canonical dotted key
ALIASES: dict[str, str] = {
    "seed": "runtime.seed",
    "rl_config.algorithm": "rl_config.adv_estimator",
    "rl_config.init_kl_coef": "rl_config.kl_coef",
    "rl_config.integrated_mode_config.ref_model_load_path": "ref.ref_model_load_path",
    "rl_config.max_prompt_length": "generate_config.max_prompt_length",
    "rl_config.use_tensorboard": "logging.tensorboard",
    "rl_config.epochs": "rl_config.ppo_epochs",
    "rl_config.shuffle_mini_batch": "rl_config.shuffle_minibatch",
    "actor_config.micro_batch_size": "rl_config.micro_batch_size",
    "generate_config.sampling_config.max_tokens": "generate_config.max_tokens",
    "generate_config.sampling_config.min_tokens": "generate_config.min_tokens",
    "generate_config.sampling_config.temperature": "generate_config.temperature",
    "generate_config.sampling_config.top_k": "generate_config.top_k",
    "generate_config.sampling_config.top_p": "generate_config.top_p",
    "generate_config.sampling_config.repetition_penalty": "generate_config.repetition_penalty",
}

_RAY = ("mindrl has no Ray workers: every msrun worker runs every role in one process, and the world size is "
        "msrun's --worker_num (WORKERS_PER_NODE / NPUS_PER_NODE in scripts/run_grpo.sh)")
_VLLM = ("rollout runs on mindrl's own KV-cache generator, not vLLM: its batch is generate_config.micro_batch_size, "
         "its length max_prompt_length + max_tokens, its dtype the model's compute_dtype")
_NO_PP = "mindrl has tensor and data parallelism, no pipeline stages"
_NO_OFFLOAD = "mindrl does not move train-side state off the device between rollout and update"

# MindSpeed-RL keys mindrl does not read (loader.py _drop_foreign): the values in the tuple say what mindrl does
# anyway and are accepted; any other value, or any value where the tuple is empty, stops the load with the reason
FOREIGN_KEYS: dict[str, tuple[tuple, str]] = {
    "rl_config.use_integrated_worker": ((True,), "mindrl always runs actor, reference and rollout in one process"),
    "rl_config.colocate_actor_ref": ((True,), "mindrl always holds the actor and the reference in one process"),
    "rl_config.blocking": ((True,), "mindrl's loop runs every stage to completion before the next"),
    "rl_config.guarantee_order": ((), _RAY),
    "rl_config.num_cpus_for_local_task": ((), _RAY),
    "rl_config.actor_resource": ((), _RAY),
    "rl_config.critic_resource": ((), _RAY),
    "rl_config.reference_resource": ((), _RAY),
    "rl_config.reward_resource": ((), _RAY),
    "rl_config.actor_forward_micro_batch_size": ((), "the log-prob passes run in rl_config.micro_batch_size rows "
                                                     "(one compiled graph shape for scoring and training)"),
    "rl_config.ref_forward_micro_batch_size": ((), "the reference's log-prob pass runs in rl_config.micro_batch_size "
                                                   "rows (one compiled graph shape for scoring and training)"),
    "rl_config.verifier_parallel": ((), "verifiers run in mindrl's own worker pool, sized by the machine, with "
                                        "rl_config.verifier_timeout per call"),
    "actor_config.pipeline_model_parallel_size": ((1,), _NO_PP),
    "critic_config.pipeline_model_parallel_size": ((1,), _NO_PP),
    "generate_config.infer_pipeline_parallel_size": ((1,), _NO_PP),
    "generate_config.infer_expert_parallel_size": ((1,), "mindrl's models have no experts (MoE)"),
    "generate_config.trust_remote_code": ((), "mindrl never runs code from a checkpoint directory: its models "
                                              "are its own"),
    "generate_config.offload_train_optimizer": ((False,), _NO_OFFLOAD),
    "generate_config.offload_train_grad": ((False,), _NO_OFFLOAD),
    "generate_config.offload_train_param": ((False,), _NO_OFFLOAD),
    "generate_config.max_num_seqs": ((), _VLLM),
    "generate_config.max_model_len": ((), _VLLM),
    "generate_config.max_num_batched_tokens": ((), _VLLM),
    "generate_config.gpu_memory_utilization": ((), _VLLM),
    "generate_config.dtype": ((), _VLLM),
    "generate_config.enforce_eager": ((), _VLLM),
    "generate_config.enable_prefix_caching": ((), _VLLM),
    "generate_config.sampling_config.logprobs": ((1,), "mindrl computes the sampled token's log-prob, and only it"),
    "generate_config.sampling_config.min_p": ((0, 0.0), "mindrl samples with top_k and top_p, no min-p"),
    "generate_config.sampling_config.detokenize": ((False,), "mindrl's generator returns token ids; the text is "
                                                             "decoded once, for the rewards"),
}

# hints for sections of other frameworks' configs
SECTION_HINTS = {
    "megatron_training": "mindrl has no megatron_training section; its keys live at "
                         "global_batch_size -> rl_config.global_batch_size, "
                         "tokenizer_name_or_path -> actor_config.tokenizer_name_or_path, "
                         "data_path -> data.path (a .mindrecord from `mindrl preprocess`), "
                         "seed -> runtime.seed",
    "defaults": "pick the model with actor_config.model (a name in model_configs/ or a path)",
}


# GSPO's clip range (Zheng et al. 2025, sec. 5.1): the sequence-level ratio moves far less than a token's
_GSPO_CLIP = (3e-4, 4e-4)


def _resolve_defaults(cfg: TrainConfig, explicit: set[str], name: str) -> None:
    rl = cfg.rl_config
    if rl.mini_batch_size is None:
        rl.mini_batch_size = rl.global_batch_size * rl.n_samples_per_prompt
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
        rl.verifier_function = [] if cfg.reward_config is not None or rl.rule_reward is False else ["acc"]
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
    if cfg.eval.max_tokens is None and cfg.eval.path is not None:
        cfg.eval.max_tokens = cfg.generate_config.max_tokens
    if cfg.logging.name is None:
        cfg.logging.name = name
    cfg.logging.log_dir = cfg.logging.log_dir.replace("<name>", cfg.logging.name)


def _check_rules(cfg: TrainConfig, explicit: set[str], err: Errors) -> None:
    from mindrl.algorithms import get_advantage_estimator
    rl, actor, gen = cfg.rl_config, cfg.actor_config, cfg.generate_config
    values = {f"{s}.{k}": v for s, sec in cfg.to_dict().items() if sec for k, v in sec.items()}

    def inert(key: str, why: str, switch: str | None = None) -> None:
        """A key the run would not act on: refused when the user set it to something other than its default,
        unless the user also set the ``switch`` that turns it off (then they know, e.g. a DAPO yaml run with
        ``rl_config.dynamic_sampling=false`` keeps its max_num_gen_batches)."""
        if key in explicit and values[key] != TRAIN.default(key) and switch not in explicit:
            err.add(key, f"{_show(values[key])} has no effect: {why}; remove it")

    est = get_advantage_estimator(rl.adv_estimator)
    if est.needs_groups and rl.n_samples_per_prompt < 2:
        err.add("rl_config.n_samples_per_prompt",
                f"must be >= 2 for adv_estimator {rl.adv_estimator!r} (the group baseline needs "
                f"more than one response per prompt), got {rl.n_samples_per_prompt}")
    critic, rm = cfg.critic_config, cfg.reward_config
    if est.needs_critic and critic is None:
        err.add("rl_config.adv_estimator",
                f"{rl.adv_estimator!r} needs a critic (a value model), and this config has no critic_config "
                f"section; add one, or pick an estimator without a critic: grpo, dr_grpo, rloo, "
                f"reinforce_plus_plus, reinforce_plus_plus_baseline")
    if critic is not None and not est.needs_critic:
        err.add("critic_config", f"only adv_estimator gae trains a critic; {rl.adv_estimator!r} would ignore it "
                                 f"(remove the section, or set rl_config.adv_estimator: gae)")
    if critic is None:
        for key in ("cliprange_value", "critic_warmup"):
            inert(f"rl_config.{key}", "there is no critic (no critic_config section)")
    else:
        if critic.save is not None and critic.save != actor.save:
            err.add("critic_config.save", f"{critic.save!r} differs from actor_config.save = {_show(actor.save)}: "
                                          f"the critic is saved with the policy, in <save>/iter_*/critic")
        if critic.finetune != actor.finetune:
            err.add("critic_config.finetune", f"{_show(critic.finetune)} differs from actor_config.finetune = "
                                              f"{_show(actor.finetune)}: a run resumes (or starts) as a whole")
        if critic.no_load_rng != actor.no_load_rng:
            err.add("critic_config.no_load_rng", f"{_show(critic.no_load_rng)} differs from "
                                                 f"actor_config.no_load_rng: the run has one RNG state")
        if critic.finetune:
            for key in ("critic_config.no_load_optim",):
                if key in explicit and values[key] is False:
                    err.add(key, "false has no effect: finetune: true starts a new run and restores no "
                                 "optimizer state; set finetune: false to resume")
        if not critic.finetune and critic.load is not None:
            err.add("critic_config.load", "finetune is false: the critic resumes from actor_config.load's "
                                          "checkpoint (its critic/ part); remove critic_config.load")
        if critic.micro_batch_size and rl.mini_batch_size % critic.micro_batch_size:
            err.add("critic_config.micro_batch_size", f"{critic.micro_batch_size} does not divide "
                                                      f"rl_config.mini_batch_size = {rl.mini_batch_size}")
        if critic.lr_decay_style == "constant":
            inert("critic_config.min_lr", "lr_decay_style is constant (min_lr is the floor of cosine/linear "
                                          "decay)", "critic_config.lr_decay_style")
        if critic.min_lr > critic.lr:
            err.add("critic_config.min_lr", f"{_fmt_num(critic.min_lr)} is larger than lr = {_fmt_num(critic.lr)}")
        if critic.lr_warmup_fraction is not None and critic.lr_warmup_iters > 0:
            err.add("critic_config.lr_warmup_fraction",
                    f"cannot be combined with lr_warmup_iters = {critic.lr_warmup_iters}; set only one")
        if rl.critic_warmup >= rl.train_iters:
            err.add("rl_config.critic_warmup", f"{rl.critic_warmup} >= train_iters = {rl.train_iters}: the actor "
                                               f"would never be updated")
    if rl.reward_clip_range is not None:
        lo_hi = rl.reward_clip_range
        if len(lo_hi) != 2 or not lo_hi[0] < lo_hi[1]:
            err.add("rl_config.reward_clip_range", f"expected [low, high] with low < high, got {_show(lo_hi)}")
    if rm is not None and rl.dynamic_sampling:
        err.add("rl_config.dynamic_sampling", "decides on the rule rewards before the reward model has scored; "
                                              "it cannot be combined with reward_config")
    if rl.pretrain_coef == 0:
        inert("data.ptx_path", "only PPO-ptx reads it (rl_config.pretrain_coef > 0)", "rl_config.pretrain_coef")
    elif total_rows(rl) % rl.mini_batch_size == 0:
        chunks = total_rows(rl) // rl.mini_batch_size
        if rl.global_batch_size % chunks:
            err.add("rl_config.pretrain_coef", f"PPO-ptx splits a step's {rl.global_batch_size} SFT rows over its "
                                               f"{chunks} mini-batches; make global_batch_size a multiple of {chunks}")
        elif (rl.global_batch_size // chunks) > rl.micro_batch_size and \
                (rl.global_batch_size // chunks) % rl.micro_batch_size:
            err.add("rl_config.pretrain_coef", f"PPO-ptx runs {rl.global_batch_size // chunks} SFT rows per mini-batch "
                                               f"in micro-batches of rl_config.micro_batch_size = "
                                               f"{rl.micro_batch_size}, which does not divide them")
    users = lambda key: ", ".join(sorted(n for n, e in _estimators().items() if key in e.options))  # noqa: E731
    for key in ("gamma", "lam", "advantage_whiten"):
        if key not in est.options:
            inert(f"rl_config.{key}", f"adv_estimator {rl.adv_estimator!r} does not use it (used by: {users(key)})")
    if rl.adv_estimator not in ("grpo", "dr_grpo"):
        inert("rl_config.norm_adv_by_std", f"only grpo scales advantages by the group std, not "
                                           f"{rl.adv_estimator!r}")
    if rl.dynamic_sampling and not est.needs_groups:
        err.add("rl_config.dynamic_sampling",
                f"drops prompts whose samples all scored the same, which needs groups of samples; "
                f"adv_estimator {rl.adv_estimator!r} has none")

    # KL: in the loss, in the reward, or nowhere
    if rl.use_kl_in_loss and rl.use_kl_in_reward:
        err.add("rl_config.use_kl_in_reward",
                "and rl_config.use_kl_in_loss are both true: the KL would be applied twice; choose one")
    # use_kl_in_loss defaults to true (MindSpeed-RL's default) with kl_coef 0, i.e. no KL: only a placement the
    # user wrote asks for a KL term that kl_coef 0 would silently drop
    loss_asked = rl.use_kl_in_loss and "rl_config.use_kl_in_loss" in explicit
    if (rl.use_kl_in_reward or loss_asked) and rl.kl_coef == 0:
        if rl.use_kl_in_reward:
            why = ("rl_config.use_kl_in_loss: false puts the KL into the reward" if "rl_config.use_kl_in_reward"
                   not in explicit else "rl_config.use_kl_in_reward is true")
        else:
            why = "rl_config.use_kl_in_loss is true"
        err.add("rl_config.kl_coef", f"is 0 but {why}; set kl_coef > 0 (alias init_kl_coef), or drop the KL keys")
    if not rl.use_kl_in_loss and not rl.use_kl_in_reward and rl.kl_coef > 0:
        err.add("rl_config.kl_coef", f"{_fmt_num(rl.kl_coef)} but use_kl_in_loss and use_kl_in_reward are both "
                                     f"false: the KL would go nowhere")
    if rl.kl_ctrl_type == "adaptive" and not rl.use_kl_in_reward:
        err.add("rl_config.kl_ctrl_type", "adaptive adjusts the coefficient of a KL reward penalty; it needs "
                                          "rl_config.use_kl_in_reward: true")
    if rl.kl_ctrl_type != "adaptive":
        for key in ("kl_target", "kl_horizon"):
            inert(f"rl_config.{key}", "only the adaptive KL controller reads it (rl_config.kl_ctrl_type: adaptive)",
                  "rl_config.kl_ctrl_type")
    if rl.kl_coef == 0:
        inert("rl_config.kl_penalty", "kl_coef is 0, so there is no KL term; set rl_config.kl_coef",
              "rl_config.kl_coef")

    if rl.policy_loss == "gspo":
        if rl.clip_ratio_c is not None:
            err.add("rl_config.clip_ratio_c", "GSPO clips the sequence ratio and has no dual clip; remove it")
        if rl.loss_agg_mode != "seq-mean-token-mean":
            err.add("rl_config.loss_agg_mode", f"{rl.loss_agg_mode!r}: GSPO's sequence-level objective needs "
                                               f"seq-mean-token-mean (the default with policy_loss gspo)")
    if ("rl_config.clip_ratio_low" in explicit and "rl_config.clip_ratio_high" in explicit
            and rl.clip_ratio not in (rl.clip_ratio_low, rl.clip_ratio_high)):
        inert("rl_config.clip_ratio", "clip_ratio_low and clip_ratio_high are both given")

    total = rl.global_batch_size * rl.n_samples_per_prompt
    if total % rl.mini_batch_size:
        err.add("rl_config.mini_batch_size",
                f"{rl.mini_batch_size} does not divide global_batch_size*n_samples_per_prompt = "
                f"{rl.global_batch_size}*{rl.n_samples_per_prompt} = {total}")
    elif rl.mini_batch_size % rl.micro_batch_size:
        err.add("rl_config.micro_batch_size",
                f"{rl.micro_batch_size} does not divide mini_batch_size = {rl.mini_batch_size}")
    if rl.adv_estimator == "dr_grpo" and rl.norm_adv_by_std:
        err.add("rl_config.norm_adv_by_std",
                "must be false with adv_estimator 'dr_grpo' (Dr. GRPO does not scale advantages "
                "by the group std); remove the key or set it to false")
    if not rl.verifier_function and rm is None:
        err.add("rl_config.verifier_function", "must name at least one verifier, e.g. [acc], when no reward "
                                               "model scores (reward_config)")
    if rl.rule_reward is True and not rl.verifier_function:
        err.add("rl_config.rule_reward", "true, but rl_config.verifier_function names no verifier to score with")
    if rl.rule_reward is False and rl.verifier_function:
        err.add("rl_config.rule_reward", f"false, but rl_config.verifier_function names "
                                         f"{', '.join(rl.verifier_function)}: remove them, or set rule_reward: true")
    dups = sorted({v for v in rl.verifier_function if rl.verifier_function.count(v) > 1})
    if dups:
        err.add("rl_config.verifier_function", f"lists {', '.join(dups)} more than once")
    if not rl.verifier_function:
        inert("rl_config.reward_fallback", "there is no rule reward (rl_config.verifier_function is empty)")
    if len(rl.verifier_weight) != len(rl.verifier_function):
        err.add("rl_config.verifier_weight",
                f"has {len(rl.verifier_weight)} entries but verifier_function has "
                f"{len(rl.verifier_function)} ({_show(rl.verifier_function)}); "
                f"give one weight per verifier")
    if rl.overlong_buffer_len >= gen.max_tokens:
        err.add("rl_config.overlong_buffer_len",
                f"{rl.overlong_buffer_len} must be smaller than generate_config.max_tokens = "
                f"{gen.max_tokens}")
    if rl.overlong_buffer_len == 0:
        inert("rl_config.overlong_penalty_factor", "the overlong penalty is off (rl_config.overlong_buffer_len: 0)",
              "rl_config.overlong_buffer_len")
    if not rl.dynamic_sampling:
        inert("rl_config.max_num_gen_batches", "dynamic sampling is off (rl_config.dynamic_sampling: false)",
              "rl_config.dynamic_sampling")

    if actor.min_lr > actor.lr:
        err.add("actor_config.min_lr",
                f"{_fmt_num(actor.min_lr)} is larger than lr = {_fmt_num(actor.lr)}")
    if actor.lr_decay_style == "constant":
        inert("actor_config.min_lr", "lr_decay_style is constant (min_lr is the floor of cosine/linear decay)",
              "actor_config.lr_decay_style")
    if actor.lr_warmup_fraction is not None and actor.lr_warmup_iters > 0:
        err.add("actor_config.lr_warmup_fraction",
                f"cannot be combined with lr_warmup_iters = {actor.lr_warmup_iters}; set only one")
    if actor.lr_warmup_iters > rl.train_iters:
        # legal (a short trial run of a long config), but the lr never reaches actor_config.lr: say so
        # a log line, not warnings.warn: that would print this file's source line after the message
        logging.getLogger("mindrl.config").warning(
            "actor_config.lr_warmup_iters = %d is longer than rl_config.train_iters = %d: the learning rate stays "
            "in warm-up", actor.lr_warmup_iters, rl.train_iters)
    if not actor.finetune and actor.load is None:
        err.add("actor_config.load",
                "is required when finetune is false (resuming needs the checkpoint directory "
                "to restore step, optimizer, rng and data position from)")
    if actor.finetune:
        for key in ("no_load_optim", "no_load_rng"):
            if f"actor_config.{key}" in explicit and values[f"actor_config.{key}"] is False:
                err.add(f"actor_config.{key}", "false has no effect: finetune: true starts a new run and restores "
                                               "no optimizer or RNG state; set finetune: false to resume")
    if not actor.finetune and cfg.ref.ref_model_load_path is None and rl.kl_coef > 0:
        err.add("ref.ref_model_load_path",
                "is required when actor_config.finetune is false and kl_coef > 0: the resumed "
                "checkpoint holds the trained actor, so give the original weights for the "
                "reference model (MindSpeed-RL spelling: "
                "rl_config.integrated_mode_config.ref_model_load_path)")
    if rl.kl_coef == 0:
        for key in ("ref.ref_model_load_path", "ref.model"):
            if key in explicit and values[key] is not None:
                err.add(key, "has no effect: there is no reference model without a KL term (rl_config.kl_coef "
                             "is 0); remove it")
    if actor.save_best is not None:
        names = ["score"] + list(rl.verifier_function)
        wanted = [f"eval/{n}/mean" for n in names]
        if actor.save is None:
            err.add("actor_config.save_best", "needs actor_config.save (the best checkpoint is kept in <save>/best)")
        elif cfg.eval.path is None or not cfg.eval.interval:
            err.add("actor_config.save_best", "needs eval.path and eval.interval > 0: checkpoints are compared by "
                                              "the held-out metric measured every eval.interval steps")
        elif actor.save_best not in wanted:
            err.add("actor_config.save_best", f"{actor.save_best!r} is not a held-out metric this run logs; one of "
                                              f"{', '.join(wanted)}")
    if actor.save_interval > 0 and actor.save is None:
        err.add("actor_config.save_interval",
                f"is {actor.save_interval} but actor_config.save is not set; give a save directory")
    if actor.save is None:
        inert("actor_config.keep_last", "nothing is saved (actor_config.save is not set)", "actor_config.save")
    if gen.min_tokens > gen.max_tokens:
        err.add("generate_config.min_tokens",
                f"{gen.min_tokens} is larger than max_tokens = {gen.max_tokens}")
    if cfg.eval.path is None:
        for key in ("interval", "num_samples", "max_tokens", "dataset_config"):
            inert(f"eval.{key}", "there is no evaluation without eval.path", "eval.path")
    elif not cfg.eval.path.endswith(".jsonl"):
        inert("eval.dataset_config", "only a .jsonl eval.path is tokenized by mindrl (a MindRecord already is)")
    _check_run_dir_keys(cfg, err)
    if not cfg.runtime.enable_compile_cache:
        inert("runtime.compile_cache_path", "runtime.enable_compile_cache is false", "runtime.enable_compile_cache")
    if not cfg.runtime.only_save_strategy:
        inert("runtime.strategy_dir", "strategy files go there only with runtime.only_save_strategy (or `mindrl "
                                      "export-strategy`); checkpoints carry their own", "runtime.only_save_strategy")


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
    if lg.run_id is not None:
        if "<run_id>" not in lg.log_dir:
            err.add("logging.run_id", f"{lg.run_id!r} has no effect: logging.log_dir ({lg.log_dir}) has no <run_id> "
                                      f"to put it in; remove it, or put <run_id> in log_dir")
        elif not lg.run_id or "/" in lg.run_id or lg.run_id in (".", "..", "latest") or lg.run_id.startswith("."):
            err.add("logging.run_id", f"{lg.run_id!r} is not a directory name a run can have (one path part, not "
                                      f"'latest', not starting with '.')")


def total_rows(rl) -> int:
    """Responses per step."""
    return rl.global_batch_size * rl.n_samples_per_prompt


def _estimators():
    from mindrl.algorithms import ADVANTAGE_ESTIMATORS
    return ADVANTAGE_ESTIMATORS


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
    if rm is not None:
        rm.load = check.weights("reward_config.load", rm.load)
        if rm.model is not None:
            rm.model = check.model("reward_config.model", rm.model)
        elif os.path.isfile(rm.load):
            err.add("reward_config.model", f"is required: {rm.load!r} is a weights file without a config.json")

    reward_file_ok = True
    if rl.custom_reward_file is not None:
        # forms the reward loader accepts: file.py, file.py:func, package.module:func
        target, _, func = rl.custom_reward_file.partition(":")
        reward_file_ok = False
        if target.endswith(".py"):
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
    from mindrl.rewards.computer import check_verifier_names
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
        # the critic's architecture is its weights' (an explicit load, else the reward model, else the policy)
        source = critic.load if critic.load is not None else (rm.load if rm is not None else None)
        if source is not None and critic.load is not None:
            source = _critic_part(source)
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
                   foreign=FOREIGN_KEYS)
