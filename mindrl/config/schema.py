"""Typed schema of a mindrl training config.

Every section is a plain dataclass. Per-field rules (allowed choices, numeric bounds, whether the
value is a filesystem path) live in the field metadata and are enforced by the generic walker in
:mod:`mindrl.config.loader`; rules that involve several fields are written out there as well.

Only the standard library and the numpy-only algorithm registries are imported here (yaml lazily in
``to_yaml``): this module runs in msrun's scheduler process before ``init()`` and must never pull in mindspore.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from mindrl.config.errors import ConfigError  # noqa: F401 (re-exported: the error every config reader raises)
from mindrl.algorithms import (ADVANTAGE_ESTIMATORS, KL_CONTROLLERS, KL_ESTIMATOR_ALIASES,  # noqa: F401
                               LOSS_AGG_MODES, POLICY_LOSS_NAMES)
from mindrl.config.meta import WithMeta
from mindrl.config.yaml_io import dump_yaml


def _opt(default: Any = dataclasses.MISSING, *, help: str, factory: Any = dataclasses.MISSING,
         choices: tuple | None = None, value_aliases: dict | None = None,
         ge: float | None = None, gt: float | None = None,
         le: float | None = None, lt: float | None = None,
         path: bool = False, derived: bool = False) -> Any:
    """A dataclass field carrying its validation rules in ``metadata``.

    Bounds on a list field apply to every element. ``value_aliases`` maps accepted alternative
    spellings of a choice onto the canonical one. ``derived``: null means the loader derives the value
    from other keys, and a rule reads whether the user wrote it, so ``to_yaml`` writes it only when given.
    """
    meta = {"help": help, "choices": choices, "value_aliases": value_aliases or {},
            "ge": ge, "gt": gt, "le": le, "lt": lt, "path": path, "derived": derived}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# Algorithm names come from the registries that implement them (numpy-only modules, safe before init()).
ADV_ESTIMATORS = tuple(ADVANTAGE_ESTIMATORS)
POLICY_LOSSES = POLICY_LOSS_NAMES
KL_PENALTIES = tuple(name for canon, aliases in KL_ESTIMATOR_ALIASES.items() for name in (canon, *aliases))
LR_DECAY_STYLES = ("constant", "cosine", "linear")
COMPUTE_DTYPES = ("float32", "float16", "bfloat16")
RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("uniform", "block")
RUN_MODES = ("graph", "pynative")


@dataclass(kw_only=True)
class RLConfig:
    adv_estimator: str = _opt("grpo", choices=ADV_ESTIMATORS,
                              value_aliases={"group_norm": "grpo", "reinforce": "reinforce_plus_plus",
                                             "reinforce_baseline": "reinforce_plus_plus_baseline"},
                              help="advantage estimator / algorithm")
    policy_loss: str = _opt("vanilla", choices=POLICY_LOSSES,
                            help="vanilla: token-level clipped ratio; gspo: sequence-level ratio")
    n_samples_per_prompt: int = _opt(8, ge=1, help="responses sampled per prompt (group size)")
    global_batch_size: int = _opt(16, ge=1, help="prompts trained on per step")
    mini_batch_size: int | None = _opt(None, ge=1, derived=True, help="prompts per optimizer update, each with its "
                                       "n_samples_per_prompt responses (MindSpeed-RL's and verl's unit); "
                                       "null = global_batch_size (one update per step)")
    micro_batch_size: int = _opt(8, ge=1, help="responses per forward/backward pass, per data-parallel rank")
    actor_forward_micro_batch_size: int | None = _opt(None, ge=1, help="responses per old-log-prob forward pass, "
                                                      "per rank; null = micro_batch_size")
    ref_forward_micro_batch_size: int | None = _opt(None, ge=1, help="responses per reference log-prob pass, per "
                                                    "rank; null = micro_batch_size")
    pad_to_multiple_of: int = _opt(0, ge=0, help="the widths the training and scoring graphs pad a batch's prompts "
                                   "and responses to: 0 = the next power of two of the longest (few widths, so few "
                                   "graphs to compile); n = the next multiple of n (TRL's pad_to_multiple_of: less "
                                   "padding computed, more widths). A batch runs at the narrowest widths compiled "
                                   "so far that hold it: they grow with the longest batch and never shrink")
    ppo_epochs: int = _opt(1, ge=1, help="passes over each rollout batch")
    shuffle_minibatch: bool = _opt(True, help="shuffle the rows into mini-batches before each pass; false = in "
                                   "rollout order")
    train_iters: int = _opt(100, ge=1, help="training steps")
    clip_ratio: float = _opt(0.2, gt=0.0, lt=1.0, help="PPO clip range epsilon")
    clip_ratio_low: float | None = _opt(None, gt=0.0, lt=1.0, derived=True,
                                        help="lower clip epsilon; null = clip_ratio (gspo: 3e-4)")
    clip_ratio_high: float | None = _opt(None, gt=0.0, derived=True,
                                         help="upper clip epsilon; null = clip_ratio (gspo: 4e-4)")
    clip_ratio_c: float | None = _opt(None, gt=1.0, help="dual-clip constant; null = off")
    kl_penalty: str = _opt("low_var_kl", choices=KL_PENALTIES, help="KL estimator")
    kl_coef: float = _opt(0.0, ge=0.0, help="KL coefficient (initial one with kl_ctrl_type adaptive); 0 = no KL")
    use_kl_in_reward: bool = _opt(False, help="subtract kl_coef * KL from the token rewards")
    use_kl_in_loss: bool | None = _opt(None, derived=True, help="add kl_coef * KL to the actor loss; "
                                       "null = not use_kl_in_reward")
    kl_ctrl_type: str = _opt("fixed", choices=KL_CONTROLLERS,
                             help="KL-in-reward coefficient: fixed, or adaptive towards kl_target")
    kl_target: float = _opt(0.1, gt=0.0, help="target KL of the adaptive controller")
    kl_horizon: int = _opt(10000, ge=1, help="sequences over which the adaptive controller moves")
    entropy_coeff: float = _opt(0.0, ge=0.0, help="entropy bonus coefficient")
    loss_agg_mode: str = _opt("token-mean", choices=LOSS_AGG_MODES,
                              help="how token losses are averaged")
    norm_adv_by_std: bool = _opt(True, help="divide group advantages by the group std")
    rule_reward: bool | None = _opt(None, help="MindSpeed-RL's switch: true = verifier_function scores (it must "
                                    "name one), false = only the reward model does; null = as verifier_function says")
    verifier_function: list[str] | None = _opt(None, derived=True, help="rule rewards to apply; null = [acc], or none "
                                               "when a reward model scores (reward_config)")
    verifier_weight: list[float] | None = _opt(None, derived=True, help="weight of each verifier; null = 1.0 each")
    custom_reward_file: str | None = _opt(None, path=True,
                                          help="python file with extra reward functions")
    verifier_timeout: float = _opt(5.0, gt=0.0, le=86400.0, help="seconds one reward call (any verifier, built-in "
                                   "or custom, one sample) may take before it is abandoned (at most a day)")
    reward_fallback: float | None = _opt(None, help="score of a sample whose reward call failed (raised, timed "
                                         "out, returned a non-number or a non-finite one); null = stop with an "
                                         "error naming the function and the sample")
    dynamic_sampling: bool = _opt(False, help="drop groups whose rewards are all equal and redraw")
    dynamic_sampling_metric: str | None = _opt(None, help="what must differ within a group for dynamic sampling to "
                                               "keep it: a verifier_function name (its own score); null = the "
                                               "sequence score (every reward, weighted, and the overlong penalty)")
    gen_batch_size: int | None = _opt(None, ge=1, help="prompts per generation batch with dynamic sampling; null = "
                                      "global_batch_size")
    max_num_gen_batches: int = _opt(4, ge=0, help="generation batches per step incl. the first; 0 = no limit")
    partial_rollout_max_split: int = _opt(1, ge=1, help="MindSpeed-RL's partial rollout: a rollout round gives each "
                                          "response at most ceil(generate_config.max_tokens / n) new tokens; the "
                                          "ones still going are paused and resumed in the next round (re-prefilled "
                                          "by the policy of then), which may be the next step's; a step trains on "
                                          "groups whose responses all ended; 1 = off")
    share_prompt: bool | None = _opt(None, help="the actor's update packs each prompt's n samples into one row, "
                                     "[prompt | response 1 | ... | response n], so the prompt's positions are "
                                     "computed once instead of n times (the same loss and gradient; mini-batches are "
                                     "shuffled as whole groups); null = whenever micro-batches hold whole groups, "
                                     "true = refuse a config where they cannot, false = one row per response")
    tis_cap: float | None = _opt(None, gt=0.0, help="truncated importance sampling (TIS): each token's policy loss is "
                                 "weighted by min(exp(old_log_prob - rollout_log_prob), tis_cap), for tokens sampled "
                                 "by an older policy (partial rollout) or with other numerics; null = off")
    overlong_buffer_len: int = _opt(0, ge=0, help="soft overlong penalty window in tokens; 0 = off")
    overlong_penalty_factor: float = _opt(1.0, ge=0.0, help="maximum soft overlong penalty")
    mask_truncated_completions: bool = _opt(False, help="exclude truncated responses from the loss")
    gamma: float = _opt(1.0, ge=0.0, le=1.0, help="discount (gae, reinforce_plus_plus)")
    lam: float = _opt(0.95, ge=0.0, le=1.0, help="GAE lambda (gae)")
    advantage_whiten: bool = _opt(True, help="whiten GAE advantages over the batch's valid tokens (gae)")
    cliprange_value: float = _opt(0.5, gt=0.0, help="clip range of the critic's value update (PPO)")
    critic_warmup: int = _opt(0, ge=0, help="first steps that update only the critic, not the actor (PPO)")
    reward_clip_range: list[float] | None = _opt(None, help="[low, high] the sequence score is clipped to; "
                                                 "null = no clipping")
    max_bad_steps: int = _opt(3, ge=1, help="consecutive steps with a non-finite reward, loss or gradient norm "
                              "(their updates skipped) before the run stops with an error")
    pretrain_coef: float = _opt(0.0, ge=0.0, help="PPO-ptx: weight of a supervised loss on data.ptx_path's "
                                "pretrain_ids (response tokens); 0 = off")


@dataclass(kw_only=True)
class OptimizerConfig:
    """What a trained model's optimizer and schedule read (actor_config and critic_config)."""
    lr: float = _opt(1e-6, ge=0.0, help="peak learning rate")
    min_lr: float = _opt(0.0, ge=0.0, help="learning rate floor for decay")
    lr_decay_style: str = _opt("constant", choices=LR_DECAY_STYLES, help="learning rate schedule")
    lr_warmup_iters: int = _opt(0, ge=0, help="linear warmup steps")
    lr_warmup_fraction: float | None = _opt(None, ge=0.0, le=1.0,
                                            help="warmup as a fraction of train_iters")
    weight_decay: float = _opt(0.0, ge=0.0, help="AdamW weight decay")
    adam_beta1: float = _opt(0.9, ge=0.0, lt=1.0, help="Adam beta1")
    adam_beta2: float = _opt(0.999, ge=0.0, lt=1.0, help="Adam beta2")
    adam_eps: float = _opt(1e-8, gt=0.0, help="Adam epsilon")
    clip_grad: float = _opt(1.0, ge=0.0, help="global gradient-norm clip; 0 = off")


