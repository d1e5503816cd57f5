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


def _args(ap, argv):
    """Flags and key=value overrides in any order."""
    return ap.parse_intermixed_args(argv)


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


def _build(cfg, run_dir: bool = True):
    """The trainer, or None after printing why the setup cannot run (a layout that does not divide the batch, a
    damaged checkpoint found while loading): such errors are the config's, found before anything compiles."""
    from mindrl.config import ConfigError
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.trainer.loop import RLTrainer
    try:
        return RLTrainer(cfg, run_dir=run_dir)
    except (ConfigError, CheckpointError) as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return None


def _setup_logging():
    """INFO on rank 0; other msrun ranks report only warnings and errors (prefixed with their rank)."""
    from mindrl.parallel.topology import launch_topology
    rank = str(launch_topology().rank)
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s" if rank == "0" else \
        f"%(asctime)s [rank {rank}] %(name)s %(levelname)s %(message)s"
    logging.basicConfig(level=logging.INFO if rank == "0" else logging.WARNING, format=fmt)


def train_main(argv) -> int:
    args = _args(_parser("mindrl train", "RL training (GRPO, PPO, ...) from a yaml config"), argv)
    cfg = _load(args)
    if cfg is None:
        return 2
    _setup_logging()
    if cfg.runtime.only_save_strategy:
        return _export_strategy(cfg)
    from mindrl.rewards import RewardError
    from mindrl.trainer.checkpointer import SaveFailed
    from mindrl.trainer.loop import TrainingDiverged
    trainer = _build(cfg)
    if trainer is None:
        return 2
    try:
        summary = trainer.fit()
    except TrainingDiverged as err:
        print(f"mindrl train: error: {err}", file=sys.stderr)
        return 3
    except (SaveFailed, RewardError) as err:  # RewardError: a reward call failed and reward_fallback is null
        print(f"mindrl train: error: {err}", file=sys.stderr)
        return 1
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if before and after and trainer.run.topo.is_main:
        keys = [k for k in after if k.endswith("/mean")]
        print("held-out (greedy): " + ", ".join(f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in keys))
    return 0


def evaluate_main(argv) -> int:
    ap = _parser("mindrl evaluate", "greedy evaluation of actor_config.load on eval.path")
    ap.add_argument("--dump", metavar="FILE.jsonl", help="also write every prompt, response, label and score")
    args = _args(ap, argv)
    cfg = _load(args)
    if cfg is None:
        return 2
    if not cfg.eval.path:
        print("mindrl: eval.path is not set", file=sys.stderr)
        return 2
    cfg.rl_config.train_iters = 0
    _setup_logging()
    trainer = _build(cfg, run_dir=False)
    if trainer is None:
        return 2
    if trainer.run.topo.is_main:
        n = len(trainer.evaluate.data()[0])
        print(f"evaluating {n} held-out prompts from {cfg.eval.path} with {cfg.actor_config.load} (greedy; the "
              f"first batch compiles the rollout graphs)", file=sys.stderr, flush=True)
    from mindrl.rewards import RewardError
    try:
        result = trainer.evaluate(dump=args.dump)
    except RewardError as err:
        print(f"mindrl evaluate: error: {err}", file=sys.stderr)
        return 1
    if trainer.run.topo.is_main:
        print(json.dumps(result, indent=2))
        if args.dump:
            print(f"wrote {result['eval/num_samples']} predictions to {args.dump}", file=sys.stderr)
    return 0


def export_strategy_main(argv) -> int:
    """`mindrl export-strategy --config X` == `mindrl train --config X runtime.only_save_strategy=true`."""
    args = _args(_parser("mindrl export-strategy", "compile every model, write per-rank strategy files, exit"), argv)
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
    from mindrl.parallel.topology import launch_topology
    if launch_topology().rank == 0:
        print("building and compiling every model of the run to write its strategy files (static shapes; a minute "
              "or more for large models) ...", file=sys.stderr, flush=True)
    trainer = _build(cfg, run_dir=False)  # compiles everything: only_save_strategy implies static shapes
    if trainer is None:
        return 2
    stages = [stage for role in trainer.roles() for stage in role.stages()]
    written = write_strategy(cfg.runtime.strategy_dir, stages, trainer.run.topo)
    trainer.run.exchange.barrier()
    if trainer.run.topo.is_main:
        for d in written:
            print(f"wrote {d}")
    return 0
