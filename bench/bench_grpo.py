#!/usr/bin/env python
"""GRPO end-to-end throughput: mindrl against TRL's GRPOTrainer on this machine, same run, same settings.

Both sides train the same random-init Qwen2 (default: 8 layers, hidden 512, GQA 8/2, vocab 8192,
intermediate 1408, fp32; ~31M parameters) on prompts of exactly --prompt-len tokens, 2 prompts x 8
samples per optimizer step, --new-tokens completion tokens (min = max, so every completion runs to the
limit on both sides), temperature 1, one update per rollout, same reward function. --beta 0 (the default) runs
no reference model; --beta 0.04 adds one on both sides (TRL's beta, mindrl's kl_coef with the k3 KL in the loss). TRL uses HF `generate` with a KV cache; gradient checkpointing on (TRL's default,
and its faster setting here).

    python bench/bench_grpo.py                 # full size, ~3 minutes per side
    python bench/bench_grpo.py --beta 0.04     # with a reference model
    python bench/bench_grpo.py --quick         # tiny smoke run

Prints the median step time and e2e_tps (MindSpeed-RL's formula) of each side and the ratio, and mindrl's
e2e_tps as a share of this machine's ceiling: the step floor from a sgemm and a memory-copy measurement taken in
the mindrl side's process (bench/common.py step_floor: decode reads the weights once per new token, the update
does 6 x parameters x tokens FLOPs, a reference model 2 x).
Semantics differ slightly and are matched where it matters: TRL's `loss_type='dapo'` is a token mean
over the batch, like mindrl's `token-mean`; `scale_rewards='group'` is GRPO's std normalisation.
"""
import argparse
import json
import os
import statistics
import sys
import time

import common

ROOT = common.ROOT
REWARD_SRC = '''
def bench_reward(text):
    """Share of completion tokens that contain the digit 7: dense, cheap, the same on both sides."""
    toks = text.split()
    return sum("7" in t for t in toks) / max(len(toks), 1)
'''


def make_assets(d, a):
    model = common.make_assets(d, a)
    with open(os.path.join(d, "reward.py"), "w") as fh:
        fh.write("from mindrl.rewards import register_reward\n" + REWARD_SRC +
                 "\n@register_reward('bench')\ndef bench(response, label):\n    return bench_reward(response)\n")
    return model


def mindrl_trainer(d, a):
    """mindrl's trainer for the benchmark's settings (bench/profile_grpo.py profiles the same one)."""
    from mindrl.config import load_train_config
    common.preprocess_prompts(d, a)
    over = {"rl_config.train_iters": a.steps, "rl_config.global_batch_size": 2, "rl_config.n_samples_per_prompt": 8,
            "rl_config.mini_batch_size": 2, "rl_config.micro_batch_size": a.micro_batch,
            "rl_config.dynamic_sampling": "false",
            "rl_config.verifier_function": "[bench]", "rl_config.verifier_weight": "[1.0]",
            "rl_config.custom_reward_file": f"{d}/reward.py", "actor_config.model": f"{d}/model",
            "actor_config.load": f"{d}/model", "actor_config.tokenizer_name_or_path": f"{d}/tok",
            "actor_config.lr": 1e-6, "actor_config.lr_warmup_iters": 0, "actor_config.save": "null",
            "actor_config.save_interval": 0, "generate_config.max_prompt_length": a.prompt_len,
            "generate_config.max_tokens": a.new_tokens, "generate_config.min_tokens": a.new_tokens,
            "data.path": f"{d}/prompts.mindrecord", "eval.path": "null", "logging.log_dir": f"{d}/mindrl_logs/<run_id>",
            "logging.progress_bar": "false", "logging.tensorboard": "false", "runtime.threads": a.threads}
    if a.beta > 0:  # TRL's beta: the k3 estimator of KL(policy || reference) in the loss
        over.update({"rl_config.kl_coef": a.beta, "rl_config.kl_penalty": "low_var_kl",
                     "rl_config.use_kl_in_loss": "true", "ref.ref_model_load_path": f"{d}/model"})
    cfg = load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                            [f"{k}={v}" for k, v in over.items()])
    from mindrl.trainer import RLTrainer
    return RLTrainer(cfg)