@dataclass(kw_only=True)
class LoraConfig:
    """Low-rank adapters (LoRA) instead of full fine-tuning: the base weights stay frozen (actor_config and
    critic_config; PEFT's and MindSpeed-LLM's key names)."""
    lora_rank: int = _opt(0, ge=0, help="adapter rank r (MindSpeed-LLM: lora_r); 0 = full fine-tuning, no adapters")
    lora_alpha: float = _opt(16.0, gt=0.0, help="adapter scale numerator: the update is (lora_alpha / lora_rank) "
                             "* x A B")
    lora_dropout: float = _opt(0.0, ge=0.0, help="must be 0: dropout would make the update's log-probs "
                               "differ from the rollout's at equal weights, and on CPU its noise cannot be seeded")
    lora_target_modules: list[str] = _opt(factory=lambda: ["all-linear"], help="projections that get adapters: "
                                          "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, MindSpeed-LLM's "
                                          "linear_proj linear_fc2, or all-linear (never the "
                                          "output head)")


@dataclass(kw_only=True)
class RecomputeConfig:
    """Activation recompute of a trained network, with Megatron's keys and meanings (MindSpeed-RL's and
    MindSpeed-LLM's): a recomputed layer keeps only its input for the backward and runs its forward again there.
    Unset, the model yaml's ``recompute_config`` decides (an HF directory has none: no recompute)."""
    recompute_granularity: str | None = _opt(None, choices=RECOMPUTE_GRANULARITIES,
                                             help="full: whole decoder layers (with recompute_method and "
                                                  "recompute_num_layers); selective (attention only) is refused; "
                                                  "null = the model yaml's recompute_config")
    recompute_method: str | None = _opt(None, choices=RECOMPUTE_METHODS,
                                        help="with granularity full: block = the first recompute_num_layers "
                                             "layers; uniform = every layer (Megatron checkpoints one input per "
                                             "chunk of recompute_num_layers layers, mindrl one per layer)")
    recompute_num_layers: int | None = _opt(None, ge=1, help="with granularity full: block's layer count, "
                                            "uniform's chunk size (at most the model's num_layers)")

    def recompute_setting(self):
        """What these keys ask of the model config's ``recompute`` (True: every layer, N: the first N layers), or
        None when they are unset and the model yaml decides. Call after the loader's check_recompute."""
        if self.recompute_granularity is None:
            return None
        return True if self.recompute_method == "uniform" else int(self.recompute_num_layers)


