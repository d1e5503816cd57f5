"""The resolved run plan: what one training step does, in numbers and names, and which file each number came from.

Computed once from a validated :class:`~mindrl.config.schema.TrainConfig` and the world size, before anything is
built. ``mindrl train`` prints it at start-up (``mindrl plan`` prints it without training). The trainer's roles,
the experience maker, PPO-ptx and the loop read the plan, never the config: every default that depends on other
keys (warm-up steps, where the critic starts, which KL goes where, micro-batch sizes) is decided here, once.

- ``batch``    the step's batch arithmetic per layout (config/batch_plan.py)
- ``rollout``  what is sampled, from which data, and how
- ``reward``   how a sequence's reward is assembled (algorithms/sequence_reward.py reads it)
- ``roles``    one spec per network: model and dtype, first weights, layout, micro-batch, optimizer and schedule
- ``schedule`` steps, warm-ups, evaluation and checkpoint intervals

Standard library only (and the model-config reader, which is json/yaml): msrun's scheduler plans before ``init()``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from mindrl.algorithms import get_advantage_estimator
from mindrl.config.batch_plan import BatchPlan, StageLayout, plan_batches
from mindrl.data.widths import padded_width
from mindrl.models.lora import LoraSpec, target_projections


# -- optimizer and learning rate ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OptimSpec:
    """One trained network's AdamW settings and learning-rate schedule: its config section, resolved."""
    lr: float
    min_lr: float
    warmup: int            # linear warm-up steps (lr_warmup_iters, or lr_warmup_fraction of the run's steps)
    decay_style: str       # constant, cosine, linear
    total_steps: int
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    weight_decay: float
    clip_grad: float
    load_optimizer: bool = True  # on resume (not no_load_optim)

    @classmethod
    def of(cls, section, total_steps: int) -> "OptimSpec":
        frac = getattr(section, "lr_warmup_fraction", None)
        warmup = int(round(frac * total_steps)) if frac else section.lr_warmup_iters
        return cls(section.lr, section.min_lr, warmup, section.lr_decay_style, total_steps, section.adam_beta1,
                   section.adam_beta2, section.adam_eps, section.weight_decay, section.clip_grad,
                   not getattr(section, "no_load_optim", False))

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based): linear warm-up, then constant/cosine/linear."""
        if self.warmup > 0 and step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if self.decay_style == "constant":
            return self.lr
        span = max(1, self.total_steps - self.warmup)
        frac = min(1.0, max(0.0, (step - self.warmup) / span))
        if self.decay_style == "cosine":
            return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
        if self.decay_style == "linear":
            return self.lr + (self.min_lr - self.lr) * frac
        raise ValueError(f"lr_decay_style {self.decay_style!r} is not one of constant, cosine, linear")

    def text(self) -> str:
        """The schedule in one line, and whether the run ends inside its warm-up (legal, and usual for a short
        trial of a long config: said once here rather than warned about at every load)."""
        line = f"learning rate {self.lr:g}, {self.decay_style}"
        if self.warmup:
            line += f", after {_count(self.warmup, 'warm-up step')}"
        if self.warmup > self.total_steps:
            line += (f"; the run's {self.total_steps} steps end inside the warm-up, so the rate peaks at "
                     f"{self.lr_at(self.total_steps - 1):g}")
        return line


# -- roles -------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpec:
    """A network's architecture: a model config (yaml, config.json or HF directory) and the dtype it computes in."""
    path: str
    compute_dtype: Optional[str] = None   # None: the model config's own
    # trained roles: the section's Megatron recompute keys (RecomputeConfig.recompute_setting): True every layer,
    # N the first N; None: the model config's own recompute_config
    recompute: object = None

    def load(self):
        """The model config, with the compute dtype and the recompute setting applied."""
        from mindrl.models.config import load_model_config  # models/ reads files; the plan itself reads none
        config = load_model_config(self.path)
        if self.compute_dtype:
            config = config.replace(compute_dtype=self.compute_dtype)
        return config if self.recompute is None else config.replace(recompute=self.recompute)

    def recompute_text(self) -> str:
        if self.recompute is None:
            return ""
        layers = "every layer" if self.recompute is True else f"the first {self.recompute} layers"
        return f", recomputing {layers} in the backward"


