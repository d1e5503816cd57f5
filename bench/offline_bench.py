"""What bench_sft.py and bench_dpo.py share: their command line, the side runner and the table of results."""
import argparse
import json
import os
import statistics
import sys
import time

import common

MODEL = os.path.join(common.ROOT, "scratch", "real", "smollm2-hf")


def peak_rss_gb() -> float:
    """This process's peak resident memory (VmHWM: getrusage's ru_maxrss would carry the parent's peak over exec)."""
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kb / 2 ** 20


def model_params(model_dir) -> int:
    """The parameter count of an HF directory's model.safetensors (read from its header, no weights loaded)."""
    import numpy as np
    import safetensors
    with safetensors.safe_open(os.path.join(model_dir, "model.safetensors"), "np") as fh:
        return sum(int(np.prod(fh.get_slice(k).get_shape())) for k in fh.keys())


def parser(doc: str, unit: str) -> argparse.ArgumentParser:
    """The flags both benchmarks take; ``unit``: what one of --batch is (rows, pairs)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL, help="the HF directory of the model (default: the example's)")
    ap.add_argument("--no-trl", action="store_true", help="mindrl's side only")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per side; the first 2 are warm-up")
    ap.add_argument("--batch", type=int, default=8, help=f"{unit} per optimizer step")
    ap.add_argument("--micro-batch", type=int, default=4, help=f"{unit} per forward/backward, both sides")
    ap.add_argument("--max-length", type=int, default=128, help="tokens per row at most (prompt + response)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pad-to-multiple-of", type=int, default=8,
                    help="mindrl's data.pad_to_multiple_of (0: powers of two); TRL pads to the longest row")
    ap.add_argument("--quick", action="store_true", help="a tiny random LLaMA and tokenizer, 3 steps: a smoke run")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    return ap


def side_args(a, flags=()) -> list:
    """The command line a side's process gets: the shared settings, and the boolean ``flags`` that are set."""
    args = []
    for k in ("steps", "threads", "batch", "micro_batch", "max_length", "pad_to_multiple_of"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    return args + ["--model", a.model] + [f"--{f.replace('_', '-')}" for f in flags if getattr(a, f)]


def main(ap, script: str, name: str, make_data, sides: dict, report, flags=()) -> None:
    """Parse, then either run one side (``--side``: print its RESULT line) or make the data in a scratch directory
    (``make_data(d, model, a)`` -> how many rows it kept), run every side in its own process and ``report``."""
    a = ap.parse_args()
    if a.side:
        print("RESULT " + json.dumps(sides[a.side](a.dir, a)), flush=True)
        return
    if a.batch % a.micro_batch:
        ap.error("--micro-batch must divide --batch")
    if a.quick:
        a.steps, a.batch, a.micro_batch, a.max_length = 3, 4, 2, 256
    d = common.scratch_dir(f"bench_{name}_")
    if a.quick:
        from bench_real import make_quick_model
        a.model = make_quick_model(d)
    elif not os.path.exists(os.path.join(a.model, "config.json")):
        raise SystemExit(f"{a.model}: no model there; run `bash examples/real/run.sh --prepare` first (it converts "
                         f"SmolLM2-135M-Instruct into scratch/real/smollm2-hf), or pass --model DIR")
    kept = make_data(d, a.model, a)
    if kept < a.steps * a.batch:
        raise SystemExit(f"only {kept} rows within --max-length {a.max_length}; raise it")
    run = ["mindrl"] + ([] if a.no_trl else ["trl"])
    results = {side: common.run_side(sys.executable, script, side, d, side_args(a, flags), a.threads) for side in run}
    report(results, a, model_params(a.model))


def table(results, first_name: str, first_key: str, fmt: str = "8.4f") -> dict:
    """Print one row per side (start-up, first step, median steady step, e2e_tps, peak RSS, the first step's
    ``first_key``, the steps) and the compile line; return each side's median e2e_tps."""
    width = max(8, len(first_name))
    print(f"{'side':7} {'start-up':>9} {'step 1':>7} {'median step':>12} {'e2e_tps':>8} {'peak RSS':>9} "
          f"{first_name:>{width}}   steps (s) / tokens per step")
    med = {}
    for side, r in results.items():
        rows = r["rows"]
        med[side] = common.median_tps(rows)
        print(f"{side:7} {r['startup_s']:8.1f}s {rows[0]['time']:6.1f}s "
              f"{statistics.median(x['time'] for x in common.steady(rows)):11.2f}s {med[side]:8.1f} {r['peak_rss_gb']:7.2f}GB "
              f"{rows[0][first_key]:{width}.4f}   {[round(x['time'], 2) for x in rows]} / "
              f"{[int(x['tokens']) for x in rows]}")
    print(f"mindrl graph compiles by step (count, seconds): {results['mindrl']['compiles']}")
    return med


def pad_words(a) -> str:
    return f"a multiple of {a.pad_to_multiple_of}" if a.pad_to_multiple_of else "a power of two"


def timed_trainer(trainer_cls):
    """(a subclass of the TRL trainer ``trainer_cls`` that counts each micro-batch's real tokens, a callback that
    marks each optimizer step's end, marks, tokens per step): step k took marks[k + 1] - marks[k] seconds."""
    import transformers
    counted, marks, per_step = [], [], []

    class Counting(trainer_cls):
        def training_step(self, model, inputs, *rest, **kw):
            counted.append(int(inputs["attention_mask"].sum()))
            return super().training_step(model, inputs, *rest, **kw)

    class Timer(transformers.TrainerCallback):
        def on_train_begin(self, *args_, **kw):
            marks.append(time.perf_counter())

        def on_step_end(self, *args_, **kw):
            marks.append(time.perf_counter())
            per_step.append(sum(counted))
            counted.clear()

    return Counting, Timer(), marks, per_step


def report(results, title: str, bench: str, unit: str, first_name: str, first_key: str, tail: str = "") -> None:
    """The benchmark's table: ``title``, whether TRL's tokens were mindrl's (``unit``: rows, pairs), a row per side
    (:func:`table`) and the ratio line with the first step's ``first_key`` on both sides, then ``tail``."""
    print(title)
    if "trl" in results:
        t = results["trl"]
        print(f"tokens: {'identical on both sides' if t['rows_differ'] == 0 else 'DIFFER'} "
              f"({t['rows_checked'] - t['rows_differ']}/{t['rows_checked']} {unit} the same)")
    med = table(results, first_name, first_key)
    if "trl" in med:
        m, t = results["mindrl"], results["trl"]
        print(f"ratio mindrl/trl {bench} e2e_tps: {med['mindrl'] / med['trl']:.2f}x; peak RSS mindrl/trl: "
              f"{m['peak_rss_gb'] / t['peak_rss_gb']:.2f}x; first-step {first_name[:-2]} mindrl "
              f"{m['rows'][0][first_key]:.4f}, trl {t['rows'][0][first_key]:.4f}" + tail.format(m=m, t=t))


def write_config(d, a, section: str, model_keys: dict, data_path: str) -> str:
    """``d/<section>.yaml``: the model at a.model, the optimizer settings both sides share with ``model_keys`` on
    top, the data in file order, a.steps steps; returns its path."""
    import yaml
    m = a.model
    doc = {section: {"model": m, "tokenizer_name_or_path": m, "load": m, "save": None, "lr_decay_style": "constant",
                     "lr_warmup_iters": 0, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
                     "adam_eps": 1e-8, "clip_grad": 1.0, "compute_dtype": "float32", **model_keys},
           "train": {"global_batch_size": a.batch, "micro_batch_size": a.micro_batch, "train_iters": a.steps},
           "data": {"path": data_path, "shuffle": False, "pad_to_multiple_of": a.pad_to_multiple_of},
           "logging": {"log_dir": f"{d}/mindrl_logs/<run_id>", "jsonl": False, "tensorboard": False,
                       "progress_bar": False},
           "runtime": {"mode": "graph", "threads": a.threads, "seed": 0}}
    path = f"{d}/{section}.yaml"
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh)
    return path


def run_mindrl(d, a, section: str, model_keys: dict, data_path: str, trainer_cls, load_config, measure) -> dict:
    """Build ``trainer_cls`` from :func:`write_config`'s file and run a.steps steps; ``measure(batch, metrics)``
    gives each step's row (tokens and the figures the table shows), to which the step's time is added."""
    from bench_real import CompileCounter
    counter = CompileCounter()
    cfg = load_config(write_config(d, a, section, model_keys, data_path))
    t0 = time.perf_counter()
    t = trainer_cls(cfg)
    startup = time.perf_counter() - t0
    batches, rows = t._batches(), []
    for step in range(1, a.steps + 1):
        counter.step = step
        s = time.perf_counter()
        batch = next(batches)
        out = t.train_step(batch, t.step)
        t.step += 1
        rows.append({"time": time.perf_counter() - s, **measure(batch, out)})
    return {"rows": rows, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb(),
            "compiles": counter.by_step()}