@dataclass(kw_only=True)
class LayerGraphsConfig:
    """A trained network's update one decoder layer per graph call (trainer/layer_graphs.py)."""
    layer_graphs: bool = _opt(False, help="true: the update's forward and backward run one decoder layer per "
                              "graph call (each layer's forward run again in its backward), and so do the "
                              "role's forward-only passes (the actor's: the policy's and the reference's "
                              "log-probs; the critic's: its values): a fraction of the compile time and of the "
                              "memory, for more update time (docs/performance.md); one device per model, no "
                              "LoRA, no recompute")


@dataclass(kw_only=True)
class ActorConfig(LayerGraphsConfig, RecomputeConfig, LoraConfig, OptimizerConfig):
    model: str = _opt(path=True, help="model yaml (name in model_configs/ or path) or HF dir")
    tokenizer_name_or_path: str = _opt(path=True, help="tokenizer directory or file")
    load: str | None = _opt(None, path=True, help="initial weights or checkpoint to resume")
    save: str | None = _opt(None, path=True, help="checkpoint output directory; <run_dir> is replaced by the run "
                            "directory (logging.log_dir)")
    finetune: bool = _opt(True, help="true: weights only, step 0; false: resume from load")
    no_load_optim: bool = _opt(False, help="on resume, do not restore optimizer state")
    no_load_rng: bool = _opt(False, help="on resume, do not restore RNG state")
    save_interval: int = _opt(0, ge=0, help="save every N steps; 0 = only at the end")
    keep_last: int = _opt(2, ge=0, help="checkpoints kept; 0 = keep all")
    save_best: str | None = _opt(None, help="a held-out metric (eval/<name>/mean, higher is better): the checkpoint "
                                 "where it was highest is kept in <save>/best, beside the last ones; null = off")
    tensor_model_parallel_size: int = _opt(1, ge=1, help="tensor parallel degree for training")
    compute_dtype: str | None = _opt(None, choices=COMPUTE_DTYPES,
                                     help="null = from the model config")


