"""Truncated importance sampling (TIS) of the policy loss, for tokens sampled by another policy than the one the
update's old log-probs come from: an older one (partial rollout), or the rollout's own numerics.

Each token's clipped PPO loss is multiplied by ``w = min(exp(old_log_prob - rollout_log_prob), cap)``. ``w`` is
positive and carries no gradient, and the clipped surrogate is homogeneous in the advantage
(``max(-A w r, -A w clip(r)) = w max(-A r, -A clip(r))``, the dual clip's bound too), so the update takes
``A * w`` as its advantages: the graph is the one without TIS.
"""
from __future__ import annotations

import numpy as np

_MAX_LOG_RATIO = 20.0


def tis_weights(old_log_probs: np.ndarray, rollout_log_probs: np.ndarray, mask: np.ndarray, cap: float):
    """(weights [N, R] float32, 1 outside ``mask``; metrics ``actor/tis_ratio_mean`` (the ratio before the cap,
    mean over the masked tokens) and ``actor/tis_clipfrac`` (share of those tokens the cap cut))."""
    log_ratio = np.clip(old_log_probs.astype(np.float64) - rollout_log_probs.astype(np.float64),
                        -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = np.exp(log_ratio)
    on = mask > 0
    weights = np.where(on, np.minimum(ratio, cap), 1.0).astype(np.float32)
    count = max(1, int(on.sum()))
    return weights, {"actor/tis_ratio_mean": float(ratio[on].sum() / count),
                     "actor/tis_clipfrac": float((ratio[on] > cap).sum() / count)}
