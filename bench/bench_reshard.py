#!/usr/bin/env python
"""Reshard cost as a share of the GRPO step, under msrun (2 workers), for two layout pairs:

  infer tp=2 / train dp=2  (train holds full weights: each infer shard is a local slice, no communication)
  infer dp=2 / train tp=2  (each infer rank needs the full weights: gather over the train tp group)

The model is the benchmark Qwen2 shape scaled down so a step fits a few seconds on 2 CPU cores
(--layers/--hidden). Prints timing/reshard_to_infer, timing/all and their ratio (target: below 5%).

    python bench/bench_reshard.py
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    from conftest import make_grpo_workdir  # the tests' tiny task data; the model is replaced below
    from pathlib import Path
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import PretrainedLM, build_network
    d = make_grpo_workdir(Path(common.scratch_dir("bench_reshard_")))
    cfg = ModelConfig(model_type="qwen2", vocab_size=192, hidden_size=a.hidden, intermediate_size=a.hidden * 11 // 4,
                      num_layers=a.layers, num_heads=8, n_kv_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, qkv_bias=True, eos_token_id=2, pad_token_id=0).validate()
    PretrainedLM(build_network(cfg, seed=1), cfg).save_pretrained(str(d / "policy"))
    base = {"rl_config.train_iters": a.steps, "rl_config.global_batch_size": 8, "rl_config.n_samples_per_prompt": 8,
            "rl_config.mini_batch_size": 64, "rl_config.micro_batch_size": 16, "rl_config.dynamic_sampling": "false",
            "rl_config.verifier_function": "[last_number,ones]", "rl_config.verifier_weight": "[1.0,1.0]",
            "rl_config.custom_reward_file": str(d / "digits.py"), "actor_config.model": str(d / "policy"),
            "actor_config.load": str(d / "policy"), "actor_config.save": "null", "actor_config.save_interval": 0,
            "actor_config.lr_warmup_iters": 0, "data.path": str(d / "train.mindrecord"), "eval.path": "null",
            "logging.progress_bar": "false", "logging.tensorboard": "false"}
    env = dict(os.environ, GLOG_v="3", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    msrun = os.path.join(os.path.dirname(sys.executable), "msrun")
    print(f"model: {a.layers} layers, hidden {a.hidden}; 8 prompts x 8 samples; 2 msrun workers")
    print(f"{'layouts':32} {'reshard (s)':>12} {'step (s)':>9} {'share':>7}")
    for name, infer_tp, train_tp in (("infer tp=2 / train dp=2", 2, 1), ("infer dp=2 / train tp=2", 1, 2)):
        over = dict(base, **{"generate_config.infer_tensor_parallel_size": infer_tp,
                             "actor_config.tensor_model_parallel_size": train_tp,
                             "logging.log_dir": str(d / f"logs_{infer_tp}{train_tp}")})
        cmd = [msrun, "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}",
               f"--log_dir={d / f'ms_{infer_tp}{train_tp}'}", "--join=True", "python", "-m", "mindrl.cli", "train",
               "--config", os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")] + [f"{k}={v}" for k, v in over.items()]
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"{name}: msrun failed\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        rows = [json.loads(x) for x in open(d / f"logs_{infer_tp}{train_tp}" / "metrics.jsonl")]
        rows = [r for r in rows if "timing/all" in r][1:]  # skip the compiling first step
        rs = statistics.median(r["timing/reshard_to_infer"] for r in rows)
        st = statistics.median(r["timing/all"] for r in rows)
        print(f"{name:32} {rs:12.4f} {st:9.3f} {100 * rs / st:6.2f}%")


if __name__ == "__main__":
    main()