@dataclass(kw_only=True)
class CriticConfig(LayerGraphsConfig, RecomputeConfig, LoraConfig, OptimizerConfig):
    """PPO's value model: its own weights, layout, optimizer and schedule (MindSpeed-RL's section name)."""
    model: str | None = _opt(None, path=True, derived=True, help="critic architecture; null = that of load, else "
                             "of the reward model, else actor_config.model")
    load: str | None = _opt(None, path=True, help="initial weights; null = the reward model's, else the "
                            "policy's with a zero value head")
    save: str | None = _opt(None, path=True, help="must be actor_config.save: the critic is saved beside the "
                            "policy, in <save>/iter_*/critic")
    finetune: bool | None = _opt(None, derived=True,
                                 help="must equal actor_config.finetune (the run resumes as a whole)")
    no_load_optim: bool = _opt(False, help="on resume, keep a fresh critic optimizer")
    no_load_rng: bool | None = _opt(None, derived=True, help="must equal actor_config.no_load_rng (one RNG per run)")
    lr: float = _opt(1e-5, ge=0.0, help="peak learning rate")
    tensor_model_parallel_size: int = _opt(1, ge=1, help="tensor parallel degree of the critic")
    micro_batch_size: int | None = _opt(None, ge=1, derived=True,
                                        help="responses per critic forward/backward, per rank; "
                                        "null = rl_config.micro_batch_size")
    loss_agg_mode: str = _opt("token-mean", choices=LOSS_AGG_MODES, help="how the value loss's token terms are "
                              "averaged")
    compute_dtype: str | None = _opt(None, choices=COMPUTE_DTYPES, help="null = from the critic's model config")


