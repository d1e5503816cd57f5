"""What a run shows and records while it trains: the progress bar, a line per logged step, eval results,
metrics.jsonl and TensorBoard (rank 0 only), and the summary ``fit()`` returns."""
from __future__ import annotations

import logging
import os

from mindrl.trainer.metrics import MetricsLogger, progress_bar, summary_line

log = logging.getLogger("mindrl.train")


def _fmt(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


class RunLog:
    def __init__(self, cfg, is_main: bool, start: int, compiled: bool):
        """``compiled``: every graph was compiled at start-up (static shapes); else the first step compiles."""
        from mindrl.io import write_text
        from mindrl.trainer import checkpoint as ck
        lg, actor, rl = cfg.logging, cfg.actor_config, cfg.rl_config
        self.cfg, self.main, self.interval = cfg, is_main, lg.log_interval
        self.logger = MetricsLogger(lg.log_dir, lg.jsonl, lg.tensorboard, enabled=is_main, start=start)
        self.summary = {}
        if is_main:
            write_text(os.path.join(lg.log_dir, "config.yaml"), cfg.to_yaml())
            print(f"run directory: {lg.log_dir}" + (f" (resumed at step {start})" if start else ""), flush=True)
            latest = ck.latest_step(actor.save) if actor.save else None
            if actor.finetune and latest is not None:
                log.warning("%s already holds checkpoints of another run (latest: %s); this run's are added beside "
                            "them and `load` of this directory will pick the newest written", actor.save, latest)
            if not compiled:
                log.info("the first step compiles the training graphs (about 10-30 s on 2 CPU cores); later steps "
                         "reuse them (runtime.enable_compile_cache keeps them for the next launch)")
        self.bar = progress_bar(rl.train_iters, rl.adv_estimator, lg.progress_bar and is_main, initial=start)

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
        held_out = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if self.main and held_out and step < self.cfg.rl_config.train_iters:  # the last one is shown as "after"
            self.bar.write(f"eval at step {step}: " + _fmt(held_out))
        self.summary["last"] = metrics

    def close(self) -> dict:
        """Close the files; on the main rank draw ``report.png``, write ``report.md`` and print the summary."""
        self.bar.close()
        self.logger.close()
        lg = self.cfg.logging
        if self.main and lg.jsonl:
            from mindrl.trainer.report import write_report
            try:
                for line in write_report(lg.log_dir, self.cfg.actor_config.save):
                    print(line)
                print(f"report: {os.path.join(lg.log_dir, 'report.md')} (picture: report.png)", flush=True)
            except Exception as err:  # noqa: BLE001 - a picture that cannot be drawn must not fail a finished run
                log.warning("could not draw the run's report (%s: %s); metrics.jsonl has every number",
                            type(err).__name__, err)
        return self.summary
