"""Drawing runs from their metrics: the panels each kind of run has, one run's picture, several runs overlaid.

Kinds: an RL run (GRPO and the other group estimators: score, held-out, KL, entropy, length, time), a PPO run (the
same plus the critic's value loss and explained variance), a `mindrl train-rm` run (its rm/* metrics) and a `mindrl
sft` run (its sft/* metrics) and a `mindrl dpo` run (its dpo/*, rewards/* and logps/* metrics). One run's
panels show every key with its own legend; several runs show one line per run in each panel, told apart by colour
and line style (ten colours, then the next line style), and named once, in a legend under the panels, by what
differs in their configs (``kl_coef=0.01, lr=1e-05``) rather than by their start times.
"""
from __future__ import annotations

import json
import os
import re
import textwrap
from typing import Dict, List, Optional, Sequence

from mindrl.io import atomic_path

# Inside functions: matplotlib (only when a picture is drawn) and the config kinds (only for run labels)

SCORE_KEYS = ("grpo/score/mean", "critic/score/mean")
KL_KEYS = ("actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl")
TIMING_ORDER = ("rollout", "rule_reward", "reward_model", "old_log_p", "reference_model", "critic_model", "adv",
                "update_critic", "update", "reshard_to_infer")
STYLES = ("-", "--", ":", "-.")
# config keys that differ between any two runs without saying how they differ
_NOT_A_DIFFERENCE = ("logging.log_dir", "logging.run_id", "logging.progress_bar", "logging.log_interval",
                     "logging.tensorboard", "logging.jsonl", "actor_config.save", "critic_config.save",
                     "rm_config.save", "sft_config.save", "dpo_config.save")


def series(rows: Sequence[dict], key: str):
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


# the key only held-out rows have, per offline kind (their other keys may be the training batches')
HELD_OUT_MARK = {"rm": "rm/num_pairs", "sft": "sft/eval_tokens", "dpo": "eval/num_pairs"}


def kind_of(rows: Sequence[dict]) -> str:
    """"rm" (train-rm), "sft" (sft), "dpo" (dpo), "ppo" (a critic) or "rl"."""
    if any("rm/loss" in r for r in rows):
        return "rm"
    if any("sft/loss" in r for r in rows):
        return "sft"
    if any("dpo/loss" in r for r in rows):
        return "dpo"
    return "ppo" if any("critic/vf_loss" in r for r in rows) else "rl"


class Run:
    """One run to draw: its rows, label, and the steps it was resumed at (run.json)."""

    def __init__(self, label: str, rows: List[dict], run_dir: Optional[str] = None):
        self.label, self.rows, self.kind = label, rows, kind_of(rows)
        self.resumes = resume_steps(run_dir) if run_dir else []
        # the run's name, runs/<name>/<run id> (for a title over several runs)
        self.name = os.path.basename(os.path.dirname(os.path.realpath(run_dir))) if run_dir else ""

    @property
    def train(self) -> List[dict]:
        """Training rows (rm, sft, dpo: without the held-out rows, which repeat a step and hold HELD_OUT_MARK's key)."""
        mark = HELD_OUT_MARK.get(self.kind)
        return [r for r in self.rows if mark not in r] if mark else self.rows

    @property
    def held_out(self) -> List[dict]:
        mark = HELD_OUT_MARK.get(self.kind, "rm/num_pairs")
        return [r for r in self.rows if mark in r]


def resume_steps(run_dir: str) -> List[int]:
    """The steps a run was resumed at, from its run.json (older records name only the checkpoint: its iter_N)."""
    try:
        with open(os.path.join(run_dir, "run.json")) as fh:
            resumed = json.load(fh).get("resumed", [])
    except (OSError, ValueError):
        return []
    out = []
    for r in resumed:
        step = r.get("step")
        if step is None:
            m = re.search(r"iter_(\d+)", str(r.get("from", "")))
            step = int(m.group(1)) if m else None
        if step is not None:
            out.append(int(step))
    return sorted(set(out))


