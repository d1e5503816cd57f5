"""A sequence's reward, assembled in one place from what the rollout and the scoring passes produced.

One name per quantity, used by the experience (trainer/experience.py), the metrics and the docs:

    rule_reward       [N] float32   the verifiers' weighted sum (rewards/computer.py)
    overlong_penalty  [N]           DAPO's soft penalty of responses inside the last overlong_buffer_len tokens
    rm_score          [N] float32   the reward model's (normalised) score
    score             [N] float64   clip(rule_reward + overlong_penalty + rm_weight * rm_score)   (verl's "score")
    kl                [N, R]        per-token KL of the rollout policy from the reference (KL in the reward)
    reward            [N] float64   score - kl_coef * sum_t kl_t: what a sequence-level estimator reads
    token_rewards     [N, R] f32    -kl_coef * kl_t, plus score on the last token: what a token-level one reads

The terms are added in this order, in float64, so every rank (and a resumed run) computes the same bits.
"""
from __future__ import annotations

import numpy as np

from .advantages import kl_penalized_token_rewards
from .dapo import overlong_penalty
from .kl_control import kl_reward_penalty


def sequence_score(rule_reward, response_lengths, plan, rm_score=None) -> np.ndarray:
    """``score`` [N] float64 under ``plan`` (a RewardPlan). Without ``rm_score`` (DAPO's dynamic sampling looks at
    groups before the reward model has scored them) the reward model's term is left out."""
    score = np.asarray(rule_reward, np.float32).astype(np.float64)
    if plan.overlong_buffer_len > 0:
        score = score + overlong_penalty(response_lengths, plan.max_tokens, plan.overlong_buffer_len,
                                         plan.overlong_penalty_factor)
    if rm_score is not None:
        score = score + plan.rm_weight * np.asarray(rm_score, np.float32).astype(np.float64)
    if plan.clip_range is not None:
        score = np.clip(score, *plan.clip_range)
    return score


def estimator_rewards(score, old_log_probs, ref_log_probs, response_mask, kl_ctrl, kl_estimator: str,
                      token_level: bool) -> tuple:
    """(``reward`` [N] float64, ``token_rewards`` [N, R] float32 or None, metrics) for an estimator.

    ``kl_ctrl`` (None: no KL in the reward) is stepped once with this batch's KL; the metrics are MindSpeed-RL's
    ``actor/reward_kl_penalty`` and ``actor/reward_kl_penalty_coeff`` (the coefficient used, before the step).
    ``token_rewards`` only for a token-level estimator (``token_level``), else None."""
    if kl_ctrl is None:
        tokens = kl_penalized_token_rewards(score, np.zeros_like(response_mask), response_mask, 0.0) \
            if token_level else None
        return np.asarray(score, np.float64), tokens, {}
    coef = kl_ctrl.value  # the batch's coefficient: the controller moves it after this batch
    tokens, kl, metrics = kl_reward_penalty(score, old_log_probs, ref_log_probs, response_mask, kl_ctrl, kl_estimator)
    reward = np.asarray(score, np.float64) - coef * kl.sum(-1)
    return reward, tokens if token_level else None, metrics

