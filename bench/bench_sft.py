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
each micro-batch to its longest row, mindrl to the next multiple of --pad-to-multiple-of, 8 by default, or with 0 to
the next power of two: padding is not counted), the LM head on the completion positions only (TRL's default loss
`chunked_nll`; mindrl always). Gradient checkpointing: off on both sides (mindrl does
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
import json
import os
import sys
import time

import common
import offline_bench
from offline_bench import peak_rss_gb

ROOT = common.ROOT
sys.path.insert(0, os.path.join(ROOT, "examples", "real"))
LR = 1e-5


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
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer

    def measure(batch, out):
        return {"tokens": float(sum(len(r) for r in batch["pretrain_ids"])), "loss": out["sft/loss"]}
    return offline_bench.run_mindrl(d, a, "sft_config", {"lr": LR}, f"{d}/sft.mindrecord", SFTTrainer,
                                    load_sft_config, measure)


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
    Counting, timer, marks, per_step = offline_bench.timed_trainer(SFTTrainer)
    trainer = Counting(model=model, args=args, processing_class=tok, train_dataset=data, callbacks=[timer])
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

def report(results, a, params):
    title = (f"\nSFT on {os.path.basename(a.model.rstrip('/'))} ({params / 1e6:.1f}M), {a.batch} rows per step in "
             f"micro-batches of {a.micro_batch}, max length {a.max_length}, float32, AdamW lr {LR:g}, no packing, "
             f"mindrl's rows padded to {offline_bench.pad_words(a)}, gradient checkpointing "
             f"{'on in TRL, off in mindrl' if a.trl_checkpointing else 'off'}, {a.threads} threads")
    offline_bench.report(results, title, "sft", "rows", "loss 1", "loss")


def main():
    ap = offline_bench.parser(__doc__, "rows")
    ap.add_argument("--trl-checkpointing", action="store_true",
                    help="gradient checkpointing on in TRL (its default; mindrl does not recompute)")
    offline_bench.main(ap, __file__, "sft", make_rows, {"mindrl": run_mindrl, "trl": run_trl}, report,
                       flags=("trl_checkpointing",))


if __name__ == "__main__":
    main()
