"""Saving and resuming a run: every trained role writes its part, the trainer state goes beside them, and the
main rank seals the directory (checkpoint.py has the layout)."""
from __future__ import annotations

import logging
import os
import shutil
from typing import List, Optional

import numpy as np

from mindrl.io import remove_stale_staging
from mindrl.trainer import checkpoint as ck

log = logging.getLogger("mindrl.train")


class SaveFailed(RuntimeError):
    """A checkpoint could not be written (disk full, directory gone, ...); the earlier ones are untouched."""


class Checkpointer:
    def __init__(self, run, roles: List):
        self.run, self.roles = run, roles  # trained roles: each saves into <iter>/<role.name>/
        root = run.cfg.actor_config.save
        if root and run.topo.is_main:
            for path in remove_stale_staging(root):
                log.warning("removed %s: a save that did not finish (the process was killed or failed) left it", path)

    def save(self, step: int, state: dict) -> str:
        """A collective: every rank calls it. Returns the checkpoint directory. A failure to write removes what
        was staged and raises SaveFailed naming the file; the newest complete checkpoint stays the newest."""
        run, cfg = self.run, self.run.cfg
        root = cfg.actor_config.save
        pending = ck.pending_dir(root, step)
        try:
            if run.topo.is_main:
                ck.begin(root, step)
            run.exchange.barrier()
            for role in self.roles:
                role.save(os.path.join(pending, role.name))
            run.exchange.barrier()
            path = ck.iter_dir(root, step)
            if run.topo.is_main:
                ck.save_trainer_state(pending, state)
                path = ck.finalize(root, step, cfg.actor_config.keep_last)
        except OSError as err:
            shutil.rmtree(pending, ignore_errors=True)
            newest = self.newest()
            raise SaveFailed(f"writing checkpoint {step} failed: {err.strerror or err} "
                             f"({err.filename or root}); nothing of it was kept. "
                             + (f"The newest complete checkpoint is still {newest}." if newest
                                else "No earlier checkpoint exists.")) from err
        run.exchange.barrier()
        log.info("saved checkpoint %s", path)
        return path

    def newest(self) -> Optional[str]:
        """The newest complete checkpoint directory of this run's save root, or None."""
        root = self.run.cfg.actor_config.save
        step = ck.latest_step(root) if root and os.path.isdir(root) else None
        return ck.iter_dir(root, step) if step is not None else None

    def resume(self) -> Optional[dict]:
        """With ``actor_config.finetune: false``, restore the optimizers from ``load`` and return the trainer
        state saved there (the caller restores step, data position, RNG seed, KL controller)."""
        actor = self.run.cfg.actor_config
        if actor.finetune or not actor.load:
            return None
        directory = ck.resolve(actor.load)
        state = ck.load_trainer_state(directory)
        for role in self.roles:  # each role's own no_load_optim: a fresh critic optimizer keeps the actor's
            if not role.section.no_load_optim:
                role.load_optimizer(directory)
        log.info("resumed from %s at step %d", directory, int(state["step"]))
        return state


def run_state(trainer) -> dict:
    """What besides the weights a resumed run needs to repeat the uninterrupted one (trainer_state.json)."""
    state = {"step": trainer.step, **trainer.maker.state_dict(),
             "rng": {"seed": trainer.run.seed, "sampler": "numpy PCG64 seeded from (seed, draw, replica)"},
             "layout": {name: [lay.dp, lay.tp] for name, lay in trainer.run.topo.layouts.items()},
             "config_fingerprint": trainer.cfg.fingerprint()}
    if trainer.kl_ctrl is not None:
        state["kl_ctrl"] = trainer.kl_ctrl.state_dict()
    if trainer.policy.ptx is not None:
        state["ptx_data"] = trainer.policy.ptx.state_dict()
    return state


def restore_run_state(trainer, state: Optional[dict]) -> None:
    """The inverse of :func:`run_state` (the optimizers were restored by :meth:`Checkpointer.resume`)."""
    if state is None:
        return
    trainer.step = int(state["step"])
    trainer.maker.load_state_dict(state)
    if trainer.kl_ctrl is not None and "kl_ctrl" in state:
        trainer.kl_ctrl.load_state_dict(state["kl_ctrl"])
    if trainer.policy.ptx is not None and "ptx_data" in state:
        trainer.policy.ptx.load_state_dict(state["ptx_data"])
    if not trainer.cfg.actor_config.no_load_rng and state.get("rng", {}).get("seed") is not None:
        trainer.cfg.runtime.seed = int(state["rng"]["seed"])


class BestCheckpoint:
    """``actor_config.save_best``: the checkpoint of the step where the held-out metric was highest, kept as
    ``<save>/best`` (a complete checkpoint: files hard-linked from its ``iter_*`` directory, so pruning the latter
    frees nothing twice and costs no copy) with ``<save>/best/best.json`` saying which step and value it holds."""

    NAME = "best"

    @classmethod
    def create(cls, actor, is_main: bool) -> Optional["BestCheckpoint"]:
        return cls(actor.save, actor.save_best, is_main) if actor.save_best else None

    def __init__(self, root: str, metric: str, is_main: bool):
        self.root, self.metric, self.is_main = root, metric, is_main
        self.value, self.step = None, None
        info = os.path.join(root, self.NAME, "best.json")
        if os.path.exists(info):  # a resumed run keeps competing with what it already found
            import json
            with open(info) as fh:
                saved = json.load(fh)
            if saved.get("metric") == metric:
                self.value, self.step = float(saved["value"]), int(saved["step"])

    def better(self, metrics: dict) -> bool:
        value = metrics.get(self.metric)
        return value is not None and np.isfinite(value) and (self.value is None or value > self.value)

    def keep(self, checkpoint: str, step: int, value: float) -> str:
        """Make ``<save>/best`` a copy of ``checkpoint`` (main rank; atomically replaces the previous best)."""
        from mindrl.io import atomic_path, write_json
        self.value, self.step = float(value), int(step)
        target = os.path.join(self.root, self.NAME)
        if self.is_main:
            with atomic_path(target, directory=True) as tmp:
                for dirpath, _, names in os.walk(checkpoint):
                    out = os.path.join(tmp, os.path.relpath(dirpath, checkpoint))
                    os.makedirs(out, exist_ok=True)
                    for name in names:
                        _link_or_copy(os.path.join(dirpath, name), os.path.join(out, name))
                write_json(os.path.join(tmp, "best.json"), {"metric": self.metric, "value": self.value,
                                                            "step": self.step, "source": os.path.basename(checkpoint)})
            log.info("best %s so far (%.4f at step %d): kept as %s", self.metric, self.value, self.step, target)
        return target


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or links not allowed
        shutil.copy2(src, dst)
