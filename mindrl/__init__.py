"""mindrl: MindSpore-native RL post-training (GRPO / PPO) for large language models.

Importing the package is cheap on purpose: msrun starts a scheduler process that runs the
entry script up to ``init()``, so nothing here may import mindspore or touch the disk.
"""
__version__ = "0.1.0"
