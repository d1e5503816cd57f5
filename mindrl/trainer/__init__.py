"""The RL trainer: roles (roles/), the experience batch and how it is made, the one loop (loop.py),
checkpoints, metrics and the ``mindrl train`` command. Names load on first use (no mindspore import here)."""
import importlib

_EXPORTS = {"RLTrainer": "loop", "Experience": "experience"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
