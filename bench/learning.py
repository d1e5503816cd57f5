#!/usr/bin/env python
"""Does the demo's GRPO learn, and how does that compare with plain supervised training given the same time?

For each of --seeds seeds this runs the README demo (examples/grpo/tiny_math.yaml: GRPO from the shipped warm-up
policy, reward `last_number` only, no labels seen by the policy) with held-out evaluation every --eval-every steps,
and a supervised control: the same starting policy trained on the labelled problems (the answer tokens, next-token
cross-entropy, AdamW at --sft-lr, batch --sft-batch) for the same wall-clock time as that seed's GRPO run took to
train, evaluated on the same 1000 held-out problems with the same reward function, greedy.

Prints each run's held-out accuracy before and after, then the mean and spread (sample standard deviation,
min..max) of the gain for each method, and draws every curve (held-out accuracy over training seconds) into one
PNG. Needs the demo data (`bash scripts/run_demo.sh` makes dataset/tiny_math/); writes only under --out.

    python bench/learning.py                        # 3 seeds, about 15 minutes on 2 cores
    python bench/learning.py --seeds 1 --steps 10   # a quick look
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
POLICY = os.path.join(ROOT, "examples", "tiny", "policy")
TOKENIZER = os.path.join(ROOT, "examples", "tiny", "tokenizer")
METRIC = "eval/last_number/mean"


def run_rl(seed, a, config=CONFIG, metric=METRIC, extra=(), name="grpo"):
    """One run of ``config`` (GRPO, or another algorithm's config: ``name`` names its directory) through the CLI;
    returns [(training seconds, step, held-out accuracy)] and the run's wall time (start-up and evaluations
    included)."""
    run_dir = os.path.join(a.out, f"{name}_seed{seed}")
    shutil.rmtree(run_dir, ignore_errors=True)  # this benchmark's own output: a rerun replaces it
    over = [f"runtime.seed={seed}", f"rl_config.train_iters={a.steps}", f"eval.interval={a.eval_every}",
            f"logging.log_dir={run_dir}", "logging.progress_bar=false", "logging.tensorboard=false",
            "actor_config.save=null", "actor_config.save_interval=0", *extra]
    env = dict(os.environ, GLOG_v="3")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", config] + over, cwd=ROOT,
                         env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"{name.upper()} seed {seed} failed:\n{res.stderr[-3000:]}")
    curve, spent = [], 0.0
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        for line in fh:
            row = json.loads(line)
            spent += row.get("timing/all", 0.0)
            if metric in row:
                curve.append((round(spent, 2), row["step"], row[metric]))
    return curve, wall


def run_sft(seed, seconds, a):
    """Supervised control from the same policy for ``seconds`` of training; the same held-out evaluation."""
    import mindspore as ms
    import task
    from make_tiny_model import encode_batch
    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.models import from_pretrained
    from mindrl.runtime import setup_context
    from mindrl.trainer.sft import SFTStep
    setup_context("graph")
    ms.set_seed(seed)
    tok = load_tokenizer(TOKENIZER)
    model = from_pretrained(POLICY)
    step_cell = SFTStep(model.net, lr_weight_decay=0.0)
    heldout = task.heldout_ids()
    prompts = [tok.encode(task.problem(pid)[0]) for pid in heldout]
    labels = [task.problem(pid)[1] for pid in heldout]
    encode = lambda batch: encode_batch(tok, batch, 16)  # noqa: E731
    return supervised_curve(step_cell, lambda: accuracy(model, tok, prompts, labels, 6, tok.eos_token_id, 250),
                            task.training_ids(200_000, seed=50_000 + seed), encode, seconds, a)


def accuracy(model, tok, prompts, labels, max_new_tokens, stops, max_batch):
    """Held-out greedy accuracy (last_number) of ``model`` on token-id ``prompts``."""
    from mindrl.rewards import RewardComputer
    from mindrl.rollout import generate
    model.net.set_train(False)
    outs = generate(model, prompts, max_new_tokens=max_new_tokens, eos_token_id=stops, max_batch=max_batch)
    model.net.set_train(True)
    texts = [tok.decode(o, skip_special_tokens=True) for o in outs]
    return float(RewardComputer(["last_number"], [1.0])(texts, labels).scores.mean())


def supervised_curve(step_cell, evaluate, items, encode, seconds, a):
    """Supervised steps of ``step_cell`` on consecutive batches of ``items`` (``encode(batch)`` gives the ids,
    attention and loss masks) for ``seconds`` of training time, with ``evaluate()`` before, every seconds /
    a.sft_evals, and at the end: [(training seconds, step, accuracy)]."""
    from mindrl.trainer.sft import run_sft_step
    curve = [(0.0, 0, evaluate())]
    spent, step, next_eval = 0.0, 0, seconds / a.sft_evals
    while spent < seconds:
        ids, attn, loss_mask = encode(items[(step * a.sft_batch) % len(items):][:a.sft_batch])
        t0 = time.perf_counter()
        run_sft_step(step_cell, ids, loss_mask, a.sft_lr)  # right-padded rows: no attention mask needed
        spent += time.perf_counter() - t0
        step += 1
        if spent >= next_eval or spent >= seconds:
            curve.append((round(spent, 2), step, evaluate()))
            next_eval += seconds / a.sft_evals
    return curve


def sft_subprocess(seed, seconds, a, script=__file__):
    """The control in its own process (its own MindSpore context and threads), like the GRPO runs: ``script
    --sft-only SEED SECONDS`` prints its curve. Returns the curve and the process's wall time."""
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, script, "--sft-only", str(seed), str(seconds), "--sft-lr", str(a.sft_lr),
                          "--sft-batch", str(a.sft_batch), "--sft-evals", str(a.sft_evals)], cwd=ROOT,
                         env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True)
    line = [x for x in res.stdout.splitlines() if x.startswith("CURVE ")]
    if res.returncode or not line:
        raise SystemExit(f"supervised control seed {seed} failed:\n{res.stderr[-3000:]}")
    return json.loads(line[0][6:]), time.perf_counter() - t0


