"""What the configs of the offline trainers share: `mindrl train-rm` (config/reward_training.py) and `mindrl sft`
(config/sft.py) each train one network on a MindRecord, with the sections ``<model section>`` (the model, its
weights, output and optimizer), ``train`` (batch sizes and length), ``data``, ``eval`` (held-out rows),
``logging`` and ``runtime``. Standard library and yaml only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from mindrl.config.loader import Errors, PathChecks, check_lora, check_optimizer, check_recompute
from mindrl.config.schema import COMPUTE_DTYPES, RUN_MODES, LoraConfig, OptimizerConfig, RecomputeConfig, _opt


@dataclass(kw_only=True)
class TrainedModelConfig(RecomputeConfig, LoraConfig, OptimizerConfig):
    """The trained network's section (``rm_config``, ``sft_config``); a kind overrides ``load``'s help."""
    model: str = _opt(path=True, help="architecture: model yaml (name in model_configs/ or path) or HF dir")
    tokenizer_name_or_path: str = _opt(path=True, help="tokenizer directory or file (copied into the output)")
    load: str | None = _opt(None, path=True, help="initial weights; with finetune false, the checkpoint to resume; "
                            "null = random")
    save: str | None = _opt(None, path=True, help="checkpoint directory (to resume from); <run_dir> is replaced by "
                            "the run directory; null = no checkpoints. The model itself is <run_dir>/model")
    finetune: bool = _opt(True, help="true: weights only, step 0; false: resume the run whose checkpoint load is")
    no_load_optim: bool = _opt(False, help="on resume, do not restore the optimizer state")
    save_interval: int = _opt(0, ge=0, help="save a checkpoint every N steps; 0 = only at the end")
    keep_last: int = _opt(2, ge=0, help="checkpoints kept; 0 = keep all")
    lr: float = _opt(1e-5, ge=0.0, help="peak learning rate")
    tensor_model_parallel_size: int = _opt(1, ge=1, help="tensor parallel degree")
    compute_dtype: str | None = _opt(None, choices=COMPUTE_DTYPES, help="null = from the model config")


@dataclass(kw_only=True)
class TrainSection:
    global_batch_size: int = _opt(64, ge=1, help="rows (train-rm: preference pairs) per optimizer step")
    micro_batch_size: int = _opt(16, ge=1, help="rows per forward/backward pass")
    epochs: int = _opt(1, ge=1, help="passes over the data (when train_iters is null)")
    train_iters: int | None = _opt(None, ge=1, help="optimizer steps; null = epochs over the data")


@dataclass(kw_only=True)
class EvalSection:
    path: str | None = _opt(None, path=True, help="held-out .mindrecord of the training data's kind; null = no eval")
    interval: int = _opt(0, ge=0, help="evaluate every N steps; 0 = only before and after training")
    num_samples: int | None = _opt(None, ge=1, help="rows evaluated; null = all")


@dataclass(kw_only=True)
class RuntimeSection:
    mode: str = _opt("graph", choices=RUN_MODES, help="MindSpore execution mode")
    threads: int | None = _opt(None, ge=1, help="CPU threads; null = all cores")
    seed: int = _opt(1234, ge=0, lt=2**32, help="global random seed")


def resolve(cfg, explicit: set, name: str) -> None:
    """Derived defaults: the shuffle seed, the run name and its directory."""
    if cfg.data.seed is None:
        cfg.data.seed = cfg.runtime.seed
    if cfg.logging.name is None:
        cfg.logging.name = name
    cfg.meta.templates = {"logging.log_dir": cfg.logging.log_dir}  # as written, for to_dict
    cfg.logging.log_dir = cfg.logging.log_dir.replace("<name>", cfg.logging.name)


def check_rules(cfg, explicit: set, err: Errors, section: str, command: str) -> None:
    """The rules every offline kind has; ``section``: its model section's name, ``command``: its subcommand."""
    m, tr = getattr(cfg, section), cfg.train
    if tr.global_batch_size % tr.micro_batch_size:
        err.add("train.micro_batch_size", f"{tr.micro_batch_size} does not divide train.global_batch_size = "
                                          f"{tr.global_batch_size}")
    if tr.train_iters is not None and "train.epochs" in explicit:
        err.add("train.epochs", "has no effect: train.train_iters sets the length; give only one")
    check_optimizer(m, section, explicit, err)
    check_lora(m, section, explicit, err)
    check_recompute(m, section, err)
    if cfg.eval.path is None:
        for key in ("interval", "num_samples"):
            if f"eval.{key}" in explicit:
                err.add(f"eval.{key}", "has no effect: there is no evaluation without eval.path; remove it")
    if not m.finetune and m.load is None:
        err.add(f"{section}.load", f"is required when finetune is false: the {command} checkpoint to resume")
    if m.save is None:
        for key, default in (("save_interval", 0), ("keep_last", 2)):  # save: null given: the user turned them off
            if f"{section}.{key}" in explicit and getattr(m, key) != default and f"{section}.save" not in explicit:
                err.add(f"{section}.{key}", f"has no effect: {section}.save is not set (no checkpoints); remove it, "
                                            f"or set save: <run_dir>/ckpt")
    elif "<run_dir>" in m.save and not m.save.startswith("<run_dir>"):
        err.add(f"{section}.save", f"{m.save!r}: <run_dir> stands for the run directory and starts the path "
                                   f"(e.g. <run_dir>/ckpt)")
    if m.finetune and f"{section}.no_load_optim" in explicit and m.no_load_optim:
        err.add(f"{section}.no_load_optim", "has no effect: finetune: true starts a new run and restores no "
                                            "optimizer; set finetune: false to resume")
    if "logging.log_max_throughput" in explicit:
        err.add("logging.log_max_throughput", f"has no effect: `mindrl {command}` has no rollouts to count at their "
                                              f"longest length; remove it")
    from mindrl.config.train import check_run_id
    check_run_id(cfg.logging, err)


def check_paths(cfg, err: Errors, section: str, command: str) -> None:
    """The model, tokenizer, weights, checkpoint directory and data files of an offline kind."""
    check, m = PathChecks(err), getattr(cfg, section)
    m.model = check.model(f"{section}.model", m.model)
    check.recompute(section, m)
    m.tokenizer_name_or_path = check.tokenizer(f"{section}.tokenizer_name_or_path", m.tokenizer_name_or_path)
    if m.load is not None:
        m.load = check.weights(f"{section}.load", m.load)
        if not m.finetune and os.path.isfile(m.load):
            err.add(f"{section}.load", f"finetune is false, so {m.load!r} must be a {command} checkpoint directory "
                                       f"to resume from, not a file")
    if m.save is not None:
        m.save = check.output_dir(f"{section}.save", m.save)
    cfg.data.path = check.mindrecord("data.path", cfg.data.path, allow_jsonl=False)
    if cfg.eval.path is not None:
        cfg.eval.path = check.mindrecord("eval.path", cfg.eval.path, allow_jsonl=False)
    cfg.logging.log_dir = os.path.expanduser(cfg.logging.log_dir)
