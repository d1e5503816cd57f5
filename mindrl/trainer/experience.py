"""The experience batch: one step's rollout, from sampling to the update, in one typed object.

Rows are sequences, prompt-major: the ``n_samples_per_prompt`` samples of one prompt are adjacent and share a
``group`` id. Shapes: ``N`` rows, ``P`` prompt width (prompts left-padded), ``R`` response width (responses
right-padded). Token ids and the attention mask are int32, per-token numbers and the loss mask float32,
host-side sequence scores float64 (sums of rewards and penalties; the graphs never see them).

Filled while sampling (every rank, for its own rows):
    prompt_ids [N, P] int32, prompt_mask [N, P] int32, response_ids [N, R] int32,
    response_mask [N, R] float32 (1 on generated tokens, a final stop token included),
    rollout_log_probs [N, R] float32 (log p under the sampling policy, temperature applied, no top-k/p),
    finished [N] bool (ended on a stop token), group [N] int64,
    rule_reward [N] float32 (the verifiers' weighted sum), verifier_scores {name: [N] float32} (each verifier,
    unweighted), score [N] float64 (the sequence's score so far: with DAPO's dynamic sampling, what it filters on).
Filled after the exchange, by the stages this run has (None otherwise):
    loss_mask [N, R] float32 (response_mask, truncated rows zeroed with mask_truncated_completions),
    old_log_probs [N, R] (the policy before this step's updates), ref_log_probs [N, R] (the reference),
    values [N, R] (critic; by its update when a step makes one, see trainer/loop.py), rm_score [N] float32
    (reward model), score (again, with every term), reward [N] float64 and token_rewards [N, R] float32 (what the
    estimator reads), advantages [N, R], returns [N, R].
The reward's names and how its terms add up: algorithms/sequence_reward.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

_ROW_FIELDS = ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rollout_log_probs", "finished",
               "group", "rule_reward", "score", "loss_mask", "old_log_probs", "ref_log_probs", "values", "rm_score",
               "reward", "token_rewards", "advantages", "returns", "tis_weight")
_TOKEN_FIELDS = ("response_ids", "response_mask", "rollout_log_probs", "loss_mask", "old_log_probs",
                 "ref_log_probs", "values", "token_rewards", "advantages", "returns", "tis_weight")


@dataclass
class Experience:
    prompt_ids: np.ndarray
    prompt_mask: np.ndarray
    response_ids: np.ndarray
    response_mask: np.ndarray
    rollout_log_probs: np.ndarray
    finished: np.ndarray
    group: np.ndarray
    rule_reward: np.ndarray
    score: np.ndarray
    verifier_scores: Dict[str, np.ndarray] = field(default_factory=dict)
    loss_mask: Optional[np.ndarray] = None
    old_log_probs: Optional[np.ndarray] = None
    ref_log_probs: Optional[np.ndarray] = None
    values: Optional[np.ndarray] = None
    rm_score: Optional[np.ndarray] = None
    reward: Optional[np.ndarray] = None
    token_rewards: Optional[np.ndarray] = None
    advantages: Optional[np.ndarray] = None
    returns: Optional[np.ndarray] = None
    tis_weight: Optional[np.ndarray] = None   # rl_config.tis_cap: each token's policy-loss weight (algorithms/tis.py)

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_rollout(cls, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                     log_probs: Sequence[np.ndarray], finished, group, rule_reward, score,
                     verifier_scores: Dict[str, np.ndarray], prompt_width: int, response_width: int,
                     pad_id: int) -> "Experience":
        n = len(responses)
        p_ids = np.full((n, prompt_width), pad_id, np.int32)
        p_mask = np.zeros((n, prompt_width), np.int32)
        r_ids = np.full((n, response_width), pad_id, np.int32)
        r_mask = np.zeros((n, response_width), np.float32)
        lps = np.zeros((n, response_width), np.float32)
        for i, (p, t, lp) in enumerate(zip(prompts, responses, log_probs)):
            if len(p) > prompt_width or len(t) > response_width:
                raise ValueError(f"row {i}: {len(p)} prompt / {len(t)} response tokens exceed the widths "
                                 f"{prompt_width} / {response_width}")
            p_ids[i, prompt_width - len(p):] = p
            p_mask[i, prompt_width - len(p):] = 1
            r_ids[i, :len(t)] = t
            r_mask[i, :len(t)] = 1
            lps[i, :len(t)] = lp
        return cls(p_ids, p_mask, r_ids, r_mask, lps, np.asarray(finished, bool), np.asarray(group, np.int64),
                   np.asarray(rule_reward, np.float32), np.asarray(score, np.float64),
                   {k: np.asarray(v, np.float32) for k, v in verifier_scores.items()})

    @classmethod
    def concat(cls, parts: List["Experience"]) -> "Experience":
        first = parts[0]
        out = {}
        for f in dataclasses.fields(cls):
            values = [getattr(p, f.name) for p in parts]
            if f.name == "verifier_scores":
                out[f.name] = {k: np.concatenate([v[k] for v in values]) for k in first.verifier_scores}
            elif values[0] is None:
                out[f.name] = None
            else:
                out[f.name] = np.concatenate(values)
        return cls(**out)

    def select(self, rows) -> "Experience":
        """The rows ``rows`` (an index array or slice) of every filled field."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "verifier_scores":
                out[f.name] = {k: a[rows] for k, a in v.items()}
            else:
                out[f.name] = None if v is None else v[rows]
        return type(self)(**out)

    # -- views ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.response_ids.shape[0])

    @property
    def prompt_width(self) -> int:
        return int(self.prompt_ids.shape[1])

    @property
    def response_width(self) -> int:
        return int(self.response_ids.shape[1])

    @property
    def input_ids(self) -> np.ndarray:
        """[N, P+R] int32: prompt then response."""
        return np.concatenate([self.prompt_ids, self.response_ids], axis=1)

    @property
    def attention_mask(self) -> np.ndarray:
        """[N, P+R] int32: 1 on real prompt and response tokens."""
        return np.concatenate([self.prompt_mask, self.response_mask.astype(np.int32)], axis=1)

    @property
    def prompt_lengths(self) -> np.ndarray:
        return self.prompt_mask.sum(1).astype(np.int64)

    @property
    def response_lengths(self) -> np.ndarray:
        return self.response_mask.sum(1).astype(np.int64)

    def responses(self) -> List[List[int]]:
        return [row[:n].tolist() for row, n in zip(self.response_ids, self.response_lengths)]

    def widths_needed(self) -> tuple:
        """(longest prompt, longest response) in tokens."""
        return int(self.prompt_lengths.max(initial=0)), int(self.response_lengths.max(initial=0))

    def resized(self, prompt_width: int, response_width: int, pad_id: int) -> "Experience":
        """The same rows with other padded widths (prompts stay right-aligned, responses left-aligned)."""
        longest_p, longest_r = self.widths_needed()
        if longest_p > prompt_width or longest_r > response_width:
            raise ValueError(f"widths {prompt_width}/{response_width} cut rows of {longest_p}/{longest_r} tokens")
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None or f.name == "verifier_scores" or v.ndim == 1:
                out[f.name] = v
            elif f.name in ("prompt_ids", "prompt_mask"):
                fill = pad_id if f.name == "prompt_ids" else 0
                out[f.name] = _fit(v, prompt_width, fill, left=True)
            else:
                out[f.name] = _fit(v, response_width, pad_id if f.name == "response_ids" else 0, left=False)
        return type(self)(**out)

    # -- the exchange between ranks ---------------------------------------------------------------------
    def pack(self) -> np.ndarray:
        """This rank's rows as one float32 matrix (the exchange between ranks carries float32 only).

        Columns: prompt length, response length, prompt ids [P], response ids [R], rollout log-probs [R],
        finished, rule reward, then one column per verifier (sorted by name). Token ids are exact in float32 below
        2**24. Only the sampling fields travel: everything else, the score included, is computed after the
        exchange (from the float32 rule reward and the lengths, so every rank gets the bits a single process does).
        """
        n, names = len(self), sorted(self.verifier_scores)
        p_len, r_len = self.prompt_lengths, self.response_lengths
        prompts = np.zeros((n, self.prompt_width), np.float32)  # left-aligned in the matrix
        for i in range(n):
            prompts[i, :p_len[i]] = self.prompt_ids[i, self.prompt_width - p_len[i]:]
        cols = [p_len[:, None], r_len[:, None], prompts, self.response_ids * self.response_mask,
                self.rollout_log_probs, self.finished[:, None], self.rule_reward[:, None]]
        cols += [self.verifier_scores[k][:, None] for k in names]
        return np.concatenate([np.asarray(c, np.float32) for c in cols], axis=1)

    @classmethod
    def unpack(cls, mat: np.ndarray, prompt_width: int, response_width: int, verifier_names: Sequence[str],
               pad_id: int, n_samples: int) -> "Experience":
        """Rows packed by :meth:`pack` on every rank, concatenated in replica order. Groups are renumbered; the
        score is left at 0 for the caller to compute (algorithms/sequence_reward.py)."""
        p0, r0 = 2, 2 + prompt_width
        o = r0 + 2 * response_width  # finished, rule reward, verifiers
        v0 = o + 2
        prompts = [row[p0:p0 + int(row[0])].astype(np.int64).tolist() for row in mat]
        responses = [row[r0:r0 + int(row[1])].astype(np.int64).tolist() for row in mat]
        log_probs = [row[r0 + response_width:r0 + response_width + int(row[1])] for row in mat]
        per = {k: mat[:, v0 + j] for j, k in enumerate(sorted(verifier_names))}
        per = {k: per[k] for k in verifier_names}
        return cls.from_rollout(prompts, responses, log_probs, mat[:, o] > 0.5, np.arange(len(mat)) // n_samples,
                                mat[:, o + 1], np.zeros(len(mat)), per, prompt_width,
                                response_width, pad_id)

    def validate(self) -> "Experience":
        """Check every filled field's shape and dtype against the documented ones (used by tests)."""
        n, r = len(self), self.response_width
        want = {"prompt_ids": ((n, self.prompt_width), np.int32), "prompt_mask": ((n, self.prompt_width), np.int32),
                "response_ids": ((n, r), np.int32), "finished": ((n,), np.bool_), "group": ((n,), np.int64),
                "rule_reward": ((n,), np.float32), "score": ((n,), np.float64), "rm_score": ((n,), np.float32),
                "reward": ((n,), np.float64)}
        for name in _TOKEN_FIELDS:
            want.setdefault(name, ((n, r), np.float32))
        for name in _ROW_FIELDS:
            v = getattr(self, name)
            if v is None:
                continue
            shape, dtype = want[name]
            if v.shape != shape or v.dtype != dtype:
                raise TypeError(f"Experience.{name}: {v.dtype}{list(v.shape)}, expected {np.dtype(dtype)}{list(shape)}")
        for k, v in self.verifier_scores.items():
            if v.shape != (n,) or v.dtype != np.float32:
                raise TypeError(f"Experience.verifier_scores[{k!r}]: {v.dtype}{list(v.shape)}, expected float32[{n}]")
        return self


def _fit(a: np.ndarray, width: int, fill, left: bool) -> np.ndarray:
    n, w = a.shape
    if w == width:
        return a
    out = np.full((n, width), fill, a.dtype)
    if left:
        k = min(w, width)
        out[:, width - k:] = a[:, w - k:]
    else:
        k = min(w, width)
        out[:, :k] = a[:, :k]
    return out
