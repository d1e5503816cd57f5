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
    from mindrl.config import ConfigError, load_train_config
    try:
        return load_train_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return None


def train_main(argv) -> int:
    args = _parser("mindrl train", "GRPO training from a yaml config").parse_args(argv)
    cfg = _load(args)
    if cfg is None:
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cfg.runtime.only_save_strategy:
        print("mindrl: runtime.only_save_strategy needs the parallel layer (mindrl.parallel), which is not "
              "available in this version", file=sys.stderr)
        return 2
    from mindrl.trainer.grpo import GRPOTrainer
    trainer = GRPOTrainer(cfg)
    summary = trainer.fit()
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if before and after:
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
    from mindrl.trainer.grpo import GRPOTrainer
    print(json.dumps(GRPOTrainer(cfg).evaluate(), indent=2))
    return 0


def export_strategy_main(argv) -> int:
    print("mindrl export-strategy: needs the parallel layer (mindrl.parallel), not available in this version",
          file=sys.stderr)
    return 2
