#!/usr/bin/env python
"""Data-layer throughput: preprocessing rows/s with 1 and 2 workers, and reader rows/s.

    python bench/bench_data.py                 # 100k synthetic DeepScaleR-shaped rows
    python bench/bench_data.py --rows 20000 --tokenizer examples/tiny/tokenizer

Without --tokenizer a byte-level BPE (Qwen2 pre-tokenizer, 8k vocab) is trained on the synthetic
text first, so the numbers reflect a realistic subword tokenizer rather than the tiny demo one.
Rows use the qwen_r1 template, like configs/datasets/deepscaler.yaml.
"""
import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORDS = ("find the value of x such that the sum of all positive integers less than n is divisible by "
         "prime number triangle area radius circle probability expected real roots polynomial equation "
         "sequence term ratio integer remainder when divided compute evaluate let be a function").split()


def synthetic_rows(n, seed=0):
    rng = random.Random(seed)

    def sentence(k):
        words = [rng.choice(WORDS) for _ in range(k)]
        return " ".join(words).capitalize() + f" ${rng.randint(2, 999)}x^{rng.randint(2, 5)} + {rng.randint(1, 99)}$."

    # about 40-100 tokens of problem, like typical DeepScaleR (AIME/AMC-style) questions
    return [{"problem": " ".join(sentence(rng.randint(6, 16)) for _ in range(rng.randint(1, 3))),
             "answer": str(rng.randint(0, 10000)),
             "solution": " ".join(sentence(rng.randint(10, 25)) for _ in range(rng.randint(3, 8)))}
            for _ in range(n)]


def train_bpe(directory, rows):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from mindrl.data.tokenizer import QWEN2_PRETOKENIZE_REGEX
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    texts = [r["problem"] + "\n" + r["solution"] for r in rows[:5000]]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=8192, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    os.makedirs(directory, exist_ok=True)
    tok.model.save(directory)        # vocab.json + merges.txt; Qwen's specials are added on load
    return directory


def bench_preprocess(data, tokenizer, out_prefix, workers):
    from mindrl.data.preprocess import load_dataset_config, preprocess
    cfg = load_dataset_config(None, extra={
        "input": data, "tokenizer_name_or_path": tokenizer, "output_prefix": out_prefix,
        "handler_name": "R1AlpacaStyleInstructionHandler", "prompt_type": "qwen_r1",
        "dataset_additional_keys": ["labels"], "workers": workers, "log_interval": 10 ** 9})
    start = time.time()
    summary = preprocess(cfg, overwrite=True)
    return summary, time.time() - start


def bench_tokenize_only(data, tokenizer, n):
    from mindrl.data.preprocess import _build_handler, load_dataset_config
    cfg = load_dataset_config(None, extra={"input": data, "tokenizer_name_or_path": tokenizer, "output_prefix": "x",
                                   "handler_name": "r1", "prompt_type": "qwen_r1"})
    handler = _build_handler(cfg)
    with open(data) as f:
        rows = json.load(f)[:n]
    start = time.time()
    for row in rows:
        handler(row)
    return len(rows) / (time.time() - start)


def bench_reader(path, batch_size, workers):
    from mindrl.data.reader import PromptDataset
    ds = PromptDataset(path, batch_size, seed=1, num_parallel_workers=workers)
    start = time.time()
    rows = sum(len(b["index"]) for b in ds)
    return rows, rows / (time.time() - start)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--tokenizer", help="tokenizer dir/file (default: train an 8k BPE on the synthetic text)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workdir", help="keep files here instead of a temporary directory")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import mindspore  # noqa: F401  (imported up front so its ~2 s start-up is not in any number)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or tmp
        os.makedirs(work, exist_ok=True)
        rows = synthetic_rows(args.rows)
        data = os.path.join(work, "deepscaler.json")
        with open(data, "w") as f:
            json.dump(rows, f)
        tokenizer = args.tokenizer or train_bpe(os.path.join(work, "bpe"), rows)
        print(f"rows: {args.rows}  tokenizer: {args.tokenizer or 'BPE 8k (trained here)'}  template: qwen_r1")
        print(f"tokenize only (1 process, no writing): {bench_tokenize_only(data, tokenizer, 5000):,.0f} rows/s")
        out = os.path.join(work, "data")
        for workers in (1, 2):
            summary, wall = bench_preprocess(data, tokenizer, out, workers)
            print(f"preprocess workers={workers}: {summary.written / wall:,.0f} rows/s "
                  f"({summary.written} rows in {wall:.1f} s, incl. reading json and writing MindRecord)")
        best = 0.0
        for workers in (1, 2):
            n, rate = bench_reader(summary.output, args.batch_size, workers)
            best = max(best, rate)
            print(f"reader rows/s: {rate:,.0f} (batch {args.batch_size}, num_parallel_workers={workers}, {n} rows)")
        print_step_share(best)
    return 0


def print_step_share(rows_per_s, prompts_per_step=64):
    """Reader time for one GRPO step's prompts against a training step (the demo's, when it has run)."""
    reader_s = prompts_per_step / rows_per_s
    metrics = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs", "tiny_math",
                           "latest", "metrics.jsonl")
    steps = []
    if os.path.exists(metrics):
        with open(metrics) as fh:
            steps = [json.loads(line)["timing/all"] for line in fh if '"timing/all"' in line][1:]
    if steps:
        step = sorted(steps)[len(steps) // 2]
        print(f"reader time for {prompts_per_step} prompts: {reader_s * 1e3:.1f} ms = {100 * reader_s / step:.2f}% "
              f"of the demo's median GRPO step ({step:.2f} s, runs/tiny_math/latest/metrics.jsonl)")
    else:
        print(f"reader time for {prompts_per_step} prompts: {reader_s * 1e3:.1f} ms "
              "(run `bash scripts/run_demo.sh` first to compare with a GRPO step)")


if __name__ == "__main__":
    sys.exit(main())
