"""What the benchmarks against TRL share: the model and prompt options, the random-init assets both sides train
on, and running one side in its own process (so each side's threads and imports are its own)."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def steady(rows: list) -> list:
    """A side's steps after the first two (warm-up: compiling, then the allocator settling); all when that is all."""
    return rows[2:] if len(rows) > 2 else rows


def median_tps(rows: list) -> float:
    """Median over the steady steps of tokens / seconds (each row has "tokens" and "time")."""
    import statistics
    return statistics.median(x["tokens"] / x["time"] for x in steady(rows))


def scratch_dir(prefix: str) -> str:
    """A temporary directory for one benchmark run (models, data, the sides' logs), removed when the process
    exits: the 0.5B case of bench_scale.py alone leaves 1.9 GB otherwise."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d

def add_model_args(ap):
    """The bench model (default: bench_grpo.py's 31M Qwen2: 8 layers, hidden 512, GQA 8/2, vocab 8192, ffn 1408)."""
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1408)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tied", action="store_true", help="tie the LM head to the embedding (Qwen2.5-0.5B)")
    ap.add_argument("--micro-batch", type=int, default=16, help="responses per forward/backward (bench_grpo: mindrl; bench_ppo: both sides; default 16, bench_ppo 4)")
    ap.add_argument("--quick", action="store_true", help="tiny model and lengths: a smoke run")
    ap.add_argument("--side", choices=["mindrl", "trl"], help=__import__("argparse").SUPPRESS)
    ap.add_argument("--dir", help=__import__("argparse").SUPPRESS)


def parse_model_args(argv):
    """The model options of ``argv`` (other flags ignored), as the benchmarks' sides read them."""
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    add_model_args(ap)
    return ap.parse_known_args(argv)[0]


def apply_quick(a, steps):
    if a.quick:
        a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab = 2, 64, 4, 2, 128, 512
        a.prompt_len, a.new_tokens, a.steps = 16, 16, steps


def make_assets(d, a):
    """``d/tok`` (a word-level HF tokenizer, t0 = pad, the last id = eos), ``d/model`` (a random-init Qwen2, seed 0),
    ``d/prompts.jsonl`` (256 prompts of exactly --prompt-len tokens, none of them pad or eos). Returns the model."""
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
                                   num_key_value_heads=a.kv_heads,
                                   max_position_embeddings=max(1024, a.prompt_len + a.new_tokens),
                                   tie_word_embeddings=a.tied, eos_token_id=a.vocab - 1, pad_token_id=0)
    model = transformers.Qwen2ForCausalLM(cfg)
    model.save_pretrained(os.path.join(d, "model"))
    rng = np.random.default_rng(0)
    rows = [" ".join(f"t{x}" for x in rng.integers(1, a.vocab - 1, size=a.prompt_len)) for _ in range(256)]
    with open(os.path.join(d, "prompts.jsonl"), "w") as fh:
        for r in rows:
            fh.write(json.dumps({"prompt": r, "labels": "0"}) + "\n")
    return model


def preprocess_prompts(d, a):
    """The prompts as mindrl reads them: ``d/prompts.mindrecord``."""
    from mindrl.data.preprocess import cli_main
    rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml"),
                   f"input={d}/prompts.jsonl", f"output_prefix={d}/prompts", "tokenizer_type=HuggingFaceTokenizer",
                   f"tokenizer_name_or_path={d}/tok", f"max_prompt_length={a.prompt_len}", "--overwrite"])
    assert rc == 0


def run_side(python, script, side, d, args, threads):
    """Run ``script --side SIDE --dir D ARGS`` with ``python``; return the JSON its ``RESULT`` line carries."""
    env = dict(os.environ, GLOG_v="3", OMP_NUM_THREADS=str(threads), TRL_EXPERIMENTAL_SILENCE="1",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([python, os.path.abspath(script), "--side", side, "--dir", d] + list(args),
                         capture_output=True, text=True, env=env)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not line:
        print(out.stdout[-3000:], out.stderr[-5000:], file=sys.stderr)
        raise SystemExit(f"{side} side failed")
    return json.loads(line[0][7:])


def machine_limits(seconds: float = 3.0) -> dict:
    """This machine's speed limits, measured now: sgemm GFLOP/s (numpy's BLAS on 2048^3, with the threads
    OMP_NUM_THREADS allows: run_side sets it to --threads) and memory bandwidth in GB/s (bytes read plus bytes
    written by a copy of 256 MiB float32 arrays). A step cannot beat them: decode reads every weight once per
    token, an update does about 6 x parameters x tokens FLOPs."""
    import time
    import numpy as np
    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = a.copy()
    a @ b  # warm up
    flops, t0, runs = 2 * n ** 3, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds / 2:
        a @ b
        runs += 1
    gflops = flops * runs / (time.perf_counter() - t0) / 1e9
    src = np.ones(64 * 2 ** 20, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t0, runs = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds / 2:
        np.copyto(dst, src)
        runs += 1
    gbps = 2 * src.nbytes * runs / (time.perf_counter() - t0) / 1e9  # read + write
    return {"sgemm_gflops": gflops, "copy_gbps": gbps}


def step_floor(params: int, rows: int, prompt_len: int, new_tokens: int, limits: dict, reference: bool = False) -> dict:
    """The fastest a GRPO step of ``rows`` sequences could run here: decode reads the fp32 weights once per new
    token (memory-bound), the update does 6 x params x tokens FLOPs (forward and backward), a reference model 2 x.
    Prefill and the optimizer are left out, so the floor is optimistic."""
    tokens = rows * (prompt_len + new_tokens)
    decode = 4 * params * new_tokens / (limits["copy_gbps"] * 1e9)
    update = 6 * params * tokens / (limits["sgemm_gflops"] * 1e9)
    ref = 2 * params * tokens / (limits["sgemm_gflops"] * 1e9) if reference else 0.0
    return {"decode_s": decode, "update_s": update, "reference_s": ref, "step_s": decode + update + ref}
