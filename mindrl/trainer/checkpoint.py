"""Training checkpoints: one subdirectory per trained role, written atomically, listed by a manifest.

Layout of ``actor_config.save`` (Megatron/MindSpeed users know the tracker file)::

    save/
      latest_checkpointed_iteration.txt      # "10": the newest complete checkpoint
      iter_0000010/
        trainer_state.json                   # step, data position, RNG seed, KL controller, layouts
        policy/                              # an HF model directory: transformers and mindrl load it as is
          config.json, model.safetensors, tokenizer files
          optimizer.safetensors              # adam_m.*, adam_v.*, global_step (full tensors, HF orientation)
          rank_checkpoints/rank_<r>/checkpoint_<r>.ckpt, strategy/   # multi-rank runs: MindSpore's own format
        critic/                              # PPO: the value model, the same files
        manifest.json                        # every file with its size and xxh3 checksum: written last, checked
                                             # before any file is used (weights, optimizer, trainer state)

Checkpoints written before roles existed hold the policy's files at the ``iter_*`` root; they still load
(:func:`role_dir`). A checkpoint is assembled in a hidden staging directory (``mindrl.io``) by every rank and
renamed when complete, so a crash never leaves a half-written directory under a real name.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

from mindrl.io import (MANIFEST, read_manifest, remove_stale_staging, staging_path, write_json,  # noqa: F401
                       write_manifest, write_text)
from mindrl.models.safetensors_io import CheckpointError, SafetensorsFile
from mindrl.models.weights import (TRACKER, TRAINER_STATE, is_training_checkpoint, iter_dir,  # noqa: F401
                                   resolve, role_dir, verify_checkpoint, weights_path)

OPTIMIZER = "optimizer.safetensors"


def pending_dir(root: str, step: int) -> str:
    """Where every rank assembles checkpoint ``step`` before the main rank renames it into place."""
    return staging_path(iter_dir(root, step), owner="ranks")


def begin(root: str, step: int) -> str:
    """(main rank) An empty staging directory for ``step``; leftovers of crashed saves are removed."""
    os.makedirs(root, exist_ok=True)
    remove_stale_staging(root)
    pending = pending_dir(root, step)
    shutil.rmtree(pending, ignore_errors=True)
    os.makedirs(pending)
    return pending


def finalize(root: str, step: int, keep_last: int = 2) -> str:
    """(main rank) Seal the staged checkpoint: manifest (sizes and checksums read back from disk), rename,
    tracker, pruning."""
    tmp, final = pending_dir(root, step), iter_dir(root, step)
    write_manifest(tmp, {"step": step})
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_text(os.path.join(root, TRACKER), str(step))
    _prune(root, keep_last, step)
    return final


def _prune(root, keep_last, current):
    """Keep the newest ``keep_last`` checkpoints up to ``current``. Later-numbered ones belong to another
    run that used the same directory: they are not ours to delete (and never outrank the one just written)."""
    if keep_last <= 0:
        return
    steps = sorted(int(d[5:]) for d in os.listdir(root)
                   if d.startswith("iter_") and d[5:].isdigit() and int(d[5:]) <= current)
    for step in steps[:-keep_last]:
        shutil.rmtree(iter_dir(root, step), ignore_errors=True)


def verify(directory: str) -> dict:
    """Check every file the manifest lists (size and checksum). Returns the manifest."""
    verify_checkpoint(directory)
    return read_manifest(directory)


def load_trainer_state(directory: str) -> dict:
    verify_checkpoint(directory, lambda rel: rel == TRAINER_STATE)
    path = os.path.join(directory, TRAINER_STATE)
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        int(state["step"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not a valid trainer state ({err.__class__.__name__}: {err})") from None
    return state


def load_optimizer_state(directory: str, role: str = "policy") -> dict:
    path = os.path.join(role_dir(directory, role), OPTIMIZER)
    verify_checkpoint(directory, lambda rel: os.path.join(directory, rel) == path)
    f = SafetensorsFile(path)
    return {k: f.get(k) for k in f.keys()}


def save_trainer_state(pending: str, state: dict) -> None:
    write_json(os.path.join(pending, TRAINER_STATE), state)


def latest_step(root: str) -> Optional[int]:
    tracker = os.path.join(root, TRACKER)
    if not os.path.exists(tracker):
        return None
    with open(tracker) as fh:
        text = fh.read().strip()
    return int(text) if text.isdigit() else None
