#!/usr/bin/env python
"""DPO on a real pretrained LLM: `mindrl dpo` against TRL's DPOTrainer on SmolLM2-135M-Instruct, one run.

The model is the real-model example's (examples/real/: SmolLM2-135M-Instruct converted from its GGUF file; make it
with `bash examples/real/run.sh --prepare`, or pass --model DIR). The pairs are the example's two-digit additions
(examples/real/addition.py, `training_problems(..., seed=11)`): the prompt in the model's own chat template, the
chosen response the right sum and the end-of-turn token (`85<|im_end|>`), the rejected one a sum off by 1 to 10
(`83<|im_end|>`).

* **mindrl**: `mindrl preprocess` with `handler_name: pairwise`, `prompt_type: hf`, `append_eod: false`
  (configs/datasets/pairwise.yaml with overrides) writes the pairwise MindRecord; the side builds `mindrl dpo`'s
  trainer (mindrl/trainer/dpo_training.py) and runs its steps in graph mode. The reference is a frozen copy of the
  starting weights (dpo_config.ref_load unset).
* **TRL**: DPOTrainer on a dataset of strings: the prompt rendered by the tokenizer's `apply_chat_template`
  (add_generation_prompt), the chosen and rejected completions with `<|im_end|>`; its reference is a frozen copy
  of the model too (ref_model unset, no PEFT). The side checks that its tokenized pairs (prompt_ids +
  chosen_ids, prompt_ids + rejected_ids) are mindrl's (chosen_ids, rejected_ids, prompt_length), pair for pair.

Same settings both sides: the pairs in file order (mindrl `data.shuffle: false`, TRL
`train_sampling_strategy='sequential'`), --batch pairs per optimizer step in micro-batches of --micro-batch pairs
(each pair is two rows, chosen and rejected, in one forward), the sigmoid loss with beta 0.1, AdamW (0.9/0.999,
eps 1e-8, no weight decay) at a constant lr 1e-6 (TRL's default), no warm-up, gradient-norm clip 1, float32, max
length --max-length, no gradient checkpointing, the reference's log-probs computed in each step (TRL
`precompute_ref_log_probs=False`, its default). Padding: TRL pads each micro-batch to its longest row, mindrl to the
next multiple of --pad-to-multiple-of (8; 0: the next power of two). Padding is not counted.

Each side runs in its own process (`bench/common.py run_side`) and reports: step times (e2e: fetching the batch,
the reference's forward, the policy's forward and backward, the optimizer step), e2e_tps (the step's real tokens,
chosen and rejected rows, over its time: mindrl counts its pairs' lengths, TRL its micro-batches'
`attention_mask`), the process's peak RSS (VmHWM), start-up (build and load, both models), the first step's time
and its `logps/chosen` (the policy's summed log-probability of the chosen responses, TRL's metric), which both sides
should agree on (the same model, pairs and masking). The median is over the steps after the 2 warm-up steps.

    python bench/bench_dpo.py            # 6 steps a side (2 warm-up), 8 pairs per step, micro-batches of 4
    python bench/bench_dpo.py --quick    # a tiny random LLaMA with a tiny tokenizer, 3 steps: a smoke run
"""
import json
import os
import random
import sys
import time

import common
import offline_bench
from offline_bench import peak_rss_gb

ROOT = common.ROOT
sys.path.insert(0, os.path.join(ROOT, "examples", "real"))
LR, BETA = 1e-6, 0.1


# ------------------------------------------------------------------------------------------------ assets

def make_pairs(d, model_dir, a):
    """``d/pairs.jsonl`` (the example's problems with a right and a wrong sum), ``d/pairs.mindrecord`` (mindrl's
    pairwise rows) and ``d/mindrl_pairs.json`` (their chosen_ids, rejected_ids and prompt_length in file order: what
    the TRL side checks against)."""
    import addition
    import mindspore.dataset as mds
    from mindrl.data.preprocess import cli_main
    count = max(32 if a.quick else 256, a.steps * a.batch)
    rng = random.Random(11)
    with open(os.path.join(d, "pairs.jsonl"), "w") as fh:
        for x, y in addition.training_problems(count, seed=11):
            wrong = x + y + rng.choice([-1, 1]) * rng.randint(1, 10)
            fh.write(json.dumps({"prompt": addition.question(x, y), "chosen": str(x + y), "rejected": str(wrong)})
                     + "\n")
    rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "pairwise.yaml"), f"input={d}/pairs.jsonl",
                   f"output_prefix={d}/pairs", f"tokenizer_name_or_path={model_dir}", "handler_name=pairwise",
                   "prompt_type=hf", "append_eod=false", "workers=1", f"max_prompt_length={a.max_length}",
                   f"seq_length={a.max_length}",
                   'map_keys={"prompt": "prompt", "query": "", "system": "", "chosen": "chosen", '
                   '"rejected": "rejected"}', "--overwrite"])
    assert rc == 0
    cols = ["chosen_ids", "rejected_ids", "prompt_length"]
    rows = list(mds.MindDataset(f"{d}/pairs.mindrecord", columns_list=cols, shuffle=False)
                .create_dict_iterator(output_numpy=True, num_epochs=1))
    with open(os.path.join(d, "mindrl_pairs.json"), "w") as fh:
        json.dump([{"chosen": r["chosen_ids"].tolist(), "rejected": r["rejected_ids"].tolist(),
                    "prompt_length": int(r["prompt_length"])} for r in rows], fh)
    return len(rows)


