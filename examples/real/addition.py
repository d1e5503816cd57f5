"""The real-model task: two-digit addition asked in the model's own chat format.

A problem is ``(a, b)`` with ``10 <= a, b <= 99``; its prompt is ``What is 47 + 38? Answer with the number only.``
and its label the sum (``85``). There are 8100 problems; the held-out set is a fixed draw of 200 of them (seed 21),
and training prompts never include one. The reward is mindrl's ``last_number`` verifier: 1 when the last number
in the response is the sum (``47 + 38 = 85`` and ``85`` both score 1; a response cut off before its answer scores 0).

SmolLM2-135M-Instruct answers 11% of the held-out problems right, greedy, with 24 new tokens: it mostly starts
with "To solve this, we need to add ..." and runs out of tokens, or writes a wrong sum.

    python examples/real/addition.py --out scratch/real/data     # train.jsonl (8,000 rows), heldout.jsonl (200 rows)
"""
import json
import os
import random

LOW, HIGH = 10, 99
HELDOUT_SEED = 21
HELDOUT_SIZE = 200
INSTRUCTION = "Answer with the number only."


def question(a: int, b: int) -> str:
    return f"What is {a} + {b}? {INSTRUCTION}"


def all_problems():
    return [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]


def heldout_problems(size: int = HELDOUT_SIZE):
    """The fixed held-out problems (the first ``size`` of one seeded shuffle, so a smaller set is a prefix)."""
    probs = all_problems()
    random.Random(HELDOUT_SEED).shuffle(probs)
    return probs[:size]


def training_problems(count: int, seed: int):
    """``count`` problems drawn with replacement from those never held out (the largest held-out set, 1000)."""
    held = set(heldout_problems(1000))
    pool = [p for p in all_problems() if p not in held]
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(count)]


def row(a: int, b: int) -> dict:
    return {"prompt": question(a, b), "labels": str(a + b)}


def write_jsonl(path: str, problems) -> None:
    with open(path, "w") as fh:
        for a, b in problems:
            fh.write(json.dumps(row(a, b)) + "\n")


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="write the two-digit addition prompts (train.jsonl) and the fixed "
                                             "held-out problems (heldout.jsonl) as {prompt, labels} rows")
    ap.add_argument("--out", default="scratch/real/data")
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--heldout", type=int, default=HELDOUT_SIZE, help="held-out problems (at most 1000)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if not 1 <= a.heldout <= 1000:
        ap.error("--heldout must be between 1 and 1000")
    os.makedirs(a.out, exist_ok=True)
    write_jsonl(os.path.join(a.out, "train.jsonl"), training_problems(a.rows, a.seed))
    write_jsonl(os.path.join(a.out, "heldout.jsonl"), heldout_problems(a.heldout))
    print(f"wrote {a.rows} training prompts and {a.heldout} held-out prompts to {a.out}")


if __name__ == "__main__":
    main()
