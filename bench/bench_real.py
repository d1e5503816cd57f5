#!/usr/bin/env python
"""A real pretrained LLM: mindrl against TRL's GRPOTrainer and PPOTrainer on SmolLM2-135M-Instruct, one run.

The model is the real-model example's (examples/real/: SmolLM2-135M-Instruct converted from its GGUF file; make it
with `bash examples/real/run.sh --prepare`, or pass --model DIR), the prompts are the example's two-digit additions
("What is 47 + 38? Answer with the number only.") in the model's own chat template: mindrl renders them with
`prompt_type: hf`, TRL with the tokenizer's `apply_chat_template` (the same text). Both sides sample at temperature 1
with the end-of-turn token on, so responses end where the model stops (variable lengths, up to --new-tokens).

* **GRPO**: --grpo-prompts prompts x 8 samples per step, one AdamW update per step (lr 1e-5; the example trains at 2e-5), the
  example's rule reward `last_number` on both sides (TRL calls the same Python function), no KL, token-mean loss
  (TRL `loss_type='dapo'`), std-normalised group advantages, micro-batches of --micro-batch responses (TRL
  `per_device_train_batch_size`, accumulated over the step). TRL: HF `generate` with a KV cache, gradient
  checkpointing on (its default).
* **PPO**: --ppo-prompts prompts x 1 response per step, a reference model, a reward model and a critic that are
  one HF LlamaForSequenceClassification directory (the policy's backbone plus a seeded one-output score head; the
  critic starts from it, mindrl's default), the k1 KL penalty in the reward (0.05), GAE (gamma 1, lambda 0.95),
  whitened advantages, one epoch in one mini-batch accumulated over micro-batches of --micro-batch. TRL's
  PPOTrainer stops a response at the end-of-turn token (`stop_token='eos'`) and scores it there.

Padding: TRL pads a batch's prompts and completions to the longest of each; mindrl's training and scoring graphs pad
them to the next multiple of --pad-to-multiple-of (8 by default: `rl_config.pad_to_multiple_of`), or with 0 to the
next power of two (mindrl's default; prompts of 46-47 tokens then take 64 positions).

Each side runs in its own process (`bench/common.py run_side`) and reports: step times, e2e_tps (the step's real
prompt + response tokens over its time: the lengths vary, so each side counts its own tokens), the process's peak
RSS, start-up (build and load) and first-step time, and for mindrl every graph compile (MindSpore's
`_CellGraphExecutor.compile` answering "new graph"), by step: a compile after the first steps means a new shape.

    python bench/bench_real.py             # GRPO and PPO, 6 steps a side (the first 2 are warm-up)
    python bench/bench_real.py --quick     # a tiny random LLaMA with a tiny tokenizer: a smoke run (~3 min)
    python bench/bench_real.py --only grpo # one algorithm
    python bench/bench_real.py --only grpo --lora 16   # LoRA: mindrl full and LoRA against TRL + PEFT, one run
    python bench/bench_real.py --only grpo --profile  # mindrl's side only, its steady steps under MindSpore's profiler
    python bench/bench_real.py --recompute  # also mindrl recomputing every layer, as TRL's GRPO side checkpoints
    python bench/bench_real.py --only grpo --layer-graphs  # also mindrl's update one layer per graph call

With --lora R the policy trains rank-R adapters (alpha 2R) on every projection (`all-linear`): mindrl with
actor_config.lora_rank, TRL with PEFT's LoraConfig handed to its trainer (its reference is then the base with the
adapter off, as mindrl's). mindrl full fine-tuning runs in the same run, so the table shows LoRA against it too.

With --recompute a third side, mindrl_recompute, trains with every decoder layer recomputed in the backward
(actor_config's and critic_config's Megatron keys: recompute_granularity full, recompute_method uniform,
recompute_num_layers 1): the like-for-like row against TRL's GRPO side, whose gradient checkpointing is on (TRL's PPO
side does not checkpoint: PPOConfig keeps TrainingArguments' default, off).

With --layer-graphs another side, mindrl_layers, runs the trained networks' updates one decoder layer per graph
call (actor_config's and critic_config's layer_graphs, trainer/layer_graphs.py): each layer's forward is run again
in its backward, as with recompute; compile time and memory are what that side trades for update time. Its
forward-only passes (the reference's log-probs, the reward model's scores: reward_config.layer_graphs) run one
layer per graph call too.

Prints a table per algorithm and the ratios mindrl/TRL of median e2e_tps. TRL's PPOTrainer is in trl<=1.12.0 (the
test extras pin it); see bench/bench_ppo.py for --trl-python.
"""
import argparse
import json
import os
import statistics
import sys
import time

