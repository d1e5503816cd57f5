#!/usr/bin/env bash
# PPO training on several processes (and machines) with msrun: `mindrl train` on every worker, as
# scripts/run_grpo.sh (same environment variables, failure and signal handling and logs; see its --help).
#
#   bash scripts/run_ppo.sh [key.sub=value ...]           # extra arguments are config overrides
#   CONFIG=my_ppo.yaml NPUS_PER_NODE=4 bash scripts/run_ppo.sh rl_config.train_iters=10
#
# CONFIG [examples/ppo/tiny_math.yaml] is any training yaml; a PPO one has rl_config.adv_estimator: gae and a
# critic_config section (and, for a learned reward, a reward_config section). Layouts per role:
# actor_config.tensor_model_parallel_size, generate_config.infer_tensor_parallel_size,
# critic_config.tensor_model_parallel_size, reward_config.tensor_model_parallel_size; each role's data-parallel
# size is the world size divided by its tp.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
export CONFIG="${CONFIG:-examples/ppo/tiny_math.yaml}"
exec bash "$HERE/run_grpo.sh" "$@"
