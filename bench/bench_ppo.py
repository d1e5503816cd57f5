#!/usr/bin/env python
"""PPO end-to-end throughput: mindrl against TRL's PPOTrainer on this machine, same run, same settings.

Both sides train the same random-init Qwen2 policy (default: 8 layers, hidden 512, GQA 8/2, vocab 8192,
intermediate 1408, fp32; ~31M parameters, bench_grpo.py's model) with a critic and a reward model that are
one HF ``Qwen2ForSequenceClassification`` directory (the policy's backbone plus a seeded one-output ``score``
head): TRL takes it as ``reward_model`` and ``value_model``, mindrl as ``reward_config.load`` (the critic starts
from the reward model, mindrl's default). Per step: 16 prompts of exactly --prompt-len tokens, one response each
(n=1) of exactly --new-tokens tokens (no stop token on TRL's side, min_tokens = max_tokens on mindrl's, so every
response runs to the limit), temperature 1, a reference model, GAE (gamma 1, lambda 0.95), the k1 KL penalty in
the reward (coefficient 0.05 on both), advantages whitened, one PPO epoch in one mini-batch of 16 accumulated
over micro-batches of --micro-batch (4: mindrl keeps every compiled graph's activation memory resident, and
at 16 its six graphs need more than 22 GB), the rollout's log-probs as the old policy, no reward
whitening/normalisation. TRL: HF ``generate`` with a KV cache over all 16 prompts, its no-grad forwards on all
16 at once, fp32 (bf16 off; PPOTrainer never turns on gradient checkpointing). mindrl: graph mode, its
scoring passes in micro-batches of --micro-batch. Both on --threads threads.

    python bench/bench_ppo.py              # full size, 8 steps a side, ~6 minutes
    python bench/bench_ppo.py --quick      # tiny smoke run
    python bench/bench_ppo.py --no-trl     # mindrl alone

TRL moved PPOTrainer to ``trl.experimental.ppo`` in 0.26 (``trl.PPOTrainer`` stayed a while as an alias) and
dropped it in 1.13.0; the newest release that has it is 1.12.0, which the test extras pin (``bash scripts/setup.sh
--test``). The TRL side runs in a subprocess of --trl-python (default: this interpreter), so it can also come from
another environment. When that TRL has no PPO trainer the bench says so and exits before running anything.

Prints each side's median and best steady step time and e2e_tps (MindSpeed-RL's formula: (prompt + response
tokens) x responses / step time; the first 2 steps are warm-up and compile), where each side's step time goes,
and the ratio mindrl/TRL of e2e_tps. Run it on a quiet machine: TRL's OpenMP threads slow down many-fold when
another process takes a core.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import common

ROOT = common.ROOT
TRL_PPO_NEWEST = "1.12.0"  # trl 1.13.0 removed trl.experimental.ppo
KL_COEF = 0.05             # TRL PPOConfig's default
CLIP_VALUE = 0.2           # TRL PPOConfig's default cliprange_value
LR = 1e-6


def find_trl_ppo():
    """(PPOConfig, PPOTrainer) wherever the installed TRL keeps them; raises ImportError naming the version needed."""
    import trl
    tried = []
    for mod in ("trl.experimental.ppo", "trl"):
        try:
            m = __import__(mod, fromlist=["PPOTrainer", "PPOConfig"])
        except ImportError as err:
            tried.append(f"{mod} ({err})")
            continue
        trainer, config = getattr(m, "PPOTrainer", None), getattr(m, "PPOConfig", None)
        if trainer is None or config is None:
            tried.append(f"{mod} (no PPOTrainer)")
            continue
        import inspect
        if "value_model" not in inspect.signature(trainer.__init__).parameters:
            tried.append(f"{mod}.PPOTrainer (the pre-0.12 API without a value model)")
            continue
        return config, trainer
    raise ImportError(f"trl {trl.__version__} at {os.path.dirname(trl.__file__)} has no usable PPO trainer "
                      f"(looked in: {'; '.join(tried)}). trl.experimental.ppo was removed in trl 1.13.0: install "
                      f"trl=={TRL_PPO_NEWEST} (the newest with PPO) in a separate environment and pass "
                      f"--trl-python /path/to/that/python, or run with --no-trl")


def make_assets(d, a):
    """The shared assets, plus the reward model (= the value model's start): the policy's backbone and a seeded
    one-output score head, as an HF Qwen2ForSequenceClassification directory ``d/rm``."""
    import torch
    import transformers
    policy = common.make_assets(d, a)
    torch.manual_seed(1)
    rm_cfg = transformers.Qwen2Config(**{**policy.config.to_dict(), "num_labels": 1, "id2label": {0: "LABEL_0"},
                                         "label2id": {"LABEL_0": 0}})
    rm = transformers.Qwen2ForSequenceClassification(rm_cfg)
    missing, _ = rm.load_state_dict(policy.state_dict(), strict=False)
    assert missing == ["score.weight"], missing
    rm.save_pretrained(os.path.join(d, "rm"))


def run_mindrl(d, a):
    import yaml
    from mindrl.config import load_train_config
    common.preprocess_prompts(d, a)
    b, mb = a.batch, a.micro_batch
    doc = {
        "rl_config": {"adv_estimator": "gae", "gamma": 1.0, "lam": 0.95, "n_samples_per_prompt": 1,
                      "global_batch_size": b, "mini_batch_size": b, "micro_batch_size": mb, "ppo_epochs": 1,
                      "train_iters": a.steps, "clip_ratio": 0.2, "cliprange_value": CLIP_VALUE, "critic_warmup": 0,
                      "kl_coef": KL_COEF, "use_kl_in_reward": True, "kl_penalty": "kl", "advantage_whiten": True,
                      "dynamic_sampling": False},
        "reward_config": {"load": f"{d}/rm", "normalize": False, "micro_batch_size": mb},
        "actor_config": {"model": f"{d}/model", "load": f"{d}/model", "tokenizer_name_or_path": f"{d}/tok",
                         "lr": LR, "lr_warmup_iters": 0, "save": None, "save_interval": 0},
        "critic_config": {"lr": LR, "lr_warmup_iters": 0, "micro_batch_size": mb},
        "generate_config": {"max_prompt_length": a.prompt_len, "max_tokens": a.new_tokens,
                            "min_tokens": a.new_tokens, "temperature": 1.0},
        "data": {"path": f"{d}/prompts.mindrecord"},
        "eval": {"path": None},
        "logging": {"log_dir": f"{d}/mindrl_logs/<run_id>", "progress_bar": False, "tensorboard": False},
        "runtime": {"threads": a.threads, "seed": 0},
    }
    with open(f"{d}/ppo.yaml", "w") as fh:
        yaml.safe_dump(doc, fh)
    cfg = load_train_config(f"{d}/ppo.yaml", [])
    from mindrl.trainer import RLTrainer
    t0 = time.perf_counter()
    t = RLTrainer(cfg)
    startup = time.perf_counter() - t0
    times, split = [], []
    for _ in range(a.steps):
        s = time.perf_counter()
        m = t.train_step()
        times.append(time.perf_counter() - s)
        assert m["response_length/mean"] == a.new_tokens, m["response_length/mean"]
        split.append({k[7:]: round(v, 3) for k, v in m.items() if k.startswith("timing/") and k != "timing/all"})
    return times, split, {"startup_s": round(startup, 1)}


def run_trl(d, a):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    from datasets import Dataset
    PPOConfig, PPOTrainer = find_trl_ppo()
    ppo_mod = sys.modules[PPOTrainer.__module__]
    import trl

    # where the time goes: wrap the module-level helpers the trainer's loop calls
    spent = {}

    def timed(name, fn, pick=None):
        def wrapper(*args, **kw):
            s = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                key = pick() if pick else name
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - s
        return wrapper

    generate = timed("rollout", ppo_mod.batch_generation)

    def batch_generation(model, queries, *args, **kw):
        out = generate(model, queries, *args, **kw)
        responses = out[0][:, queries.shape[1]:]
        assert responses.shape[1] == a.new_tokens and not (responses == tok.pad_token_id).any(), \
            "a TRL response is shorter than --new-tokens"
        return out

    ppo_mod.batch_generation = batch_generation
    ppo_mod.get_reward = timed("value+reward_model", ppo_mod.get_reward)
    ppo_mod.forward = timed("", ppo_mod.forward,
                            lambda: "update_forward" if torch.is_grad_enabled() else "reference_model")

    tok = transformers.AutoTokenizer.from_pretrained(f"{d}/tok")
    rows = [json.loads(line)["prompt"] for line in open(f"{d}/prompts.jsonl")]
    ids = [tok(r, add_special_tokens=False)["input_ids"] for r in rows]
    assert all(len(x) == a.prompt_len for x in ids)
    policy = transformers.AutoModelForCausalLM.from_pretrained(f"{d}/model", dtype=torch.float32)
    # the pad token doubles as TRL's end-of-response marker (it truncates responses at the first one): keep it out
    # of the samples so every response is --new-tokens long, as on mindrl's side
    policy.generation_config.suppress_tokens = [tok.pad_token_id]
    rm = transformers.AutoModelForSequenceClassification.from_pretrained(f"{d}/rm", dtype=torch.float32)
    value = transformers.AutoModelForSequenceClassification.from_pretrained(f"{d}/rm", dtype=torch.float32)
    b, mb = a.batch, a.micro_batch
    args = PPOConfig(output_dir=f"{d}/trl_out", per_device_train_batch_size=mb, gradient_accumulation_steps=b // mb,
                     num_mini_batches=1, num_ppo_epochs=1, local_rollout_forward_batch_size=b,
                     total_episodes=a.steps * b, response_length=a.new_tokens, stop_token=None, temperature=1.0,
                     kl_coef=KL_COEF, kl_estimator="k1", cliprange=0.2, cliprange_value=CLIP_VALUE, gamma=1.0,
                     lam=0.95, whiten_rewards=False, missing_eos_penalty=None, learning_rate=LR,
                     lr_scheduler_type="constant", bf16=False, fp16=False,
                     num_sample_generations=0, logging_steps=1,
                     report_to=[], use_cpu=True, save_strategy="no", dataloader_num_workers=0, seed=0)
    marks, per_step = [], []

    class Timer(transformers.TrainerCallback):
        def on_train_begin(self, *args_, **kw):
            marks.append(time.perf_counter())

        def on_step_end(self, *args_, **kw):
            marks.append(time.perf_counter())
            per_step.append({k: round(v, 3) for k, v in spent.items()})
            spent.clear()

    t0 = time.perf_counter()
    trainer = PPOTrainer(args=args, processing_class=tok, model=policy, ref_model=None, reward_model=rm,
                         value_model=value, train_dataset=Dataset.from_dict({"input_ids": ids}),
                         eval_dataset=Dataset.from_dict({"input_ids": ids[:b]}), callbacks=[Timer()])
    startup = time.perf_counter() - t0
    orig_backward = trainer.accelerator.backward
    trainer.accelerator.backward = timed("update_backward", orig_backward)
    trainer.train()
    times = [y - x for x, y in zip(marks, marks[1:])]
    for t, s in zip(times, per_step):
        s["other"] = round(t - sum(s.values()), 3)
    # PPOConfig.gradient_checkpointing defaults to True, but PPOTrainer (its own __init__, not Trainer's) never
    # turns it on: report what the policy actually ran with
    return times, per_step, {"startup_s": round(startup, 1), "trl": trl.__version__,
                             "gradient_checkpointing": policy.is_gradient_checkpointing}


def side_args(a):
    args = []
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "prompt_len", "new_tokens", "steps",
              "threads", "batch", "micro_batch"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    return args


def check_trl(python):
    """None if the interpreter's TRL has a usable PPO trainer, else the reason."""
    probe = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import bench_ppo\n"
             "try:\n    bench_ppo.find_trl_ppo()\nexcept ImportError as e:\n    print('NOPPO', e)")
    env = dict(os.environ, TRL_EXPERIMENTAL_SILENCE="1")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env)
    if out.returncode:
        return f"{python} cannot import trl/torch/transformers: {out.stderr.strip().splitlines()[-1:]}"
    line = [x for x in out.stdout.splitlines() if x.startswith("NOPPO ")]
    return line[0][6:] if line else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_model_args(ap)
    ap.add_argument("--batch", type=int, default=16, help="prompts (= responses, n=1) per step")
    ap.set_defaults(micro_batch=4)  # --micro-batch (common): rows per forward/backward in the updates (both
    # sides) and per scoring pass (mindrl)
    ap.add_argument("--steps", type=int, default=8, help="steps per side; the first 2 are warm-up")
    ap.add_argument("--trl-python", default=sys.executable,
                    help=f"python whose TRL (<= {TRL_PPO_NEWEST}) runs TRL's side; default: this one")
    ap.add_argument("--no-trl", action="store_true", help="measure mindrl only")
    ap.add_argument("--check-trl", action="store_true",
                    help="only say whether --trl-python's TRL has a PPO trainer (exit status 0 if so)")
    a = ap.parse_args()
    common.apply_quick(a, steps=4)
    if a.quick:
        a.batch, a.micro_batch = 8, 4
    if a.side:
        times, split, info = (run_mindrl if a.side == "mindrl" else run_trl)(a.dir, a)
        print("RESULT " + json.dumps({"times": times, "split": split, "info": info}), flush=True)
        return
    if a.batch % a.micro_batch:
        raise SystemExit("--batch must be a multiple of --micro-batch")
    sides = ["mindrl"] + ([] if a.no_trl else ["trl"])
    if not a.no_trl or a.check_trl:
        why = check_trl(a.trl_python)
        if why:
            raise SystemExit(f"bench_ppo: TRL's PPO trainer is not available ({a.trl_python}): {why}")
        if a.check_trl:
            print(f"bench_ppo: {a.trl_python} has TRL's PPO trainer")
            return
    d = common.scratch_dir("bench_ppo_")
    make_assets(d, a)
    results = {side: common.run_side(sys.executable if side == "mindrl" else a.trl_python, __file__, side, d,
                                     side_args(a), a.threads) for side in sides}
    tokens = (a.prompt_len + a.new_tokens) * a.batch  # MindSpeed-RL e2e_tps numerator, n=1, world_size 1
    print(f"\nPPO step, model L{a.layers} H{a.hidden} GQA {a.heads}/{a.kv_heads} V{a.vocab} (policy, reference, "
          f"critic, reward model), {a.batch} prompts x 1 response, {a.prompt_len}+{a.new_tokens} tokens, "
          f"one update of {a.batch} in micro-batches of {a.micro_batch}, {a.threads} threads")
    print(f"{'side':8} {'median step (s)':>16} {'e2e_tps':>9} {'best step (s)':>14} {'best e2e_tps':>13}   steps (s)")
    med, best = {}, {}
    for side, r in results.items():
        steady = r["times"][2:] if len(r["times"]) > 2 else r["times"]
        med[side], best[side] = statistics.median(steady), min(steady)
        print(f"{side:8} {med[side]:16.3f} {tokens / med[side]:9.1f} {best[side]:14.3f} {tokens / best[side]:13.1f}   "
              f"{[round(t, 2) for t in r['times']]}")
    for side, r in results.items():
        steady = r["split"][2:] if len(r["split"]) > 2 else r["split"]
        keys = sorted({k for s in steady for k in s})
        split = {k: round(statistics.median(s.get(k, 0.0) for s in steady), 3) for k in keys}
        print(f"{side} split (median s): {split}  {r['info']}")
    if "trl" in med:
        # the best steps say what a quiet machine gives: TRL's OpenMP threads slow down many-fold when another
        # process takes a core, so a busy machine shows up as a gap between the median and the best
        print(f"ratio mindrl/trl e2e_tps (best steps): {best['trl'] / best['mindrl']:.2f}x")
        print(f"ratio mindrl/trl e2e_tps: {med['trl'] / med['mindrl']:.2f}x")


if __name__ == "__main__":
    main()