import common

ROOT = common.ROOT
sys.path.insert(0, os.path.join(ROOT, "examples", "real"))
MODEL = os.path.join(ROOT, "scratch", "real", "smollm2-hf")
LR = 1e-5
KL_COEF = 0.05
SAMPLES = 8


def peak_rss_gb() -> float:
    """This process's peak resident memory (VmHWM: getrusage's ru_maxrss would carry the parent's peak over exec)."""
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kb / 2 ** 20


# ------------------------------------------------------------------------------------------------ assets

def make_quick_model(d):
    """A tiny random LLaMA (2 layers, hidden 64) with a byte-level BPE tokenizer trained on the task's text and
    SmolLM2's chat template: the smoke run's stand-in for the real model, loadable by mindrl and transformers."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    import addition
    text = [addition.question(a, b) + f" {a + b}" for a, b in addition.all_problems()[::7]]
    text += ["You are a helpful AI assistant named SmolLM, trained by Hugging Face", "system user assistant"] * 50
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=320, special_tokens=special,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    with open(os.path.join(ROOT, "tests", "data", "chat_templates", "smollm2.jinja")) as fh:
        template = fh.read()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                                unk_token="<|endoftext|>", pad_token="<|im_end|>")
    fast.chat_template = template
    out = os.path.join(d, "model")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                                   rope_theta=100000.0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def make_rm(d, model_dir):
    """``d/rm``: the policy's backbone with a seeded one-output score head (PPO's reward model and critic start)."""
    import torch
    import transformers
    policy = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(1)
    cfg = transformers.AutoConfig.from_pretrained(model_dir, num_labels=1)
    rm = transformers.AutoModelForSequenceClassification.from_config(cfg)
    missing, _ = rm.load_state_dict({k: v for k, v in policy.state_dict().items() if k != "lm_head.weight"},
                                    strict=False)
    assert missing == ["score.weight"], missing
    rm.save_pretrained(os.path.join(d, "rm"))
    transformers.AutoTokenizer.from_pretrained(model_dir).save_pretrained(os.path.join(d, "rm"))


def make_prompts(d, model_dir, a):
    """``d/prompts.jsonl`` (the example's training problems) and ``d/prompts.mindrecord`` (rendered with
    prompt_type hf by `mindrl preprocess`, as the example does)."""
    import addition
    from mindrl.data.preprocess import cli_main
    addition.write_jsonl(os.path.join(d, "prompts.jsonl"), addition.training_problems(256, seed=7))
    rc = cli_main(["--config", os.path.join(ROOT, "examples", "real", "data.yaml"), f"input={d}/prompts.jsonl",
                   f"output_prefix={d}/prompts", f"tokenizer_name_or_path={model_dir}", "--overwrite",
                   f"max_prompt_length={a.max_prompt}"])
    assert rc == 0


def questions(d):
    return [json.loads(line)["prompt"] for line in open(os.path.join(d, "prompts.jsonl"))]


# ------------------------------------------------------------------------------------------------ mindrl sides

class CompileCounter:
    """Counts MindSpore graph compiles (a cell's graph compiled anew, not reused from the executor's cache), with
    the seconds each took, per training step."""

    def __init__(self):
        from mindspore.graph.api import _CellGraphExecutor
        from mindrl.runtime import compiled_anew
        self.step, self.events = 0, []
        orig = _CellGraphExecutor.compile
        counter = self

        def compile(executor, obj, *args, **kw):
            t0 = time.perf_counter()
            out = orig(executor, obj, *args, **kw)
            if compiled_anew(out):
                counter.events.append((counter.step, type(obj).__name__, round(time.perf_counter() - t0, 2)))
            return out

        _CellGraphExecutor.compile = compile

    def by_step(self):
        out = {}
        for step, _, secs in self.events:
            n, s = out.get(step, (0, 0.0))
            out[step] = (n + 1, round(s + secs, 2))
        return {str(k): v for k, v in sorted(out.items())}


def mindrl_overrides(d, a, model_dir):
    return {"actor_config.model": model_dir, "actor_config.load": model_dir,
            "actor_config.tokenizer_name_or_path": model_dir, "actor_config.lr": LR,
            "actor_config.lr_warmup_iters": 0, "actor_config.save": "null", "actor_config.save_interval": 0,
            "generate_config.max_tokens": a.new_tokens, "generate_config.max_prompt_length": a.max_prompt, "generate_config.temperature": 1.0,
            "data.path": f"{d}/prompts.mindrecord", "eval.path": "null", "eval.interval": 0,
            "logging.log_dir": f"{d}/mindrl_logs/<run_id>", "logging.progress_bar": "false",
            "logging.tensorboard": "false", "logging.log_max_throughput": "false", "runtime.threads": a.threads,
            "runtime.seed": 0, "rl_config.train_iters": a.steps, "rl_config.pad_to_multiple_of": a.pad_to_multiple_of}


def recompute_overrides(algo) -> dict:
    """Every decoder layer of the trained networks recomputed in the backward (Megatron's keys)."""
    return {f"{section}.{k}": v for section in ("actor_config",) + (("critic_config",) if algo == "ppo" else ())
            for k, v in (("recompute_granularity", "full"), ("recompute_method", "uniform"),
                         ("recompute_num_layers", 1))}


def layer_graphs_overrides(algo) -> dict:
    """Every network one decoder layer per graph call (actor_config's, critic_config's and reward_config's
    layer_graphs): the trained networks' updates, and every forward-only pass."""
    sections = ("actor_config", "critic_config", "reward_config") if algo == "ppo" else ("actor_config",)
    return {f"{section}.layer_graphs": "true" for section in sections}


def side_overrides(side: str, algo: str):
    """The config overrides of a mindrl side by its name's suffix."""
    if side.endswith("_recompute"):
        return recompute_overrides(algo)
    if side.endswith("_layers"):
        return layer_graphs_overrides(algo)
    return None


def run_mindrl(d, a, algo, model_dir, lora=False, extra=None):
    """``extra``: more config overrides (bench_longtail.py's rollout settings, --recompute's, --layer-graphs')."""
    from mindrl.config import load_train_config
    from mindrl.trainer import RLTrainer
    counter = CompileCounter()
    over = mindrl_overrides(d, a, model_dir)
    if lora:
        over.update({"actor_config.lora_rank": a.lora, "actor_config.lora_alpha": 2 * a.lora})
    if algo == "grpo":
        b = a.grpo_prompts
        over.update({"rl_config.global_batch_size": b, "rl_config.n_samples_per_prompt": SAMPLES,
                     "rl_config.mini_batch_size": b, "rl_config.micro_batch_size": a.micro_batch,
                     "rl_config.dynamic_sampling": "false", "rl_config.gen_batch_size": "null",
                     "rl_config.max_num_gen_batches": 4})  # TRL has no dynamic sampling: the example's is off
        config = os.path.join(ROOT, "examples", "real", "grpo.yaml")
    else:
        b = a.ppo_prompts
        over.update({"rl_config.global_batch_size": b, "rl_config.mini_batch_size": b,
                     "rl_config.micro_batch_size": a.micro_batch, "rl_config.kl_coef": KL_COEF,
                     "rl_config.use_kl_in_reward": "true", "rl_config.kl_penalty": "kl", "rl_config.cliprange_value": 0.2,
                     "rl_config.advantage_whiten": "true", "rl_config.verifier_function": "null",
                     "rl_config.verifier_weight": "null", "reward_config.load": f"{d}/rm",
                     "reward_config.normalize": "false", "critic_config.lr": LR, "critic_config.lr_warmup_iters": 0})
        config = os.path.join(ROOT, "examples", "real", "ppo.yaml")
    over.update(extra or {})
    cfg = load_train_config(config, [f"{k}={v}" for k, v in over.items()])
    t0 = time.perf_counter()
    t = RLTrainer(cfg)
    startup = time.perf_counter() - t0
    counter.step = 1
    rows = []
    profiler, prof_dir = None, os.path.join(d, f"profile_{algo}{'_lora' if lora else ''}")
    for step in range(1, a.steps + 1):
        counter.step = step
        # --profile: the steady steps (common.steady: the first two are warm-up); bench_longtail and memory_phases
        # call run_mindrl without the flag
        if getattr(a, "profile", False) and step == 3:
            import mindspore as ms
            profiler = ms.Profiler(output_path=prof_dir)
        s = time.perf_counter()
        m = t.train_step()
        secs = time.perf_counter() - s
        n = b * (SAMPLES if algo == "grpo" else 1)
        tokens = (m["prompt_length/mean"] + m["response_length/mean"]) * n
        rows.append({"time": secs, "tokens": tokens, "response_mean": m["response_length/mean"],
                     "response_max": m["response_length/max"], "stale": m.get("rollout/stale_fraction", 0.0),
                     "work": {k[8:]: m[k] for k in ("rollout/prefill_tokens", "rollout/decode_steps",
                                                     "rollout/decoded_rows", "rollout/rounds") if k in m},
                     "split": {k[7:]: v for k, v in m.items() if k.startswith("timing/") and k != "timing/all"}})
    res = {"rows": rows, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb(),
           "compiles": counter.by_step(), "compile_events": counter.events,
           # decoder layers of the trained networks marked for recompute (MindSpore's Cell.recompute), by role
           "recomputed": {r.spec.name: [r.net.model.n_recompute, r.model_config.num_layers]
                          for r in (t.policy, t.critic) if r is not None}}
    if profiler is not None:
        from profile_grpo import read_profile
        profiler.analyse()
        # the tiny --quick model's kernels take alike microseconds: 15 rows would be a draw among them
        res["profile"], res["profiled_steps"] = read_profile(prof_dir, 30 if a.quick else 15), a.steps - 2
    return res


# ------------------------------------------------------------------------------------------------ TRL sides

def last_number_reward(prompts, completions, labels, **kw):
    """The example's reward for TRL: mindrl's last_number verifier on each completion's text."""
    from mindrl.rewards.verifiers import last_number_reward as rule
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [rule(t, lab) for t, lab in zip(texts, labels)]


def peft_config(a):
    from peft import LoraConfig
    return LoraConfig(r=a.lora, lora_alpha=2 * a.lora, target_modules="all-linear", lora_dropout=0.0)


def run_trl_grpo(d, a, model_dir, lora=False):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    rows = [json.loads(line) for line in open(f"{d}/prompts.jsonl")]
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": r["prompt"]}] for r in rows],
                              "labels": [r["labels"] for r in rows]})
    b = a.grpo_prompts
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = GRPOConfig(output_dir=f"{d}/trl_out", per_device_train_batch_size=a.micro_batch,
                      gradient_accumulation_steps=b * SAMPLES // a.micro_batch, num_generations=SAMPLES,
                      max_completion_length=a.new_tokens, num_iterations=1, beta=0.0, learning_rate=LR,
                      lr_scheduler_type="constant", warmup_steps=0, temperature=1.0, use_vllm=False,
                      gradient_checkpointing=True, max_steps=a.steps, logging_steps=1, report_to=[], use_cpu=True,
                      save_strategy="no", loss_type="dapo", scale_rewards="group", dataloader_num_workers=0, seed=0)
    out = []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, args_, state, *rest, **kw):
            self.t, self.seen = time.perf_counter(), state.num_input_tokens_seen

        def on_step_end(self, args_, state, *rest, **kw):
            out.append({"time": time.perf_counter() - self.t, "tokens": state.num_input_tokens_seen - self.seen})

    trainer = GRPOTrainer(model=model, reward_funcs=[last_number_reward], args=args, processing_class=tok,
                          train_dataset=data, callbacks=[Timer()], peft_config=peft_config(a) if lora else None)
    startup = time.perf_counter() - t0
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    for r, length in zip(out, lengths):
        r["response_mean"] = length
    return {"rows": out, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb()}


