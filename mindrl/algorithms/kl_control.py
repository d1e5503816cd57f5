"""KL as a reward penalty, with a fixed or an adaptive coefficient (numpy, on the host).

``rewards_t = score on the last token - beta * KL_t`` per token, where ``KL_t`` is the estimator ``kl_penalty``
between the rollout policy's log-probs and the reference's. The adaptive controller (Ziegler et al. 2019, as in
verl and MindSpeed-RL) moves ``beta`` towards a target KL: with ``e = clip(KL / target - 1, -0.2, 0.2)``,
``beta *= 1 + e * n_steps / horizon`` after each batch of ``n_steps`` sequences. It grows while the policy
drifts further than the target and shrinks while it stays closer.
"""
from __future__ import annotations

import numpy as np

from .advantages import kl_penalized_token_rewards, kl_penalty_np, masked_mean_np

KL_CONTROLLERS = ("fixed", "adaptive")


class FixedKLController:
    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"type": "fixed", "value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


class AdaptiveKLController(FixedKLController):
    def __init__(self, kl_coef: float, target: float, horizon: int):
        if not target > 0 or not horizon > 0:
            raise ValueError(f"the adaptive KL controller needs target > 0 and horizon > 0, got {target}, {horizon}")
        super().__init__(kl_coef)
        self.target, self.horizon = float(target), int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = float(np.clip(current_kl / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"type": "adaptive", "value": self.value, "target": self.target, "horizon": self.horizon}


def make_kl_controller(kind: str, kl_coef: float, target: float = 0.1, horizon: int = 10000):
    if kind == "fixed":
        return FixedKLController(kl_coef)
    if kind == "adaptive":
        return AdaptiveKLController(kl_coef, target, horizon)
    raise ValueError(f"unknown kl_ctrl_type {kind!r}; valid: {', '.join(KL_CONTROLLERS)}")


def kl_reward_penalty(scores, log_probs, ref_log_probs, response_mask, controller, kl_penalty="kl"):
    """Token rewards with the KL penalty, and the controller stepped once.

    Returns ``(token_rewards [N, T] float32, kl [N, T] float64, metrics)``; ``metrics`` holds MindSpeed-RL's
    ``actor/reward_kl_penalty`` (mean over sequences of each one's mean token KL) and
    ``actor/reward_kl_penalty_coeff`` (the coefficient used for this batch, before the update).
    """
    m = np.asarray(response_mask, np.float64)
    kl = kl_penalty_np(log_probs, ref_log_probs, kl_penalty).astype(np.float64) * m
    beta = controller.value
    rewards = kl_penalized_token_rewards(scores, kl, m, beta)
    current = float(np.mean(masked_mean_np(kl, m, axis=-1))) if len(m) else 0.0
    controller.update(current, n_steps=len(m))
    return rewards, kl, {"actor/reward_kl_penalty": current, "actor/reward_kl_penalty_coeff": beta}
