"""The demo task: ``a+b-c`` with zero-padded two-digit numbers, e.g. ``53+93-01=`` -> ``145``.

Problem ids are ``a*10000 + b*100 + c`` (one million problems). The held-out set is fixed: the 1000
ids with ``id % 1000 == 7``. Supervised warm-up and GRPO only ever draw from the other ids, so the
held-out accuracy measures generalisation, never memorisation.
"""
import json
import random

HELDOUT_REMAINDER = 7


def problem(pid: int):
    a, b, c = pid // 10000, pid // 100 % 100, pid % 100
    return f"{a:02d}+{b:02d}-{c:02d}=", str(a + b - c)


def heldout_ids():
    return [pid for pid in range(1_000_000) if pid % 1000 == HELDOUT_REMAINDER]


def training_ids(count: int, seed: int):
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        pid = rng.randrange(1_000_000)
        if pid % 1000 != HELDOUT_REMAINDER:
            out.append(pid)
    return out


def write_jsonl(path: str, ids):
    with open(path, "w") as fh:
        for pid in ids:
            prompt, answer = problem(pid)
            fh.write(json.dumps({"prompt": prompt, "labels": answer}) + "\n")


if __name__ == "__main__":
    import argparse
    import os
    ap = argparse.ArgumentParser(description="write the tiny-math GRPO prompts and the held-out set as jsonl")
    ap.add_argument("--out", default="dataset/tiny_math")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    write_jsonl(os.path.join(args.out, "train.jsonl"), training_ids(args.rows, args.seed))
    write_jsonl(os.path.join(args.out, "heldout.jsonl"), heldout_ids())
    print(f"wrote {args.rows} training prompts and 1000 held-out prompts to {args.out}")
