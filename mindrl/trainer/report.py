"""A picture and a summary of a run, from its metrics.jsonl alone (so any finished, stopped or running run can be
drawn, several overlaid): ``mindrl plot RUN_DIR... [-o out.png]``, and ``report.png`` + ``report.md`` written into
the run directory when a run ends.

The panels (plot.py): an RL run's training score, held-out metrics (eval/*), KL, entropy, response length and
where a step's time goes; a PPO run's also the critic's value loss and explained variance; a `mindrl train-rm`
run's rm/* metrics; a `mindrl sft` run's sft/* metrics; a `mindrl dpo` run's dpo/*, rewards/* and logps/*
metrics. Only metrics a run logged are drawn.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

from mindrl.io import write_text
from mindrl.trainer.plot import HELD_OUT_MARK, SCORE_KEYS, Run, config_labels, draw, kind_of, series


def read_rows(run_dir: str) -> List[dict]:
    """The rows of ``run_dir/metrics.jsonl`` in step order (a torn last line, from a killed run, is skipped)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl (is it a run directory?)")
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return sorted(out, key=lambda r: r.get("step", 0))


def run_label(run_dir: str) -> str:
    """``<name>/<run id>`` for a run directory under runs/, else its last two path parts; a link (``latest``) is
    named by the run it points to."""
    parts = os.path.realpath(run_dir).split(os.sep)
    return "/".join(parts[-2:])


def unique_runs(run_dirs: Sequence[str]) -> List[str]:
    """``run_dirs`` without repeats of one run, in the order given: ``runs/<name>/*`` matches ``latest`` as well as
    the run it links to, which is drawn once (under the name the first mention gave)."""
    seen, out = set(), []
    for d in run_dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            out.append(d)
    return out


def default_output(run_dirs: Sequence[str]) -> str:
    """Where ``mindrl plot`` draws without ``-o``: one run's own ``report.png``; several runs' ``compared.png`` in
    their common parent directory (``runs/tiny_math/*`` -> ``runs/tiny_math/compared.png``), so it lands beside the
    runs (ignored by git as they are) and not in the current directory."""
    if len(run_dirs) == 1:
        return os.path.join(run_dirs[0], "report.png")
    parents = [os.path.dirname(os.path.realpath(d)) for d in run_dirs]
    common = os.path.commonpath(parents)
    if common == os.path.dirname(common):  # nothing shared but the filesystem root: beside the first run
        common = parents[0]
    rel = os.path.relpath(common)
    return os.path.join(common if rel.startswith("..") else rel, "compared.png")


def plot_runs(run_dirs: Sequence[str], out: str, title: Optional[str] = None) -> str:
    """Draw the runs' metrics into one PNG at ``out`` (plot.py: one run's panels, or several overlaid, each named by
    what differs in its config). Returns ``out``."""
    dirs = unique_runs(run_dirs)
    names = [run_label(d) for d in dirs]
    labels = config_labels(dirs, names) if len(dirs) > 1 else names
    return draw([Run(label, read_rows(d), d) for label, d in zip(labels, dirs)], out, title)


