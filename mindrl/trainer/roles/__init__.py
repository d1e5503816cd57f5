"""The models of an RL run, one role each: each builds its network(s) in its layout, loads, saves its part of a
checkpoint, lists its strategy-file stages and compiles its graphs in a fixed order.

- :class:`Policy`: train and infer networks, the actor update, the in-place reshard (roles/policy.py)
- :class:`Reference`: frozen log-probs for the KL term (roles/reference.py)
- :class:`Critic`: PPO's value model with its own optimizer (roles/critic.py)
- :class:`RewardScorer`: a trained reward model scoring rollouts (roles/reward_model.py)
"""
from mindrl.trainer.roles.base import Stage, TrainedNetwork, write_strategy
from mindrl.trainer.roles.critic import Critic
from mindrl.trainer.roles.policy import Policy
from mindrl.trainer.roles.reference import Reference
from mindrl.trainer.roles.reward_model import RewardScorer

__all__ = ["Critic", "Policy", "Reference", "RewardScorer", "Stage", "TrainedNetwork", "write_strategy"]
