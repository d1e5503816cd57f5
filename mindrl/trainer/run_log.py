"""What a run shows and records while it trains: the progress bar, a line per logged step, eval results,
metrics.jsonl and TensorBoard (rank 0 only), and the summary ``fit()`` returns."""
from __future__ import annotations

import logging
import os
import sys

from mindrl.trainer.metrics import MetricsLogger, summary_line

log = logging.getLogger("mindrl.train")


def _fmt(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


class RunLog:
    def __init__(self, cfg, is_main: bool, start: int):
        from tqdm import tqdm
        from mindrl.io import write_text
        from mindrl.trainer import checkpoint as ck
        lg, actor, rl = cfg.logging, cfg.actor_config, cfg.rl_config
        self.main, self.interval = is_main, lg.log_interval
        self.logger = MetricsLogger(lg.log_dir, lg.jsonl, lg.tensorboard, enabled=is_main, start=start)
        self.summary = {}
        if is_main:
            write_text(os.path.join(lg.log_dir, "config.yaml"), cfg.to_yaml())
            latest = ck.latest_step(actor.save) if actor.save else None
            if actor.finetune and latest is not None:
                log.warning("%s already holds checkpoints of another run (latest: %s); this run's are added beside "
                            "them and `load` of this directory will pick the newest written", actor.save, latest)
        self.bar = tqdm(total=rl.train_iters, initial=start, desc=rl.adv_estimator,
                        disable=not (lg.progress_bar and is_main), file=sys.stderr, dynamic_ncols=True)

    def eval(self, when: str, step: int, result: dict, record: bool = True) -> None:
        """Show (and with ``record``, log as the row of ``step``) a held-out result."""
        self.summary[f"eval_{when}"] = result
        if record:
            self.logger.log(step, result)
        if self.main:
            print(f"eval {when} training (step {step}): " + _fmt(result), flush=True)

    def step(self, step: int, metrics: dict) -> None:
        self.logger.log(step, metrics)
        self.bar.update(1)
        score = metrics.get("grpo/score/mean", metrics.get("critic/score/mean", 0.0))
        self.bar.set_postfix({"score": f"{score:.3f}", "tps": f"{metrics['e2e_tps']:.0f}"})
        if self.main and self.interval and step % self.interval == 0:
            self.bar.write(summary_line(step, metrics))
        self.summary["last"] = metrics

    def close(self) -> dict:
        self.bar.close()
        self.logger.close()
        return self.summary