def spread(gains):
    sd = statistics.stdev(gains) if len(gains) > 1 else 0.0
    return f"mean {statistics.mean(gains):+.3f}, sd {sd:.3f}, min {min(gains):+.3f}, max {max(gains):+.3f}"


COLOURS = {"grpo": "tab:blue", "ppo": "tab:green", "sft": "tab:orange"}
METHODS = {"grpo": "GRPO (reward only, no labels)", "ppo": "PPO (reward only, no labels)",
           "sft": "supervised (labels)"}


def draw(curves, out, ylabel="held-out greedy accuracy (last_number)",
         title="tiny arithmetic task: GRPO from a reward alone vs supervised training with labels, same time",
         title_size=None, names=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for (method, seed), curve in curves.items():
        t, _, acc = zip(*curve)
        ax.plot(t, acc, marker="o", ms=3, color=COLOURS.get(method, "tab:gray"),
                alpha=0.8, label=f"{(names or {}).get(method, method.upper())} (seed {seed})")
    ax.set_xlabel("training seconds (2 CPU cores)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, **({"fontsize": title_size} if title_size else {}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="runs per method (seeds 1234, 1, 2, ...)")
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps per run (the demo's 60)")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--sft-lr", type=float, default=1e-4,
                    help="the best of 1e-4, 5e-4 and 1e-3 for this policy (5e-4 and 1e-3 lose accuracy)")
    ap.add_argument("--sft-batch", type=int, default=128)
    ap.add_argument("--sft-evals", type=int, default=6, help="held-out evaluations during each supervised run")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "learning"), help="where runs and the PNG go")
    ap.add_argument("--sft-only", nargs=2, metavar=("SEED", "SECONDS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.sft_only:
        print("CURVE " + json.dumps(run_sft(int(a.sft_only[0]), float(a.sft_only[1]), a)), flush=True)
        return
    if not os.path.exists(os.path.join(ROOT, "dataset", "tiny_math", "prompts.mindrecord")):
        raise SystemExit("the demo data is missing: run `bash scripts/run_demo.sh` once (it makes dataset/tiny_math/)")
    os.makedirs(a.out, exist_ok=True)
    seeds = [1234, 1, 2, 3, 4, 5][:a.seeds]
    curves, gains = {}, {"grpo": [], "sft": []}
    for seed in seeds:
        grpo, _ = run_rl(seed, a)
        sft, _ = sft_subprocess(seed, grpo[-1][0], a)
        for method, curve in (("grpo", grpo), ("sft", sft)):
            curves[(method, seed)] = curve
            gains[method].append(curve[-1][2] - curve[0][2])
            print(f"{method.upper():4} seed {seed}: held-out {curve[0][2]:.3f} -> {curve[-1][2]:.3f} "
                  f"in {curve[-1][0]:.0f} s of training ({curve[-1][1]} steps)", flush=True)
    png = os.path.join(a.out, "learning.png")
    draw(curves, png)
    summary(gains, len(seeds), png)


def summary(gains, seeds, png):
    """The held-out gain of each method in ``gains`` (method -> one gain per seed)."""
    control = "sft" in gains
    print(f"\nheld-out gain over {seeds} seeds{', same training time per seed' if control else ''}:")
    for method, values in gains.items():
        print(f"  {METHODS[method] + ':':30} {spread(values)}")
    print(f"curves: {png}")


if __name__ == "__main__":
    main()
