"""A training loop's side of a stop request (interrupt.py has the signals): check at every step boundary, save the
step just finished, and say how to resume. `mindrl train` and `mindrl train-rm` both use it."""
from __future__ import annotations

from typing import Callable, Optional

from mindrl.trainer import interrupt
from mindrl.trainer.run_config import resume_command


class Stopper:
    """``command``: "train" or "train-rm" (for the resume line); ``key``: the config section holding ``save``;
    ``save_root``: the run's checkpoint directory (None: it saves none); ``step()``: steps finished so far;
    ``save()``: write a checkpoint of the current step (a collective) and return its directory."""

    def __init__(self, command: str, key: str, run_dir: str, save_root: Optional[str], total: int,
                 step: Callable[[], int], save: Callable[[], str], newest: Optional[str], topo, exchange, extra=()):
        self.command, self.key, self.run_dir, self.save_root, self.total = command, key, run_dir, save_root, total
        self.extra = list(extra)  # overrides the resume line needs besides (run_config.resume_extra)
        self.step, self._save, self.topo, self.exchange = step, save, topo, exchange
        self.signum, self.last = None, (newest, None)  # (newest checkpoint, the step it holds when this run wrote it)
        interrupt.listen(self._describe, self._lost(), topo.is_main)

    def _describe(self) -> str:
        then = "saving a checkpoint, " if self.save_root else ""
        note = "" if self.save_root else f" ({self.key}.save is not set: nothing will be resumable)"
        return (f"finishing step {self.step() + 1} of {self.total}, then {then}writing the report and stopping{note}; "
                f"press Ctrl-C again to stop at once")

    def _lost(self) -> str:
        newest = self.last[0]
        if not newest:
            return "no checkpoint was written, so nothing can be resumed"
        return f"the steps after the newest checkpoint are lost; resume with: {self.resume_command(newest)}"

    def resume_command(self, checkpoint: str) -> str:
        return resume_command(self.command, self.run_dir, checkpoint, self.extra)

    def now(self) -> bool:
        """At a step boundary, on every rank: True when a stop was asked for on any rank."""
        self.signum = interrupt.agreed(self.exchange, self.topo.world)
        return self.signum is not None

    def saved(self, path: Optional[str]) -> None:
        """A checkpoint of the current step was written (by the loop's own schedule)."""
        if path:
            self.last = (path, self.step())
            interrupt.update(self._lost())

    def checkpoint(self) -> Optional[str]:
        """The checkpoint of the step the run stops after: the one just written, else a new one (every rank)."""
        path, step = self.last
        if step == self.step():
            return path
        if not self.save_root or self.step() == 0:
            return None
        interrupt.update(f"the checkpoint of step {self.step()} was being written and is not complete; "
                         + self._lost())
        self.saved(self._save())
        return self.last[0]

    def stopped(self, checkpoint: Optional[str]) -> interrupt.RunInterrupted:
        """Print (main rank) why and after which step the run stopped and how to resume; the exception to raise."""
        name, step = interrupt.signal_name(self.signum), self.step()
        resume = self.resume_command(checkpoint) if checkpoint else None
        if self.topo.is_main:
            if step == 0:
                why = "before its first step: nothing was trained or saved; run the same command again to start over"
            elif resume:
                why = f"after step {step} of {self.total}, saved in {checkpoint}. Resume with:\n  {resume}"
                if self.topo.world > 1:  # the same overrides, given to the launcher that started the workers
                    why += (f"\n  (on {self.topo.world} processes: the same overrides after CONFIG="
                            f"{self.run_dir}/config.yaml bash scripts/run_grpo.sh, or your own launcher)")
            elif not self.save_root:
                why = (f"after step {step} of {self.total}; {self.key}.save is not set, so nothing was saved and the "
                       f"run cannot be resumed")
            else:
                why = f"after step {step} of {self.total}; no checkpoint was written, so it cannot be resumed"
            print(f"stopped by {name} {why}", flush=True)
        interrupt.stop_listening()
        return interrupt.RunInterrupted(self.signum, checkpoint, resume)

    def close(self) -> None:
        interrupt.stop_listening()

    def __enter__(self) -> "Stopper":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stopper_of(trainer) -> Stopper:
    """The Stopper of an RL trainer (loop.py)."""
    cfg = trainer.cfg
    return Stopper("train", "actor_config", cfg.logging.log_dir, cfg.actor_config.save, cfg.rl_config.train_iters,
                   lambda: trainer.step, trainer.save, trainer.checkpointer.newest(), trainer.run.topo,
                   trainer.run.exchange, cfg.meta.resume_extra)
