"""What the offline trainers share: `mindrl train-rm` (reward_training.py) and `mindrl sft` (sft_training.py) each
train one network (a TrainedNetwork, roles/base.py) on the rows of a MindRecord, and have the same run directory,
console lines with the pace, metrics.jsonl and TensorBoard, held-out evaluation, checkpoints and bit-identical
resume, Ctrl-C handling, the final model as an HF directory (``<run dir>/model``) and the report.

A subclass names its command, config section and metric prefix, the columns it reads, the role it trains, how a
batch's rows become the loss cell's inputs (``_arrays``) with their loss denominator (``_denominator``), and its
evaluation; the loop, saving and the command line are here.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from types import SimpleNamespace

import numpy as np

from mindrl.config import ConfigError
from mindrl.config.plan import ModelSpec, OptimSpec, RoleSpec, WeightsSpec, lora_spec
from mindrl.data.reader import PromptDataset, mindrecord_columns
from mindrl.data.tokenizer import load_tokenizer
from mindrl.io import atomic_path
from mindrl.models.safetensors_io import CheckpointError
from mindrl.parallel.exchange import Exchange
from mindrl.parallel.topology import build_topology
from mindrl.runtime import setup_context
from mindrl.trainer import checkpoint as ck
from mindrl.trainer.checkpoint import OPTIMIZER
from mindrl.trainer.checkpointer import Checkpointer, link_or_copy, resumed_step
from mindrl.trainer.cli import _setup_logging
from mindrl.trainer.interrupt import RunInterrupted
from mindrl.trainer.metrics import LogWriteFailed, MetricsLogger, format_metrics, progress_bar
from mindrl.trainer.preflight import check_resumed_adapter
from mindrl.trainer.report import write_report
from mindrl.trainer.roles.base import gathered_state
from mindrl.trainer.run_config import write_run_config
from mindrl.trainer.run_dir import claim_run
from mindrl.trainer.stopping import Stopper
from mindrl.trainer.updater import GradientBuffers

log = logging.getLogger("mindrl.offline")

MODEL = "model"  # <run dir>/model: the trained model


class NonFinite(RuntimeError):
    """The weights (or optimizer state) hold NaN or inf: nothing is saved, the run stops (exit 3)."""


class OfflineTrainer:
    command = ""        # the subcommand: "train-rm", "sft"
    section = ""        # the config section of the trained model: "rm_config", "sft_config"
    prefix = ""         # metric prefix: "rm", "sft"
    what = ""           # "the reward model", "the model": said when it is written
    loss_key = ""       # the metric the progress bar shows

    def __init__(self, cfg):
        self.cfg = cfg
        m, tr, d = self.model_section, cfg.train, cfg.data
        self._check_columns()  # before anything is built or written
        resumed_at = None if m.finetune else self._resumed_step(m.load)
        setup_context(cfg.runtime.mode, cfg.runtime.threads)
        self.topo = build_topology({"train": (m.tensor_model_parallel_size, None,
                                              f"{self.section}.tensor_model_parallel_size")})
        self.layout, self.exchange = self.topo.train, Exchange(self.topo.world)
        if tr.global_batch_size % (self.layout.dp * tr.micro_batch_size):
            raise ConfigError(f"train.global_batch_size={tr.global_batch_size} must split into data parallel size "
                              f"{self.layout.dp} x train.micro_batch_size {tr.micro_batch_size}")
        self.run_dir = claim_run(cfg, (f"{self.section}.save",), self.topo.is_main, self.exchange, load=m.load,
                                 resuming=not m.finetune)
        if self.topo.is_main:
            resumed = "" if m.finetune else f" (resumed at step {resumed_at})"
            print(f"run directory: {self.run_dir}{resumed}", flush=True)
        self.tokenizer = load_tokenizer(m.tokenizer_name_or_path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.dataset = PromptDataset(d.path, batch_size=tr.global_batch_size // self.layout.dp,
                                     dp_rank=self.layout.dp_rank, dp_size=self.layout.dp, seed=d.seed,
                                     shuffle=d.shuffle, columns=self.columns())
        self.total = tr.train_iters or max(1, tr.epochs * (self.dataset.samples_per_epoch // tr.global_batch_size))
        # the trained network as the RL run's roles are described (config/plan.py)
        weights = (WeightsSpec(m.load, self.weights_part(m.load, m.finetune), f"{self.section}.load",
                               adapters=bool(m.lora_rank) and not m.finetune) if m.load else WeightsSpec(None))
        model = ModelSpec(m.model, m.compute_dtype, m.recompute_setting())
        self.spec = RoleSpec(self.role_name, "train", model, weights, self.layout,
                             tr.micro_batch_size, cfg.runtime.seed, OptimSpec.of(m, self.total),
                             lora=lora_spec(m, cfg.runtime.seed))
        tok = m.tokenizer_name_or_path
        run = SimpleNamespace(topo=self.topo, exchange=self.exchange, seed=cfg.runtime.seed,
                              tokenizer_dir=tok if os.path.isdir(tok) else os.path.dirname(tok),
                              grad_buffers=GradientBuffers())
        self.role = self.make_role(run)
        self.net, self.updater, self.model_config = self.role.net, self.role.updater, self.role.model_config
        self._eval = None
        self.checkpointer = Checkpointer(self.role.run, [self.role], m)
        self.step = 0
        state = self.checkpointer.resume()
        if state is not None:
            self.step = int(state["step"])
            self.dataset.load_state_dict(state["data"])

    # -- what a kind says -------------------------------------------------------------------------------
    role_name = ""  # the RoleSpec's name

    @property
    def model_section(self):
        return getattr(self.cfg, self.section)

    def columns(self) -> list:
        """The training file's columns this kind reads."""
        raise NotImplementedError

    def eval_columns(self) -> list:
        return self.columns()

    def _check_columns(self) -> None:
        """Refuse (ConfigError naming the key) a data or eval file that is not of this kind's data."""
        cfg = self.cfg
        for key, path, need in (("data.path", cfg.data.path, self.columns()),
                                ("eval.path", cfg.eval.path, self.eval_columns())):
            if path is None:
                continue
            missing = [c for c in need if c not in mindrecord_columns(path)]
            if missing:
                raise ConfigError(f"{key}: {path!r} has no {' or '.join(missing)} column: {self.data_hint()}")

    def data_hint(self) -> str:
        raise NotImplementedError

    def _resumed_step(self, load: str) -> int:
        """The step the checkpoint ``load`` resumes at; refused (ConfigError) when it is not one of this command's,
        or when the config would train something else than its run did (whole model vs LoRA adapters)."""
        try:
            step = resumed_step(load)
            lines = []
            check_resumed_adapter(lines, self.weights_part(load, False), self.section, self.model_section,
                                  ck.resolve(load))
        except CheckpointError as err:
            raise ConfigError(f"{self.section}.load: {err} (finetune is false: load must be a {self.command} "
                              f"checkpoint to resume)") from None
        if lines:
            raise ConfigError("\n".join(lines), lines)
        return step

    def weights_part(self, load: str, finetune: bool) -> str:
        return self.role_name

    def make_role(self, run):
        raise NotImplementedError

    def _arrays(self, batch, rows, training: bool = True) -> dict:
        """The loss cell's inputs from rows ``rows`` of ``batch``."""
        raise NotImplementedError

    def _denominator(self, batch) -> float:
        """The loss denominator every micro-batch of the step gets (the global batch's count)."""
        return float(self.cfg.train.global_batch_size)

    def evaluate(self) -> dict:
        raise NotImplementedError

    def line(self, metrics: dict) -> str:
        """A step's console line's numbers."""
        raise NotImplementedError

    def postfix(self, metrics: dict) -> dict:
        return {"loss": f"{metrics[self.loss_key]:.3f}"}

    # -- one step ---------------------------------------------------------------------------------
    def _batches(self):
        return self.dataset.forever()

    def _rows_in(self, batch) -> int:
        return len(batch[self.columns()[0]])

    def train_step(self, batch, step: int) -> dict:
        tr = self.cfg.train
        lr = self.spec.optim.lr_at(step)
        n = self._rows_in(batch)
        denom = self._denominator(batch)
        acc = np.zeros(len(self.updater.metrics))
        for u0 in range(0, n, tr.micro_batch_size):
            outs = self.updater.micro_step(self._arrays(batch, range(u0, min(n, u0 + tr.micro_batch_size))), denom)
            acc += outs[1:]
        if self.topo.world > 1:
            acc = self.exchange.all_sum(acc) / self.layout.tp
        out = {f"{self.prefix}/{name}": float(v) for (name, _), v in zip(self.updater.metrics, acc)}
        out[f"{self.prefix}/grad_norm"] = norm = self.updater.apply(lr)
        out[f"{self.prefix}/lr"] = lr
        if np.isfinite(norm) and not self.updater.weights_finite(self.exchange):
            raise NonFinite(f"step {step + 1}: the update left NaN or inf weights (gradient norm {norm:.4g} before "
                            f"clipping); nothing of this step was saved. Lower {self.section}.lr or clip_grad")
        return out

    def _eval_rows(self) -> dict:
        """The held-out file's columns (``eval.num_samples`` rows spread over it), read once."""
        import mindspore.dataset as mds
        from mindrl.trainer.evaluation import spread, subset_note
        if self._eval is None:
            ev, columns = self.cfg.eval, self.eval_columns()
            rows = list(mds.MindDataset(ev.path, columns_list=columns, shuffle=False).create_dict_iterator(
                output_numpy=True, num_epochs=1))
            note = subset_note(len(rows), ev.num_samples, self.rows_word)
            rows = [rows[i] for i in spread(len(rows), ev.num_samples)]
            if note and self.topo.is_main:
                log.info("held-out %s %s: %s", self.rows_word, ev.path, note)
            self._eval = {k: [np.asarray(r[k]) for r in rows] for k in columns}
        return self._eval

    rows_word = "rows"

    # -- the run ------------------------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train to the last step, then write ``<run dir>/model``. SIGINT or SIGTERM: the step in progress
        finishes, is saved (with <section>.save) and reported, and RunInterrupted is raised (trainer/stopping.py)."""
        cfg, main = self.cfg, self.topo.is_main
        lg, ev, m = cfg.logging, cfg.eval, self.model_section
        logger = MetricsLogger(lg.log_dir, lg.jsonl, lg.tensorboard, enabled=main, start=self.step)
        if main:
            write_run_config(cfg, self.command, resumed=self.step > 0, checkpoints=m.save)
        summary = {}
        with Stopper(self.command, self.section, self.run_dir, m.save, self.total, lambda: self.step, self.save,
                     self.checkpointer.newest(), self.topo, self.exchange) as stop:
            if ev.path and self.step == 0 and not stop.now():
                summary["eval_before"] = self.evaluate()
                logger.log(0, summary["eval_before"])
                _say(main, "eval before training: " + format_metrics(summary["eval_before"]))
            try:
                self._train(stop, logger, summary)
            except NonFinite:
                logger.close()
                raise
            if stop.signum is not None:  # stopped early: the last step is saved, no model is written
                checkpoint = stop.checkpoint()
                logger.close()
                self._report()
                raise stop.stopped(checkpoint)
        if ev.path:
            summary["eval_after"] = self.evaluate()
            logger.log(self.step, summary["eval_after"])
            _say(main, "eval after training: " + format_metrics(summary["eval_after"]))
        logger.close()
        self.finished(summary)
        self.write_model(self.save() if m.save else None)
        self._report()
        return summary

    def finished(self, summary: dict) -> None:
        """Called after the last evaluation, before the model is written."""

    def _train(self, stop, logger, summary: dict) -> None:
        """The steps, until the last or a stop request; a line every logging.log_interval steps, with the pace."""
        lg, ev, m, main = self.cfg.logging, self.cfg.eval, self.model_section, self.topo.is_main
        bar = progress_bar(self.total, self.command, lg.progress_bar and main, initial=self.step)
        batches, pace = self._batches(), Pace(self.step, self.total)
        while self.step < self.total and not stop.now():
            metrics = self.train_step(next(batches), self.step)
            self.step += 1
            pace.done()
            logger.log(self.step, metrics)
            if ev.path and ev.interval and self.step % ev.interval == 0 and self.step < self.total:
                logger.log(self.step, self.evaluate())  # a row of its own: its keys may be the batch's
            bar.update(1)
            bar.set_postfix(self.postfix(metrics))
            if main and (self.step % lg.log_interval == 0 or self.step == self.total):
                bar.write(f"step {self.step}/{self.total}  {self.line(metrics)}  ({pace.text(self.step)})")
            summary["last"] = metrics
            if m.save and m.save_interval and self.step % m.save_interval == 0 and self.step < self.total:
                stop.saved(self.save())
        bar.close()

    def _check_finite(self) -> None:
        """Nothing non-finite is saved: raise NonFinite naming the first tensors that are (every rank agrees)."""
        bad = self.role.non_finite()
        if float(self.exchange.all_sum(np.array([len(bad)], np.float32))[0]) > 0:
            raise NonFinite(f"not saved at step {self.step}: "
                            + (f"{', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} hold NaN or inf" if bad
                               else "another rank's tensors hold NaN or inf"))

    def save(self) -> str:
        """A checkpoint of the current step (a collective): the model, its optimizer and the data position."""
        self._check_finite()
        state = {"step": self.step, "data": self.dataset.state_dict(),
                 "rng": {"seed": self.cfg.runtime.seed, "shuffle_seed": self.cfg.data.seed}}
        return self.checkpointer.save(self.step, state)

    def write_model(self, checkpoint=None) -> str:
        """``<run dir>/model``: an HF directory (main rank, atomically). From a checkpoint just written, its files
        are hard-linked (no second copy of the weights)."""
        out = os.path.join(self.run_dir, MODEL)
        if not checkpoint:
            self._check_finite()
        full = None if checkpoint else gathered_state(self.net, self.layout)
        if self.topo.is_main:
            with atomic_path(out, directory=True) as tmp:
                if checkpoint:
                    link_model_files(os.path.join(checkpoint, self.role.name), tmp)
                else:
                    self.role.export(full, tmp)
            _say(True, f"saved {self.what} to {out}")
        self.exchange.barrier()
        return out

    def _report(self) -> None:
        if self.topo.is_main and self.cfg.logging.jsonl:
            try:
                write_report(self.run_dir, self.model_section.save)
                _say(True, f"report: {os.path.join(self.run_dir, 'report.md')} (picture: report.png)")
            except Exception as err:  # noqa: BLE001 - a picture that cannot be drawn must not fail a finished run
                log.warning("could not draw the run's report (%s: %s); metrics.jsonl has every number",
                            type(err).__name__, err)


def link_model_files(part: str, out: str) -> None:
    """The HF files of a checkpoint part (not its optimizer, rank shards or strategy files) into ``out``, and a LoRA
    run's adapter directory."""
    for name in os.listdir(part):
        if name != OPTIMIZER and os.path.isfile(os.path.join(part, name)):
            link_or_copy(os.path.join(part, name), os.path.join(out, name))
    adapter = os.path.join(part, "adapter")
    if os.path.isdir(adapter):
        os.makedirs(os.path.join(out, "adapter"), exist_ok=True)
        for name in os.listdir(adapter):
            link_or_copy(os.path.join(adapter, name), os.path.join(out, "adapter", name))


