#!/usr/bin/env python
"""Does GRPO (or PPO) teach a real pretrained LLM, and how does that compare with supervised training given the same time?

The real-model example (examples/real/): SmolLM2-135M-Instruct, converted from its GGUF file, asked two-digit
additions in its own chat format ("What is 47 + 38? Answer with the number only."), rewarded by `last_number`
only. For each of --seeds seeds this runs examples/real/grpo.yaml (with --algo ppo: examples/real/ppo.yaml)
through `mindrl train` with held-out greedy evaluation (200 fixed problems, 24 new tokens) every --eval-every
steps, and a supervised control (left out with --no-control): the same starting model trained on the labelled
problems (the rendered prompt, then the sum and the end-of-turn token; next-token cross-entropy on the answer, AdamW
at --sft-lr, batch --sft-batch) for the same training seconds as that seed's RL run, evaluated on the same held-out
prompts with the same reward function and generation settings.

Prints each run's held-out accuracy before and after, the mean and spread of the gain for each method, and draws
every curve (held-out accuracy over training seconds) into one PNG. Needs the example's model and data: run
`bash examples/real/run.sh --prepare` once. Writes only under --out.

    python bench/learning_real.py                        # 3 seeds x (GRPO + control): 2 to 3 hours on 2 busy cores
    python bench/learning_real.py --seeds 1 --steps 4    # a quick look
    python bench/learning_real.py --algo ppo --no-control   # PPO, 3 seeds of 20 steps: about 45 minutes on the Xeon
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "real"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {algo: os.path.join(ROOT, "examples", "real", f"{algo}.yaml") for algo in ("grpo", "ppo")}
EVAL_EVERY = {"grpo": 5, "ppo": 10}  # held-out evaluations: GRPO's 10 steps at 0, 5, 10; PPO's 20 as the example
MODEL = os.path.join(ROOT, "scratch", "real", "smollm2-hf")
HELDOUT = os.path.join(ROOT, "scratch", "real", "data", "heldout.mindrecord")
METRIC = "eval/last_number/mean"
TITLE = "SmolLM2-135M-Instruct, two-digit addition: {algo} (reward only){control}"


def sft_batch(tok, template_render, problems, width):
    """Token ids, attention and loss masks of ``problems`` as supervised rows: the chat-rendered question, then
    the sum and the end-of-turn token <|im_end|> (the loss covers those), right-padded to ``width``."""
    import numpy as np
    import addition
    from mindrl.data.chat_template import turn_end_ids
    end = turn_end_ids(tok)
    ids = np.zeros((len(problems), width), np.int32)
    attn, loss = np.zeros_like(ids), np.zeros_like(ids)
    for i, (x, y) in enumerate(problems):
        p = tok.encode(template_render(addition.question(x, y)))
        seq = (p + tok.encode(str(x + y)) + end)[:width]
        ids[i, :len(seq)], attn[i, :len(seq)], loss[i, len(p):len(seq)] = seq, 1, 1
    return ids, attn, loss


def run_sft(seed, seconds, a):
    """Supervised control from the same model for ``seconds`` of training; the same held-out evaluation."""
    import mindspore as ms
    import addition
    from learning import accuracy, supervised_curve
    from mindrl.data.chat_template import turn_end_ids
    from mindrl.data.templates import get_template
    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.models import from_pretrained
    from mindrl.runtime import setup_context
    from mindrl.trainer.evaluation import load_eval_set
    from mindrl.trainer.sft import SFTStep
    setup_context("graph")
    ms.set_seed(seed)
    tok = load_tokenizer(MODEL)
    template = get_template("hf", tokenizer=tok)
    model = from_pretrained(MODEL)
    step_cell = SFTStep(model.net, lr_weight_decay=0.0)
    prompts, labels = load_eval_set(HELDOUT, "prompt_ids", "labels")
    stops = sorted(set(model.eos_token_ids + [tok.eos_token_id] + turn_end_ids(tok)))
    encode = lambda batch: sft_batch(tok, template.render, batch, 64)  # noqa: E731
    return supervised_curve(step_cell, lambda: accuracy(model, tok, prompts, labels, a.max_tokens, stops, 64),
                            addition.training_problems(100_000, seed=50_000 + seed), encode, seconds, a)


def main():
    from learning import draw, run_rl, sft_subprocess, summary
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", choices=sorted(CONFIGS), default="grpo", help="the example config the RL runs use")
    ap.add_argument("--seeds", type=int, default=3, help="runs per method (seeds 1234, 1, 2, ...)")
    ap.add_argument("--steps", type=int, help="RL steps per run (default: the config's, GRPO 10, PPO 20)")
    ap.add_argument("--eval-every", type=int, help="held-out evaluation interval (default: GRPO 5, PPO 10)")
    ap.add_argument("--no-control", action="store_true", help="RL runs only, no supervised control")
    ap.add_argument("--max-tokens", type=int, default=24, help="new tokens in the control's evaluation (the "
                                                                "GRPO config's generate_config.max_tokens)")
    ap.add_argument("--sft-lr", type=float, default=1e-5)
    ap.add_argument("--sft-batch", type=int, default=16)
    ap.add_argument("--sft-evals", type=int, default=2, help="held-out evaluations during each supervised run")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "learning_real"), help="where runs and the PNG go")
    ap.add_argument("override", nargs="*", help="more key=value overrides for the RL runs")
    ap.add_argument("--sft-only", nargs=2, metavar=("SEED", "SECONDS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.sft_only:
        print("CURVE " + json.dumps(run_sft(int(a.sft_only[0]), float(a.sft_only[1]), a)), flush=True)
        return
    if not (os.path.isdir(MODEL) and os.path.exists(HELDOUT)):
        raise SystemExit("the example's model and data are missing: run `bash examples/real/run.sh --prepare` once "
                         "(it makes scratch/real/)")
    if not a.steps:  # the config's own
        import yaml
        with open(CONFIGS[a.algo]) as fh:
            a.steps = yaml.safe_load(fh)["rl_config"]["train_iters"]
    a.eval_every = a.eval_every or EVAL_EVERY[a.algo]
    os.makedirs(a.out, exist_ok=True)
    seeds = [1234, 1, 2, 3, 4, 5][:a.seeds]
    curves, gains = {}, {a.algo: []} if a.no_control else {a.algo: [], "sft": []}
    for seed in seeds:
        rl, wall = run_rl(seed, a, CONFIGS[a.algo], METRIC, a.override, name=a.algo)
        runs = [(a.algo, rl, wall)]
        if not a.no_control:
            runs.append(("sft", *sft_subprocess(seed, rl[-1][0], a, __file__)))
        for method, curve, w in runs:
            curves[(method, seed)] = curve
            gains[method].append(curve[-1][2] - curve[0][2])
            steps = ", ".join(f"{acc:.3f}@{s}" for _, s, acc in curve)
            print(f"{method.upper():4} seed {seed}: held-out {curve[0][2]:.3f} -> "
                  f"{curve[-1][2]:.3f} in {curve[-1][0]:.0f} s of training ({curve[-1][1]} steps; {w:.0f} s wall "
                  f"with start-up and evaluations); accuracy@step: {steps}", flush=True)
    png = os.path.join(a.out, "learning_real.png" if a.algo == "grpo" else f"learning_real_{a.algo}.png")
    title = TITLE.format(algo=a.algo.upper(), control="" if a.no_control else " vs supervised (labels), same time")
    draw(curves, png, "held-out greedy accuracy (last_number, 200 problems)", title, 9,
         {"grpo": "GRPO", "ppo": "PPO", "sft": "supervised"})
    summary(gains, len(seeds), png)


if __name__ == "__main__":
    main()