# -- panels: (title, draw(ax, run, colour, style, several)) -------------------------------------------------------

def _line(ax, run_rows, key, c, ls, label, **kw):
    x, y = series(run_rows, key)
    if x:
        ax.plot(x, y, color=c, ls=ls, label=label, **kw)
    return bool(x)


def _score(ax, run, c, ls, several):
    key = next((k for k in SCORE_KEYS if any(k in r for r in run.rows)), None)
    if key:
        _line(ax, run.rows, key, c, ls, key)
    if not several and any("critic/values/mean" in r for r in run.rows):  # PPO: token rewards, KL penalty included
        _line(ax, run.rows, "critic/rewards/mean", c, ":", "critic/rewards/mean")


def _eval(ax, run, c, ls, several):
    keys = sorted({k for r in run.rows for k in r if k.startswith("eval/") and k.endswith("/mean")})
    if several:  # one line per run: the score (the verifiers' weighted sum)
        keys = [k for k in keys if k == "eval/score/mean"] or keys[:1]
    for j, key in enumerate(keys):
        _line(ax, run.rows, key, c, ls if several else STYLES[j % 4], key, marker="o", ms=3)


def _kl(ax, run, c, ls, several):
    drawn = [k for k in KL_KEYS if any(v != 0 for v in series(run.rows, k)[1])]
    for j, key in enumerate(drawn[:1] if several else drawn):
        _line(ax, run.rows, key, c, ls if several else STYLES[j % 4], key)


def _length(ax, run, c, ls, several):
    x, y = series(run.rows, "response_length/mean")
    if not x:
        return
    ax.plot(x, y, color=c, ls=ls, label="response_length/mean")
    lo, hi = series(run.rows, "response_length/min")[1], series(run.rows, "response_length/max")[1]
    if not several and len(lo) == len(x) == len(hi):
        ax.fill_between(x, lo, hi, color=c, alpha=0.12)


def _rm_pair(key):
    """An rm/* panel: the training batches' line, and the held-out evaluations as points."""
    def draw(ax, run, c, ls, several):
        _line(ax, run.train, key, c, ls, "training batches", lw=0.8, alpha=0.8)
        _line(ax, run.held_out, key, c, "none" if not several else ls, "held-out pairs", marker="o", ms=4)
    return draw


def _rm_chosen(ax, run, c, ls, several):
    for key, style in (("rm/chosen_mean", ls), ("rm/rejected_mean", ls if several else "--")):
        if not several or key == "rm/chosen_mean":
            _line(ax, run.train, key, c, style, key.split("/")[1], lw=0.8)


def _plain(key, **kw):
    def draw(ax, run, c, ls, several):
        _line(ax, run.train, key, c, ls, key, **kw)
    return draw


def _dpo_pair(key):
    """A dpo panel: the training batches' ``key`` and the held-out pairs' ``eval/<key>`` as points."""
    def draw(ax, run, c, ls, several):
        _line(ax, run.train, key, c, ls, "training batches", lw=0.8, alpha=0.8)
        _line(ax, run.held_out, f"eval/{key}", c, "none" if not several else ls, "held-out pairs", marker="o", ms=4)
    return draw


def _dpo_both(side_a, side_b):
    def draw(ax, run, c, ls, several):
        for key, style in ((side_a, ls), (side_b, ls if several else "--")):
            if not several or key == side_a:
                _line(ax, run.train, key, c, style, key, lw=0.8)
    return draw


def _sft_loss(ax, run, c, ls, several):
    _line(ax, run.train, "sft/loss", c, ls, "training batches", lw=0.8, alpha=0.8)
    _line(ax, run.held_out, "sft/eval_loss", c, "none" if not several else ls, "held-out rows", marker="o", ms=4)