# ------------------------------------------------------------------------------------------------ sides

def run_mindrl(d, a):
    from mindrl.config.dpo import load_dpo_config
    from mindrl.trainer.dpo_training import DPOTrainer

    def measure(batch, out):
        tokens = sum(len(r) for r in batch["chosen_ids"]) + sum(len(r) for r in batch["rejected_ids"])
        return {"tokens": float(tokens), "loss": out["dpo/loss"], "logps_chosen": out["logps/chosen"]}
    return offline_bench.run_mindrl(d, a, "dpo_config", {"lr": LR, "beta": BETA, "loss_type": "sigmoid"},
                                    f"{d}/pairs.mindrecord", DPOTrainer, load_dpo_config, measure)


def run_trl(d, a):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer
    pairs = [json.loads(line) for line in open(f"{d}/pairs.jsonl")]
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    eot = tok.eos_token  # SmolLM2's <|im_end|>: the end of turn mindrl's hf template reads off the template
    data = Dataset.from_dict({
        "prompt": [tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for p in pairs],
        "chosen": [p["chosen"] + eot for p in pairs], "rejected": [p["rejected"] + eot for p in pairs]})
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    args = DPOConfig(output_dir=f"{d}/trl_out", per_device_train_batch_size=a.micro_batch,
                     gradient_accumulation_steps=a.batch // a.micro_batch, max_steps=a.steps, learning_rate=LR,
                     lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, adam_beta1=0.9,
                     adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0, optim="adamw_torch",
                     max_length=a.max_length, beta=BETA, loss_type=["sigmoid"], precompute_ref_log_probs=False,
                     gradient_checkpointing=False, bf16=False, fp16=False, use_cpu=True,
                     train_sampling_strategy="sequential", logging_steps=1, report_to=[], save_strategy="no",
                     dataloader_num_workers=0, seed=0)
    Counting, timer, marks, per_step = offline_bench.timed_trainer(DPOTrainer)
    trainer = Counting(model=model, args=args, processing_class=tok, train_dataset=data, callbacks=[timer])
    startup = time.perf_counter() - t0
    mine = json.load(open(f"{d}/mindrl_pairs.json"))
    ds = trainer.train_dataset
    differ = sum(1 for i, r in enumerate(mine) if i >= len(ds)
                 or ds[i]["prompt_ids"] + ds[i]["chosen_ids"] != r["chosen"]
                 or ds[i]["prompt_ids"] + ds[i]["rejected_ids"] != r["rejected"]
                 or len(ds[i]["prompt_ids"]) != r["prompt_length"])
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    rows = [{"time": y - x, "tokens": float(n), "loss": h["loss"], "logps_chosen": h["logps/chosen"]}
            for x, y, n, h in zip(marks, marks[1:], per_step, logged)]
    return {"rows": rows, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb(),
            "rows_checked": len(mine), "rows_differ": differ + abs(len(ds) - len(mine))}


# ------------------------------------------------------------------------------------------------ main

def report(results, a, params):
    title = (f"\nDPO on {os.path.basename(a.model.rstrip('/'))} ({params / 1e6:.1f}M), {a.batch} pairs per step in "
             f"micro-batches of {a.micro_batch}, sigmoid loss, beta {BETA:g}, reference computed each step, max "
             f"length {a.max_length}, float32, AdamW lr {LR:g}, mindrl's rows padded to {offline_bench.pad_words(a)}, "
             f"{a.threads} threads")
    offline_bench.report(results, title, "dpo", "pairs", "logps/chosen 1", "logps_chosen",
                         "; losses at step 1: mindrl {m[rows][0][loss]:.4f}, trl {t[rows][0][loss]:.4f} "
                         "(ln 2 = 0.6931)")


def main():
    offline_bench.main(offline_bench.parser(__doc__, "pairs"), __file__, "dpo", make_pairs,
                       {"mindrl": run_mindrl, "trl": run_trl}, report)


if __name__ == "__main__":
    main()
