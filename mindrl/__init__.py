"""mindrl: MindSpore-native RL post-training (GRPO / PPO) for large language models.

Importing the package is cheap on purpose: msrun starts a scheduler process that runs the
entry script up to ``init()``, so nothing here may import mindspore or touch the disk.
"""
__version__ = "0.1.0"

_API = {"GRPOTrainer": "mindrl.api", "PPOTrainer": "mindrl.api", "RLTrainer": "mindrl.trainer.loop",
        "load_config": "mindrl.api"}
__all__ = ["__version__", *_API]


def __getattr__(name):
    """``from mindrl import GRPOTrainer, load_config``: imported on first use, so ``import mindrl`` stays cheap."""
    if name in _API:
        import importlib
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'mindrl' has no attribute {name!r}")

