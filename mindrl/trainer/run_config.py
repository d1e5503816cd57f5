"""A run's own ``config.yaml``: the config it ran with, written so that it reruns, and the command that resumes it.

``cfg.to_dict()`` keeps what the user gave with the placeholders the run filled in (``<run_id>``, ``<run_dir>``), so
``mindrl train --config <run dir>/config.yaml`` starts a new run of its own. A resume writes the file again (an
override such as ``rl_config.train_iters=8`` belongs to the run from then on), but keeps the weights the run started
from: the file describes the run, and rerunning it must not resume it.
"""
from __future__ import annotations

import os
import shlex
from typing import Optional

from mindrl.config.yaml_io import dump_yaml, parse_yaml
from mindrl.io import write_text
from mindrl.trainer.metrics import LogWriteFailed

CONFIG = "config.yaml"
# per command: the section holding the weights a run starts from and the keys a resume overrides
_START_KEYS = {"train": (("actor_config", "critic_config"), ("finetune", "load")),
               "train-rm": (("rm_config",), ("finetune", "load")),
               "sft": (("sft_config",), ("finetune", "load")),
               "dpo": (("dpo_config",), ("finetune", "load"))}


def resume_command(command: str, run_dir: str, checkpoint: str, extra=()) -> str:
    """The command line that resumes the run in ``run_dir`` from ``checkpoint``, as a user types it. ``extra``: the
    overrides its config.yaml needs besides (:func:`resume_extra`)."""
    section = _START_KEYS[command][0][0]
    return " ".join([f"mindrl {command} --config {shlex.quote(os.path.join(run_dir, CONFIG))} {section}.finetune=false "
                     f"{section}.load={shlex.quote(checkpoint)}", *extra])


def resume_extra(data: dict) -> list:
    """Overrides a resume of the config mapping ``data`` needs: a critic started from other weights
    (critic_config.load) resumes from the checkpoint's critic/ part, and the key must go."""
    return ["critic_config.load=null"] if (data.get("critic_config") or {}).get("load") else []


def write_run_config(cfg, command: str, resumed: bool, checkpoints: Optional[str]) -> str:
    """Write ``<run dir>/config.yaml`` (main rank) and return its path. ``checkpoints``: the run's save directory.
    A file that cannot be written (full disk, no permission) is LogWriteFailed, which every command reports in one
    line."""
    run_dir = cfg.logging.log_dir
    path = os.path.join(run_dir, CONFIG)
    data = cfg.to_dict()
    if resumed and os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            _keep_start(data, parse_yaml(fh.read(), path) or {}, command)
    cfg.meta.resume_extra = resume_extra(data)  # for the line a stopped run prints (stopping.py)
    name = f"{cfg.logging.name}/{cfg.logging.run_id}"
    header = [f"# The config of run {name}, as it ran (defaults left out; <run_id> and <run_dir> are filled per run).",
              f"# A new run with it:  mindrl {command} --config {shlex.quote(path)}",
              f"# Resume this run:    {resume_command(command, run_dir, checkpoints, cfg.meta.resume_extra)}"
              if checkpoints else
              "# (This run saves no checkpoints, so it cannot be resumed.)"]
    try:
        write_text(path, "\n".join(header) + "\n" + dump_yaml(data))
    except OSError as err:
        raise LogWriteFailed(f"cannot write {path}: {err.strerror or err}") from None
    return path


def _keep_start(data: dict, before: dict, command: str) -> None:
    """Put the previous file's starting weights (``finetune``, ``load``) back into ``data``."""
    sections, keys = _START_KEYS[command]
    for section in sections:
        if section not in data:
            continue
        old = before.get(section) or {}
        for key in keys:
            if key in old:
                data[section][key] = old[key]
            else:
                data[section].pop(key, None)

