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
        manifest.json                        # every file with its size and xxh3 checksum, and its own checksum
                                             # (mindrl/manifest.py): written last, checked before any file is used

Checkpoints written before roles existed hold the policy's files at the ``iter_*`` root; they still load
(:func:`role_dir`). A checkpoint is assembled in a hidden staging directory (``mindrl.io``) by every rank and
renamed when complete, so a crash never leaves a half-written directory under a real name.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

from mindrl.io import remove_stale_staging, staging_path, write_json, write_text  # noqa: F401
from mindrl.manifest import MANIFEST, read_manifest, write_manifest  # noqa: F401
from mindrl.models.safetensors_io import CheckpointError, SafetensorsFile
from mindrl.models.weights import (TRACKER, TRAINER_STATE, checkpoint_steps, is_training_checkpoint,  # noqa: F401
                                   iter_dir, newest_intact, resolve, role_dir, verify_checkpoint, weights_path)

OPTIMIZER = "optimizer.safetensors"


def pending_dir(root: str, step: int, owner: Optional[int] = None) -> str:
    """Where every rank assembles checkpoint ``step`` before the main rank renames it into place. It is named after
    the main rank's pid ``owner`` (default: this process's), so another run saving into the same directory never
    takes it for a leftover of a crash, and removes it only once that process is gone."""
    return staging_path(iter_dir(root, step), owner=f"ranks{owner or os.getpid()}")


def begin(root: str, step: int, owner: Optional[int] = None) -> str:
    """(main rank) An empty staging directory for ``step``; leftovers of crashed saves are removed."""
    os.makedirs(root, exist_ok=True)
    remove_stale_staging(root)
    pending = pending_dir(root, step, owner)
    shutil.rmtree(pending, ignore_errors=True)
    os.makedirs(pending)
    return pending


def finalize(root: str, step: int, keep_last: int = 2, owner: Optional[int] = None) -> str:
    """(main rank) Seal the staged checkpoint: manifest (sizes and checksums read back from disk), rename,
    tracker, pruning."""
    tmp, final = pending_dir(root, step, owner), iter_dir(root, step)
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
    for step in checkpoint_steps(root, current + 1)[keep_last:]:
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
        step = state["step"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not a valid trainer state ({err.__class__.__name__}: {err})") from None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:  # a run resumed at step -5 trained on
        raise CheckpointError(f"{path}: step {step!r} is not a step a run can be at (a whole number from 0); resume "
                              f"from another checkpoint, or start from these weights with actor_config.finetune=true")
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


def reseal_main(argv) -> int:
    """``mindrl reseal DIR``: a checkpoint whose manifest is of format 1 gets format 2, after every file was checked
    against the old one. Exit 0 done (or nothing to do), 1 a file does not match, 2 no such checkpoint."""
    import argparse
    import sys
    from mindrl.manifest import DamagedFile, reseal
    ap = argparse.ArgumentParser(prog="mindrl reseal", description="re-seal a checkpoint whose manifest.json is of "
                                 "format 1 (no checksum of its own) with format 2, after checking its files")
    ap.add_argument("checkpoint", help="an iter_* directory, or a save directory (its newest checkpoint)")
    args = ap.parse_args(argv)
    try:
        directory = resolve(args.checkpoint)
    except CheckpointError as err:
        print(f"mindrl reseal: error: {err}", file=sys.stderr)
        return 2
    try:
        done = reseal(directory)
    except DamagedFile as err:
        print(f"mindrl reseal: error: {err}; nothing was changed", file=sys.stderr)
        return 1
    if done is None:
        print(f"{directory}: its manifest is format 2 already; nothing to do")
        return 0
    by_size = done["files"] - done["by_checksum"]
    print(f"resealed {directory}: {done['files']} files checked against its format-1 manifest ({done['by_checksum']} "
          f"by checksum, {by_size} by size only" + (": their contents could not be checked" if by_size else "")
          + ") and sealed with format 2")
    return 0
