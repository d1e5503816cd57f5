"""Saving and resuming a run: every trained role writes its part, the trainer state goes beside them, and the
main rank seals the directory (checkpoint.py has the layout)."""
from __future__ import annotations

import json
import logging
import os
import shutil
from typing import List, Optional

import numpy as np

from mindrl.io import atomic_path, remove_stale_staging, write_json
from mindrl.trainer import checkpoint as ck

log = logging.getLogger("mindrl.train")


class SaveFailed(RuntimeError):
    """A checkpoint could not be written (disk full, directory gone, ...); the earlier ones are untouched."""


class Checkpointer:
    """The run's checkpoints under actor_config.save (``root``): saving (a collective), finding the newest, and
    resuming from actor_config.load when finetune is false."""

    def __init__(self, run, roles: List, actor):
        self.run, self.roles = run, roles  # trained roles: each saves into <iter>/<role.name>/
        self.root, self.keep_last = actor.save, actor.keep_last
        self.resume_from = None if actor.finetune or not actor.load else actor.load
        # every rank names the staging directory after the main rank's pid (exact in float32: pids are < 2**22)
        self.owner = int(run.exchange.all_sum(np.array([os.getpid() if run.topo.is_main else 0], np.float32))[0])
        root = self.root
        if root and run.topo.is_main:
            for path in remove_stale_staging(root):
                log.warning("removed %s: a save that did not finish (the process was killed or failed) left it", path)

    def save(self, step: int, state: dict) -> str:
        """A collective: every rank calls it. Returns the checkpoint directory. A failure to write removes what
        was staged and raises SaveFailed naming the file; the newest complete checkpoint stays the newest."""
        run, root = self.run, self.root
        pending = ck.pending_dir(root, step, self.owner)
        try:
            if run.topo.is_main:
                ck.begin(root, step, self.owner)
            run.exchange.barrier()
            for role in self.roles:
                role.save(os.path.join(pending, role.name))
            run.exchange.barrier()
            path = ck.iter_dir(root, step)
            if run.topo.is_main:
                ck.save_trainer_state(pending, state)
                path = ck.finalize(root, step, self.keep_last, self.owner)
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
        root = self.root
        step = ck.latest_step(root) if root and os.path.isdir(root) else None
        return ck.iter_dir(root, step) if step is not None else None

    def newest_intact(self, at_most: int) -> Optional[str]:
        """The newest checkpoint of this run's save root saved at step ``at_most`` or before whose files match its
        manifest (the one the numerical guard offers), or None."""
        return ck.newest_intact(self.root, at_most) if self.root else None

    def resume(self) -> Optional[dict]:
        """With ``actor_config.finetune: false``, restore the optimizers from ``load`` and return the trainer
        state saved there (the caller restores step, data position, RNG seed, KL controller)."""
        if self.resume_from is None:
            return None
        directory = ck.resolve(self.resume_from)
        state = ck.load_trainer_state(directory)
        for role in self.roles:  # each role's own no_load_optim: a fresh critic optimizer keeps the actor's
            if role.spec.optim.load_optimizer:
                role.load_optimizer(directory)
        log.info("resumed from %s at step %d", directory, int(state["step"]))
        return state


# the keys a resume must keep: they decide which prompts come next and how they are sampled, so a resume with other
# values would not continue the run it names (start a new one from the checkpoint's weights instead)
RESUME_KEYS = ("data.shuffle", "data.seed", "rl_config.global_batch_size", "rl_config.gen_batch_size",
               "rl_config.n_samples_per_prompt", "runtime.seed", "generate_config.seed")


def resume_keys(cfg) -> dict:
    values = {}
    for key in RESUME_KEYS:
        section, name = key.split(".")
        values[key] = getattr(getattr(cfg, section), name)
    return values


def resumed_step(load: str) -> int:
    """The step the checkpoint ``load`` (a save directory or an ``iter_*`` one) resumes at."""
    return int(ck.load_trainer_state(ck.resolve(load))["step"])


