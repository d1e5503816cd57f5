"""The config of `mindrl train-rm`: an outcome reward model trained on preference pairs (Bradley-Terry).

Sections: ``rm_config`` (the model, its weights, output and optimizer), ``train`` (batch sizes and length),
``data`` (pairwise MindRecord from `mindrl preprocess` with the pairwise handler), ``eval`` (held-out pairs),
``logging`` and ``runtime``. Standard library and yaml only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mindrl.config.loader import ConfigKind, Errors, PathChecks
from mindrl.config.schema import COMPUTE_DTYPES, RUN_MODES, LoggingConfig, OptimizerConfig, _opt


@dataclass(kw_only=True)
class RMModelConfig(OptimizerConfig):
    model: str = _opt(path=True, help="architecture: model yaml (name in model_configs/ or path) or HF dir")
    tokenizer_name_or_path: str = _opt(path=True, help="tokenizer directory or file (copied into the output)")
    load: str | None = _opt(None, path=True, help="initial weights: a causal LM (its backbone; a new score head) "
                            "or a reward model to train further; null = random")
    save: str = _opt(path=True, help="output: an HF sequence-classification directory")
    overwrite: bool = _opt(False, help="replace an existing save directory")
    lr: float = _opt(1e-5, ge=0.0, help="peak learning rate")
    tensor_model_parallel_size: int = _opt(1, ge=1, help="tensor parallel degree")
    compute_dtype: str | None = _opt(None, choices=COMPUTE_DTYPES, help="null = from the model config")


@dataclass(kw_only=True)
class RMTrainSection:
    global_batch_size: int = _opt(64, ge=1, help="preference pairs per optimizer step")
    micro_batch_size: int = _opt(16, ge=1, help="pairs per forward/backward pass")
    epochs: int = _opt(1, ge=1, help="passes over the data (when train_iters is null)")
    train_iters: int | None = _opt(None, ge=1, help="optimizer steps; null = epochs over the data")


@dataclass(kw_only=True)
class RMDataConfig:
    path: str = _opt(path=True, help="pairwise .mindrecord written by `mindrl preprocess` (pairwise handler)")
    shuffle: bool = _opt(True, help="shuffle the pairs every epoch")
    seed: int | None = _opt(None, ge=0, lt=2**32, help="shuffle seed; null = runtime.seed")
    chosen_key: str = _opt("chosen_ids", help="column with the preferred sequence (prompt + response)")
    rejected_key: str = _opt("rejected_ids", help="column with the other sequence")
    margin_key: str | None = _opt(None, help="column with a per-pair margin; null = no margin")


@dataclass(kw_only=True)
class RMEvalConfig:
    path: str | None = _opt(None, path=True, help="held-out pairwise .mindrecord; null = no eval")
    interval: int = _opt(0, ge=0, help="evaluate every N steps; 0 = only before and after training")
    num_samples: int | None = _opt(None, ge=1, help="pairs evaluated; null = all")


@dataclass(kw_only=True)
class RMRuntimeConfig:
    mode: str = _opt("graph", choices=RUN_MODES, help="MindSpore execution mode")
    threads: int | None = _opt(None, ge=1, help="CPU threads; null = all cores")
    seed: int = _opt(1234, ge=0, lt=2**32, help="global random seed")


@dataclass(kw_only=True)
class RewardTrainConfig:
    rm_config: RMModelConfig = _opt(help="the reward model: architecture, weights, output, optimizer")
    train: RMTrainSection = _opt(factory=RMTrainSection, help="batch sizes and length")
    data: RMDataConfig = _opt(help="training pairs")
    eval: RMEvalConfig = _opt(factory=RMEvalConfig, help="held-out pairs")
    logging: LoggingConfig = _opt(factory=LoggingConfig, help="metrics output")
    runtime: RMRuntimeConfig = _opt(factory=RMRuntimeConfig, help="MindSpore runtime")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _resolve(cfg: RewardTrainConfig, explicit: set, name: str) -> None:
    if cfg.data.seed is None:
        cfg.data.seed = cfg.runtime.seed
    if cfg.logging.name is None:
        cfg.logging.name = name
    cfg.logging.log_dir = cfg.logging.log_dir.replace("<name>", cfg.logging.name)


def _rules(cfg: RewardTrainConfig, explicit: set, err: Errors) -> None:
    rm, tr = cfg.rm_config, cfg.train
    if tr.global_batch_size % tr.micro_batch_size:
        err.add("train.micro_batch_size", f"{tr.micro_batch_size} does not divide train.global_batch_size = "
                                          f"{tr.global_batch_size}")
    if tr.train_iters is not None and "train.epochs" in explicit:
        err.add("train.epochs", "has no effect: train.train_iters sets the length; give only one")
    if rm.min_lr > rm.lr:
        err.add("rm_config.min_lr", f"{rm.min_lr} is larger than lr = {rm.lr}")
    if rm.lr_warmup_fraction is not None and rm.lr_warmup_iters > 0:
        err.add("rm_config.lr_warmup_fraction", f"cannot be combined with lr_warmup_iters = {rm.lr_warmup_iters}")
    if cfg.eval.path is None:
        for key in ("interval", "num_samples"):
            if f"eval.{key}" in explicit:
                err.add(f"eval.{key}", "has no effect: there is no evaluation without eval.path; remove it")
    from mindrl.config.train import check_run_id
    check_run_id(cfg.logging, err)


def _paths(cfg: RewardTrainConfig, err: Errors) -> None:
    import os
    check, rm = PathChecks(err), cfg.rm_config
    rm.model = check.model("rm_config.model", rm.model)
    rm.tokenizer_name_or_path = check.tokenizer("rm_config.tokenizer_name_or_path", rm.tokenizer_name_or_path)
    if rm.load is not None:
        rm.load = check.weights("rm_config.load", rm.load)
    rm.save = check.output_dir("rm_config.save", rm.save)
    if os.path.isdir(rm.save) and os.listdir(rm.save) and not rm.overwrite:
        err.add("rm_config.save", f"{rm.save!r} already exists and is not empty; set rm_config.overwrite: true "
                                  f"to replace it")
    cfg.data.path = check.mindrecord("data.path", cfg.data.path, allow_jsonl=False)
    if cfg.eval.path is not None:
        cfg.eval.path = check.mindrecord("eval.path", cfg.eval.path, allow_jsonl=False)
    cfg.logging.log_dir = os.path.expanduser(cfg.logging.log_dir)


REWARD_TRAINING = ConfigKind(RewardTrainConfig, {"seed": "runtime.seed"}, {
    "rl_config": "a reward model is trained with rm_config / train / data; RL settings go to `mindrl train`",
    "actor_config": "the model being trained is rm_config (model, tokenizer_name_or_path, load, save, lr, ...)",
}, _resolve, _rules, _paths)


def load_reward_training_config(path, overrides=(), *, check_paths: bool = True) -> RewardTrainConfig:
    from mindrl.config.loader import load_config
    return load_config(path, overrides, check_paths=check_paths, kind=REWARD_TRAINING)