def summarize(rows: Sequence[dict]) -> Dict[str, object]:
    """The facts report.md and the end-of-run line give: steps, time, score at start and end, held-out results (for
    a train-rm run: its training batches' accuracy and the held-out pairs' rm/* values; for an sft run: its training
    batches' loss and the held-out loss, best = lowest)."""
    kind = kind_of(rows)
    if kind == "dpo":
        return _summarize_dpo(rows)
    offline = kind in HELD_OUT_MARK
    train_key = {"rm": "rm/loss", "sft": "sft/loss"}.get(kind, "timing/all")
    train = [r for r in rows if train_key in r and HELD_OUT_MARK.get(kind) not in r]
    out: Dict[str, object] = {"steps": len(train), "last_step": train[-1]["step"] if train else 0}
    if not offline:
        out["train_seconds"] = round(sum(r["timing/all"] for r in train), 1)
    for key in {"rm": ("rm/accuracy",), "sft": ("sft/loss",)}.get(kind, SCORE_KEYS):
        x, y = series(train, key)
        if y:
            k = max(1, len(y) // 10)  # means over the first and last tenth: single steps are noisy
            out["score_key"], out["score_first"], out["score_last"] = key, sum(y[:k]) / k, sum(y[-k:]) / k
            break
    held_out = [r for r in rows if HELD_OUT_MARK[kind] in r] if offline else rows
    keys = {"rm": ("rm/accuracy", "rm/margin_mean"), "sft": ("sft/eval_loss",)}.get(kind) or sorted(
        {k for r in rows for k in r if k.startswith("eval/") and k.endswith("/mean")})
    lower_is_better = kind == "sft"
    for key in keys:
        x, y = series(held_out, key)
        if not y:
            continue
        best = (min if lower_is_better else max)(range(len(y)), key=lambda i: y[i])
        out.setdefault("eval", {})[f"held-out {key}" if kind == "rm" else key] = {
            "first": y[0], "first_step": x[0], "last": y[-1], "last_step": x[-1], "best": y[best], "best_step": x[best]}
    if train and not offline:
        out["e2e_tps_median"] = sorted(r["e2e_tps"] for r in train)[len(train) // 2]
        if "memory/peak_rss_gb" in train[-1]:
            out["peak_rss_gb"] = train[-1]["memory/peak_rss_gb"]
    return out


def _summarize_dpo(rows: Sequence[dict]) -> Dict[str, object]:
    """A `mindrl dpo` run's facts: its training batches' rewards/accuracies, the held-out pairs' (eval/*)."""
    train = [r for r in rows if "dpo/loss" in r]
    out: Dict[str, object] = {"steps": len(train), "last_step": train[-1]["step"] if train else 0}
    x, y = series(train, "rewards/accuracies")
    if y:
        k = max(1, len(y) // 10)
        out["score_key"], out["score_first"], out["score_last"] = "rewards/accuracies", sum(y[:k]) / k, sum(y[-k:]) / k
    held_out = [r for r in rows if HELD_OUT_MARK["dpo"] in r]
    for key in ("eval/rewards/accuracies", "eval/rewards/margins"):
        x, y = series(held_out, key)
        if y:
            best = max(range(len(y)), key=lambda i: y[i])
            out.setdefault("eval", {})[key] = {"first": y[0], "first_step": x[0], "last": y[-1], "last_step": x[-1],
                                               "best": y[best], "best_step": x[best]}
    return out


def summary_text(s: Dict[str, object]) -> List[str]:
    lines = [f"{s['steps']} step{'' if s['steps'] == 1 else 's'} (to step {s['last_step']})"
             + (f" in {s['train_seconds']} s of training" if "train_seconds" in s else "")
             + (f", median e2e_tps {s['e2e_tps_median']:.1f}" if "e2e_tps_median" in s else "")
             + (f", peak memory {s['peak_rss_gb']:.2f} GiB" if "peak_rss_gb" in s else "")]
    if "score_key" in s:
        lines.append(f"{s['score_key']}: {s['score_first']:.4f} (first tenth of the steps) -> "
                     f"{s['score_last']:.4f} (last tenth)")
    for key, e in (s.get("eval") or {}).items():
        lines.append(f"{key}: {e['first']:.4f} (step {e['first_step']}) -> {e['last']:.4f} (step {e['last_step']}); "
                     f"best {e['best']:.4f} at step {e['best_step']}")
    return lines


def write_report(run_dir: str, checkpoints: Optional[str] = None) -> List[str]:
    """``report.png`` and ``report.md`` in ``run_dir``; returns the summary lines (for the console)."""
    rows = read_rows(run_dir)
    lines = summary_text(summarize(rows))
    png = plot_runs([run_dir], os.path.join(run_dir, "report.png"))
    md = [f"# {run_label(run_dir)}", "", *[f"- {line}" for line in lines], ""]
    if checkpoints:
        md += [f"Checkpoints: `{checkpoints}`", ""]
    md += [f"![metrics]({os.path.basename(png)})", "", "Config: `config.yaml`. Metrics: `metrics.jsonl`."]
    write_text(os.path.join(run_dir, "report.md"), "\n".join(md) + "\n")
    return lines


def cli_main(argv) -> int:
    """``mindrl plot RUN_DIR... [-o out.png]``."""
    ap = argparse.ArgumentParser(prog="mindrl plot", description="draw the metrics of one or more runs into a PNG "
                                 "(several runs are overlaid)")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (each holds a metrics.jsonl); "
                    "a link such as runs/<name>/latest is drawn once with the run it points to")
    ap.add_argument("-o", "--output", help="PNG to write; default: RUN_DIR/report.png for one run, "
                    "compared.png in the runs' common parent directory for several")
    ap.add_argument("--title", help="figure title; default: the runs' names")
    args = ap.parse_args(argv)
    # `mindrl plot runs/<name>/*` also matches the comparison picture an earlier plot wrote there
    pictures = [d for d in args.runs if d.endswith(".png") and os.path.isfile(d)]
    runs = [d for d in args.runs if d not in pictures]
    missing = [d for d in runs if not os.path.isfile(os.path.join(d, "metrics.jsonl"))]
    if missing or not runs:
        print(f"mindrl plot: error: {(missing or args.runs)[0]}: no metrics.jsonl (is it a run directory?)",
              file=sys.stderr)
        return 2
    runs = unique_runs(runs)
    out = args.output or default_output(runs)
    plot_runs(runs, out, args.title)
    print(f"wrote {out}" + (f" ({len(runs)} runs: {', '.join(run_label(d) for d in runs)})" if len(runs) > 1 else ""))
    return 0
