"""A working directory laid out as MindSpeed-RL's users have theirs, for the peer config files in peer_configs/.

``configs/`` holds the training yamls with ``configs/model/`` and ``configs/datasets/`` beside them (MindSpeed-RL's
layout); the model directories the yamls name (``./Qwen2.5-7B``, ...) hold random weights of the tiny sizes of the
model files and a small Hugging Face BPE tokenizer; ``dataset/`` holds raw DeepScaleR-, DAPO-Math-17k- and
ORZ-shaped rows.
"""
import json
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "tests", "peer_configs")

# model directory named in a yaml -> the model file (MindSpeed-RL's name) whose shapes it holds
MODEL_DIRS = {"Qwen2.5-7B": "qwen25_7b", "Qwen2.5-7B-Instruct": "qwen25_7b", "Qwen2.5-32B": "qwen25_32b",
              "Qwen3-8B": "qwen3_8b"}
PROBLEMS = [("What is 2+3?", "5"), ("Compute 7*6.", "42"), ("What is 10-4?", "6"), ("Half of 18?", "9"),
            ("What is 3^2?", "9"), ("Sum of 11 and 12?", "23"), ("What is 100/4?", "25"), ("Compute 8+8.", "16")]


def make_tokenizer(directory: str) -> None:
    """A 192-piece BPE tokenizer.json with ChatML's special tokens (its eos <|im_end|>), as Qwen's directories have."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    corpus = [f"{q} Answer: {a} \\boxed{{{a}}} <think> </think> <answer> </answer> system user assistant"
              for q, a in PROBLEMS] * 4
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=192 + len(alphabet), special_tokens=specials, initial_alphabet=[])
    tok.train_from_iterator(corpus, trainer)
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as fh:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": "<unk>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, fh)


def make_model_dir(directory: str, model_file: str, seed: int = 3) -> None:
    """Random weights of the model file's shapes (its padded vocabulary holds the tokenizer's ids)."""
    from mindrl.models.config import load_model_config
    from mindrl.models.lm import PretrainedLM, build_network
    cfg = load_model_config(model_file).replace(eos_token_id=3, pad_token_id=1)
    PretrainedLM(build_network(cfg, seed=seed), cfg).save_pretrained(directory)


def make_peer_workdir(d) -> str:
    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.runtime import setup_context
    setup_context("graph")
    d = str(d)
    configs = os.path.join(d, "configs")
    shutil.copytree(os.path.join(PEER, "mindspeed_rl"), configs)
    tok_dir = os.path.join(d, "tokenizer")
    make_tokenizer(tok_dir)
    assert load_tokenizer(tok_dir).vocab_size <= 192  # the tiny model files' padded_vocab_size
    for name, model in MODEL_DIRS.items():
        target = os.path.join(d, name)
        make_model_dir(target, os.path.join(configs, "model", f"{model}.yaml"))
        for f in os.listdir(tok_dir):
            shutil.copy(os.path.join(tok_dir, f), target)
    data = os.path.join(d, "dataset")
    os.makedirs(os.path.join(data, "deepscaler"))
    os.makedirs(os.path.join(data, "math_17k"))
    rows = PROBLEMS * 4
    with open(os.path.join(data, "deepscaler.json"), "w") as fh:  # DeepScaleR: one JSON array
        json.dump([{"problem": q, "answer": a, "solution": f"The answer is {a}."} for q, a in rows], fh)
    with open(os.path.join(data, "orz.json"), "w") as fh:
        json.dump([{"problem": q, "answer": a} for q, a in rows], fh)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({  # DAPO-Math-17k: the prompt as chat messages, the answer inside reward_model
        "data_source": ["math_dapo"] * len(rows),
        "prompt": [[{"content": f"{q}\n\nRemember to put your answer on its own line after \"Answer:\".",
                     "role": "user"}] for q, _ in rows],
        "ability": ["MATH"] * len(rows),
        "reward_model": [{"ground_truth": a, "style": "rule-lighteval/MATH_v2"} for _, a in rows],
        "extra_info": [{"index": str(i)} for i in range(len(rows))]}), os.path.join(data, "dapo-math-17k.parquet"))
    return d
