"""A picture and a summary of a run, from its metrics.jsonl alone (so any finished, stopped or running run can be
drawn, several overlaid): ``mindrl plot RUN_DIR... [-o out.png]``, and ``report.png`` + ``report.md`` written into
the run directory when a run ends.

Panels: the training score; held-out metrics (eval/*); KL; entropy; response length; where a step's time goes.
Only metrics a run logged are drawn (a GRPO run has no critic panel, a run without eval no held-out one).
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence

SCORE_KEYS = ("grpo/score/mean", "critic/score/mean")
KL_KEYS = ("actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl")
TIMING_ORDER = ("rollout", "rule_reward", "reward_model", "old_log_p", "reference_model", "critic_model", "adv",
                "update_critic", "update", "reshard_to_infer")


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


def series(rows: Sequence[dict], key: str):
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


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
    """Draw the runs' metrics into one PNG at ``out`` (several runs: one colour each). Returns ``out``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [(run_label(d), read_rows(d)) for d in unique_runs(run_dirs)]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = dict(zip(("score", "eval", "kl", "entropy", "length", "time"), axes.ravel()))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, rows) in enumerate(runs):
        c = colours[i % len(colours)]
        tag = f"{label}: " if len(runs) > 1 else ""
        score = next((k for k in SCORE_KEYS if any(k in r for r in rows)), None)
        if score:
            ax["score"].plot(*series(rows, score), color=c, label=f"{tag}{score}")
        x, y = series(rows, "critic/rewards/mean")  # PPO: the token rewards' mean, KL penalty included
        if any("critic/values/mean" in r for r in rows) and x:
            ax["score"].plot(x, y, color=c, ls=":", label=f"{tag}critic/rewards/mean")
        eval_keys = sorted({k for r in rows for k in r if k.startswith("eval/") and k.endswith("/mean")})
        for j, key in enumerate(eval_keys):
            x, y = series(rows, key)
            ax["eval"].plot(x, y, color=c, marker="o", ms=3, ls=("-", "--", ":", "-.")[j % 4], label=f"{tag}{key}")
        for j, key in enumerate(KL_KEYS):
            x, y = series(rows, key)
            if x and any(v != 0 for v in y):
                ax["kl"].plot(x, y, color=c, ls=("-", "--", ":")[j], label=f"{tag}{key}")
        x, y = series(rows, "actor/entropy")
        ax["entropy"].plot(x, y, color=c, label=f"{tag}actor/entropy")
        x, y = series(rows, "response_length/mean")
        ax["length"].plot(x, y, color=c, label=f"{tag}response_length/mean")
        lo, hi = series(rows, "response_length/min")[1], series(rows, "response_length/max")[1]
        if len(lo) == len(x) == len(hi) and x:
            ax["length"].fill_between(x, lo, hi, color=c, alpha=0.12)
        if len(runs) == 1:
            _timing_stack(ax["time"], rows)
        else:
            x, y = series(rows, "e2e_tps")
            ax["time"].plot(x, y, color=c, label=f"{tag}e2e_tps")
    titles = {"score": "training score (per step)", "eval": "held-out (greedy)", "kl": "KL",
              "entropy": "entropy", "length": "response length (tokens; band: min-max)",
              "time": "seconds per step, by stage" if len(runs) == 1 else "e2e tokens/s"}
    for name, a in ax.items():
        a.set_title(titles[name], fontsize=10)
        a.set_xlabel("step", fontsize=8)
        a.tick_params(labelsize=8)
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7, loc="best")
        else:
            a.text(0.5, 0.5, "not logged by this run", ha="center", va="center", transform=a.transAxes, color="grey")
    fig.suptitle(title or ", ".join(label for label, _ in runs), fontsize=11)
    fig.tight_layout()
    from mindrl.io import atomic_path
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
    return out


def _timing_stack(a, rows) -> None:
    keys = [k for k in TIMING_ORDER if any(f"timing/{k}" in r for r in rows)]
    keys += sorted({k[7:] for r in rows for k in r if k.startswith("timing/")} - set(keys) - {"all"})
    steps = [r["step"] for r in rows if "timing/all" in r]
    if not steps:
        return
    train = [r for r in rows if "timing/all" in r]
    base = [0.0] * len(train)
    for k in keys:
        vals = [float(r.get(f"timing/{k}", 0.0)) for r in train]
        if not any(vals):
            continue
        top = [b + v for b, v in zip(base, vals)]
        a.fill_between(steps, base, top, step="mid", alpha=0.7, label=k)
        base = top
    total = [r["timing/all"] for r in train]
    a.plot(steps, total, color="black", lw=0.8, label="all")
    if len(total) > 2:  # the first step compiles every graph: keep the scale for the steady ones
        steady = sorted(total[1:])
        a.set_ylim(0, steady[int(0.98 * (len(steady) - 1))] * 1.25)
        a.annotate(f"step {steps[0]}: {total[0]:.1f} s (compiling)", xy=(0.02, 0.95), xycoords="axes fraction",
                   fontsize=7, va="top")


def summarize(rows: Sequence[dict]) -> Dict[str, object]:
    """The facts report.md and the end-of-run line give: steps, time, score at start and end, held-out results."""
    train = [r for r in rows if "timing/all" in r]
    out: Dict[str, object] = {"steps": len(train), "last_step": train[-1]["step"] if train else 0,
                              "train_seconds": round(sum(r["timing/all"] for r in train), 1)}
    for key in SCORE_KEYS:
        x, y = series(train, key)
        if y:
            k = max(1, len(y) // 10)  # means over the first and last tenth: single steps are noisy
            out["score_key"], out["score_first"], out["score_last"] = key, sum(y[:k]) / k, sum(y[-k:]) / k
            break
    for key in sorted({k for r in rows for k in r if k.startswith("eval/") and k.endswith("/mean")}):
        x, y = series(rows, key)
        best = max(range(len(y)), key=lambda i: y[i])
        out.setdefault("eval", {})[key] = {"first": y[0], "first_step": x[0], "last": y[-1], "last_step": x[-1],
                                           "best": y[best], "best_step": x[best]}
    if train:
        out["e2e_tps_median"] = sorted(r["e2e_tps"] for r in train)[len(train) // 2]
        if "memory/peak_rss_gb" in train[-1]:
            out["peak_rss_gb"] = train[-1]["memory/peak_rss_gb"]
    return out


def summary_text(s: Dict[str, object]) -> List[str]:
    lines = [f"{s['steps']} steps (to step {s['last_step']}) in {s['train_seconds']} s of training"
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
    from mindrl.io import write_text
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
    import argparse
    ap = argparse.ArgumentParser(prog="mindrl plot", description="draw the metrics of one or more runs into a PNG "
                                 "(several runs are overlaid)")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (each holds a metrics.jsonl); "
                    "a link such as runs/<name>/latest is drawn once with the run it points to")
    ap.add_argument("-o", "--output", help="PNG to write; default: RUN_DIR/report.png for one run, "
                    "compared.png in the runs' common parent directory for several")
    ap.add_argument("--title", help="figure title; default: the runs' names")
    args = ap.parse_args(argv)
    import sys
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
