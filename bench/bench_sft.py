#!/usr/bin/env python
"""SFT on a real pretrained LLM: `mindrl sft` against TRL's SFTTrainer on SmolLM2-135M-Instruct, one run.

The model is the real-model example's (examples/real/: SmolLM2-135M-Instruct converted from its GGUF file; make it
with `bash examples/real/run.sh --prepare`, or pass --model DIR). The rows are the example's two-digit additions
(examples/real/addition.py, `training_problems(..., seed=7)`) as prompt/response SFT rows: the prompt in the model's
own chat template, the response the right sum and the end-of-turn token (`85<|im_end|>`), the loss on the response
tokens only.

* **mindrl**: `mindrl preprocess` with `handler_name: sft`, `prompt_type: hf`, `append_eod: false`
  (configs/datasets/sft.yaml with overrides) writes the SFT MindRecord; the side builds `mindrl sft`'s trainer
  (mindrl/trainer/sft_training.py) and runs its steps in graph mode.
* **TRL**: SFTTrainer on a prompt-completion dataset of strings: the prompt rendered by the tokenizer's
  `apply_chat_template` (add_generation_prompt), the completion the sum and `<|im_end|>`, `completion_only_loss=True`
  (the loss on the completion tokens only). A conversational prompt-completion dataset would also learn the `\\n`
  the template writes after `<|im_end|>`, one token more than mindrl's rows; the string form gives the same tokens.
  The side checks that its tokenized rows (input_ids, and labels != -100) are mindrl's (pretrain_ids, loss_mask),
  row for row, and the table says so.

Same settings both sides: the rows in file order (mindrl `data.shuffle: false`, TRL
`train_sampling_strategy='sequential'`), --batch rows per optimizer step in micro-batches of --micro-batch (TRL
`per_device_train_batch_size` and `gradient_accumulation_steps`), the loss the token mean over the step's response
tokens (TRL divides by `num_items_in_batch`), AdamW (betas 0.9/0.999, eps 1e-8, no weight decay) at a constant lr
1e-5, no warm-up, gradient-norm clip 1, float32 (TRL `bf16=False`), max length --max-length, no packing (TRL pads
each micro-batch to its longest row, mindrl to the next power of two: padding is not counted), TRL's default loss
(`chunked_nll`: lm_head on the completion positions only). Gradient checkpointing: off on both sides (mindrl does
not recompute; TRL's default is on, --trl-checkpointing turns it on there).

Each side runs in its own process (`bench/common.py run_side`) and reports: step times (e2e: fetching the batch,
forward, backward and the optimizer step), e2e_tps (the step's real prompt + response tokens, no padding, over its
time: mindrl counts its batch's `pretrain_ids`, TRL its micro-batches' `attention_mask`), the process's peak RSS
(VmHWM), start-up (build and load), the first step's time and its loss. The median is over the steps after the 2
warm-up steps. The first-step losses should agree closely (same model, rows and loss); a large gap means the sides
differ.

    python bench/bench_sft.py            # 6 steps a side (2 warm-up), batch 8, micro-batch 4
    python bench/bench_sft.py --quick    # a tiny random LLaMA with a tiny tokenizer, 3 steps: a smoke run
    python bench/bench_sft.py --threads 1  # one thread a side: on cores other jobs share, torch's two OpenMP
                                         # threads stall (docs/performance.md#sft: TRL 7x slower at 2 threads)
"""
import argparse
import json
import os
import statistics
import sys
import time

import common

ROOT = common.ROOT
sys.path.insert(0, os.path.join(ROOT, "examples", "real"))
MODEL = os.path.join(ROOT, "scratch", "real", "smollm2-hf")
LR = 1e-5


def peak_rss_gb() -> float:
    """This process's peak resident memory (VmHWM: getrusage's ru_maxrss would carry the parent's peak over exec)."""
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kb / 2 ** 20


# ------------------------------------------------------------------------------------------------ assets

def make_rows(d, model_dir, a):
    """``d/sft.jsonl`` (the example's problems as {prompt, labels}), ``d/sft.mindrecord`` (mindrl's SFT rows) and
    ``d/mindrl_rows.json`` (their pretrain_ids and loss_mask, in file order: what the TRL side checks against)."""
    import addition
    import mindspore.dataset as mds
    from mindrl.data.preprocess import cli_main
    count = max(64 if a.quick else 256, a.steps * a.batch)
    addition.write_jsonl(os.path.join(d, "sft.jsonl"), addition.training_problems(count, seed=7))
    rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "sft.yaml"), f"input={d}/sft.jsonl",
                   f"output_prefix={d}/sft", "tokenizer_type=HuggingFaceTokenizer",
                   f"tokenizer_name_or_path={model_dir}", "prompt_type=hf", "append_eod=false",
                   f"max_prompt_length={a.max_length}", f"seq_length={a.max_length}", "--overwrite"])
    assert rc == 0
    rows = list(mds.MindDataset(f"{d}/sft.mindrecord", columns_list=["pretrain_ids", "loss_mask"], shuffle=False)
                .create_dict_iterator(output_numpy=True, num_epochs=1))
    with open(os.path.join(d, "mindrl_rows.json"), "w") as fh:
        json.dump([{"ids": r["pretrain_ids"].tolist(), "mask": r["loss_mask"].tolist()} for r in rows], fh)
    return len(rows)


