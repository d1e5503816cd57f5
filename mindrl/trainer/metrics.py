"""Step metrics: timers, MindSpeed-RL's formulas, and the three sinks (console bar, JSONL, TensorBoard)."""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Dict


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


def throughput(metrics: dict, global_batch_size: int, n_samples: int, world_size: int) -> dict:
    """MindSpeed-RL: (response_length_mean + prompt_length_mean) * gbs * n / world_size / time."""
    tokens = (metrics["response_length/mean"] + metrics["prompt_length/mean"]) * global_batch_size * n_samples
    tokens /= world_size
    out = {}
    for name, timer in (("e2e_tps", "timing/all"), ("update_tps", "timing/update"), ("rollout_tps", "timing/rollout")):
        t = metrics.get(timer, 0.0)
        out[name] = tokens / t if t > 0 else 0.0
    out["vllm_tps"] = out["rollout_tps"]  # MindSpeed-RL's older name for the same number
    return out


def memory_metrics() -> dict:
    """This process's resident memory now and at its peak, in GiB (host memory: on CPU that is all of it)."""
    import resource
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
    import sys
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc=desc, disable=not (enabled and sys.stderr.isatty()),
                file=sys.stderr, dynamic_ncols=True)


class MetricsLogger:
    """Writes one JSON line per step and TensorBoard scalars; rank 0 only."""

    def __init__(self, log_dir: str, jsonl: bool = True, tensorboard: bool = True, enabled: bool = True,
                 start: int = 0):
        """``start``: the step a resumed run continues from. Rows after it were written by the run that was
        interrupted and will be written again: they are dropped, so every step is in the files once."""
        self.enabled = enabled
        self.log_dir = log_dir
        self._jsonl = None
        self._tb = None
        if not enabled:
            return
        os.makedirs(log_dir, exist_ok=True)
        if jsonl:
            path = os.path.join(log_dir, "metrics.jsonl")
            if start and os.path.exists(path):
                _keep_rows_up_to(path, start)
            self._jsonl = open(path, "a", buffering=1)
        if tensorboard:
            from tensorboardX import SummaryWriter
            # purge_step: TensorBoard discards the interrupted run's events from this step on
            self._tb = SummaryWriter(logdir=os.path.join(log_dir, "tensorboard"), purge_step=start + 1 if start else None)

    def log(self, step: int, metrics: dict):
        if not self.enabled:
            return
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **{k: _plain(v) for k, v in metrics.items()}}) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self):
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()


def _keep_rows_up_to(path: str, step: int) -> None:
    """Rewrite metrics.jsonl without its rows after ``step`` (and without a torn last line)."""
    from mindrl.io import write_text
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
    import numpy as np
    v = np.asarray(values, np.float64)
    if v.size == 0:
        return {}
    return {f"{prefix}/mean": float(v.mean()), f"{prefix}/min": float(v.min()), f"{prefix}/max": float(v.max())}


# stages a step may skip still report a time, so every step's line has the same keys
_ALWAYS_TIMED = ("timing/old_log_p", "timing/reference_model", "timing/reshard_to_train", "timing/update",
                 "timing/reshard_to_infer")


def rollout_metrics(exp, max_tokens: int, group_estimator: bool) -> dict:
    """MindSpeed-RL's length and reward metrics, and verl's ``critic/*`` data metrics, of one experience batch.

    ``grpo/*`` (group estimators): ``score`` is the final sequence score, ``rewards`` the weighted verifier sum,
    ``advantages`` the mean over sequences of each one's advantage. ``critic/*``: ``score`` as above,
    ``rewards`` the sequence total after the KL penalty, the others over every valid token.
    """
    import numpy as np
    out = {k: 0.0 for k in _ALWAYS_TIMED}
    lengths = exp.response_lengths.astype(np.float64)
    out.update(stats("response_length", lengths))
    out["response_length/clip_ratio"] = float(np.mean(~exp.finished & (lengths >= max_tokens)))
    out.update(stats("prompt_length", exp.prompt_lengths))
    mask = exp.loss_mask > 0
    if group_estimator:
        out["grpo/score/mean"] = float(exp.scores.mean())
        out["grpo/rewards/mean"] = float(exp.rewards.mean())
        for name, vals in exp.verifier_scores.items():
            out[f"grpo/rewards/{name}/mean"] = float(np.mean(vals))
        if exp.advantages is not None:  # None when a non-finite reward skipped the step
            row_adv = exp.advantages.sum(1) / np.maximum(exp.loss_mask.sum(1), 1.0)
            out["grpo/advantages/mean"] = float(row_adv.mean())
    out["critic/score/mean"] = float(exp.scores.mean())
    if exp.token_rewards is not None:
        out["critic/rewards/mean"] = float(exp.token_rewards.astype(np.float64).sum(1).mean())
    for name in ("advantages", "returns", "values"):
        arr = getattr(exp, name)
        if arr is not None:
            out.update(stats(f"critic/{name}", arr[mask]))
    if exp.values is not None and exp.returns is not None and mask.sum() > 1:
        # verl's explained variance: how much of the returns' variance the critic's values account for
        ret, val = exp.returns[mask].astype(np.float64), exp.values[mask].astype(np.float64)
        out["critic/vf_explained_var"] = float(1.0 - np.var(ret - val, ddof=1) / (np.var(ret, ddof=1) + 1e-5))
    if exp.rm_scores is not None:
        out.update(stats("reward_model/score", exp.rm_scores))
    return out