def panels(kind: str, several: bool, sampled: bool = False) -> List[tuple]:
    """(title, painter) of each panel; ``sampled``: a run's held-out responses were sampled (eval.n_samples), so its
    eval/*/mean are means over every response, not greedy accuracy."""
    if kind == "dpo":
        return [("dpo/loss", _dpo_pair("dpo/loss")), ("rewards/accuracies", _dpo_pair("rewards/accuracies")),
                ("rewards/margins: beta x (log-ratio chosen - rejected)", _dpo_pair("rewards/margins")),
                ("rewards/chosen" if several else "rewards of chosen and rejected",
                 _dpo_both("rewards/chosen", "rewards/rejected")),
                ("logps/chosen" if several else "policy log-probs of the responses",
                 _dpo_both("logps/chosen", "logps/rejected")),
                ("dpo/grad_norm (before clipping)", _plain("dpo/grad_norm", lw=0.8)), ("dpo/lr", _plain("dpo/lr"))]
    if kind == "sft":
        return [("sft/loss (response tokens) and sft/eval_loss", _sft_loss),
                ("sft/grad_norm (before clipping)", _plain("sft/grad_norm", lw=0.8)), ("sft/lr", _plain("sft/lr")),
                ("sft/tokens_per_second", _plain("sft/tokens_per_second", lw=0.8))]
    if kind == "rm":
        return [("rm/loss (Bradley-Terry)", _plain("rm/loss", lw=0.8)), ("rm/accuracy", _rm_pair("rm/accuracy")),
                ("rm/margin_mean: r(chosen) - r(rejected)", _rm_pair("rm/margin_mean")),
                ("rm/chosen_mean" if several else "rewards of chosen and rejected", _rm_chosen),
                ("rm/grad_norm (before clipping)", _plain("rm/grad_norm", lw=0.8)), ("rm/lr", _plain("rm/lr"))]
    out = [("training score (per step)", _score),
           (f"held-out ({'sampled: mean over responses' if sampled else 'greedy'})"
            + (": eval/score/mean" if several else ""), _eval),
           ("KL" + (" (the first the run logs)" if several else ""), _kl), ("entropy", _plain("actor/entropy")),
           ("response length (tokens" + ("" if several else "; band: min-max") + ")", _length)]
    if kind == "ppo":
        out += [("critic/vf_loss", _plain("critic/vf_loss")),
                ("critic/vf_explained_var", _plain("critic/vf_explained_var"))]
    out.append(("e2e tokens/s" if several else "seconds per step, by stage", _e2e if several else None))
    return out


def _e2e(ax, run, c, ls, several):
    _line(ax, run.rows, "e2e_tps", c, ls, "e2e_tps")


# -- one figure ---------------------------------------------------------------------------------------------------

def draw(runs: Sequence[Run], out: str, title: Optional[str] = None) -> str:
    """Write the runs' figure to ``out`` (a PNG, atomically) and return ``out``."""
    import matplotlib.pyplot as plt
    fig = figure(runs, title)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
    return out