def run_mindrl(d, a):
    t = mindrl_trainer(d, a)
    times, tps, split = [], [], []
    for _ in range(a.steps):
        m = t.train_step()
        times.append(m["timing/all"])
        tps.append(m["e2e_tps"])
        split.append({k: round(m[k], 3) for k in ("timing/rollout", "timing/update", "timing/old_log_p",
                                                  "timing/reference_model")})
    return times, split, m["memory/peak_rss_gb"]


def run_trl(d, a):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    ns = {}
    exec(REWARD_SRC, ns)

    def reward(prompts, completions, **kw):
        return [ns["bench_reward"](c) for c in completions]

    rows = [json.loads(line)["prompt"] for line in open(f"{d}/prompts.jsonl")]
    tok = transformers.AutoTokenizer.from_pretrained(f"{d}/tok")
    model = transformers.AutoModelForCausalLM.from_pretrained(f"{d}/model", dtype=torch.float32)
    args = GRPOConfig(output_dir=f"{d}/trl_out", per_device_train_batch_size=16, num_generations=8,
                      max_completion_length=a.new_tokens, generation_kwargs={"min_new_tokens": a.new_tokens},
                      num_iterations=1, beta=a.beta, learning_rate=1e-6, temperature=1.0, use_vllm=False,
                      gradient_checkpointing=True, max_steps=a.steps, logging_steps=1, report_to=[],
                      use_cpu=True, save_strategy="no", loss_type="dapo", scale_rewards="group",
                      dataloader_num_workers=0, seed=0)
    times = []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, *args_, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, *args_, **kw):
            times.append(time.perf_counter() - self.t)

    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, processing_class=tok,
                          train_dataset=Dataset.from_dict({"prompt": rows}), callbacks=[Timer()])
    trainer.train()
    import resource
    return times, [], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_model_args(ap)
    ap.add_argument("--steps", type=int, default=6, help="steps per side; the first 2 are warm-up")
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient: > 0 adds a reference model")
    a = ap.parse_args()
    common.apply_quick(a, steps=4)
    if a.side:
        limits = common.machine_limits() if a.side == "mindrl" else {}
        times, split, peak = (run_mindrl if a.side == "mindrl" else run_trl)(a.dir, a)
        print("RESULT " + json.dumps({"times": times, "split": split, "limits": limits, "peak_rss_gb": peak}),
              flush=True)
        return
    d = common.scratch_dir("bench_grpo_")
    params = sum(p.numel() for p in make_assets(d, a).parameters())
    args = [x for x in sys.argv[1:]]
    results = {side: common.run_side(sys.executable, __file__, side, d, args, a.threads) for side in ("mindrl", "trl")}
    tokens = (a.prompt_len + a.new_tokens) * 2 * 8  # MindSpeed-RL e2e_tps numerator, world_size 1
    print(f"\nGRPO step, model L{a.layers} H{a.hidden} GQA {a.heads}/{a.kv_heads} V{a.vocab} ({params / 1e6:.1f}M), "
          f"2 prompts x 8 samples, {a.prompt_len}+{a.new_tokens} tokens, beta {a.beta}, {a.threads} threads")
    print(f"{'side':8} {'median step (s)':>16} {'e2e_tps':>9}   steps (s)")
    med = {}
    for side, r in results.items():
        steady = r["times"][2:] if len(r["times"]) > 2 else r["times"]
        med[side] = statistics.median(steady)
        print(f"{side:8} {med[side]:16.3f} {tokens / med[side]:9.1f}   {[round(t, 2) for t in r['times']]}")
    if results["mindrl"]["split"]:
        print("mindrl split (last step):", results["mindrl"]["split"][-1])
    print(f"ratio mindrl/trl e2e_tps: {med['trl'] / med['mindrl']:.2f}x")
    limits = results["mindrl"]["limits"]
    floor = common.step_floor(params, 16, a.prompt_len, a.new_tokens, limits, reference=a.beta > 0)
    print(f"machine: sgemm {limits['sgemm_gflops']:.0f} GFLOP/s, memory {limits['copy_gbps']:.1f} GB/s (read + "
          f"write); step floor {floor['step_s']:.2f} s (decode {floor['decode_s']:.2f}, update {floor['update_s']:.2f}"
          + (f", reference {floor['reference_s']:.2f}" if a.beta > 0 else "") + f") = {tokens / floor['step_s']:.0f} "
          f"e2e_tps; mindrl at {100 * floor['step_s'] / med['mindrl']:.0f}% of it")


if __name__ == "__main__":
    main()