def run_trl_ppo(d, a, model_dir, lora=False):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    from datasets import Dataset
    from bench_ppo import find_trl_ppo
    PPOConfig, PPOTrainer = find_trl_ppo()
    ppo_mod = sys.modules[PPOTrainer.__module__]
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                   return_dict=False) for q in questions(d)]
    counted = []
    generate = ppo_mod.batch_generation

    def batch_generation(model, queries, *args, **kw):  # count each response's tokens up to its stop token
        res = generate(model, queries, *args, **kw)
        resp = res[0][:, queries.shape[1]:]
        for row in resp.tolist():
            counted.append(row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row))
        return res

    ppo_mod.batch_generation = batch_generation
    policy = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rm = transformers.AutoModelForSequenceClassification.from_pretrained(f"{d}/rm", dtype=torch.float32)
    value = transformers.AutoModelForSequenceClassification.from_pretrained(f"{d}/rm", dtype=torch.float32)
    b, mb = a.ppo_prompts, a.micro_batch
    args = PPOConfig(output_dir=f"{d}/trl_out", per_device_train_batch_size=mb, gradient_accumulation_steps=b // mb,
                     num_mini_batches=1, num_ppo_epochs=1, local_rollout_forward_batch_size=b,
                     total_episodes=a.steps * b, response_length=a.new_tokens, stop_token="eos", temperature=1.0,
                     kl_coef=KL_COEF, kl_estimator="k1", cliprange=0.2, cliprange_value=0.2, gamma=1.0, lam=0.95,
                     whiten_rewards=False, missing_eos_penalty=None, learning_rate=LR, lr_scheduler_type="constant",
                     bf16=False, fp16=False, num_sample_generations=0, logging_steps=1, report_to=[], use_cpu=True,
                     save_strategy="no", dataloader_num_workers=0, seed=0)
    marks, per_step_tokens = [], []

    class Timer(transformers.TrainerCallback):
        def on_train_begin(self, *args_, **kw):
            marks.append(time.perf_counter())

        def on_step_end(self, *args_, **kw):
            marks.append(time.perf_counter())
            per_step_tokens.append(list(counted))
            counted.clear()

    trainer = PPOTrainer(args=args, processing_class=tok, model=policy, ref_model=None, reward_model=rm,
                         value_model=value, train_dataset=Dataset.from_dict({"input_ids": ids}),
                         eval_dataset=Dataset.from_dict({"input_ids": ids[:b]}), callbacks=[Timer()],
                         peft_config=peft_config(a) if lora else None)
    startup = time.perf_counter() - t0
    batches = [ids[i:i + b] for i in range(0, len(ids), b)]  # TRL shuffles: count prompts at the mean length
    prompt_mean = statistics.mean(len(x) for x in ids)
    del batches
    trainer.train()
    rows = [{"time": y - x, "tokens": prompt_mean * len(n) + sum(n), "response_mean": statistics.mean(n)}
            for x, y, n in zip(marks, marks[1:], per_step_tokens)]
    return {"rows": rows, "startup_s": round(startup, 1), "peak_rss_gb": peak_rss_gb()}