# ------------------------------------------------------------------------------------------------ sides

def run_mindrl(d, a):
    import yaml
    from bench_real import CompileCounter
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer
    counter = CompileCounter()
    m = a.model
    doc = {"sft_config": {"model": m, "tokenizer_name_or_path": m, "load": m, "save": None, "lr": LR,
                          "lr_decay_style": "constant", "lr_warmup_iters": 0, "weight_decay": 0.0,
                          "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8, "clip_grad": 1.0,
                          "compute_dtype": "float32"},
           "train": {"global_batch_size": a.batch, "micro_batch_size": a.micro_batch, "train_iters": a.steps},
           "data": {"path": f"{d}/sft.mindrecord", "shuffle": False},
           "logging": {"log_dir": f"{d}/mindrl_logs/<run_id>", "jsonl": False, "tensorboard": False,
                       "progress_bar": False},
           "runtime": {"mode": "graph", "threads": a.threads, "seed": 0}}
    with open(f"{d}/sft.yaml", "w") as fh:
        yaml.safe_dump(doc, fh)
    cfg = load_sft_config(f"{d}/sft.yaml")
    t0 = time.perf_counter()
    t = SFTTrainer(cfg)
    startup = time.perf_counter() - t0
    batches, rows = t._batches(), []
    for step in range(1, a.steps + 1):
        counter.step = step
        s = time.perf_counter()
        batch = next(batches)
        out = t.train_step(batch, t.step)
        t.step += 1
        secs = time.perf_counter() - s
        rows.append({"time": secs, "tokens": float(sum(len(r) for r in batch["pretrain_ids"])),
                     "loss": out["sft/loss"]})
    return {"rows": rows, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb(),
            "compiles": counter.by_step()}


def run_trl(d, a):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    problems = [json.loads(line) for line in open(f"{d}/sft.jsonl")]
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    eot = tok.eos_token  # SmolLM2's <|im_end|>: the end of turn mindrl's hf template reads off the template
    data = Dataset.from_dict({
        "prompt": [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for p in problems],
        "completion": [p["labels"] + eot for p in problems]})
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = SFTConfig(output_dir=f"{d}/trl_out", per_device_train_batch_size=a.micro_batch,
                     gradient_accumulation_steps=a.batch // a.micro_batch, max_steps=a.steps, learning_rate=LR,
                     lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, adam_beta1=0.9,
                     adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0, optim="adamw_torch",
                     max_length=a.max_length, packing=False, padding_free=False, completion_only_loss=True,
                     gradient_checkpointing=a.trl_checkpointing, bf16=False, fp16=False, use_cpu=True,
                     train_sampling_strategy="sequential", logging_steps=1, report_to=[], save_strategy="no",
                     dataloader_num_workers=0, seed=0)
    counted, marks, per_step = [], [], []

    class Counting(SFTTrainer):
        def training_step(self, model, inputs, *rest, **kw):  # real tokens of each micro-batch
            counted.append(int(inputs["attention_mask"].sum()))
            return super().training_step(model, inputs, *rest, **kw)

    class Timer(transformers.TrainerCallback):
        def on_train_begin(self, *args_, **kw):
            marks.append(time.perf_counter())

        def on_step_end(self, *args_, **kw):
            marks.append(time.perf_counter())
            per_step.append(sum(counted))
            counted.clear()

    trainer = Counting(model=model, args=args, processing_class=tok, train_dataset=data, callbacks=[Timer()])
    startup = time.perf_counter() - t0
    mine = json.load(open(f"{d}/mindrl_rows.json"))
    ds = trainer.train_dataset
    differ = sum(1 for i, r in enumerate(mine) if i >= len(ds) or ds[i]["input_ids"] != r["ids"]
                 or [int(x != -100) for x in ds[i]["labels"]] != r["mask"])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    rows = [{"time": y - x, "tokens": float(n), "loss": loss}
            for x, y, n, loss in zip(marks, marks[1:], per_step, losses)]
    return {"rows": rows, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb(),
            "rows_checked": len(mine), "rows_differ": differ + abs(len(ds) - len(mine))}


