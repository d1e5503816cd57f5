"""Step metrics: timers, MindSpeed-RL's formulas, and the three sinks (console bar, JSONL, TensorBoard)."""
from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
from contextlib import contextmanager
from typing import Dict

import numpy as np

from mindrl.io import write_text

# Inside functions: tqdm (the progress bar, only on a terminal) and the TensorBoard writer, each loaded only when a
# run asks for it


class Timers:
    """``with timers("rollout"): ...`` accumulates seconds under ``timing/rollout`` for this step."""

    def __init__(self):
        self.values: Dict[str, float] = {}

    @contextmanager
    def __call__(self, name):
        start = time.perf_counter()
        try:
            yield
        finally:
            key = f"timing/{name}"
            self.values[key] = self.values.get(key, 0.0) + time.perf_counter() - start


def throughput(metrics: dict, global_batch_size: int, n_samples: int, world_size: int, use_max: bool = True) -> dict:
    """MindSpeed-RL's: (response_length + prompt_length) * gbs * n / world_size / time, the lengths the batch's
    longest (``log_max_throughput``, its default) or their means."""
    stat = "max" if use_max else "mean"
    tokens = (metrics[f"response_length/{stat}"] + metrics[f"prompt_length/{stat}"]) * global_batch_size * n_samples
    tokens /= world_size
    out = {}
    for name, timer in (("e2e_tps", "timing/all"), ("update_tps", "timing/update"), ("rollout_tps", "timing/rollout")):
        t = metrics.get(timer, 0.0)
        out[name] = tokens / t if t > 0 else 0.0
    out["vllm_tps"] = out["rollout_tps"]  # MindSpeed-RL's older name for the same number
    return out


def memory_metrics() -> dict:
    """This process's resident memory now and at its peak, in GiB (host memory: on CPU that is all of it)."""
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * page
    except OSError:  # not Linux: the peak is all there is
        rss = None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"memory/rss_gb": (rss if rss is not None else peak) / 2**30, "memory/peak_rss_gb": peak / 2**30}


def progress_bar(total: int, desc: str, enabled: bool, initial: int = 0):
    """A tqdm bar on a terminal; none when stderr is a file or a pipe, where the step lines are the progress (a bar
    there interleaves with them on one line)."""
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc=desc, disable=not (enabled and sys.stderr.isatty()),
                file=sys.stderr, dynamic_ncols=True)


class LogWriteFailed(RuntimeError):
    """The run's record (metrics.jsonl, or TensorBoard when it is the only one) cannot be written."""


class MetricsLogger:
    """Writes one JSON line per step and TensorBoard scalars; rank 0 only.

    A write that fails (a full disk, a directory gone) raises ``LogWriteFailed`` naming the file when it is the
    run's record: metrics.jsonl, or TensorBoard with ``jsonl`` off. TensorBoard beside metrics.jsonl is a view of the
    same numbers: its failure is one warning, and TensorBoard is off for the rest of the run.
    """

    def __init__(self, log_dir: str, jsonl: bool = True, tensorboard: bool = True, enabled: bool = True,
                 start: int = 0):
        """``start``: the step a resumed run continues from. Rows after it were written by the run that was
        interrupted and will be written again: they are dropped, so every step is in the files once."""
        self.enabled = enabled
        self.log_dir = log_dir
        self._jsonl_path = os.path.join(log_dir, "metrics.jsonl")
        self._tb_dir = os.path.join(log_dir, "tensorboard")
        self._jsonl = None
        self._tb = None
        self._tb_is_the_record = tensorboard and not jsonl
        if not enabled:
            return
        with self._writing(self._jsonl_path):
            os.makedirs(log_dir, exist_ok=True)
            if jsonl:
                if start and os.path.exists(self._jsonl_path):
                    _keep_rows_up_to(self._jsonl_path, start)
                self._jsonl = open(self._jsonl_path, "a", buffering=1)
        if tensorboard:
            from mindrl.trainer.tensorboard import ScalarWriter
            # purge_step: TensorBoard discards the interrupted run's events from this step on
            with self._writing(self._tb_dir):
                self._tb = ScalarWriter(self._tb_dir, purge_step=start + 1 if start else None)

    @contextmanager
    def _writing(self, path):
        """OSError from metrics.jsonl (``path``) or TensorBoard: LogWriteFailed for the record, else a warning."""
        try:
            yield
        except OSError as err:
            record = path != self._tb_dir or self._tb_is_the_record
            self._drop(tensorboard_only=not record)
            why = f"cannot write {path}: {err.strerror or err}"
            if record:
                raise LogWriteFailed(why) from None
            logging.getLogger("mindrl.train").warning("%s; TensorBoard is off for the rest of the run (metrics.jsonl "
                                                      "has every number)", why)

    def _drop(self, tensorboard_only=False):
        """Stop writing after a failure; closing flushes what could not be written once more, so errors are ignored."""
        sinks = [self._tb] if tensorboard_only else [self._tb, self._jsonl]
        for sink in sinks:
            try:
                if sink is not None:
                    sink.close()
            except OSError:
                pass
        self._tb = None
        if not tensorboard_only:
            self._jsonl = None

    def log(self, step: int, metrics: dict):
        if not self.enabled:
            return
        if self._jsonl is not None:
            with self._writing(self._jsonl_path):
                self._jsonl.write(json.dumps({"step": step, **{k: _plain(v) for k, v in metrics.items()}}) + "\n")
        if self._tb is not None:
            with self._writing(self._tb_dir):
                self._tb.write(step, metrics)

    def close(self):
        if self._jsonl is not None:
            with self._writing(self._jsonl_path):
                self._jsonl.close()
                self._jsonl = None
        if self._tb is not None:
            with self._writing(self._tb_dir):
                self._tb.close()
                self._tb = None


