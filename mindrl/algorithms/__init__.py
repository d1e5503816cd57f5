"""RL algorithm math, as small pure functions chosen by name (like verl's ``core_algos``).

- Host side (numpy, imported here, no MindSpore): ``advantages`` (the estimator registry: GRPO, Dr.GRPO, RLOO,
  REINFORCE++, REINFORCE++-baseline, GAE; reward shaping), ``kl_control`` (KL in the reward, fixed and adaptive
  coefficients), ``dapo`` (dynamic sampling, overlong penalty), ``sequence_reward`` (a sequence's reward from its
  parts, in one place), ``denominators``.
- Graph side (MindSpore): ``losses`` (agg_loss, the policy losses vanilla and gspo, value_loss, entropy,
  ActorLoss) and
  ``kl`` (KL estimators). They are loaded on first attribute access, so ``import mindrl.algorithms``
  stays cheap (msrun's scheduler process imports the entry script before ``init()``).
"""
from .advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    AdvantageInputs,
    discounted_returns,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    rloo_advantages,
    broadcast_to_tokens,
    dr_grpo_advantages,
    gae_advantages,
    get_advantage_estimator,
    group_ids,
    grpo_advantages,
    kl_penalized_token_rewards,
    kl_penalty_np,
    masked_mean_np,
    masked_whiten_np,
    register_advantage_estimator,
)
from .dapo import dynamic_sampling_keep_mask, overlong_penalty
from .kl_control import (KL_CONTROLLERS, AdaptiveKLController, FixedKLController, kl_reward_penalty,
                         make_kl_controller)
from .denominators import loss_denominator
from .sequence_reward import estimator_rewards, sequence_score
from .registry import LOSS_AGG_MODES, POLICY_LOSS_NAMES, KL_ESTIMATOR_ALIASES, canonical_kl_name

_LAZY = {
    "losses": (
        "masked_mean", "agg_loss", "policy_loss", "gspo_policy_loss", "POLICY_LOSSES", "get_policy_loss",
        "value_loss", "gae_returns", "ActorLoss",
    ),
    "kl": ("KL_ESTIMATORS", "get_kl_estimator", "kl_k1", "kl_k2", "kl_k3", "kl_abs"),
}


__all__ = [
    "ADVANTAGE_ESTIMATORS", "AdvantageEstimator", "AdvantageInputs", "discounted_returns",
    "reinforce_plus_plus_advantages", "reinforce_plus_plus_baseline_advantages", "rloo_advantages",
    "KL_CONTROLLERS", "AdaptiveKLController", "FixedKLController", "kl_reward_penalty", "make_kl_controller",
    "broadcast_to_tokens", "dr_grpo_advantages", "gae_advantages",
    "get_advantage_estimator", "group_ids", "grpo_advantages", "kl_penalized_token_rewards",
    "kl_penalty_np", "masked_mean_np", "masked_whiten_np", "register_advantage_estimator",
    "dynamic_sampling_keep_mask", "overlong_penalty", "loss_denominator", "estimator_rewards", "sequence_score",
    "LOSS_AGG_MODES", "POLICY_LOSS_NAMES", "KL_ESTIMATOR_ALIASES", "canonical_kl_name",
    *(n for names in _LAZY.values() for n in names),
]


def __getattr__(name):
    import importlib

    for mod, names in _LAZY.items():
        if name in names:
            return getattr(importlib.import_module(f".{mod}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
