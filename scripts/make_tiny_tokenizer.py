#!/usr/bin/env python
"""Train the tiny sentencepiece tokenizer shipped in examples/tiny/tokenizer/.

It is trained on generated text of the demo task (``a+b-c`` with zero-padded two-digit numbers,
e.g. ``53+93-01=`` -> ``145``) plus a little English and chat markup. ``split_digits`` keeps every
digit its own token, because a subword vocabulary that merges digits differently in different
contexts makes arithmetic much harder to learn. The output is deterministic: fixed seed, one
training thread, and the model bytes contain no file paths.

    python scripts/make_tiny_tokenizer.py                      # writes examples/tiny/tokenizer/
    python scripts/make_tiny_tokenizer.py --check              # verify the shipped file is up to date
    python scripts/make_tiny_tokenizer.py --write-data dataset/tiny_math/train.jsonl --rows 20000
"""
import argparse
import io
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "examples", "tiny", "tokenizer")

# Atomic tokens. "\n" is included so chat templates round-trip (we disable whitespace folding);
# the operators are atomic so a learned merge such as "=-" (from negative answers) cannot appear.
OPERATORS = ["+", "-", "="]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<answer>", "</answer>"]
NEWLINE = "\n"
# Tokens a decode(skip_special_tokens=True) drops; the tags stay, like Qwen3 keeps <think>.
SKIPPED = {"<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"}
VOCAB_SIZE = 192
SEED = 1234

ENGLISH = [
    "You are a helpful assistant.",
    "Compute the value of the expression and give only the number.",
    "Think step by step, then write the final answer.",
    "The answer is",
    "Add the first two numbers, then subtract the third one.",
    "What is the result of this calculation?",
    "Please reason carefully before you answer.",
    "The quick brown fox jumps over the lazy dog.",
    "A small model can learn simple arithmetic from examples.",
    "The reward is one when the answer is correct and zero otherwise.",
    "Here is a question from the user, followed by the assistant's reply.",
    "Each number has two digits, and leading zeros are kept.",
]


def make_problem(rng: random.Random) -> tuple[str, str]:
    """One demo problem: ('53+93-01=', '145')."""
    a, b, c = rng.randrange(100), rng.randrange(100), rng.randrange(100)
    return f"{a:02d}+{b:02d}-{c:02d}=", str(a + b - c)


def training_lines(rng: random.Random, n_problems: int = 4000) -> list[str]:
    lines = []
    for i in range(n_problems):
        prompt, answer = make_problem(rng)
        if i % 4 == 0:   # some problems in chat form, so the markup sits in realistic contexts
            lines.append(f"<|im_start|>user{NEWLINE}{prompt}<|im_end|>{NEWLINE}<|im_start|>assistant{NEWLINE}"
                         f"<think>{prompt}{answer}</think><answer>{answer}</answer><|im_end|>")
        else:
            lines.append(prompt + answer + "<|endoftext|>")
    for _ in range(20):  # repeat the English so its words win merges over rare digit contexts
        lines.extend(ENGLISH)
    return lines


def train_model(vocab_size: int = VOCAB_SIZE, seed: int = SEED) -> bytes:
    import sentencepiece as spm

    lines = training_lines(random.Random(seed))
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf,
        model_type="bpe", vocab_size=vocab_size, character_coverage=1.0,
        split_digits=True, user_defined_symbols=SPECIALS + [NEWLINE] + OPERATORS,
        # keep text exactly as written: no NFKC, no whitespace folding, no leading "▁"
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=False,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece="<pad>", unk_piece="<unk>",
        num_threads=1, minloglevel=2,
    )
    return buf.getvalue()


def tokenizer_config(model_bytes: bytes) -> dict:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    added = {}
    for piece in ["<pad>"] + SPECIALS + [NEWLINE]:
        added[str(sp.piece_to_id(piece))] = {"content": piece, "special": piece in SKIPPED}
    return {
        "tokenizer_class": "SentencePiece",
        "eos_token": "<|endoftext|>",
        "pad_token": "<pad>",
        "bos_token": None,
        "unk_token": "<unk>",
        "added_tokens_decoder": added,
        "model_max_length": 512,
    }


def verify(model_bytes: bytes) -> None:
    """The demo relies on these: fail loudly if a retrain breaks them."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    for ch in "0123456789+-=":
        ids = sp.encode(ch)
        if len(ids) != 1 or sp.id_to_piece(ids[0]) != ch:
            raise SystemExit(f"{ch!r} does not encode to a single token: {[sp.id_to_piece(i) for i in ids]}")
    for token in SPECIALS + [NEWLINE]:
        if sp.encode(token) != [sp.piece_to_id(token)]:
            raise SystemExit(f"{token!r} is not atomic")
    for sample in ("53+93-01=145", "07+02-55=-46"):
        if [sp.id_to_piece(i) for i in sp.encode(sample)] != list(sample):
            raise SystemExit(f"{sample!r} does not split into characters")


def write_data(path: str, rows: int, seed: int) -> None:
    """Demo prompts for `mindrl preprocess` (tiny_math.yaml): {"prompt": "53+93-01=", "labels": "145"}."""
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(rows):
            prompt, answer = make_problem(rng)
            f.write(json.dumps({"prompt": prompt, "labels": answer}) + "\n")
    print(f"wrote {rows} rows to {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: examples/tiny/tokenizer)")
    p.add_argument("--check", action="store_true", help="retrain in memory and compare with the files in --out")
    p.add_argument("--write-data", metavar="PATH", help="also write demo prompts as jsonl to PATH")
    p.add_argument("--rows", type=int, default=20000, help="rows for --write-data")
    p.add_argument("--data-seed", type=int, default=0, help="seed for --write-data")
    args = p.parse_args(argv)

    model = train_model()
    verify(model)
    config = json.dumps(tokenizer_config(model), indent=2, ensure_ascii=False) + "\n"
    model_path = os.path.join(args.out, "tokenizer.model")
    config_path = os.path.join(args.out, "tokenizer_config.json")
    if args.check:
        for path, data in ((model_path, model), (config_path, config.encode())):
            with open(path, "rb") as f:
                if f.read() != data:
                    print(f"{path} differs from a fresh training run", file=sys.stderr)
                    return 1
        print("tokenizer files are up to date")
    else:
        os.makedirs(args.out, exist_ok=True)
        with open(model_path, "wb") as f:
            f.write(model)
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(config)
        print(f"wrote {model_path} ({len(model)} bytes) and {config_path}")
    if args.write_data:
        write_data(args.write_data, args.rows, args.data_seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