def _keep_rows_up_to(path: str, step: int) -> None:
    """Rewrite metrics.jsonl without its rows after ``step`` (and without a torn last line)."""
    keep = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short when the process was killed
            if int(row.get("step", 0)) <= step:
                keep.append(json.dumps(row) + "\n")
    write_text(path, "".join(keep))


def _plain(v):
    try:
        return float(v) if not isinstance(v, (str, bool, int)) else v
    except (TypeError, ValueError):
        return str(v)


def format_metrics(metrics: dict) -> str:
    """``key=value, ...`` for a console line: floats with four decimals."""
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def summary_line(step: int, metrics: dict, keys=("grpo/score/mean", "critic/score/mean", "actor/pg_loss",
                                                 "actor/kl_loss", "actor/reward_kl_penalty", "actor/ptx_loss",
                                                 "critic/vf_loss", "critic/vf_explained_var",
                                                 "response_length/mean", "e2e_tps", "timing/all")) -> str:
    parts = [f"step {step}"]
    for k in keys:
        if k == "critic/score/mean" and "grpo/score/mean" in metrics:
            continue  # the same number under MindSpeed-RL's GRPO name
        if k == "actor/kl_loss" and "actor/reward_kl_penalty" in metrics:
            continue  # the KL is in the reward, the loss has none
        if k in metrics:
            parts.append(f"{k}={metrics[k]:.4g}")
    return "  ".join(parts)


def stats(prefix: str, values) -> dict:
    v = np.asarray(values, np.float64)
    if v.size == 0:
        return {}
    return {f"{prefix}/mean": float(v.mean()), f"{prefix}/min": float(v.min()), f"{prefix}/max": float(v.max())}


# stages a step may skip still report a time, so every step's line has the same keys
_ALWAYS_TIMED = ("timing/old_log_p", "timing/reference_model", "timing/update",
                 "timing/reshard_to_infer")


def rollout_metrics(exp, max_tokens: int, group_estimator: bool) -> dict:
    """MindSpeed-RL's length and reward metrics, and verl's ``critic/*`` data metrics, of one experience batch.

    ``grpo/*`` (group estimators): ``score`` is the sequence score, ``rewards`` the weighted verifier sum (the rule
    reward), ``advantages`` the mean over sequences of each one's advantage. ``critic/*``: ``score`` as above,
    ``rewards`` the reward the estimator read (after the KL penalty), the others over every valid token. The names
    of the quantities: algorithms/sequence_reward.py.
    """
    out = {k: 0.0 for k in _ALWAYS_TIMED}
    lengths = exp.response_lengths.astype(np.float64)
    out.update(stats("response_length", lengths))
    out["response_length/clip_ratio"] = float(np.mean(~exp.finished & (lengths >= max_tokens)))
    out.update(stats("prompt_length", exp.prompt_lengths))
    mask = exp.loss_mask > 0
    if group_estimator:
        out["grpo/score/mean"] = float(exp.score.mean())
        out["grpo/rewards/mean"] = float(exp.rule_reward.mean())
        for name, vals in exp.verifier_scores.items():
            out[f"grpo/rewards/{name}/mean"] = float(np.mean(vals))
        if exp.advantages is not None:  # None when a non-finite reward skipped the step
            row_adv = exp.advantages.sum(1) / np.maximum(exp.loss_mask.sum(1), 1.0)
            out["grpo/advantages/mean"] = float(row_adv.mean())
    out["critic/score/mean"] = float(exp.score.mean())
    if exp.token_rewards is not None:
        out["critic/rewards/mean"] = float(exp.token_rewards.astype(np.float64).sum(1).mean())
    elif exp.reward is not None:  # None when a non-finite reward skipped the step
        out["critic/rewards/mean"] = float(np.mean(exp.reward))
    for name in ("advantages", "returns", "values"):
        arr = getattr(exp, name)
        if arr is not None:
            out.update(stats(f"critic/{name}", arr[mask]))
    if exp.values is not None and exp.returns is not None and mask.sum() > 1:
        # verl's explained variance: how much of the returns' variance the critic's values account for
        ret, val = exp.returns[mask].astype(np.float64), exp.values[mask].astype(np.float64)
        out["critic/vf_explained_var"] = float(1.0 - np.var(ret - val, ddof=1) / (np.var(ret, ddof=1) + 1e-5))
    if exp.rm_score is not None:
        out.update(stats("reward_model/score", exp.rm_score))
    return out
