#!/usr/bin/env python
"""The MindRLHF Qwen-PPO tutorial's data step, on top of mindrl's preprocessing.

    python examples/qwen_ppo_tutorial/rlhf_data.py --vocab_path path/to/vocab.json \\
        --merges_file_path path/to/merges.txt --file_path path/to/input.jsonl \\
        --output_path path/to/output.mindrecord --max_prompt_length 4096 --seq_length 8193

Input rows are CValues-style: {"prompt": ..., "pos_resp": ..., "neg_resp": ...} (other key names
with --prompt_key / --response_key). The MindRecord has MindRLHF's fields:

* ``prompt_ids``   the prompt tokens, padded with the pad id to ``max_prompt_length``
* ``pretrain_ids`` prompt + response tokens, padded to ``seq_length``
* ``loss_mask``    1 on response tokens, 0 on the prompt and on padding

plus ``prompt_length``. Unlike MindRLHF, rows longer than the limits are skipped (and counted)
instead of silently truncated. Like MindRLHF, an existing output file is replaced.
"""
import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from mindrl.data.preprocess import PreprocessError, load_dataset_config, preprocess  # noqa: E402


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab_path", help="Qwen vocab.json (with --merges_file_path)")
    p.add_argument("--merges_file_path", help="Qwen merges.txt")
    p.add_argument("--tokenizer_dir", help="instead of vocab/merges: any tokenizer directory mindrl reads "
                                           "(tokenizer.json, vocab.json + merges.txt, tokenizer.model)")
    p.add_argument("--file_path", required=True, help="input .jsonl (or .json / .parquet)")
    p.add_argument("--output_path", required=True, help="output .mindrecord file")
    p.add_argument("--max_prompt_length", type=int, default=2048, help="prompt length (padded to it)")
    p.add_argument("--seq_length", type=int, default=4096, help="prompt + response length (padded to it)")
    p.add_argument("--pad_token_id", type=int, default=None, help="default: the tokenizer's pad token")
    p.add_argument("--prompt_key", default="prompt")
    p.add_argument("--response_key", default="pos_resp", help="the response trained on (default pos_resp)")
    p.add_argument("--workers", type=int, default=1)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = get_args(argv)
    if bool(args.tokenizer_dir) == bool(args.vocab_path and args.merges_file_path):
        print("rlhf_data.py: error: give --vocab_path and --merges_file_path, or --tokenizer_dir", file=sys.stderr)
        return 2
    tokenizer = {"tokenizer_name_or_path": args.tokenizer_dir} if args.tokenizer_dir else \
        {"vocab_file": args.vocab_path, "merge_file": args.merges_file_path}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    try:
        cfg = load_dataset_config(None, extra={
            "input": args.file_path, **tokenizer,
            "output_prefix": args.output_path, "handler_name": "sft", "prompt_type": "empty",
            "map_keys": {"prompt": args.prompt_key, "query": "", "response": args.response_key},
            "max_prompt_length": args.max_prompt_length, "seq_length": args.seq_length,
            "pad_to_max_length": True, "pad_token_id": args.pad_token_id,
            "workers": args.workers, "log_interval": 1000,
        })
        summary = preprocess(cfg, overwrite=True)
    except (PreprocessError, ValueError, OSError) as e:
        print(f"rlhf_data.py: error: {e}", file=sys.stderr)
        return 1
    print(f"Total number of samples: {summary.written}")
    print(f"Transformation finished! Output file refer: {summary.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
