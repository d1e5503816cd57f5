"""`mindrl train`, `mindrl evaluate` and `mindrl export-strategy`."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

# Imports sit inside the commands: `mindrl --help`, a refused config and msrun's scheduler (which runs this
# module up to init()) must not load MindSpore or the trainer


def _parser(prog, description):
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", required=True, help="training yaml (see docs/configuration.md)")
    ap.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override any config key")
    return ap


def _args(ap, argv):
    """Flags and key=value overrides in any order."""
    return ap.parse_intermixed_args(argv)


def _load(args, world: int | None = None):
    """(the validated config, its run plan): the files it names checked (preflight) and the run planned on the
    launcher's world size (or ``world``), so that a layout that does not divide the batch is refused before
    anything is built; (None, None) after printing the errors."""
    from mindrl.config import ConfigError, load_train_config
    from mindrl.config.plan import plan_run
    from mindrl.parallel.topology import launch_topology
    from mindrl.trainer.preflight import preflight
    try:
        cfg = load_train_config(args.config, args.overrides)
        preflight(cfg, source=args.config)
        return cfg, plan_run(cfg, world or launch_topology().world)
    except ConfigError as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return None, None


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
    cfg, _ = _load(args)
    if cfg is None:
        return 2
    _setup_logging()
    if cfg.runtime.only_save_strategy:
        return _export_strategy(cfg)
    from mindrl.rewards import RewardError
    from mindrl.trainer.checkpointer import SaveFailed
    from mindrl.trainer.guard import TrainingDiverged
    from mindrl.trainer.interrupt import RunInterrupted
    from mindrl.trainer.metrics import LogWriteFailed
    trainer = _build(cfg)
    if trainer is None:
        return 2
    try:
        summary = trainer.fit()
    except RunInterrupted as stopped:  # saved and said how to resume (trainer/stopping.py)
        trainer.run.exchange.barrier()
        return stopped.exit_code
    except TrainingDiverged as err:
        print(f"mindrl train: error: {err}", file=sys.stderr)
        return 3
    except (SaveFailed, RewardError, LogWriteFailed) as err:  # RewardError: a reward call failed, reward_fallback null
        print(f"mindrl train: error: {err}", file=sys.stderr)
        return 1
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if before and after and trainer.run.topo.is_main:
        keys = [k for k in after if k.endswith("/mean")]
        print(f"held-out ({_eval_kind(trainer.run.plan.eval)}): "
              + ", ".join(f"{k} {before[k]:.3f} -> {after[k]:.3f}" for k in keys), flush=True)
    # every rank ends after the main rank's summary: MindSpore logs a few lines when a worker leaves the cluster,
    # whatever GLOG_v says, and under msrun another rank's would land inside the summary
    trainer.run.exchange.barrier()
    return 0


def _eval_kind(ev) -> str:
    """How the held-out responses are made, for the lines that announce and sum up an evaluation."""
    if not ev.sampled:
        return "greedy"
    return (f"{ev.n_samples} responses sampled per prompt at temperature {ev.temperature:g}"
            + (f", top_p {ev.top_p:g}" if ev.top_p < 1 else ""))


def evaluate_main(argv) -> int:
    ap = _parser("mindrl evaluate", "evaluation of actor_config.load on eval.path: greedy accuracy, or pass@k and "
                                    "mean@n of eval.n_samples responses sampled at eval.temperature")
    ap.add_argument("--dump", metavar="FILE.jsonl", help="also write every prompt, response (each sample), label "
                                                         "and score")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --dump file")
    args = _args(ap, argv)
    if args.dump and os.path.exists(args.dump) and not args.overwrite:  # as preprocess and convert refuse theirs
        print(f"mindrl evaluate: {args.dump} already exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    cfg, _ = _load(args)
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
        n, note = len(trainer.evaluate.data()[0]), trainer.evaluate.note
        print(f"evaluating {n} held-out prompts from {cfg.eval.path}{f' ({note})' if note else ''} with "
              f"{cfg.actor_config.load} ({_eval_kind(trainer.run.plan.eval)}; the first batch compiles the rollout "
              f"graphs)", file=sys.stderr, flush=True)
    from mindrl.rewards import RewardError
    try:
        result = trainer.evaluate(dump=args.dump)
    except RewardError as err:
        print(f"mindrl evaluate: error: {err}", file=sys.stderr)
        return 1
    if trainer.run.topo.is_main:
        print(json.dumps(result, indent=2))
        if args.dump:
            rows = result["eval/num_samples"] * result.get("eval/n_samples", 1)
            print(f"wrote {rows} predictions to {args.dump}", file=sys.stderr)
    return 0


def plan_main(argv) -> int:
    """`mindrl plan --config X`: the run plan `mindrl train` would print, after the same checks, without training."""
    ap = _parser("mindrl plan", "check a training config and print its run plan: what one step does, in numbers, "
                                "and where each number came from")
    ap.add_argument("--world", type=int, default=None, metavar="N",
                    help="processes to plan for (default: msrun's worker count, or 1)")
    args = _args(ap, argv)
    if args.world is not None and args.world < 1:
        print("mindrl plan: --world must be at least 1", file=sys.stderr)
        return 2
    cfg, plan = _load(args, args.world)
    if cfg is None:
        return 2
    print(plan.text())
    return 0


def export_strategy_main(argv) -> int:
    """`mindrl export-strategy --config X` == `mindrl train --config X runtime.only_save_strategy=true`."""
    args = _args(_parser("mindrl export-strategy", "compile every model, write per-rank strategy files, exit"), argv)
    args.overrides = ["runtime.only_save_strategy=true"] + list(args.overrides)
    cfg, _ = _load(args)
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
