"""Held-out evaluation with the rollout model, scored by the run's verifiers: greedy decoding (the default), or
``eval.n_samples`` responses per prompt sampled at ``eval.temperature``, reported as pass@k and mean@n."""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

import numpy as np

from mindrl.config.plan import pass_ks
from mindrl.data.handlers import BadRow
from mindrl.io import write_text
from mindrl.rollout.sampling import SamplingParams

# Inside functions: MindSpore's dataset reader (a MindRecord eval set), the jsonl tokenizing path (preprocess: half
# a second) and the run's seed helper (trainer.context loads MindSpore): preflight imports this module to check
# eval sets, in msrun's scheduler too


def spread(n: int, k: Optional[int]) -> list:
    """``k`` of ``n`` row indices spread evenly over the file (the i-th is ``i*n // k``), or all of them. Why not the
    first ``k``: held-out files are often sorted (by difficulty, length or source), and the first rows of the demo's
    scored 0.815 where the whole file scores 0.553. Fixed, not random: every evaluation and run sees the same rows."""
    if not k or k >= n:
        return list(range(n))
    return [i * n // k for i in range(k)]


def subset_note(n: int, k: Optional[int], unit: str = "prompts") -> str:
    """How ``eval.num_samples`` chose the rows (``unit``: what a row is), for the line that announces an evaluation
    ('' for all of them)."""
    if not k or k >= n:
        return ""
    return f"{k} of its {n} {unit}, spread evenly over the file (eval.num_samples; the same rows every time)"


def load_eval_set(path: str, prompt_key: str, label_key: str, limit: Optional[int] = None,
                  tokenizer_path: Optional[str] = None, dataset_config: Optional[str] = None):
    """(prompts as token-id lists, labels) of a held-out set: a MindRecord written by `mindrl preprocess`, or a
    .jsonl file tokenized here the way `mindrl preprocess` would with ``dataset_config`` (its handler, template
    and map_keys; its input/output keys are ignored) and the policy's tokenizer. Without a dataset config, jsonl
    rows are ``{"prompt": ..., "labels": ...}`` with the prompt used as it is (no template). ``limit``: that many rows
    spread evenly over the file (:func:`spread`)."""
    prompts, labels = _load_all(path, prompt_key, label_key, tokenizer_path, dataset_config)
    keep = spread(len(prompts), limit)
    return [prompts[i] for i in keep], [labels[i] for i in keep]


def _load_all(path, prompt_key, label_key, tokenizer_path, dataset_config):
    if path.endswith(".jsonl"):
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, tokenizer_path, dataset_config)
        if key not in _JSONL_SETS:  # tokenized once per process: preflight checks it, the evaluator uses it
            _JSONL_SETS[key] = _load_jsonl(path, tokenizer_path, dataset_config)
        return _JSONL_SETS[key]
    import mindspore.dataset as ds
    data = ds.MindDataset(path, columns_list=[prompt_key, label_key], shuffle=False)
    prompts, labels = [], []
    for row in data.create_dict_iterator(output_numpy=True, num_epochs=1):
        prompts.append([int(x) for x in row[prompt_key]])
        lab = row[label_key]
        labels.append(lab.item().decode() if isinstance(lab.item(), bytes) else str(lab.item()))
    return prompts, labels


