"""The config of `mindrl dpo`: Direct Preference Optimization of a causal LM on preference pairs, against a frozen
reference (the policy's starting weights).

Sections: ``dpo_config`` (the policy, its weights, output and optimizer, the reference, and DPO's ``beta``,
``loss_type`` and ``label_smoothing``, spelled as TRL's DPOConfig spells them), ``train`` (batch sizes and length),
``data`` (pairwise MindRecord from `mindrl preprocess` with the pairwise handler, as `mindrl train-rm` reads it),
``eval`` (held-out pairs), ``logging`` and ``runtime`` (config/offline.py has what they share with the other
offline trainers). Standard library and yaml only.
"""
from __future__ import annotations

from dataclasses import dataclass

from mindrl.config import offline
from mindrl.config.loader import ConfigKind, PathChecks, load_config
from mindrl.config.offline import EvalSection, RuntimeSection, TrainSection, TrainedModelConfig
from mindrl.config.schema import ConfigRoot, LoggingConfig, _opt

LOSS_TYPES = ("sigmoid", "ipo", "hinge")


@dataclass(kw_only=True)
class DPOModelConfig(TrainedModelConfig):
    load: str | None = _opt(None, path=True, help="the policy's starting weights: a causal LM (HF directory, weights "
                            "file, or a mindrl checkpoint's policy, e.g. `mindrl sft`'s); the reference is a frozen "
                            "copy of them. With finetune false, the dpo checkpoint to resume")
    lr: float = _opt(1e-6, ge=0.0, help="peak learning rate (TRL's DPOConfig: learning_rate 1e-6)")
    ref_load: str | None = _opt(None, path=True, help="the reference model's weights; null = the policy's starting "
                                "weights (dpo_config.load). A run writes the value it used into its config.yaml, so "
                                "its resume keeps the same reference")
    beta: float = _opt(0.1, gt=0.0, help="TRL's beta: how far the policy may move from the reference (higher: "
                       "less); for ipo, the regularisation tau")
    loss_type: str = _opt("sigmoid", choices=LOSS_TYPES, help="TRL's loss_type: sigmoid (DPO), ipo (IPO, on the "
                          "per-token mean log-ratios), hinge (SLiC)")
    label_smoothing: float = _opt(0.0, ge=0.0, lt=0.5, help="conservative DPO (cDPO): the probability that a pair's "
                                  "label is flipped; sigmoid only (TRL before 1.0 and OpenRLHF mean the same)")


@dataclass(kw_only=True)
class DPODataConfig:
    path: str = _opt(path=True, help="pairwise .mindrecord written by `mindrl preprocess` (pairwise handler): "
                     "chosen_ids, rejected_ids and prompt_length columns")
    shuffle: bool = _opt(True, help="shuffle the pairs every epoch")
    seed: int | None = _opt(None, ge=0, lt=2**32, derived=True, help="shuffle seed; null = runtime.seed")
    pad_to_multiple_of: int = _opt(0, ge=0, help="the width each micro-batch is padded to: 0 = the next power of "
                                   "two of its longest row (few widths, so few graphs to compile); n = the next "
                                   "multiple of n (TRL's pad_to_multiple_of: less padding computed, a compiled graph "
                                   "per width met)")
    chosen_key: str = _opt("chosen_ids", help="column with the preferred sequence (prompt + response)")
    rejected_key: str = _opt("rejected_ids", help="column with the other sequence (the same prompt + response)")
    prompt_length_key: str = _opt("prompt_length", help="column with the prompt's token count: the loss is on the "
                                  "tokens after it (the responses)")


@dataclass(kw_only=True)
class DPOConfig(ConfigRoot):
    dpo_config: DPOModelConfig = _opt(help="the policy and its reference: architecture, weights, output, optimizer, "
                                      "beta, loss_type")
    train: TrainSection = _opt(factory=TrainSection, help="batch sizes and length")
    data: DPODataConfig = _opt(help="training pairs")
    eval: EvalSection = _opt(factory=EvalSection, help="held-out pairs")
    logging: LoggingConfig = _opt(factory=LoggingConfig, help="metrics output")
    runtime: RuntimeSection = _opt(factory=RuntimeSection, help="MindSpore runtime")


def _rules(cfg: DPOConfig, explicit: set, err) -> None:
    offline.check_rules(cfg, explicit, err, "dpo_config", "dpo")
    m = cfg.dpo_config
    if m.label_smoothing > 0 and m.loss_type != "sigmoid":
        err.add("dpo_config.label_smoothing", f"{m.label_smoothing}: conservative DPO smooths the sigmoid loss only; "
                                              f"loss_type {m.loss_type} has no label smoothing (set it to 0)")
    if m.finetune and m.load is None:
        err.add("dpo_config.load", "is required: DPO starts from a trained policy (e.g. `mindrl sft`'s), and the "
                                   "reference is a frozen copy of it")
    if not m.finetune and m.ref_load is None:
        err.add("dpo_config.ref_load", "is required when finetune is false: resume with the run's own config.yaml "
                                       "(the command a stopped run prints), which names the reference it used")


def _paths(cfg: DPOConfig, err) -> None:
    offline.check_paths(cfg, err, "dpo_config", "dpo")
    m = cfg.dpo_config
    if m.ref_load is not None:
        m.ref_load = PathChecks(err).weights("dpo_config.ref_load", m.ref_load)


DPO = ConfigKind(DPOConfig, {"seed": "runtime.seed"}, {
    "rl_config": "DPO is configured with dpo_config / train / data; RL settings go to `mindrl train`",
    "actor_config": "the policy DPO trains is dpo_config (model, tokenizer_name_or_path, load, save, lr, beta, ...)",
    "ref_config": "the reference is a frozen copy of the policy's starting weights: dpo_config.ref_load",
    "rm_config": "a reward model is trained by `mindrl train-rm`; the model of `mindrl dpo` is dpo_config",
}, offline.resolve, _rules, _paths)


def load_dpo_config(path, overrides=(), *, check_paths: bool = True) -> DPOConfig:
    return load_config(path, overrides, check_paths=check_paths, kind=DPO)