@dataclass(kw_only=True)
class RewardModelConfig:
    """A trained reward model that scores rollouts (outcome reward), e.g. from `mindrl train-rm`."""
    load: str = _opt(path=True, help="weights: an HF sequence-classification directory (score head)")
    model: str | None = _opt(None, path=True, derived=True, help="architecture; null = load's config.json")
    tensor_model_parallel_size: int = _opt(1, ge=1, help="tensor parallel degree of the reward model")
    micro_batch_size: int | None = _opt(None, ge=1, derived=True, help="responses per scoring pass; "
                                        "null = rl_config.micro_batch_size")
    weight: float = _opt(1.0, help="coefficient of the reward model's score in the sequence score")
    normalize: bool = _opt(False, help="(score - mean) / std with the statistics `mindrl train-rm` stored")
    layer_graphs: bool = _opt(False, help="true: the scoring pass runs one decoder layer per graph call (three "
                              "small graphs instead of one: less compile time and memory, for more scoring time; "
                              "docs/performance.md); one device per model (tensor_model_parallel_size 1)")


@dataclass(kw_only=True)
class RefConfig:
    ref_model_load_path: str | None = _opt(None, path=True,
                                           help="reference weights; null = actor_config.load")
    model: str | None = _opt(None, path=True, derived=True,
                             help="reference model config; null = actor_config.model")


@dataclass(kw_only=True)
class GenerateConfig:
    max_prompt_length: int = _opt(512, ge=1, help="prompt tokens kept (longer prompts are dropped)")
    max_tokens: int = _opt(256, ge=1, help="max new tokens per response")
    min_tokens: int = _opt(0, ge=0, help="EOS is suppressed before this many new tokens")
    do_sample: bool = _opt(True, help="false: greedy rollout (MindFormers' do_sample, as MindRLHF's tutorial yaml "
                           "sets it): one response per prompt, no temperature, top_k or top_p")
    temperature: float = _opt(1.0, gt=0.0, help="sampling temperature")
    top_k: int = _opt(0, ge=0, value_aliases={-1: 0}, help="top-k sampling; 0 (or vLLM's -1) = off")
    top_p: float = _opt(1.0, gt=0.0, le=1.0, help="nucleus sampling mass")
    repetition_penalty: float = _opt(1.0, gt=0.0, help="1.0 = off")
    stop_token_ids: list[int] = _opt(factory=list, ge=0, help="extra stop tokens besides EOS")
    infer_tensor_parallel_size: int = _opt(1, ge=1, help="tensor parallel degree for rollout")
    infer_data_parallel_size: int | None = _opt(None, ge=1, help="null = derived from world size")
    max_num_seqs: int | None = _opt(None, ge=1, derived=True,
                                    help="decode slots per rollout replica: at most this many responses decode at "
                                    "once, and finished responses' slots take the next prompts' samples "
                                    "(continuous batching); null = micro_batch_size, or all of its share")
    micro_batch_size: int | None = _opt(None, ge=1, help="the older name of max_num_seqs (set one of the two)")
    seed: int | None = _opt(None, ge=0, lt=2**32, help="seed of the rollout's sampling; null = runtime.seed")


