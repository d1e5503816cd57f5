"""`mindrl train`, `mindrl evaluate` and `mindrl export-strategy`."""
from __future__ import annotations

import argparse
import json
import logging
import sys


def _parser(prog, description):
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", required=True, help="training yaml (see docs/configuration.md)")
    ap.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override any config key")
    return ap


def _load(args):
    """The validated config, with the files it names checked (preflight); None after printing the errors."""
    from mindrl.config import ConfigError, load_train_config
    from mindrl.trainer.preflight import preflight
    try:
        cfg = load_train_config(args.config, args.overrides)
        preflight(cfg, source=args.config)
        return cfg
    except ConfigError as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return None


def _build(cfg):
    """The trainer, or None after printing why the setup cannot run (a layout that does not divide the batch, a
    damaged checkpoint found while loading): such errors are the config's, found before anything compiles."""
    from mindrl.config import ConfigError
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.trainer.loop import RLTrainer
    try:
        return RLTrainer(cfg)
    except (ConfigError, CheckpointError) as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return None


def _setup_logging():
    """INFO on rank 0; other msrun ranks report only warnings and errors (prefixed with their rank)."""
    import os
    rank = os.environ.get("RANK_ID", "0")
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s" if rank == "0" else \
        f"%(asctime)s [rank {rank}] %(name)s %(levelname)s %(message)s"
    logging.basicConfig(level=logging.INFO if rank == "0" else logging.WARNING, format=fmt)


def train_main(argv) -> int:
    args = _parser("mindrl train", "RL training (GRPO, PPO, ...) from a yaml config").parse_args(argv)
    cfg = _load(args)
    if cfg is None:
        return 2
    _setup_logging()
    if cfg.runtime.only_save_strategy:
        return _export_strategy(cfg)
    from mindrl.trainer.checkpointer import SaveFailed
    from mindrl.trainer.loop import RLTrainer, TrainingDiverged
    trainer = _build(cfg)
    if trainer is None:
        return 2
    try:
        summary = trainer.fit()
    except TrainingDiverged as err:
        print(f"mindrl train: error: {err}", file=sys.stderr)
        return 3
    except SaveFailed as err:
        print(f"mindrl train: error: {err}", file=sys.stderr)
        return 1
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if before and after and trainer.run.topo.is_main:
        keys = [k for k in after if k.endswith("/mean")]
        print("held-out (greedy): " + ", ".join(f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in keys))
    return 0


def evaluate_main(argv) -> int:
    args = _parser("mindrl evaluate", "greedy evaluation of actor_config.load on eval.path").parse_args(argv)
    cfg = _load(args)
    if cfg is None:
        return 2
    if not cfg.eval.path:
        print("mindrl: eval.path is not set", file=sys.stderr)
        return 2
    cfg.rl_config.train_iters = 0
    _setup_logging()
    trainer = _build(cfg)
    if trainer is None:
        return 2
    result = trainer.evaluate()
    if trainer.run.topo.is_main:
        print(json.dumps(result, indent=2))
    return 0


def export_strategy_main(argv) -> int:
    """`mindrl export-strategy --config X` == `mindrl train --config X runtime.only_save_strategy=true`."""
    args = _parser("mindrl export-strategy", "compile every model, write per-rank strategy files, exit").parse_args(argv)
    args.overrides = ["runtime.only_save_strategy=true"] + list(args.overrides)
    cfg = _load(args)
    if cfg is None:
        return 2
    _setup_logging()
    return _export_strategy(cfg)


def _export_strategy(cfg) -> int:
    """Build and compile every model of the run (static shapes, fixed order), write
    ``<strategy_dir>/<stage>_<model>_strategy/strategy_<rank>.json``, and exit without training."""
    from mindrl.trainer.roles import write_strategy
    trainer = _build(cfg)  # compiles everything: only_save_strategy implies static shapes
    if trainer is None:
        return 2
    stages = [stage for role in trainer.roles() for stage in role.stages()]
    written = write_strategy(cfg.runtime.strategy_dir, stages, trainer.run.topo)
    trainer.run.exchange.barrier()
    if trainer.run.topo.is_main:
        for d in written:
            print(f"wrote {d}")
    return 0