@dataclass(frozen=True)
class WeightsSpec:
    """Where a network's first weights come from: ``path`` (an HF directory, a weights file or a mindrl checkpoint,
    whose ``part`` is read), or random initialisation when ``path`` is None."""
    path: Optional[str]
    part: str = "policy"
    what: str = "random initialisation"   # said in the plan: which key or rule chose it
    # LoRA on resume: ``path``'s part holds the merged model and its adapter; the network is rebuilt from the base
    # its adapter_config.json names (base_model_name_or_path) plus the adapter (trainer/roles/base.py)
    adapters: bool = False


@dataclass(frozen=True)
class PolicyLossSpec:
    """The actor's objective (algorithms/losses.py: ActorLoss takes these as keyword arguments)."""
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: Optional[float]
    loss_agg_mode: str
    use_kl_in_loss: bool
    kl_penalty: str
    kl_coef: float
    entropy_coeff: float
    policy_loss_name: str
    norm_len: int           # Dr.GRPO's constant length normaliser: the response budget


@dataclass(frozen=True)
class ValueLossSpec:
    cliprange_value: float
    loss_agg_mode: str


@dataclass(frozen=True)
class RoleSpec:
    """One network of the run. ``micro_batch``: responses per forward(/backward) per rank; ``seed``: its random
    initialisation's (the reference shares the policy's, so with no weights both start equal)."""
    name: str                          # policy, reference, critic, reward_model
    stage: str                         # its layout's name in the topology: train, critic, reward
    model: ModelSpec
    weights: WeightsSpec
    layout: StageLayout
    micro_batch: int
    seed: int = 0
    optim: Optional[OptimSpec] = None  # trained roles only
    loss: object = None                # PolicyLossSpec | ValueLossSpec for trained roles
    scoring_micro_batch: Optional[int] = None  # the policy's old-log-prob passes
    epochs: int = 1                    # trained roles: passes over a step's experience
    rows_per_update: int = 0           # trained roles: responses per optimizer update (a mini-batch)
    shuffle: bool = True               # trained roles: rows shuffled into mini-batches before each pass
    lora: Optional[LoraSpec] = None    # trained roles: adapters on a frozen base (None: full fine-tuning)
    layer_graphs: bool = False         # one decoder layer per graph call: the update's forward and backward, and
                                       # every forward-only pass (trainer/layer_graphs.py)

    def text(self) -> str:
        dtype = f", {self.model.compute_dtype}" if self.model.compute_dtype else ""
        w = self.weights
        where = f"{w.path} ({w.what})" if w.path is not None else w.what
        line = f"{self.name}: {self.model.path}{dtype}{self.model.recompute_text()}, from {where}"
        line += f"; {self.lora.text()}" if self.lora is not None else ""
        if self.layer_graphs:
            line += "; the update and scoring one layer per graph" if self.optim is not None else \
                "; scoring one layer per graph"
        return line + (f"; {self.optim.text()}" if self.optim is not None else "")


def critic_weights(cfg) -> WeightsSpec:
    """Where the critic starts: the run being resumed (its checkpoint's critic/), else where a new run starts it
    (``critic_start``). A source without a value head gets a zero head (roles/critic.py)."""
    if not cfg.actor_config.finetune:
        return resumed_weights(cfg.actor_config.load, "critic", cfg.critic_config)
    return critic_start(cfg)


def resumed_weights(load: str, part: str, section) -> WeightsSpec:
    """The checkpoint part a resumed role reads: with LoRA (``section.lora_rank``) its base and its adapter."""
    lora = bool(section.lora_rank)
    return WeightsSpec(load, part, f"the resumed run's {part}" + (": its base and adapter" if lora else ""), lora)


def critic_start(cfg) -> WeightsSpec:
    """Where a new run's critic starts, in this order: critic_config.load, the reward model (OpenRLHF's default: a
    critic that starts knowing what is rewarded), else the policy's backbone. The critic's architecture
    (critic_config.model's default, config/train.py) is that of the same source, so a resumed critic keeps it."""
    actor, critic, rm = cfg.actor_config, cfg.critic_config, cfg.reward_config
    if critic.load is not None:
        return WeightsSpec(critic.load, "critic", "critic_config.load")
    if rm is not None:
        return WeightsSpec(rm.load, "policy", "the reward model's")
    if actor.load is not None:
        return WeightsSpec(actor.load, "policy", "the policy's backbone")
    return WeightsSpec(None, "policy", "random initialisation, as the policy")