@dataclass(kw_only=True)
class DataConfig:
    path: str = _opt(path=True, help="training .mindrecord written by `mindrl preprocess`")
    shuffle: bool = _opt(True, help="shuffle prompts every epoch")
    seed: int | None = _opt(None, ge=0, lt=2**32, derived=True, help="shuffle seed; null = runtime.seed")
    prompt_key: str = _opt("prompt_ids", help="column with prompt token ids")
    label_key: str = _opt("labels", help="column with reference answers")
    ptx_path: str | None = _opt(None, path=True, derived=True, help="PPO-ptx rows (pretrain_ids, loss_mask columns); "
                                "null = data.path when rl_config.pretrain_coef > 0")


@dataclass(kw_only=True)
class LoggingConfig:
    log_dir: str = _opt("runs/<name>/<run_id>", path=True,
                        help="the run directory; <name> is replaced by logging.name, <run_id> by logging.run_id")
    name: str | None = _opt(None, help="run name; null = config file stem")
    run_id: str | None = _opt(None, derived=True, help="this run's id in log_dir; null = a new one (its start time), "
                              "or that of the run a resume continues")
    jsonl: bool = _opt(True, help="write metrics.jsonl")
    tensorboard: bool = _opt(True, help="write tensorboard events")
    log_interval: int = _opt(1, ge=1, help="log every N steps")
    progress_bar: bool = _opt(True, help="show a progress bar on rank 0")
    log_max_throughput: bool = _opt(True, help="e2e_tps/update_tps/rollout_tps count every response at the batch's "
                                    "longest prompt and response length (MindSpeed-RL's default); false = mean lengths")


@dataclass(kw_only=True)
class RuntimeConfig:
    mode: str = _opt("graph", choices=RUN_MODES, help="MindSpore execution mode")
    enable_compile_cache: bool = _opt(False, help="reuse compiled graphs across runs")
    compile_cache_path: str = _opt("./.compile_cache", path=True, help="compile cache directory")
    only_save_strategy: bool = _opt(False, help="compile, write strategy files, exit")
    strategy_dir: str = _opt("./strategy", path=True, help="where strategy files are written")
    threads: int | None = _opt(None, ge=1, help="CPU threads; null = all cores")
    seed: int = _opt(1234, ge=0, lt=2**32, help="global random seed")
    world_size: int | None = _opt(None, ge=1, help="processes (devices) the config is written for; checked against "
                                  "msrun's workers at start-up; null = any")


@dataclass(kw_only=True)
class EvalConfig:
    path: str | None = _opt(None, path=True, help="held-out .mindrecord or .jsonl; null = no eval")
    dataset_config: str | None = _opt(None, path=True, help="a .jsonl eval.path is tokenized as this `mindrl "
                                      "preprocess` yaml would (handler, template, map_keys); null = rows of "
                                      "{prompt, labels} with the prompt used as it is")
    interval: int = _opt(0, ge=0, help="evaluate every N steps; 0 = only before and after training")
    num_samples: int | None = _opt(None, ge=1, help="held-out prompts evaluated, spread evenly over the file; "
                                   "null = all")
    max_tokens: int | None = _opt(None, ge=1, derived=True, help="null = generate_config.max_tokens")
    n_samples: int = _opt(1, ge=1, help="responses sampled per held-out prompt; > 1 reports pass@k and mean@n "
                          "(needs eval.temperature > 0); 1 with temperature 0 = greedy accuracy")
    temperature: float = _opt(0.0, ge=0.0, help="0 = greedy decoding; > 0 samples the held-out responses at this "
                              "temperature")
    top_p: float = _opt(1.0, gt=0.0, le=1.0, help="nucleus sampling of the sampled evaluation (eval.temperature > 0); "
                        "1.0 = off")