_JSONL_SETS = {}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` passed (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): ``1 - C(n-c, k) / C(n, k)``, the chance that ``k`` of the ``n`` drawn
    without replacement include a passing one. As their product form, ``1 - prod_{i=n-c+1..n} (1 - k/i)``: no
    binomial coefficient is formed, so large ``n`` neither overflows nor loses precision."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a passing sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def passed(scores) -> np.ndarray:
    """Which samples a verifier passed: a score of 1 or more, the full score of every built-in verifier (they give
    1 for a right answer and 0, or a negative value, otherwise; ``step``'s partial credit below 1 does not pass)."""
    return np.asarray(scores, np.float64) >= 1.0


def sampled_metrics(per_verifier: dict, scores, n: int, ks) -> dict:
    """``eval/<name>/mean``, ``eval/<name>/mean@<n>`` and ``eval/<name>/pass@<k>`` for each verifier and for
    ``score`` (the weighted sum; a sample passes ``score`` when it passes every verifier), from prompt-major
    per-sample values (prompt i's samples are rows i*n .. i*n+n-1)."""
    out = {}
    columns = {"score": None, **per_verifier}
    for name, vals in columns.items():
        if name == "score":
            mean = float(np.mean(scores, dtype=np.float64))
            ok = np.all([passed(v) for v in per_verifier.values()], axis=0) if per_verifier else None
        else:
            mean = float(np.mean(vals, dtype=np.float64))
            ok = passed(vals)
        out[f"eval/{name}/mean"] = out[f"eval/{name}/mean@{n}"] = mean
        if ok is None:  # no verifier: nothing decides which samples pass
            continue
        counts = ok.reshape(-1, n).sum(1)
        for k in ks:
            out[f"eval/{name}/pass@{k}"] = float(np.mean([pass_at_k(n, int(c), k) for c in counts]))
    return out


class EvalSetError(ValueError):
    """A held-out jsonl row that cannot be tokenized (the message names file and line)."""


def _load_jsonl(path, tokenizer_path, dataset_config):
    from mindrl.data.preprocess import _build_handler, load_dataset_config
    base = {"handler_name": "prompt", "prompt_type": "empty"} if dataset_config is None else {}
    cfg = load_dataset_config(dataset_config, [], extra={**base, "input": path, "output_prefix": path,
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
            except RecursionError:  # json's decoder recurses once per nesting level
                raise EvalSetError(f"{path}:{line_no}: nested too deeply to read (a held-out row is a flat mapping "
                                   f"of prompt and labels)") from None
            prompts.append([int(x) for x in out["prompt_ids"][:int(out.get("prompt_length", len(out["prompt_ids"])))]])
            labels.append(str(out.get("labels", "")))
    return prompts, labels


class Evaluator:
    """``eval/score/mean`` and ``eval/<verifier>/mean`` of greedy responses on ``eval.path``, or with
    ``eval.temperature > 0`` of ``eval.n_samples`` sampled responses per prompt, with their pass@k and mean@n
    (:func:`sampled_metrics`); with ``dump``, each prompt, response, label and score is also written to a jsonl
    file (one line per response)."""

    def __init__(self, run, policy, rewards, stop_token_ids):
        self.run, self.policy, self.rewards = run, policy, rewards
        self.stop_token_ids = list(stop_token_ids)
        self._data, self.note, self.rows = None, "", []  # rows: the file's row index of each prompt evaluated

    def data(self):
        """(prompts, labels) evaluated: eval.num_samples of them spread evenly over the file, or all."""
        if self._data is None:
            ev = self.run.plan.eval
            prompts, labels = _load_all(ev.path, ev.prompt_key, ev.label_key, ev.tokenizer, ev.dataset_config)
            self.note = subset_note(len(prompts), ev.num_samples)
            self.rows = spread(len(prompts), ev.num_samples)
            self._data = [prompts[i] for i in self.rows], [labels[i] for i in self.rows]
            if self.note and self.run.topo.is_main:
                logging.getLogger("mindrl.train").info("held-out set %s: %s", ev.path, self.note)
        return self._data

    def __call__(self, dump: Optional[str] = None) -> dict:
        ev = self.run.plan.eval
        prompts, labels = self.data()
        n = ev.n_samples if ev.sampled else 1
        tokens = self._generate(prompts)
        tok = self.run.tokenizer
        texts = [tok.decode(t, skip_special_tokens=True) for t in tokens]
        rew = self.rewards(texts, [lab for lab in labels for _ in range(n)])
        res = {"eval/score/mean": float(rew.scores.mean()), "eval/num_samples": len(prompts)}
        if ev.sampled:
            res["eval/n_samples"] = n
            res.update(sampled_metrics(rew.per_verifier, rew.scores, n, pass_ks(n)))
        else:
            for name, vals in rew.per_verifier.items():
                res[f"eval/{name}/mean"] = float(np.mean(vals))
        if dump and self.run.topo.is_main:
            self._dump(dump, prompts, texts, labels, rew, n)
        return res

    def _generate(self, prompts) -> list:
        """The response tokens, prompt-major: greedy (one per prompt), or ``eval.n_samples`` per prompt sampled from
        a stream that depends only on the run's seed, so an evaluation repeated (another step, ``mindrl evaluate``
        of the same checkpoint) draws the same way. More samples than the generator decodes at once are drawn in
        rounds, each round from a stream of its own."""
        from mindrl.trainer.context import seed_from
        ev, generator = self.run.plan.eval, self.policy.generator
        max_tokens = min(ev.max_tokens, generator.max_new_tokens)
        if not ev.sampled:
            params = SamplingParams(n=1, max_tokens=max_tokens, do_sample=False, stop_token_ids=self.stop_token_ids)
            return generator.generate(prompts, params, seed=0).tokens
        n, per_round = ev.n_samples, min(ev.n_samples, generator.max_batch)
        tokens = [[] for _ in prompts]
        for r, first in enumerate(range(0, n, per_round)):
            params = SamplingParams(n=min(per_round, n - first), max_tokens=max_tokens, do_sample=True,
                                    temperature=ev.temperature, top_p=ev.top_p, stop_token_ids=self.stop_token_ids)
            out = generator.generate(prompts, params, seed=seed_from(self.run.seed, _EVAL_STREAM, r))
            for i, t in zip(out.prompt_index, out.tokens):
                tokens[int(i)].append(t)
        return [t for per_prompt in tokens for t in per_prompt]

    def _dump(self, path, prompts, texts, labels, rew, n) -> None:
        """One line per response: ``index`` (the prompt's row in the file), ``sample`` (0..n-1, sampled evaluation
        only), the prompt, response, label, weighted score and each verifier's score."""
        tok = self.run.tokenizer
        lines = []
        for i, (p, lab) in enumerate(zip(prompts, labels)):
            prompt = tok.decode(p, skip_special_tokens=False)
            for j in range(n):
                row = i * n + j
                head = {"index": self.rows[i], "sample": j} if self.run.plan.eval.sampled else {"index": self.rows[i]}
                lines.append(json.dumps({**head, "prompt": prompt, "response": texts[row], "label": lab,
                                         "score": float(rew.scores[row]),
                                         "verifiers": {k: float(v[row]) for k, v in rew.per_verifier.items()}},
                                        ensure_ascii=False))
        write_text(path, "\n".join(lines) + "\n")


_EVAL_STREAM = 0x6576616C  # "eval": the sampled evaluation's seeds are (run seed, this, round), apart from rollouts'