def figure(runs: Sequence[Run], title: Optional[str] = None):
    """The matplotlib figure of :func:`draw`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    several = len(runs) > 1
    kinds = {r.kind for r in runs}
    kind = kinds.pop() if len(kinds) == 1 and kinds <= {"rm", "sft", "dpo"} else (
        "ppo" if any(r.kind == "ppo" for r in runs) else "rl")
    chosen = panels(kind, several, any("eval/n_samples" in r for run in runs for r in run.rows))
    cols = 3 if len(chosen) <= 6 else 4
    rows_n = -(-len(chosen) // cols)
    legend_rows = -(-len(runs) // 3) if several else 0
    fig = plt.figure(figsize=(5 * cols, 4.2 * rows_n + 0.22 * legend_rows + 0.6))
    axes = [fig.add_subplot(rows_n, cols, i + 1) for i in range(len(chosen))]
    colours = plt.get_cmap("tab10").colors
    for i, run in enumerate(runs):
        c, ls = colours[i % 10], STYLES[(i // 10) % len(STYLES)]
        for a, (_, paint) in zip(axes, chosen):
            if paint is not None:
                paint(a, run, c, ls, several)
            elif not several:
                _timing_stack(a, run)
    steps = [r["step"] for run in runs for r in run.rows if "step" in r]
    for a, (name, _) in zip(axes, chosen):
        a.set_title(name, fontsize=10)
        a.set_xlabel("\n".join(["step"] + getattr(a, "notes", [])), fontsize=8)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        if steps and max(steps) > min(steps):  # every panel on the run's steps (a lone step-0 point included)
            a.set_xlim(min(steps) - 0.02 * (max(steps) - min(steps)), max(steps) * 1.02 + 0.02)
        for s in (runs[0].resumes if not several else []):  # where a resumed run started again
            a.axvline(s + 0.5, color="tab:red", ls=":", lw=1)
        a.tick_params(labelsize=8)
        a.grid(alpha=0.3)
        handles = a.get_legend_handles_labels()[0]
        if not handles:
            a.text(0.5, 0.5, "not logged by " + ("these runs" if several else "this run"), ha="center", va="center",
                   transform=a.transAxes, color="grey")
        elif not several:
            a.legend(fontsize=6, loc="best", framealpha=0.6, ncol=2 if len(handles) > 4 else 1)
    if several:
        handles = [matplotlib.lines.Line2D([], [], color=colours[i % 10], ls=STYLES[(i // 10) % len(STYLES)])
                   for i in range(len(runs))]
        fig.legend(handles, [r.label for r in runs], loc="lower center", ncol=min(3, len(runs)), fontsize=8,
                   frameon=False)
    resumed = f" (resumed after step {', '.join(map(str, runs[0].resumes))}: red dotted line)" \
        if not several and runs[0].resumes else ""
    text = textwrap.fill(title or (runs[0].label + resumed if not several else _several(runs)), 30 * cols)
    fig.suptitle(text, fontsize=11)
    height = fig.get_figheight()  # room in inches: the title's lines above, the runs' legend below
    bottom = (0.22 * legend_rows + 0.1) / height if several else 0
    fig.tight_layout(rect=(0, bottom, 1, 1 - (0.25 * (text.count("\n") + 1) + 0.05) / height))
    return fig


def _several(runs: Sequence[Run]) -> str:
    """``12 runs of sweep``: how many, and the names (the part of a label before the run id) they share."""
    names = sorted({r.name for r in runs if r.name})
    return f"{len(runs)} runs" + (f" of {', '.join(names)}" if names else "")


def _timing_stack(a, run) -> None:
    """Where each step's time went, stacked; steps that compiled (the first, the first after each resume) are cut
    off, marked and noted, so the scale stays that of the steady steps."""
    rows = [r for r in run.rows if "timing/all" in r]
    if not rows:
        return
    keys = [k for k in TIMING_ORDER if any(f"timing/{k}" in r for r in rows)]
    keys += sorted({k[7:] for r in rows for k in r if k.startswith("timing/")} - set(keys) - {"all"})
    steps = [r["step"] for r in rows]
    base = [0.0] * len(rows)
    for k in keys:
        vals = [float(r.get(f"timing/{k}", 0.0)) for r in rows]
        if any(vals):
            top = [b + v for b, v in zip(base, vals)]
            a.fill_between(steps, base, top, step="mid", alpha=0.7, label=k)
            base = top
    total = [r["timing/all"] for r in rows]
    a.plot(steps, total, color="black", lw=0.8, label="all")
    first = {steps[0]} | {s + 1 for s in run.resumes}  # steps that compiled their graphs
    steady = sorted(t for s, t in zip(steps, total) if s not in first)
    cut = []
    if len(steady) > 1:
        top = steady[int(0.98 * (len(steady) - 1))] * 1.25
        a.set_ylim(0, top)
        cut = [f"step {s}: {t:.1f} s" + (" (compiling)" if s in first else "")
               for s, t in zip(steps, total) if t > top]
    notes = (["cut off: " + ", ".join(cut)] if cut else []) + [
        f"resumed after step {s}: step {s + 1} compiles again" for s in run.resumes]
    a.notes = notes  # under the axis, where no legend or bar covers them (draw() writes them)


# -- labels: what differs between the runs' configs --------------------------------------------------------------

def _flat(doc, prefix="") -> Dict[str, object]:
    out = {}
    for k, v in (doc or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _config(run_dir: str) -> Dict[str, object]:
    """The run's config.yaml, flattened, read as it was written (yaml_io: `1e-5` is a number, `on` a string)."""
    from mindrl.config import ConfigError
    from mindrl.config.yaml_io import parse_yaml
    path = os.path.join(run_dir, "config.yaml")
    try:
        with open(path, encoding="utf-8") as fh:
            return _flat(parse_yaml(fh.read(), path) or {})
    except (OSError, ConfigError):
        return {}