class ConfigRoot(WithMeta):
    """What every kind of config file (``mindrl train``'s, ``mindrl train-rm``'s) gives back: the mapping that loads
    again to an equal config, and every key's resolved value."""

    def resolved_dict(self) -> dict:
        """Every key with the value the run uses (defaults and derived values filled in), sections in schema
        order; absent sections (no critic) are None. For reading, not for loading again: see :meth:`to_dict`."""
        return dataclasses.asdict(self)

    def to_dict(self) -> dict:
        """The config as a mapping that loads back to an equal config (``config_from_dict(cfg.to_dict()) == cfg``)
        and reruns as its own file would.

        Kept: every key the file or an override gave, and every key whose value differs from its default, except
        ``derived`` ones (the loader derives them again, so a rerun that changes ``clip_ratio`` or ``runtime.seed``
        moves what follows them); keys left at their defaults are omitted, so rules about keys given on their own
        ("has no effect") judge the reloaded mapping as they judged the original. Absent sections (no critic, no
        reward model) are left out, as an empty one would mean "present". Paths a run filled in are written as
        given: ``logging.log_dir`` and a ``save`` with ``<run_dir>`` keep their placeholders, and the run id is
        kept only when the user named it, so the mapping starts a new run rather than writing into the old one.
        """
        given, templates = self.meta.explicit, self.meta.templates
        out = {}
        for f in dataclasses.fields(self):
            section = getattr(self, f.name)
            if section is None:
                continue
            keep, values = {}, dataclasses.asdict(section)
            for sf in dataclasses.fields(section):
                dotted = f"{f.name}.{sf.name}"
                value = templates.get(dotted, values[sf.name])
                default = sf.default if sf.default is not dataclasses.MISSING else (
                    sf.default_factory() if sf.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
                if dotted in given or (value != default and not sf.metadata.get("derived")):
                    keep[sf.name] = value
            out[f.name] = keep
        return out

    def to_yaml(self) -> str:
        """:meth:`to_dict` as yaml text; loading it back yields an equal config."""
        return dump_yaml(self.to_dict())


@dataclass(kw_only=True)
class TrainConfig(ConfigRoot):
    rl_config: RLConfig = _opt(factory=RLConfig, help="algorithm and batch sizes")
    actor_config: ActorConfig = _opt(help="policy model, checkpoints, optimizer")
    critic_config: CriticConfig | None = _opt(None, help="value model (PPO); absent = no critic")
    reward_config: RewardModelConfig | None = _opt(None, help="reward model; absent = rule rewards only")
    ref: RefConfig = _opt(factory=RefConfig, help="reference model")
    generate_config: GenerateConfig = _opt(factory=GenerateConfig, help="rollout sampling")
    data: DataConfig = _opt(help="training data")
    logging: LoggingConfig = _opt(factory=LoggingConfig, help="metrics output")
    runtime: RuntimeConfig = _opt(factory=RuntimeConfig, help="MindSpore runtime")
    eval: EvalConfig = _opt(factory=EvalConfig, help="held-out evaluation")

    def fingerprint(self, *keys: str) -> str:
        """sha256 hex digest of a canonical JSON of the selected sections or dotted keys.

        ``fingerprint()`` covers the whole config; ``fingerprint("actor_config",
        "generate_config.max_tokens")`` only those parts. Independent of yaml key order, of
        alias spellings and of the order of ``keys``.
        """
        tree = self.resolved_dict()
        if not keys:
            payload: Any = tree
        else:
            payload = {}
            for key in keys:
                node: Any = tree
                for part in key.split("."):
                    if not isinstance(node, dict) or part not in node:
                        raise ConfigError(f"fingerprint: unknown config key {key!r}")
                    node = node[part]
                payload[key] = node
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TrainConfig))