# ------------------------------------------------------------------------------------------------ main

def side_args(a):
    args = []
    for k in ("steps", "threads", "batch", "micro_batch", "max_length"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    return args + ["--model", a.model] + (["--trl-checkpointing"] if a.trl_checkpointing else [])


def report(results, a, params):
    print(f"\nSFT on {os.path.basename(a.model.rstrip('/'))} ({params / 1e6:.1f}M), {a.batch} rows per step in "
          f"micro-batches of {a.micro_batch}, max length {a.max_length}, float32, AdamW lr {LR:g}, no packing, "
          f"gradient checkpointing {'on in TRL, off in mindrl' if a.trl_checkpointing else 'off'}, {a.threads} threads")
    if "trl" in results:
        t = results["trl"]
        print(f"tokens: {'identical on both sides' if t['rows_differ'] == 0 else 'DIFFER'} "
              f"({t['rows_checked'] - t['rows_differ']}/{t['rows_checked']} rows the same)")
    print(f"{'side':7} {'start-up':>9} {'step 1':>7} {'median step':>12} {'e2e_tps':>8} {'peak RSS':>9} "
          f"{'loss 1':>8}   steps (s) / tokens per step")
    med = {}
    for side, r in results.items():
        rows = r["rows"]
        steady = rows[2:] if len(rows) > 2 else rows
        med[side] = statistics.median(x["tokens"] / x["time"] for x in steady)
        print(f"{side:7} {r['startup_s']:8.1f}s {rows[0]['time']:6.1f}s "
              f"{statistics.median(x['time'] for x in steady):11.2f}s {med[side]:8.1f} {r['peak_rss_gb']:7.2f}GB "
              f"{rows[0]['loss']:8.4f}   {[round(x['time'], 2) for x in rows]} / {[int(x['tokens']) for x in rows]}")
    print(f"mindrl graph compiles by step (count, seconds): {results['mindrl']['compiles']}")
    if "trl" in med:
        m, t = results["mindrl"], results["trl"]
        print(f"ratio mindrl/trl sft e2e_tps: {med['mindrl'] / med['trl']:.2f}x; peak RSS mindrl/trl: "
              f"{m['peak_rss_gb'] / t['peak_rss_gb']:.2f}x; first-step loss mindrl {m['rows'][0]['loss']:.4f}, "
              f"trl {t['rows'][0]['loss']:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL, help="the HF directory of the model (default: the example's)")
    ap.add_argument("--no-trl", action="store_true", help="mindrl's side only")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per side; the first 2 are warm-up")
    ap.add_argument("--batch", type=int, default=8, help="rows per optimizer step")
    ap.add_argument("--micro-batch", type=int, default=4, help="rows per forward/backward, both sides")
    ap.add_argument("--max-length", type=int, default=128, help="tokens per row at most (prompt + response)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trl-checkpointing", action="store_true",
                    help="gradient checkpointing on in TRL (its default; mindrl does not recompute)")
    ap.add_argument("--quick", action="store_true", help="a tiny random LLaMA and tokenizer, 3 steps: a smoke run")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        res = (run_mindrl if a.side == "mindrl" else run_trl)(a.dir, a)
        print("RESULT " + json.dumps(res), flush=True)
        return
    if a.batch % a.micro_batch:
        ap.error("--micro-batch must divide --batch")
    if a.quick:
        a.steps, a.batch, a.micro_batch, a.max_length = 3, 4, 2, 256
    d = common.scratch_dir("bench_sft_")
    if a.quick:
        from bench_real import make_quick_model
        a.model = make_quick_model(d)
    elif not os.path.exists(os.path.join(a.model, "config.json")):
        raise SystemExit(f"{a.model}: no model there; run `bash examples/real/run.sh --prepare` first (it converts "
                         f"SmolLM2-135M-Instruct into scratch/real/smollm2-hf), or pass --model DIR")
    kept = make_rows(d, a.model, a)
    if kept < a.steps * a.batch:
        raise SystemExit(f"only {kept} rows within --max-length {a.max_length}; raise it")
    import numpy as np
    import safetensors
    params = 0
    with safetensors.safe_open(os.path.join(a.model, "model.safetensors"), "np") as fh:
        for k in fh.keys():
            params += int(np.prod(fh.get_slice(k).get_shape()))
    sides = ["mindrl"] + ([] if a.no_trl else ["trl"])
    results = {side: common.run_side(sys.executable, __file__, side, d, side_args(a), a.threads) for side in sides}
    report(results, a, params)


if __name__ == "__main__":
    main()