class RunState:
    """What besides the weights a resumed run needs to repeat the uninterrupted one (trainer_state.json): the step,
    the rollout's draws and data position, PPO-ptx's data position, the KL controller, the run's seed, and the
    config values a resume must keep (``resume_keys``)."""

    def __init__(self, run, maker, kl_ctrl=None, ptx=None, keys: Optional[dict] = None):
        self.run, self.maker, self.kl_ctrl, self.ptx, self.keys = run, maker, kl_ctrl, ptx, dict(keys or {})
        self.step = 0

    def state_dict(self) -> dict:
        run = self.run
        state = {"step": self.step, **self.maker.state_dict(),
                 "rng": {"seed": run.seed, "sampler": "numpy PCG64 seeded from (seed, draw, replica)"},
                 "layout": {name: [lay.dp, lay.tp] for name, lay in run.topo.layouts.items()},
                 "resume_keys": self.keys}
        if self.kl_ctrl is not None:
            state["kl_ctrl"] = self.kl_ctrl.state_dict()
        if self.ptx is not None:
            state["ptx_data"] = self.ptx.state_dict()
        return state

    def load_state_dict(self, state: Optional[dict], restore_seed: bool = True) -> None:
        """The inverse of :meth:`state_dict` (the optimizers were restored by :meth:`Checkpointer.resume`); None:
        a new run. ``restore_seed``: take the saved run's seed (not actor_config.no_load_rng)."""
        if state is None:
            return
        self.step = int(state["step"])
        self.maker.load_state_dict(state)
        if self.kl_ctrl is not None and "kl_ctrl" in state:
            self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        if self.ptx is not None and "ptx_data" in state:
            self.ptx.load_state_dict(state["ptx_data"])
        if restore_seed and state.get("rng", {}).get("seed") is not None:
            self.run.seed = int(state["rng"]["seed"])


class BestCheckpoint:
    """``actor_config.save_best``: the checkpoint of the step where the held-out metric was highest, kept as
    ``<save>/best`` (a complete checkpoint: files hard-linked from its ``iter_*`` directory, so pruning the latter
    frees nothing twice and costs no copy) with ``<save>/best/best.json`` saying which step and value it holds."""

    NAME = "best"

    @classmethod
    def create(cls, schedule, is_main: bool) -> Optional["BestCheckpoint"]:
        """From the run plan's schedule (save root, save_best); None without save_best."""
        return cls(schedule.save, schedule.save_best, is_main) if schedule.save_best else None

    def __init__(self, root: str, metric: str, is_main: bool):
        self.root, self.metric, self.is_main = root, metric, is_main
        self.value, self.step = None, None
        info = os.path.join(root, self.NAME, "best.json")
        if os.path.exists(info):  # a resumed run keeps competing with what it already found
            with open(info) as fh:
                saved = json.load(fh)
            if saved.get("metric") == metric:
                self.value, self.step = float(saved["value"]), int(saved["step"])

    def better(self, metrics: dict) -> bool:
        value = metrics.get(self.metric)
        return value is not None and np.isfinite(value) and (self.value is None or value > self.value)

    def keep(self, checkpoint: str, step: int, value: float) -> str:
        """Make ``<save>/best`` a copy of ``checkpoint`` (main rank; atomically replaces the previous best)."""
        self.value, self.step = float(value), int(step)
        target = os.path.join(self.root, self.NAME)
        if self.is_main:
            with atomic_path(target, directory=True) as tmp:
                for dirpath, _, names in os.walk(checkpoint):
                    out = os.path.join(tmp, os.path.relpath(dirpath, checkpoint))
                    os.makedirs(out, exist_ok=True)
                    for name in names:
                        link_or_copy(os.path.join(dirpath, name), os.path.join(out, name))
                write_json(os.path.join(tmp, "best.json"), {"metric": self.metric, "value": self.value,
                                                            "step": self.step, "source": os.path.basename(checkpoint)})
            log.info("best %s so far (%.4f at step %d): kept as %s", self.metric, self.value, self.step, target)
        return target


def link_or_copy(src: str, dst: str) -> None:
    """A hard link of ``src`` at ``dst`` (no copy of the bytes), or a copy where links cannot be made."""
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or links not allowed
        shutil.copy2(src, dst)
