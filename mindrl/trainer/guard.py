"""The numerical guard: a step whose reward, loss or gradient norm is not finite changes nothing (its updates were
skipped, weights and optimizer state untouched), and too many such steps in a row stop the run."""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("mindrl.train")


class TrainingDiverged(RuntimeError):
    """Too many consecutive steps with non-finite rewards, losses or gradients (or non-finite weights to save)."""


class NumericalGuard:
    def __init__(self, limit: int, announce: bool):
        self.limit, self.announce = limit, announce  # rl_config.max_bad_steps; log on the main rank only
        self.bad_steps = 0

    def check(self, step: int, metrics: dict, reward_ok: bool, newest_checkpoint=None) -> None:
        """Count the step if a quantity went bad; raise TrainingDiverged after ``limit`` such steps in a row."""
        bad = [] if reward_ok else ["reward (critic/score/mean)"]
        bad += sorted(k for k, v in metrics.items() if k.split("/")[0] in ("actor", "critic")
                      and k != "critic/score/mean" and isinstance(v, float) and not np.isfinite(v))
        if not bad:
            self.bad_steps = 0
            return
        self.bad_steps += 1
        if self.announce:
            log.warning("step %d: non-finite %s; its updates were skipped (weights and optimizer state unchanged), "
                        "%d such step(s) in a row of rl_config.max_bad_steps=%d", step, ", ".join(bad),
                        self.bad_steps, self.limit)
        if self.bad_steps >= self.limit:
            newest = newest_checkpoint() if newest_checkpoint else None
            raise TrainingDiverged(
                f"{self.bad_steps} steps in a row had a non-finite {', '.join(bad)} (rl_config.max_bad_steps="
                f"{self.limit}); stopping at step {step}. Weights were not updated by those steps"
                + (f"; the newest checkpoint is {newest}" if newest else "")
                + ". Lower the learning rate (actor_config.lr), check the reward function, or raise clip_grad.")

    @staticmethod
    def refuse_non_finite(roles, step: int) -> None:
        """Before a save: a checkpoint with NaN would resume into NaN, so none is written."""
        for role in roles:
            bad = role.non_finite()
            if bad:
                raise TrainingDiverged(f"step {step}: the {role.name}'s {bad[0]} (and {len(bad) - 1} more) "
                                       f"hold non-finite values; no checkpoint was written")