def lora_spec(section, seed: int) -> Optional[LoraSpec]:
    """The adapters a role's config section asks for (None: lora_rank 0, full fine-tuning)."""
    if not section.lora_rank:
        return None
    return LoraSpec(section.lora_rank, float(section.lora_alpha), target_projections(section.lora_target_modules),
                    seed)


def plan_roles(cfg, batch: BatchPlan, needs_critic: bool) -> Dict[str, RoleSpec]:
    rl, actor, gen, steps = cfg.rl_config, cfg.actor_config, cfg.generate_config, cfg.rl_config.train_iters
    seed = cfg.runtime.seed
    kl_in_loss = bool(rl.use_kl_in_loss and rl.kl_coef > 0)
    updates = dict(epochs=batch.epochs, rows_per_update=batch.responses_per_update, shuffle=batch.shuffle)
    roles = {"policy": RoleSpec(
        "policy", "train", ModelSpec(actor.model, actor.compute_dtype, actor.recompute_setting()),
        (WeightsSpec(actor.load, "policy", "actor_config.load") if actor.finetune else
         resumed_weights(actor.load, "policy", actor)) if actor.load else WeightsSpec(None),
        batch.train, batch.micro_batch, seed, OptimSpec.of(actor, steps),
        PolicyLossSpec(rl.clip_ratio_low, rl.clip_ratio_high, rl.clip_ratio_c, rl.loss_agg_mode, kl_in_loss,
                       rl.kl_penalty, rl.kl_coef, rl.entropy_coeff, rl.policy_loss, gen.max_tokens),
        scoring_micro_batch=batch.logprob_micro_batch, lora=lora_spec(actor, seed),
        layer_graphs=actor.layer_graphs, **updates)}
    if rl.kl_coef > 0 and actor.lora_rank:  # the policy's own base with its adapters off (roles/reference.py)
        roles["reference"] = RoleSpec("reference", "train", ModelSpec(actor.model, actor.compute_dtype),
                                      WeightsSpec(None, "policy", "the policy's frozen base (LoRA)"),
                                      batch.train, batch.ref_micro_batch, seed)
    elif rl.kl_coef > 0:
        ref = cfg.ref
        roles["reference"] = RoleSpec(
            "reference", "train", ModelSpec(ref.model, actor.compute_dtype),
            WeightsSpec(ref.ref_model_load_path, "policy", "ref.ref_model_load_path") if ref.ref_model_load_path
            else WeightsSpec(None, "policy", "the policy's random initialisation"),
            batch.train, batch.ref_micro_batch, seed, layer_graphs=actor.layer_graphs)
    if needs_critic:
        cc = cfg.critic_config
        roles["critic"] = RoleSpec(
            "critic", "critic", ModelSpec(cc.model, cc.compute_dtype or actor.compute_dtype, cc.recompute_setting()),
            critic_weights(cfg),
            batch.critic, batch.critic_micro_batch, seed + 7, OptimSpec.of(cc, steps),
            ValueLossSpec(rl.cliprange_value, cc.loss_agg_mode), lora=lora_spec(cc, seed + 7),
            layer_graphs=cc.layer_graphs, **updates)
    if cfg.reward_config is not None:
        rm = cfg.reward_config
        roles["reward_model"] = RoleSpec("reward_model", "reward", ModelSpec(rm.model),
                                         WeightsSpec(rm.load, "policy", "reward_config.load"), batch.reward,
                                         batch.reward_micro_batch, layer_graphs=rm.layer_graphs)
    return roles


