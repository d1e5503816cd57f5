"""Per-token KL estimators between the current policy and the reference policy (MindSpore).

All take ``log_prob`` and ``ref_log_prob`` of the sampled tokens ([B, T]) and return a [B, T]
tensor; they run in GRAPH_MODE and PyNative and are differentiable w.r.t. ``log_prob``. With
``d = log_prob - ref_log_prob`` (an estimate of KL(pi || pi_ref) under samples from pi):

- ``kl`` (``k1``): ``d``. Unbiased, high variance, can be negative per token.
- ``abs``: ``|d|``.
- ``mse`` (``k2``): ``0.5 * d^2``.
- ``low_var_kl`` (``k3``): ``exp(-d) + d - 1`` (always >= 0, unbiased, low variance); ``-d`` is
  clamped to [-20, 20] before exp and the result to [-10, 10], as verl does, so one extreme
  token cannot blow up the loss.
"""
from mindspore import ops

from .registry import KL_ESTIMATOR_ALIASES, canonical_kl_name


def kl_k1(log_prob, ref_log_prob):
    return log_prob - ref_log_prob


def kl_abs(log_prob, ref_log_prob):
    return ops.abs(log_prob - ref_log_prob)


def kl_k2(log_prob, ref_log_prob):
    d = log_prob - ref_log_prob
    return 0.5 * d * d


def kl_k3(log_prob, ref_log_prob):
    nd = ops.clamp(ref_log_prob - log_prob, -20.0, 20.0)
    return ops.clamp(ops.exp(nd) - nd - 1.0, -10.0, 10.0)


KL_ESTIMATORS = {"kl": kl_k1, "abs": kl_abs, "mse": kl_k2, "low_var_kl": kl_k3}
assert set(KL_ESTIMATORS) == set(KL_ESTIMATOR_ALIASES)


def get_kl_estimator(name):
    """Estimator for ``rl_config.kl_penalty``; accepts ``k1``/``kl``, ``k2``/``mse``,
    ``k3``/``low_var_kl`` and ``abs``. Unknown name -> ValueError listing the valid names."""
    return KL_ESTIMATORS[canonical_kl_name(name)]
