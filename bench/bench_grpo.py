#!/usr/bin/env python
"""GRPO end-to-end throughput: mindrl against TRL's GRPOTrainer on this machine, same run, same settings.

Both sides train the same random-init Qwen2 (default: 8 layers, hidden 512, GQA 8/2, vocab 8192,
intermediate 1408, fp32; ~31M parameters) on prompts of exactly --prompt-len tokens, 2 prompts x 8
samples per optimizer step, --new-tokens completion tokens (min = max, so every completion runs to the
limit on both sides), temperature 1, one update per rollout, no reference model (beta = kl_coef = 0),
same reward function. TRL uses HF `generate` with a KV cache; gradient checkpointing on (TRL's default,
and its faster setting here).

    python bench/bench_grpo.py                 # full size, ~3 minutes per side
    python bench/bench_grpo.py --quick         # tiny smoke run

Prints the median step time and e2e_tps (MindSpeed-RL's formula) of each side and the ratio.
Semantics differ slightly and are matched where it matters: TRL's `loss_type='dapo'` is a token mean
over the batch, like mindrl's `token-mean`; `scale_rewards='group'` is GRPO's std normalisation.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REWARD_SRC = '''
def bench_reward(text):
    """Share of completion tokens that contain the digit 7: dense, cheap, the same on both sides."""
    toks = text.split()
    return sum("7" in t for t in toks) / max(len(toks), 1)
'''


def make_assets(d, a):
    import numpy as np
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {f"t{i}": i for i in range(a.vocab)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{a.vocab - 1}",
                                                pad_token="t0", unk_token="t0")
    fast.save_pretrained(os.path.join(d, "tok"))
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                                   num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads, max_position_embeddings=1024,
                                   tie_word_embeddings=False, eos_token_id=a.vocab - 1, pad_token_id=0)
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(os.path.join(d, "model"))
    rng = np.random.default_rng(0)
    rows = [" ".join(f"t{x}" for x in rng.integers(1, a.vocab - 1, size=a.prompt_len)) for _ in range(256)]
    with open(os.path.join(d, "prompts.jsonl"), "w") as fh:
        for r in rows:
            fh.write(json.dumps({"prompt": r, "labels": "0"}) + "\n")
    with open(os.path.join(d, "reward.py"), "w") as fh:
        fh.write("from mindrl.rewards import register_reward\n" + REWARD_SRC +
                 "\n@register_reward('bench')\ndef bench(response, label):\n    return bench_reward(response)\n")


def run_mindrl(d, a):
    from mindrl.config import load_train_config
    from mindrl.data.preprocess import cli_main
    rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml"),
                   f"input={d}/prompts.jsonl", f"output_prefix={d}/prompts", "tokenizer_type=HuggingFaceTokenizer",
                   f"tokenizer_name_or_path={d}/tok", f"max_prompt_length={a.prompt_len}", "--overwrite"])
    assert rc == 0
    over = {"rl_config.train_iters": a.steps, "rl_config.global_batch_size": 2, "rl_config.n_samples_per_prompt": 8,
            "rl_config.mini_batch_size": 16, "rl_config.micro_batch_size": 16, "rl_config.dynamic_sampling": "false",
            "rl_config.verifier_function": "[bench]", "rl_config.verifier_weight": "[1.0]",
            "rl_config.custom_reward_file": f"{d}/reward.py", "actor_config.model": f"{d}/model",
            "actor_config.load": f"{d}/model", "actor_config.tokenizer_name_or_path": f"{d}/tok",
            "actor_config.lr": 1e-6, "actor_config.lr_warmup_iters": 0, "actor_config.save": "null",
            "actor_config.save_interval": 0, "generate_config.max_prompt_length": a.prompt_len,
            "generate_config.max_tokens": a.new_tokens, "generate_config.min_tokens": a.new_tokens,
            "data.path": f"{d}/prompts.mindrecord", "eval.path": "null", "logging.log_dir": f"{d}/mindrl_logs",
            "logging.progress_bar": "false", "logging.tensorboard": "false", "runtime.threads": a.threads}
    cfg = load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                            [f"{k}={v}" for k, v in over.items()])
    from mindrl.trainer import RLTrainer
    t = RLTrainer(cfg)
    times, tps, split = [], [], []
    for _ in range(a.steps):
        m = t.train_step()
        times.append(m["timing/all"])
        tps.append(m["e2e_tps"])
        split.append({k: round(m[k], 3) for k in ("timing/rollout", "timing/update", "timing/old_log_p")})
    return times, split


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
                      num_iterations=1, beta=0.0, learning_rate=1e-6, temperature=1.0, use_vllm=False,
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
    return times, []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1408)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6, help="steps per side; the first 2 are warm-up")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny model and lengths: a smoke run")
    ap.add_argument("--side", choices=["mindrl", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab = 2, 64, 4, 2, 128, 512
        a.prompt_len, a.new_tokens, a.steps = 16, 16, 4
    if a.side:
        times, split = (run_mindrl if a.side == "mindrl" else run_trl)(a.dir, a)
        print("RESULT " + json.dumps({"times": times, "split": split}), flush=True)
        return
    d = tempfile.mkdtemp(prefix="bench_grpo_")
    make_assets(d, a)
    results = {}
    for side in ("mindrl", "trl"):
        cmd = [sys.executable, __file__, "--side", side, "--dir", d] + [x for x in sys.argv[1:] if x != "--quick"]
        if a.quick:
            cmd += ["--quick"]
        env = dict(os.environ, GLOG_v="3", OMP_NUM_THREADS=str(a.threads))
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode or not line:
            print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{side} side failed")
        results[side] = json.loads(line[0][7:])
    tokens = (a.prompt_len + a.new_tokens) * 2 * 8  # MindSpeed-RL e2e_tps numerator, world_size 1
    print(f"\nGRPO step, model L{a.layers} H{a.hidden} GQA {a.heads}/{a.kv_heads} V{a.vocab}, "
          f"2 prompts x 8 samples, {a.prompt_len}+{a.new_tokens} tokens, {a.threads} threads")
    print(f"{'side':8} {'median step (s)':>16} {'e2e_tps':>9}   steps (s)")
    med = {}
    for side, r in results.items():
        steady = r["times"][2:] if len(r["times"]) > 2 else r["times"]
        med[side] = statistics.median(steady)
        print(f"{side:8} {med[side]:16.3f} {tokens / med[side]:9.1f}   {[round(t, 2) for t in r['times']]}")
    if results["mindrl"]["split"]:
        print("mindrl split (last step):", results["mindrl"]["split"][-1])
    print(f"ratio mindrl/trl e2e_tps: {med['trl'] / med['mindrl']:.2f}x")


if __name__ == "__main__":
    main()