# -- rollout and reward ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RolloutPlan:
    """What the experience maker samples: which data, how, and which tokens the loss then sees."""
    tokenizer: str                     # the policy's (actor_config.tokenizer_name_or_path)
    data_path: str
    prompt_key: str
    label_key: Optional[str]           # None: no rule reward reads labels (a reward-model-only run)
    shuffle: bool
    data_seed: int
    ptx_path: Optional[str]            # PPO-ptx rows (None: no PPO-ptx)
    max_prompt_length: int
    max_tokens: int
    min_tokens: int
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    stop_token_ids: Tuple[int, ...]
    seed: Optional[int]                # the sampling stream's (generate_config.seed); None: the run's seed
    dynamic_sampling: bool
    dynamic_sampling_metric: Optional[str]   # None: the sequence score before the reward model
    mask_truncated: bool               # truncated responses get no loss (mask_truncated_completions)
    pad_to_multiple_of: int = 0        # the training widths: 0 = powers of two, n = multiples of n
    max_split: int = 1                 # partial rollout: rounds the longest response may take (1 = off)
    tis_cap: Optional[float] = None    # truncated importance sampling of the policy loss (None = off)
    static_shapes: bool = False        # fixed widths: the configured maxima (compile cache, only_save_strategy)

    @property
    def round_tokens(self) -> int:
        """New tokens a response gets per rollout round."""
        return -(-self.max_tokens // self.max_split)

    def widths(self, prompt: int, response: int) -> Tuple[int, int]:
        """The (prompt, response) widths the training and scoring graphs pad a batch of these longest lengths to."""
        m = self.pad_to_multiple_of
        return padded_width(prompt, m), padded_width(response, m, 4)

    def widths_line(self) -> str:
        pad = f"the next multiple of {self.pad_to_multiple_of}" if self.pad_to_multiple_of else "the next power of two"
        p, r = self.widths(self.max_prompt_length, self.max_tokens)
        if self.static_shapes:
            return (f"  training widths: {p} prompt and {r} response positions for every batch (the configured maxima "
                    f"padded to {pad}; fixed shapes for the compile cache)")
        return (f"  training widths: a batch's longest prompt and response padded to {pad}, at most {p} and {r} "
                f"positions; the compiled widths grow with the longest batch met and never shrink "
                f"(rl_config.pad_to_multiple_of)")


@dataclass(frozen=True)
class KLPlan:
    """The KL term: in the reward (a per-token penalty, fixed or adaptive coefficient) or in the actor's loss."""
    where: str            # "reward" or "loss"
    coef: float           # the (initial) coefficient
    estimator: str        # rl_config.kl_penalty
    controller: str = "fixed"
    target: float = 0.1
    horizon: int = 10000


@dataclass(frozen=True)
class RewardPlan:
    """How one sequence's reward is assembled (algorithms/sequence_reward.py), in this order:
    ``score = clip(rule_reward + overlong_penalty + rm_weight * rm_score)``, then with KL in the reward
    ``reward = score - coef * sum_t kl_t`` (token-level estimators get the penalty per token instead)."""
    verifiers: Tuple[Tuple[str, float], ...]   # (name, weight) of each rule reward
    custom_reward_file: object                 # str | list | None
    timeout: float
    fallback: Optional[float]
    overlong_buffer_len: int                   # 0: no overlong penalty
    overlong_penalty_factor: float
    max_tokens: int
    rm_weight: Optional[float]                 # None: no reward model
    rm_normalize: bool
    clip_range: Optional[Tuple[float, float]]
    kl: Optional[KLPlan]                       # None: no KL term

    @property
    def kl_in_reward(self) -> bool:
        return self.kl is not None and self.kl.where == "reward"

    def lines(self) -> list:
        terms = [f"{w:g} x {n}" for n, w in self.verifiers]
        if self.overlong_buffer_len:
            terms.append(f"overlong penalty (up to {self.overlong_penalty_factor:g} over the last "
                         f"{self.overlong_buffer_len} of {self.max_tokens} tokens)")
        if self.rm_weight is not None:
            terms.append(f"{self.rm_weight:g} x reward model{' (normalised)' if self.rm_normalize else ''}")
        score = " + ".join(terms) or "nothing"
        if self.clip_range is not None:
            score = f"clip({score}, {self.clip_range[0]:g}, {self.clip_range[1]:g})"
        out = [f"  reward: score = {score}"]
        kl = self.kl
        if kl is None:
            out.append("          no KL term")
        else:
            coef = f"{kl.coef:g}" if kl.controller == "fixed" else \
                f"adaptive from {kl.coef:g} towards KL {kl.target:g} over {kl.horizon} sequences"
            where = "subtracted from the reward per token" if kl.where == "reward" else "added to the actor loss"
            out.append(f"          KL ({kl.estimator}) {where}, coefficient {coef}")
        return out


def plan_reward(cfg) -> RewardPlan:
    rl, rm = cfg.rl_config, cfg.reward_config
    kl = None
    if rl.kl_coef > 0 and (rl.use_kl_in_reward or rl.use_kl_in_loss):
        kl = KLPlan("reward" if rl.use_kl_in_reward else "loss", rl.kl_coef, rl.kl_penalty, rl.kl_ctrl_type,
                    rl.kl_target, rl.kl_horizon)
    return RewardPlan(tuple(zip(rl.verifier_function, rl.verifier_weight)), rl.custom_reward_file,
                      rl.verifier_timeout, rl.reward_fallback, rl.overlong_buffer_len, rl.overlong_penalty_factor,
                      cfg.generate_config.max_tokens, None if rm is None else rm.weight,
                      bool(rm is not None and rm.normalize),
                      None if rl.reward_clip_range is None else tuple(rl.reward_clip_range), kl)


def plan_rollout(cfg) -> RolloutPlan:
    rl, d, gen = cfg.rl_config, cfg.data, cfg.generate_config
    return RolloutPlan(
        cfg.actor_config.tokenizer_name_or_path, d.path, d.prompt_key, d.label_key if rl.verifier_function else None,
        d.shuffle, d.seed,
        d.ptx_path if rl.pretrain_coef > 0 else None, gen.max_prompt_length, gen.max_tokens, gen.min_tokens,
        gen.do_sample, gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty, tuple(gen.stop_token_ids),
        gen.seed, rl.dynamic_sampling, rl.dynamic_sampling_metric,
        rl.mask_truncated_completions, rl.pad_to_multiple_of, rl.partial_rollout_max_split, rl.tis_cap,
        bool(cfg.runtime.enable_compile_cache or cfg.runtime.only_save_strategy))


# -- the schedule and the held-out set ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class EvalPlan:
    """The held-out set (eval.path: a MindRecord, or a jsonl tokenized with the policy's tokenizer) and its runs."""
    path: str
    prompt_key: str
    label_key: str
    num_samples: Optional[int]        # rows spread over the file; None: all
    max_tokens: int
    dataset_config: Optional[str]
    tokenizer: str
    n_samples: int = 1                # responses per prompt (eval.n_samples)
    temperature: float = 0.0          # 0: greedy
    top_p: float = 1.0

    @property
    def sampled(self) -> bool:
        """Responses drawn at eval.temperature (pass@k, mean@n) rather than decoded greedily."""
        return self.temperature > 0

    def line(self) -> str:
        """The start-up print's line for a sampled evaluation (a greedy one has none: it is the default)."""
        nucleus = f", top_p {self.top_p:g}" if self.top_p < 1 else ""
        ks = ", ".join(f"pass@{k}" for k in pass_ks(self.n_samples))
        return (f"  held-out: {_count(self.n_samples, 'response')} sampled per prompt at temperature "
                f"{self.temperature:g}{nucleus} (eval.n_samples, eval.temperature), reported as {ks} and "
                f"mean@{self.n_samples}")


def pass_ks(n: int) -> list:
    """The k of the pass@k a sampled evaluation of ``n`` responses per prompt reports: 1, the powers of two below
    ``n``, and ``n`` itself (n=10: 1, 2, 4, 8, 10)."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def eval_metric_names(names, ev) -> list:
    """The held-out metrics of ``names`` (``score`` and the verifiers) that an evaluation configured by ``ev`` (the
    eval section) logs and ``actor_config.save_best`` may name: ``eval/<name>/mean``, and with sampled responses
    also ``eval/<name>/mean@<n>`` and ``eval/<name>/pass@<k>``."""
    out = [f"eval/{n}/mean" for n in names]
    if ev.temperature > 0:
        out += [f"eval/{n}/{m}" for n in names
                for m in [f"mean@{ev.n_samples}"] + [f"pass@{k}" for k in pass_ks(ev.n_samples)]]
    return out


@dataclass(frozen=True)
class Schedule:
    steps: int
    critic_warmup: int                # first steps that update only the critic
    pretrain_coef: float              # PPO-ptx's weight (0: none)
    max_bad_steps: int
    seed: int
    eval_interval: int                # 0: before and after training only
    save: Optional[str]               # checkpoint root (None: no checkpoints)
    save_interval: int
    save_best: Optional[str]
    log_max_throughput: bool


def plan_schedule(cfg) -> Schedule:
    rl, actor = cfg.rl_config, cfg.actor_config
    return Schedule(rl.train_iters, rl.critic_warmup, rl.pretrain_coef, rl.max_bad_steps, cfg.runtime.seed,
                    cfg.eval.interval, actor.save, actor.save_interval, actor.save_best,
                    cfg.logging.log_max_throughput)


def plan_eval(cfg) -> Optional[EvalPlan]:
    ev = cfg.eval
    if not ev.path:
        return None
    return EvalPlan(ev.path, cfg.data.prompt_key, cfg.data.label_key, ev.num_samples, ev.max_tokens,
                    ev.dataset_config, cfg.actor_config.tokenizer_name_or_path, ev.n_samples, ev.temperature,
                    ev.top_p)


# -- the plan ----------------------------------------------------------------------------------------------------------

@dataclass
class RunPlan:
    batch: BatchPlan
    estimator: str = "grpo"                        # rl_config.adv_estimator
    estimator_options: dict = field(default_factory=dict)   # the estimator's own keys (gamma, lam, ...)
    rollout: Optional[RolloutPlan] = None
    reward: Optional[RewardPlan] = None
    roles: Dict[str, RoleSpec] = field(default_factory=dict)
    schedule: Optional[Schedule] = None
    eval: Optional[EvalPlan] = None               # None: no held-out set
    origins: dict = field(default_factory=dict)   # dotted key -> where its value came from
    notes: list = field(default_factory=list)     # keys accepted although mindrl does nothing with them, and why
    source: str = "<config>"                      # the config file
    peer_file: bool = False                       # read as MindSpeed-RL's file (megatron_training / defaults)

    def origin(self, key: str) -> str:
        return self.origins.get(key, "default")

    def lines(self) -> list:
        """The start-up print: the step in numbers, the models, the reward, then where the numbers came from."""
        b = self.batch
        kind = ", read as MindSpeed-RL's (its meaning and defaults)" if self.peer_file else ""
        out = [f"run plan of {self.source}{kind}, on {b.world} process{'es' if b.world > 1 else ''}:"]
        out.append(f"  per step: {b.prompts} prompts x {b.samples_per_prompt} samples = {b.responses} responses")
        if b.gen_prompts != b.prompts or b.max_gen_batches != 1:
            limit = "no limit" if b.max_gen_batches == 0 else f"at most {b.max_gen_batches}"
            out.append(f"  generation: batches of {b.gen_prompts} prompts, {limit} per step, until {b.prompts} "
                       f"prompts have rewards that differ within their group (dynamic sampling)")
        share = b.gen_responses_per_replica
        decode = f"{b.rollout_batch} at a time (finished responses' slots take the next prompts' samples)" \
            if b.rollout_batch < share else "all at once"
        out.append(f"  rollout: layout {b.infer.text()}, {share} responses per replica and generation batch, "
                   f"decoded {decode}")
        ro = self.rollout
        if ro is not None and ro.max_split > 1:
            out.append(f"  partial rollout: at most {ro.round_tokens} new tokens per response and round, "
                       f"{ro.max_split} rounds at most; responses still going wait for the next round (the next "
                       f"step's when this step has its {b.prompts} groups)")
        if ro is not None and ro.tis_cap is not None:
            out.append(f"  policy loss: each token weighted by min(exp(old - rollout log-prob), {ro.tis_cap:g}) (TIS)")
        out.append(f"  actor: {b.updates} optimizer update{'s' if b.updates != 1 else ''} per step = {b.epochs} "
                   f"epoch{'s' if b.epochs != 1 else ''} x {b.prompts} prompts / {b.prompts_per_update} prompts "
                   f"per update ({b.responses_per_update} responses)")
        out.append(f"         layout {b.train.text()}: per rank {_count(b.micro_batches_per_update, 'micro-batch')} of "
                   f"{_count(b.micro_batch, 'response')} per update")
        if b.shared_prompt:
            n = b.samples_per_prompt
            old = b.logprob_micro_batch if b.recompute_old_log_probs else None  # else the rollout's own: no pass
            passes = ", ".join(["update"] + [what for what, micro in (("old-log-prob", old),
                                                                      ("reference", b.ref_micro_batch))
                                             if b.shared_group(micro)])
            out.append(f"         each prompt computed once for its {n} samples (one packed row per group; "
                       f"rl_config.share_prompt) in the passes: {passes}")
        elif b.unshared_why and b.samples_per_prompt > 1:
            out.append(f"         each response's row holds its prompt: {b.unshared_why} (rl_config.share_prompt)")
        if b.ptx_rows_per_update:
            out.append(f"         PPO-ptx: {b.ptx_rows_per_update} supervised rows added to each update")
        if b.critic is not None:
            out.append(f"  critic: {_count(b.updates, 'optimizer update')} per step; layout {b.critic.text()}: "
                       f"per rank "
                       f"{_count(b.critic_micro_batches_per_update, 'micro-batch')} of "
                       f"{_count(b.critic_micro_batch, 'response')} per update")
            values = ("from the critic's update, run before the advantages (a single update per step: its forward "
                      "reads the weights a value pass would)" if b.critic_values_in_update else
                      f"a pass of their own before the updates ({b.updates} updates per step: the later ones read "
                      "newer weights)")
            out.append(f"          values: {values}")
        why = "more than one update per step" if b.updates > 1 else "the rollout's may be an older policy's"
        old = (f"recomputed before the updates ({why})" if b.recompute_old_log_probs
               else "the rollout's own (a single update per step)")
        out.append(f"  old log-probs: {old}; log-prob passes in micro-batches of {b.logprob_micro_batch}"
                   + (f", the reference's of {b.ref_micro_batch}" if b.ref_micro_batch else ""))
        if ro is not None:
            out.append(ro.widths_line())
        if self.reward is not None:
            out += self.reward.lines()
        if self.eval is not None and self.eval.sampled:
            out.append(self.eval.line())
        if self.roles:
            out.append("  models:")
            out += [f"    {spec.text()}" for spec in self.roles.values()]
        plain = {self.source, f"{self.source}: "}
        keys = [k for k in _PLAN_KEYS if k in self.origins and self.origins[k] not in plain
                and self.origins[k] != f"{self.source}: {k}"]
        if keys:
            out.append("  where the numbers came from (other than the key of that name in the config):")
            out += [f"    {k}: {self.origins[k]}" for k in keys]
        if self.notes:
            out.append("  accepted, no effect in mindrl:")
            out += [f"    {n}" for n in _grouped(self.notes)]
        return out

    def text(self) -> str:
        return "\n".join(self.lines())


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('batch') else 's'}"


def _grouped(notes: list) -> list:
    """Notes ``key: value (why)`` that share a why on one line: ``key=value, key=value: why``."""
    groups: dict = {}
    for note in notes:
        head, sep, why = note.partition(" (")
        if not sep or not why.endswith(")"):
            groups.setdefault(note, [])
            continue
        key, _, value = head.partition(": ")
        groups.setdefault(why[:-1], []).append(f"{key}={value}")
    return [f"{', '.join(heads)}: {why}" if heads else why for why, heads in groups.items()]


# the keys whose origin the print shows: those that set the numbers above
_PLAN_KEYS = ("actor_config.model", "actor_config.load", "actor_config.finetune", "actor_config.compute_dtype",
              "critic_config.model", "data.path", "runtime.world_size", "rl_config.kl_coef", "rl_config.loss_agg_mode",
              "rl_config.global_batch_size", "rl_config.gen_batch_size", "rl_config.n_samples_per_prompt",
              "rl_config.mini_batch_size", "rl_config.ppo_epochs", "rl_config.micro_batch_size",
              "rl_config.actor_forward_micro_batch_size", "rl_config.ref_forward_micro_batch_size",
              "rl_config.max_num_gen_batches", "actor_config.tensor_model_parallel_size",
              "generate_config.infer_tensor_parallel_size", "generate_config.max_num_seqs",
              "generate_config.micro_batch_size",
              "critic_config.tensor_model_parallel_size", "critic_config.micro_batch_size")


def plan_run(cfg, world: int) -> RunPlan:
    """The run's plan on ``world`` ranks, with the origins and notes the loader recorded."""
    rl, meta = cfg.rl_config, cfg.meta
    estimator = get_advantage_estimator(rl.adv_estimator)
    batch = plan_batches(cfg, world)
    return RunPlan(batch, rl.adv_estimator, {k: getattr(rl, k) for k in estimator.options}, plan_rollout(cfg),
                   plan_reward(cfg), plan_roles(cfg, batch, estimator.needs_critic), plan_schedule(cfg),
                   plan_eval(cfg), dict(meta.origins), list(meta.notes), meta.source, meta.peer_file)
