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


def wrong_answer(pid: int, rng: random.Random) -> str:
    """A plausible mistake for problem ``pid``, never the right answer: the rejected side of a synthetic pair.
    Half the time only the units digit is wrong (uniformly another digit; the policy's commonest mistake is a units
    digit one too high); otherwise a wrong tens or hundreds digit, an answer off by 10, 20 or 100, a wrong sign or
    length. The reward model needs both halves: the coarse mistakes are what it learns to see first, and checking
    the units digit comes after them (pairs that differ only in the units digit, or only the policy's own
    mistakes, taught the demo's small reward model next to nothing in the same number of steps)."""
    right = problem(pid)[1]
    while True:
        if rng.random() < 0.5:
            text = right[:-1] + str((int(right[-1]) + rng.randrange(1, 10)) % 10)
        else:
            kind = rng.random()
            digits = [i for i, ch in enumerate(right[:-1]) if ch.isdigit()]
            if kind < 0.4 and digits:
                i = rng.choice(digits)
                text = right[:i] + str(rng.randrange(10)) + right[i + 1:]
            elif kind < 0.8:
                text = str(int(right) + rng.choice([-1, 1]) * rng.choice([10, 20, 100]))
            elif kind < 0.9:
                text = str(-int(right))
            else:
                text = right + str(rng.randrange(10)) if rng.random() < 0.5 else right[:-1]
        if text not in (right, "", "-", "-0") and not (len(text.lstrip("-")) > 1 and text.lstrip("-")[0] == "0"):
            return text


def write_pairs_jsonl(path: str, ids, seed: int):
    """Synthetic preference pairs for reward-model training: the right answer is chosen, ``wrong_answer`` rejected."""
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for pid in ids:
            prompt, answer = problem(pid)
            rejected = wrong_answer(pid, rng)
            fh.write(json.dumps({"prompt": prompt, "chosen": answer, "rejected": rejected}) + "\n")


def write_jsonl(path: str, ids):
    with open(path, "w") as fh:
        for pid in ids:
            prompt, answer = problem(pid)
            fh.write(json.dumps({"prompt": prompt, "labels": answer}) + "\n")


if __name__ == "__main__":
    import argparse
    import os
    ap = argparse.ArgumentParser(description="write the tiny-math prompts and the held-out set as jsonl; with "
                                             "--pairs, training pairs for the reward model instead")
    ap.add_argument("--out", default="dataset/tiny_math")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--pairs", action="store_true", help="write pairs.jsonl (the right answer against a synthetic "
                                                         "mistake); examples/tiny/sample_pairs.py writes the held-out "
                                                         "pairs from the policy's own answers")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.pairs:  # other problems than the prompts' (another seed), never a held-out one
        write_pairs_jsonl(os.path.join(args.out, "pairs.jsonl"), training_ids(args.rows, args.seed + 100), args.seed)
        print(f"wrote {args.rows} training pairs to {args.out}")
    else:
        write_jsonl(os.path.join(args.out, "train.jsonl"), training_ids(args.rows, args.seed))
        write_jsonl(os.path.join(args.out, "heldout.jsonl"), heldout_ids())
        print(f"wrote {args.rows} training prompts and 1000 held-out prompts to {args.out}")
