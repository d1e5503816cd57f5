#!/usr/bin/env bash
# The embedded default example: GRPO on the tiny arithmetic task, about 2.5 minutes on 2 idle CPU cores.
# Sets up .venv, writes and tokenises the prompts into MindRecord, measures held-out greedy accuracy,
# trains, and measures again. Extra arguments are config overrides, e.g. rl_config.train_iters=10.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export GLOG_v=3
if [ ! -f dataset/tiny_math/prompts.mindrecord ] || [ ! -f dataset/tiny_math/heldout.mindrecord ]; then
  python examples/tiny/task.py --out dataset/tiny_math --rows 20000
  mindrl preprocess --config configs/datasets/tiny_math.yaml --overwrite
  mindrl preprocess --config configs/datasets/tiny_math.yaml --overwrite \
    input=./dataset/tiny_math/heldout.jsonl output_prefix=./dataset/tiny_math/heldout
fi
mindrl train --config examples/grpo/tiny_math.yaml "$@"
