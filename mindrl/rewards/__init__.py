"""Rewards: rule verifiers chosen by name and their weighted sum over a batch.

``RewardComputer(verifier_function, verifier_weight, custom_reward_file)`` is the entry point;
``register_reward("name")`` lets a user file add a verifier. Every reward call, built-in or custom, has a time
limit and its value is checked (``containment.py``). Importing this package is cheap (no MindSpore, no
math-verify: the reward calls and math-verify run in worker processes).
"""
from .computer import RewardComputer, RewardError, RewardOutput
from .custom import load_custom_reward_file
from .math_pool import MathVerifyPool
from .mindspeed_verifiers import format_reward, strict_format_reward
from .verifiers import (
    VERIFIERS,
    extract_math_answer,
    get_verifier,
    last_boxed,
    last_number,
    last_number_reward,
    math_acc,
    math_score_batch,
    r1_format_reward,
    r1_strict_format_reward,
    register_reward,
    valid_verifier_names,
)

__all__ = [
    "RewardComputer", "RewardError", "RewardOutput", "load_custom_reward_file", "MathVerifyPool", "VERIFIERS",
    "extract_math_answer", "format_reward", "get_verifier", "last_boxed", "last_number",
    "last_number_reward", "math_acc", "math_score_batch", "r1_format_reward", "r1_strict_format_reward",
    "register_reward", "strict_format_reward", "valid_verifier_names",
]
