"""What a run shows and records while it trains: the progress bar, a line per logged step, eval results,
metrics.jsonl and TensorBoard (rank 0 only), and the summary ``fit()`` returns."""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from mindrl.trainer import checkpoint as ck
from mindrl.trainer.metrics import LogWriteFailed, MetricsLogger, format_metrics, progress_bar, summary_line
from mindrl.trainer.report import write_report
from mindrl.trainer.run_config import write_run_config

log = logging.getLogger("mindrl.train")


class RunLog:
    def __init__(self, cfg, is_main: bool, start: int, compiled: bool):
        """``compiled``: every graph was compiled at start-up (static shapes); else the first step compiles."""
        lg, actor, rl = cfg.logging, cfg.actor_config, cfg.rl_config
        self.cfg, self.main, self.interval = cfg, is_main, lg.log_interval
        with self._record(start):
            self.logger = MetricsLogger(lg.log_dir, lg.jsonl, lg.tensorboard, enabled=is_main, start=start)
            if is_main:
                write_run_config(cfg, "train", resumed=bool(start), checkpoints=actor.save)
        self.summary = {}
        if is_main:
            latest = ck.latest_step(actor.save) if actor.save else None
            if actor.finetune and latest is not None:
                log.warning("%s already holds checkpoints of another run (latest: %s); this run's are added beside "
                            "them and `load` of this directory will pick the newest written", actor.save, latest)
            if not compiled:
                log.info("the first step compiles the rollout and training graphs (on 2 CPU cores: 10-30 s for the "
                         "demo's 2-layer model, 1-2 minutes for a 30-layer one); later steps reuse them "
                         "(runtime.enable_compile_cache keeps them for the next launch)")
        self.bar = progress_bar(rl.train_iters, rl.adv_estimator, lg.progress_bar and is_main, initial=start)

    @contextmanager
    def _record(self, step: int):
        """A failed write of the run's record (metrics.py) stops the run, at a step's end: no checkpoint is begun,
        the ones written stay as they are. The error says what to do."""
        try:
            yield
        except LogWriteFailed as err:
            save = self.cfg.actor_config.save
            newest = ck.latest_step(save) if save and os.path.isdir(save) else None
            then = "run it again (no checkpoint was written)" if newest is None else \
                f"resume from the newest checkpoint, {ck.iter_dir(save, newest)} (actor_config.load={save} " \
                "actor_config.finetune=false)"
            raise LogWriteFailed(f"{err}; the run stopped at step {step}. Free space there or set logging.log_dir to "
                                 f"a directory with room, then {then}") from None

    def eval(self, when: str, step: int, result: dict, record: bool = True) -> None:
        """Show (and with ``record``, log as the row of ``step``) a held-out result."""
        self.summary[f"eval_{when}"] = result
        if record:
            with self._record(step):
                self.logger.log(step, result)
        if self.main:
            print(f"eval {when} training (step {step}): " + format_metrics(result), flush=True)

    def step(self, step: int, metrics: dict) -> None:
        with self._record(step):
            self.logger.log(step, metrics)
        self.bar.update(1)
        score = metrics.get("grpo/score/mean", metrics.get("critic/score/mean", 0.0))
        self.bar.set_postfix({"score": f"{score:.3f}", "tps": f"{metrics['e2e_tps']:.0f}"})
        if self.main and self.interval and step % self.interval == 0:
            self.bar.write(summary_line(step, metrics))
        held_out = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        if self.main and held_out and step < self.cfg.rl_config.train_iters:  # the last one is shown as "after"
            self.bar.write(f"eval at step {step}: " + format_metrics(held_out))
        self.summary["last"] = metrics

    def close(self) -> dict:
        """Close the files; on the main rank draw ``report.png``, write ``report.md`` and print the summary."""
        self.bar.close()
        lg = self.cfg.logging
        with self._record(self.cfg.rl_config.train_iters):
            self.logger.close()
        if self.main and lg.jsonl:
            try:
                for line in write_report(lg.log_dir, self.cfg.actor_config.save):
                    print(line)
                print(f"report: {os.path.join(lg.log_dir, 'report.md')} (picture: report.png)", flush=True)
            except Exception as err:  # noqa: BLE001 - a picture that cannot be drawn must not fail a finished run
                log.warning("could not draw the run's report (%s: %s); metrics.jsonl has every number",
                            type(err).__name__, err)
        return self.summary
