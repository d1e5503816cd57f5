"""GRPO from Python, as a TRL user would write it: a config, a reward function, a trainer, fit().

    python examples/python_api/grpo_tiny_math.py                       # 5 steps, about a minute on 2 cores
    python examples/python_api/grpo_tiny_math.py rl_config.train_iters=20

Needs the demo data (`bash scripts/run_demo.sh` makes dataset/tiny_math/). The run writes its directory under
runs/python_api_tiny_math/ (metrics.jsonl, report.png, config.yaml), like `mindrl train`. The reward is the yaml's
`last_number` plus `exact_answer` below; to make a function the whole reward, give it to load_config with
`rl_config.verifier_function=[]` (docs/runs.md, "The Python API").
"""
import re
import sys

from mindrl import GRPOTrainer, load_config


def exact_answer(response: str, label: str) -> float:
    """1.0 when the response is the answer and nothing else (the demo's `last_number` also accepts extra text)."""
    return 1.0 if re.fullmatch(r"\s*-?\d+\s*", response) and int(response) == int(label) else 0.0


def main(overrides):
    config = load_config("examples/grpo/tiny_math.yaml",
                         ["rl_config.train_iters=5", "eval.interval=0", "logging.name=python_api_tiny_math",
                          "actor_config.save=null", "actor_config.save_interval=0", *overrides])
    # exact_answer joins the yaml's last_number (weight 1.0 each): a right answer with nothing else scores 2
    trainer = GRPOTrainer(config, reward_funcs=[exact_answer])
    summary = trainer.fit()
    print("last step:", {k: round(v, 4) for k, v in summary["last"].items()
                         if k in ("grpo/score/mean", "grpo/rewards/last_number/mean", "grpo/rewards/exact_answer/mean",
                                  "eval/score/mean")})
    print("run directory:", trainer.cfg.logging.log_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
