#!/usr/bin/env python
"""Held-out preference pairs from the policy's own answers, for measuring the tiny demo's reward model where PPO
will use it.

    python examples/tiny/sample_pairs.py --out dataset/tiny_math

The policy (examples/tiny/policy) samples ``--samples`` answers to each of the 1000 held-out problems at
temperature 1, as PPO's rollouts do, and the rule (``last_number``, the verifier the held-out accuracy uses) labels
them. Every distinct wrong answer of a problem that also got a right one becomes a pair
``{"prompt": "53+93-01=", "chosen": "145", "rejected": "146"}``; problems whose answers are all right or all wrong
give none. Writes ``<out>/pairs_heldout.jsonl`` and prints how many pairs it wrote.

These pairs are what PPO asks of the reward model: mostly a units digit one too high, the policy's commonest
mistake, which synthetic held-out pairs (``task.py --pairs``) underweight. `mindrl train-rm` reports its accuracy
on them, and stores the mean and std of their scores, which PPO's ``reward_config.normalize`` then uses: the
statistics of the answers PPO will score.
"""
import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import task  # noqa: E402


def sample_answers(lm, tok, pids, samples: int, seed: int, temperature: float = 1.0):
    """{pid: [answer text, ...]} of ``samples`` sampled answers per problem (finished ones only)."""
    from mindrl.rollout import generate
    prompts = [tok.encode(task.problem(pid)[0]) for pid in pids]
    outs = generate(lm, prompts, max_new_tokens=6, do_sample=True, temperature=temperature, n=samples, seed=seed,
                    eos_token_id=tok.eos_token_id, max_batch=256)
    answers = collections.defaultdict(list)
    for k, ids in enumerate(outs):
        if ids and ids[-1] == tok.eos_token_id:  # a pair's response ends with the end-of-text token (append_eod)
            answers[pids[k // samples]].append(tok.decode(ids, skip_special_tokens=True))
    return answers


def write_policy_pairs(path: str, lm, tok, pids, samples: int, seed: int) -> dict:
    """Sample answers to ``pids``, label them with the rule, write the pairs; returns counts."""
    from mindrl.rewards import last_number_reward
    pids = list(dict.fromkeys(pids))
    answers = sample_answers(lm, tok, pids, samples, seed)
    counts = collections.Counter(problems=len(pids))
    with open(path, "w") as fh:
        for pid in pids:
            prompt, label = task.problem(pid)
            texts = answers.get(pid, [])
            right = [t for t in texts if last_number_reward(t, label) == 1.0]
            counts["answers"] += len(texts)
            counts["right"] += len(right)
            if not right or len(right) == len(texts):
                continue
            counts["paired"] += 1
            for wrong in dict.fromkeys(t for t in texts if t not in right):  # distinct, in sampling order
                fh.write(json.dumps({"prompt": prompt, "chosen": right[0], "rejected": wrong}) + "\n")
                counts["pairs"] += 1
    return dict(counts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="dataset/tiny_math", help="directory for pairs_heldout.jsonl")
    ap.add_argument("--policy", default=os.path.join(HERE, "policy"), help="the policy PPO will train")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "tokenizer"))
    ap.add_argument("--samples", type=int, default=4, help="answers sampled per held-out problem")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.models import from_pretrained
    os.makedirs(args.out, exist_ok=True)
    tok = load_tokenizer(args.tokenizer)
    lm = from_pretrained(args.policy)
    path = os.path.join(args.out, "pairs_heldout.jsonl")
    c = write_policy_pairs(path, lm, tok, task.heldout_ids(), args.samples, args.seed)
    print(f"wrote {c.get('pairs', 0)} held-out pairs from {c.get('paired', 0)} of {c['problems']} problems to {path} "
          f"({c['answers']} answers sampled, {c['right'] / max(c['answers'], 1):.1%} right)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