class Pace:
    """``12 s, 4.1 steps/s, ETA 3 min``: the rate of the steps this process ran (the first one compiles, so it
    counts from the second on) and the time the rest would take at it."""

    def __init__(self, start: int, total: int):
        self.start, self.total, self.t0 = start, total, time.perf_counter()
        self.t1 = None  # when the first step of this process ended

    def done(self) -> None:
        """A step ended (call it after every step)."""
        if self.t1 is None:
            self.t1 = time.perf_counter()

    def text(self, step: int) -> str:
        now = time.perf_counter()
        done, spent = step - self.start - 1, now - (self.t1 or now)
        if done < 1 or spent <= 0:
            return f"{now - self.t0:.0f} s"
        rate = done / spent
        return f"{now - self.t0:.0f} s, {rate:.1f} steps/s, ETA {_duration((self.total - step) / rate)}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _say(main: bool, text: str) -> None:
    if main:
        print(text, flush=True)


def run_command(trainer_cls, load, argv, description: str) -> int:
    """The command line of an offline trainer: ``--config FILE [key=value ...]``. Exit status 0 done, 2 a config
    error (nothing was trained), 1 the metrics cannot be written, 3 non-finite weights (nothing of them saved),
    130 / 143 stopped by SIGINT / SIGTERM (saved, with the resume command printed)."""
    command = trainer_cls.command
    ap = argparse.ArgumentParser(prog=f"mindrl {command}", description=description)
    ap.add_argument("--config", required=True, help=f"{command} yaml")
    ap.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override any config key")
    args = ap.parse_intermixed_args(argv)
    try:
        cfg = load(args.config, args.overrides)
    except ConfigError as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return 2
    _setup_logging()
    try:
        trainer = trainer_cls(cfg)
    except (ConfigError, CheckpointError, ValueError) as err:  # ValueError: a checkpoint of another data set
        print(f"mindrl {command}: config error: {err}", file=sys.stderr)
        return 2
    try:
        trainer.fit()
    except RunInterrupted as stopped:  # saved and said how to resume (trainer/stopping.py)
        trainer.exchange.barrier()
        return stopped.exit_code
    except NonFinite as err:
        print(f"mindrl {command}: error: {err}", file=sys.stderr)
        return 3
    except LogWriteFailed as err:  # metrics.jsonl (or TensorBoard alone) cannot be written: a full disk
        print(f"mindrl {command}: error: {err}; free space there or set logging.log_dir to a directory with room, "
              f"then run it again", file=sys.stderr)
        return 1
    trainer.exchange.barrier()  # every rank ends after the main rank's last line (see trainer/cli.py)
    return 0