# ------------------------------------------------------------------------------------------------ main

def side_args(a):
    args = []
    for k in ("new_tokens", "steps", "threads", "micro_batch", "grpo_prompts", "ppo_prompts", "max_prompt", "lora",
              "pad_to_multiple_of"):
        args += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    return args + (["--quick"] if a.quick else []) + (["--profile"] if a.profile else []) + ["--model", a.model]


def report(algo, results, a, params):
    what = (f"{a.grpo_prompts} prompts x {SAMPLES} samples" if algo == "grpo"
            else f"{a.ppo_prompts} prompts x 1 response (reference, reward model, critic)")
    print(f"\n{algo.upper()} on {os.path.basename(a.model.rstrip('/'))} ({params / 1e6:.1f}M), {what}, up to "
          f"{a.new_tokens} new tokens (stop at end of turn), micro-batch {a.micro_batch}, mindrl's widths padded to "
          f"{f'a multiple of {a.pad_to_multiple_of}' if a.pad_to_multiple_of else 'a power of two'}, {a.threads} threads")
    print(f"{'side':16} {'start-up':>9} {'step 1':>7} {'median step':>12} {'e2e_tps':>8} {'peak RSS':>9}   "
          f"steps (s) / mean response tokens")
    med = {}
    for side, r in results.items():
        rows = r["rows"]
        med[side] = common.median_tps(rows)
        print(f"{side:16} {r['startup_s']:8.1f}s {rows[0]['time']:6.1f}s "
              f"{statistics.median(x['time'] for x in common.steady(rows)):11.2f}s "
              f"{med[side]:8.1f} {r['peak_rss_gb']:7.2f}GB   {[round(x['time'], 1) for x in rows]} / "
              f"{[round(x.get('response_mean', 0), 1) for x in rows]}")
    m = results["mindrl"]
    if m["rows"][-1].get("split"):
        print("mindrl split (median of steady steps): " + str({
            k: round(statistics.median(x["split"].get(k, 0.0) for x in common.steady(m["rows"])), 3)
            for k in m["rows"][-1]["split"] if any(x["split"].get(k, 0.0) > 0 for x in m["rows"])}))
    later = {k: v for k, v in m["compiles"].items() if int(k) > 2}
    print(f"mindrl graph compiles by step (count, seconds): {m['compiles']}; after step 2: "
          f"{sum(v[0] for v in later.values())} compiles" + (f" {later}" if later else ""))
    for side, r in results.items():
        if not side.startswith("mindrl"):
            continue
        first = {}
        for step, graph, secs in r.get("compile_events", []):
            if step == 1:  # a class compiled twice (PPO's actor and critic updates) is named twice: "AccumulateGrad 2"
                n = sum(1 for name in first if name.split(" ")[0] == graph)
                first[f"{graph} {n + 1}" if n else graph] = round(secs, 1)
        print(f"{side} step 1 compiles by graph (seconds): {first}")
    for side, r in results.items():
        if side.startswith("mindrl") and any(n for n, _ in r.get("recomputed", {}).values()):
            print(f"{side} recomputes in the backward: " + ", ".join(
                f"{role} {n} of {layers} layers" for role, (n, layers) in r["recomputed"].items()))
    for side, r in results.items():
        if "profile" in r:  # --profile
            from profile_grpo import print_profile
            print(f"{side} under MindSpore's profiler, {r['profiled_steps']} steady steps (the profiler slows them: "
                  f"their times above are not the side's speed):")
            print_profile(r["profile"], r["profiled_steps"])
    for ours, peer in (("mindrl", "trl"), ("mindrl_recompute", "trl"), ("mindrl_recompute", "mindrl"),
                       ("mindrl_layers", "trl"), ("mindrl_layers", "mindrl"), ("mindrl_lora", "trl_lora"),
                       ("mindrl_lora", "mindrl")):
        if ours in med and peer in med:
            print(f"ratio {ours}/{peer} {algo} e2e_tps: {med[ours] / med[peer]:.2f}x; peak RSS {ours}/{peer}: "
                  f"{results[ours]['peak_rss_gb'] / results[peer]['peak_rss_gb']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL, help="the HF directory of the model (default: the example's)")
    ap.add_argument("--only", choices=["grpo", "ppo"], help="one algorithm")
    ap.add_argument("--no-trl", action="store_true", help="mindrl's sides only")
    ap.add_argument("--steps", type=int, default=6, help="steps per side; the first 2 are warm-up")
    ap.add_argument("--new-tokens", type=int, default=24, help="at most this many new tokens per response")
    ap.add_argument("--grpo-prompts", type=int, default=8, help="GRPO prompts per step (x 8 samples)")
    ap.add_argument("--ppo-prompts", type=int, default=16, help="PPO prompts (= responses) per step")
    ap.add_argument("--micro-batch", type=int, default=8, help="responses per forward/backward, both sides")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-prompt", type=int, default=64, help="prompt tokens at most (the example's 64)")
    ap.add_argument("--pad-to-multiple-of", type=int, default=8,
                    help="mindrl's rl_config.pad_to_multiple_of (0: powers of two); TRL pads to the longest")
    ap.add_argument("--quick", action="store_true", help="a tiny random LLaMA and tokenizer, 3 steps: a smoke run")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank of the policy (0: full fine-tuning only); with a "
                    "rank: mindrl full and LoRA, and TRL with PEFT")
    ap.add_argument("--profile", action="store_true",
                    help="mindrl's sides only, their steady steps under MindSpore's profiler: kernel time by graph "
                         "part, operator type and scope")
    ap.add_argument("--recompute", action="store_true",
                    help="also mindrl with every layer recomputed in the backward (mindrl_recompute)")
    ap.add_argument("--layer-graphs", action="store_true",
                    help="also mindrl with every network one decoder layer per graph call (mindrl_layers: "
                         "actor_config's, critic_config's and reward_config's layer_graphs)")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick and not a.side:
        a.steps, a.new_tokens, a.grpo_prompts, a.ppo_prompts, a.micro_batch, a.max_prompt = 3, 8, 2, 4, 4, 128
    if a.side:
        algo, side = a.side.split("-")
        lora = side.endswith("_lora")
        if side.startswith("mindrl"):
            res = run_mindrl(a.dir, a, algo, a.model, lora, side_overrides(side, algo))
        else:
            res = (run_trl_grpo if algo == "grpo" else run_trl_ppo)(a.dir, a, a.model, lora)
        print("RESULT " + json.dumps(res), flush=True)
        return
    d = common.scratch_dir("bench_real_")
    if a.quick:
        a.model = make_quick_model(d)
    elif not os.path.exists(os.path.join(a.model, "config.json")):
        raise SystemExit(f"{a.model}: no model there; run `bash examples/real/run.sh --prepare` first (it converts "
                         f"SmolLM2-135M-Instruct into scratch/real/smollm2-hf), or pass --model DIR")
    algos = [a.only] if a.only else ["grpo", "ppo"]
    a.no_trl = a.no_trl or a.profile
    sides = ["mindrl"] + ([] if a.no_trl else ["trl"])
    if a.lora:  # LoRA against full fine-tuning and against TRL + PEFT (TRL's full fine-tuning is left out)
        sides = ["mindrl", "mindrl_lora"] + ([] if a.no_trl else ["trl_lora"])
    if a.recompute:
        sides.insert(1, "mindrl_recompute")
    if a.layer_graphs:
        sides.insert(1, "mindrl_layers")
    if "ppo" in algos and not a.no_trl:
        from bench_ppo import check_trl
        why = check_trl(sys.executable)
        if why:
            raise SystemExit(f"bench_real: TRL's PPO trainer is not available: {why}; use --only grpo or --no-trl")
    make_prompts(d, a.model, a)
    if "ppo" in algos:
        make_rm(d, a.model)
    import safetensors
    params = 0
    with safetensors.safe_open(os.path.join(a.model, "model.safetensors"), "np") as fh:
        for k in fh.keys():
            params += int(__import__("numpy").prod(fh.get_slice(k).get_shape()))
    for algo in algos:
        results = {side: common.run_side(sys.executable, __file__, f"{algo}-{side}", d, side_args(a), a.threads)
                   for side in sides}
        report(algo, results, a, params)


if __name__ == "__main__":
    main()