def _kinds() -> tuple:
    """The config kinds a run directory may hold (imported when labels are drawn: plotting needs no config)."""
    from mindrl.config.reward_training import REWARD_TRAINING
    from mindrl.config.dpo import DPO
    from mindrl.config.sft import SFT
    from mindrl.config.train import TRAIN
    return TRAIN, REWARD_TRAINING, SFT, DPO


def _order(key: str) -> tuple:
    """Where ``key`` stands in its config kind's schema (sections, then keys, in the order the docs list them)."""
    section, _, name = key.partition(".")
    kinds = _kinds()
    for kind in kinds:
        if section in kind.sections:
            fields = list(kind.fields(section))
            return kind.sections.index(section), fields.index(name) if name in fields else len(fields)
    return len(kinds[0].sections), 0


def _default(key: str):
    """The schema's default of ``key`` (a config.yaml leaves defaults out), or a marker when there is none."""
    for kind in _kinds():
        try:
            return kind.default(key)
        except (KeyError, ValueError, TypeError):
            continue
    return "-"


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ",".join(_show(x) for x in v) + "]"
    return "null" if v is None else str(v)


def _follows(values: list, shown: List[list]) -> bool:
    """True when ``values`` (one per run) are decided by the keys already ``shown``: runs equal in those are equal in
    this one (``ref.ref_model_load_path``, filled in when ``kl_coef > 0``, says nothing ``kl_coef`` does not)."""
    if not shown:
        return False
    seen = {}
    for i, v in enumerate(values):
        key = tuple(repr(col[i]) for col in shown)
        if seen.setdefault(key, repr(v)) != repr(v):
            return False
    return True


def config_labels(run_dirs: Sequence[str], fallback: Sequence[str], most: int = 3) -> List[str]:
    """Each run named by the config keys whose values differ between the runs (``kl_coef=0.01, lr=1e-05``; a key's
    section is named only when two differing keys share a name); runs whose configs do not differ, or cannot be
    read, keep ``fallback`` (their <name>/<run id>)."""
    configs = [_config(d) for d in run_dirs]
    keys = []
    for c in configs:
        keys += [k for k in c if k not in keys and k not in _NOT_A_DIFFERENCE]
    value = {k: [c.get(k, _default(k)) if c else None for c in configs] for k in keys}
    differ = []
    for k in sorted((k for k in keys if len({repr(v) for v in value[k]}) > 1), key=_order):
        if not _follows(value[k], [value[j] for j in differ]):
            differ.append(k)
    leaves = [k.rsplit(".", 1)[-1] for k in differ]
    names = [leaf if leaves.count(leaf) == 1 else k for k, leaf in zip(differ, leaves)]
    out = []
    for i, (c, back) in enumerate(zip(configs, fallback)):
        if not c or not differ:
            out.append(back)
            continue
        parts = [f"{n}={_show(value[k][i])}" for k, n in zip(differ, names)]
        out.append(", ".join(parts[:most]) + (f" (+{len(parts) - most} more)" if len(parts) > most else ""))
    for i, label in enumerate(out):  # two runs of one config: say which is which
        if out.count(label) > 1 and label != fallback[i]:
            out[i] = f"{label} ({fallback[i].rsplit('/', 1)[-1]})"
    return out
