"""Held-out evaluation: greedy decoding with the rollout model, scored by the run's verifiers."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np


def load_eval_set(path: str, prompt_key: str, label_key: str, limit: Optional[int] = None,
                  tokenizer_path: Optional[str] = None, dataset_config: Optional[str] = None):
    """(prompts as token-id lists, labels) of a held-out set: a MindRecord written by `mindrl preprocess`, or a
    .jsonl file tokenized here the way `mindrl preprocess` would with ``dataset_config`` (its handler, template
    and map_keys; its input/output keys are ignored) and the policy's tokenizer. Without a dataset config, jsonl
    rows are ``{"prompt": ..., "labels": ...}`` with the prompt used as it is (no template)."""
    if path.endswith(".jsonl"):
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, limit, tokenizer_path, dataset_config)
        if key not in _JSONL_SETS:  # tokenized once per process: preflight checks it, the evaluator uses it
            _JSONL_SETS[key] = _load_jsonl(path, limit, tokenizer_path, dataset_config)
        return _JSONL_SETS[key]
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


_JSONL_SETS = {}


class EvalSetError(ValueError):
    """A held-out jsonl row that cannot be tokenized (the message names file and line)."""


def _load_jsonl(path, limit, tokenizer_path, dataset_config):
    import json
    from mindrl.data.handlers import BadRow
    from mindrl.data.preprocess import _build_handler, load_config
    base = {"handler_name": "prompt", "prompt_type": "empty"} if dataset_config is None else {}
    cfg = load_config(dataset_config, [], extra={**base, "input": path, "output_prefix": path,
                                                 "tokenizer_name_or_path": tokenizer_path, "tokenizer_type": None,
                                                 "vocab_file": None, "merge_file": None})
    handler = _build_handler(cfg)
    prompts, labels = [], []
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                out = handler(json.loads(raw.decode("utf-8-sig" if line_no == 1 else "utf-8")))
            except (ValueError, BadRow) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                raise EvalSetError(f"{path}:{line_no}: {err}") from None
            prompts.append([int(x) for x in out["prompt_ids"][:int(out.get("prompt_length", len(out["prompt_ids"])))]])
            labels.append(str(out.get("labels", "")))
            if limit and len(prompts) >= limit:
                break
    return prompts, labels


class Evaluator:
    """``eval/score/mean`` and ``eval/<verifier>/mean`` of greedy responses on ``eval.path``; with ``dump``, each
    prompt, response, label and score is also written to a jsonl file."""

    def __init__(self, run, policy, rewards, stop_token_ids):
        self.run, self.policy, self.rewards = run, policy, rewards
        self.stop_token_ids = list(stop_token_ids)
        self._data = None

    def data(self):
        if self._data is None:
            cfg = self.run.cfg
            self._data = load_eval_set(cfg.eval.path, cfg.data.prompt_key, cfg.data.label_key, cfg.eval.num_samples,
                                       cfg.actor_config.tokenizer_name_or_path, cfg.eval.dataset_config)
        return self._data

    def __call__(self, dump: Optional[str] = None) -> dict:
        from mindrl.rollout.sampling import SamplingParams
        ev = self.run.cfg.eval
        prompts, labels = self.data()
        generator = self.policy.generator
        params = SamplingParams(n=1, max_tokens=min(ev.max_tokens, generator.max_new_tokens), do_sample=False,
                                stop_token_ids=self.stop_token_ids)
        out = generator.generate(prompts, params, seed=0)
        tok = self.run.tokenizer
        texts = [tok.decode(t, skip_special_tokens=True) for t in out.tokens]
        rew = self.rewards(texts, labels)
        res = {"eval/score/mean": float(rew.scores.mean()), "eval/num_samples": len(prompts)}
        for name, vals in rew.per_verifier.items():
            res[f"eval/{name}/mean"] = float(np.mean(vals))
        if dump and self.run.topo.is_main:
            self._dump(dump, prompts, texts, labels, rew)
        return res

    def _dump(self, path, prompts, texts, labels, rew) -> None:
        import json
        from mindrl.io import write_text
        tok = self.run.tokenizer
        lines = [json.dumps({"index": i, "prompt": tok.decode(p, skip_special_tokens=False), "response": t,
                             "label": lab, "score": float(rew.scores[i]),
                             "verifiers": {k: float(v[i]) for k, v in rew.per_verifier.items()}}, ensure_ascii=False)
                 for i, (p, t, lab) in enumerate(zip(prompts, texts, labels))]
        write_text(path, "\n".join(lines) + "\n")
