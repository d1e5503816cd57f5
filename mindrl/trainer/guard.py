"""The numerical guard: it says what happened to the weights, update by update, and stops a run that diverged.

A step whose reward, loss or gradient norm is not finite is a bad step. Of its updates, one whose gradient norm is
not finite was skipped (weights and optimizer state untouched), and the others were applied: the guard names each,
because "the step's updates were skipped" was said of steps whose first update had blown the weights up.
``rl_config.max_bad_steps`` bad steps in a row stop the run; an applied update that left non-finite weights stops
it at once (no later update can repair them, and no checkpoint may hold them).

A stopped run offers only a checkpoint whose weights were seen to give a finite gradient afterwards (the first
update of the next step). Finite is not enough: weights a 1e30 learning rate threw to 1e30 are finite, and the
checkpoint saved right after that update held them.
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, Optional

import numpy as np

log = logging.getLogger("mindrl.train")
ADVICE = ("Lower the learning rate (actor_config.lr), check the reward function, or clip gradients harder (a lower "
          "clip_grad).")


class TrainingDiverged(RuntimeError):
    """Too many consecutive steps with non-finite rewards, losses or gradients, non-finite weights after an
    update, or non-finite weights to save."""


def describe_updates(name: str, updates) -> str:
    """One network's updates of a step, e.g. ``actor update 1 of 2 applied, update 2 skipped (gradient norm inf)``
    (``updates``: an updater's UpdateLog)."""
    norms, parts, i = updates.norms, [], 0
    while i < len(norms):
        applied, j = bool(np.isfinite(norms[i])), i
        while j + 1 < len(norms) and bool(np.isfinite(norms[j + 1])) == applied:
            j += 1
        which = (f"update {i + 1}" if i == j else f"updates {i + 1}-{j + 1}") + ("" if parts else f" of {updates.planned}")
        parts.append(f"{which} applied" if applied else
                     f"{which} skipped (gradient norm {', '.join(sorted({str(n) for n in norms[i:j + 1]}))})")
        i = j + 1
    return f"{name} " + ", ".join(parts)


class NumericalGuard:
    def __init__(self, limit: int, announce: bool):
        self.limit, self.announce = limit, announce  # rl_config.max_bad_steps; log on the main rank only
        self.bad_steps = 0
        self.streak = []      # what happened at each bad step of the current run of them
        self.trusted = None   # the newest step whose weights gave a finite gradient afterwards

    def check(self, step: int, metrics: dict, reward_ok: bool, updated: Dict[str, object],
              checkpoint_at: Optional[Callable[[int], Optional[str]]] = None) -> None:
        """After step ``step``: ``updated`` maps a name ("actor", "critic") to each role that ran its updates
        this step (its ``updater.log`` says how they went); ``checkpoint_at(s)`` is the newest intact checkpoint
        saved at step ``s`` or before. Raises TrainingDiverged to stop the run."""
        ran = {name: role.updater.log for name, role in updated.items() if role.updater.log.norms}
        if reward_ok and ran and all(np.isfinite(u.norms[0]) for u in ran.values()):
            self.trusted = step - 1  # the weights this step started from gave finite losses and gradients
        for name, u in ran.items():
            if not u.weights_finite:
                bad = updated[name].non_finite()
                raise TrainingDiverged(
                    f"step {step}: {name} update {len(u.norms)} of {u.planned} was applied and left non-finite weights "
                    f"({bad[0] if bad else 'on another rank'}{f' and {len(bad) - 1} more' if len(bad) > 1 else ''}); "
                    f"stopping at once: no later update can repair them. {self._offer(checkpoint_at)}. {ADVICE}")
        bad = [] if reward_ok else ["reward (critic/score/mean)"]
        bad += sorted(k for k, v in metrics.items() if k.split("/")[0] in ("actor", "critic")
                      and k != "critic/score/mean" and isinstance(v, float) and not np.isfinite(v))
        if not bad:
            self.bad_steps, self.streak = 0, []
            return
        self.bad_steps += 1
        self.streak.append(f"step {step}: {self._what_happened(reward_ok, ran)}")
        if self.announce:
            log.warning("step %d: non-finite %s; %s; %d such step(s) in a row of rl_config.max_bad_steps=%d", step,
                        ", ".join(bad), self._what_happened(reward_ok, ran), self.bad_steps, self.limit)
        if self.bad_steps >= self.limit:
            raise TrainingDiverged(
                f"{self.bad_steps} steps in a row had a non-finite {', '.join(bad)} (rl_config.max_bad_steps="
                f"{self.limit}); stopping at step {step}. {'; '.join(self.streak)}. {self._offer(checkpoint_at)}. "
                f"{ADVICE}")

    @staticmethod
    def _what_happened(reward_ok: bool, ran: dict) -> str:
        if not reward_ok:
            return "no update was made (a non-finite reward would poison every advantage): weights and optimizer " \
                   "state unchanged"
        if not ran:
            return "no update was made: weights and optimizer state unchanged"
        applied = any(np.isfinite(n) for u in ran.values() for n in u.norms)
        return "; ".join(describe_updates(name, u) for name, u in ran.items()) + (
            ": the weights changed" if applied else ": weights and optimizer state unchanged")

    def _offer(self, checkpoint_at) -> str:
        found = checkpoint_at(self.trusted) if checkpoint_at and self.trusted is not None else None
        if found:
            return (f"The newest checkpoint whose weights gave finite gradients afterwards is {found}: resume from it "
                    f"with actor_config.finetune=false actor_config.load={found}")
        return "No checkpoint of this run holds weights from before the divergence"

    @staticmethod
    def refuse_non_finite(roles, step: int) -> None:
        """Before a save: a checkpoint with NaN would resume into NaN, so none is written."""
        for role in roles:
            bad = role.non_finite()
            if bad:
                raise TrainingDiverged(f"step {step}: the {role.name}'s {bad[0]} (and {len(bad) - 1} more) "
                                       f"hold non-finite values; no checkpoint was written")
