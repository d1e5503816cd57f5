"""Held-out evaluation: greedy decoding with the rollout model, scored by the run's verifiers."""
from __future__ import annotations

from typing import Optional

import numpy as np


def load_eval_set(path: str, prompt_key: str, label_key: str, limit: Optional[int] = None):
    """(prompts, labels) from a MindRecord written by `mindrl preprocess`."""
    import mindspore.dataset as ds
    data = ds.MindDataset(path, columns_list=[prompt_key, label_key], shuffle=False)
    prompts, labels = [], []
    for row in data.create_dict_iterator(output_numpy=True, num_epochs=1):
        prompts.append([int(x) for x in row[prompt_key]])
        lab = row[label_key]
        labels.append(lab.item().decode() if isinstance(lab.item(), bytes) else str(lab.item()))
        if limit and len(prompts) >= limit:
            break
    return prompts, labels


class Evaluator:
    """``eval/score/mean`` and ``eval/<verifier>/mean`` of greedy responses on ``eval.path``."""

    def __init__(self, run, policy, rewards, stop_token_ids):
        self.run, self.policy, self.rewards = run, policy, rewards
        self.stop_token_ids = list(stop_token_ids)
        self._data = None

    def __call__(self) -> dict:
        from mindrl.rollout.sampling import SamplingParams
        cfg = self.run.cfg
        ev = cfg.eval
        if self._data is None:
            self._data = load_eval_set(ev.path, cfg.data.prompt_key, cfg.data.label_key, ev.num_samples)
        prompts, labels = self._data
        generator = self.policy.generator
        params = SamplingParams(n=1, max_tokens=min(ev.max_tokens, generator.max_new_tokens), do_sample=False,
                                stop_token_ids=self.stop_token_ids)
        out = generator.generate(prompts, params, seed=0)
        texts = [self.run.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
        rew = self.rewards(texts, labels)
        res = {"eval/score/mean": float(rew.scores.mean()), "eval/num_samples": len(prompts)}
        for name, vals in rew.per_verifier.items():
            res[f"eval/{name}/mean"] = float(np.mean(vals))
        return res
