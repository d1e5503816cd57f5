"""Training checkpoints: written atomically, listed by a manifest, the last K kept.

Layout of ``actor_config.save`` (Megatron/MindSpeed users know the tracker file)::

    save/
      latest_checkpointed_iteration.txt     # "10": the newest complete checkpoint
      iter_0000010/
        config.json, model.safetensors      # the policy as an HF directory (from_pretrained / transformers load it)
        optimizer.safetensors               # adam_m.*, adam_v.*, global_step
        trainer_state.json                  # step, data position, RNG seeds, lr
        manifest.json                       # every file with its size: written last, checked on load

A checkpoint is first written to ``iter_XXXXXXX.tmp-<pid>/`` and renamed when complete, so a crash
never leaves a half-written directory under a real name.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

from mindrl.models.safetensors_io import CheckpointError, SafetensorsFile, save_safetensors

TRACKER = "latest_checkpointed_iteration.txt"


def iter_dir(root: str, step: int) -> str:
    return os.path.join(root, f"iter_{step:07d}")


def _write_json(path, obj):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


def pending_dir(root: str, step: int) -> str:
    """Where a checkpoint is assembled (by every rank under msrun) before it is renamed into place."""
    return f"{iter_dir(root, step)}.tmp"


def save_checkpoint(root: str, step: int, policy, optimizer_state: dict, trainer_state: dict,
                    keep_last: int = 2, tokenizer_dir: Optional[str] = None, finalize: bool = True) -> str:
    """Write the policy (HF directory), optimizer and trainer state into the pending directory; with
    ``finalize`` also seal it (manifest, rename, tracker, pruning). Under msrun the other ranks add their
    shards first and the main rank calls :func:`finalize` afterwards."""
    os.makedirs(root, exist_ok=True)
    tmp = pending_dir(root, step)
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp, tokenizer_dir=tokenizer_dir)
    save_safetensors(optimizer_state, os.path.join(tmp, "optimizer.safetensors"))
    _write_json(os.path.join(tmp, "trainer_state.json"), trainer_state)
    if finalize:
        return globals()["finalize"](root, step, keep_last)
    return iter_dir(root, step)


def finalize(root: str, step: int, keep_last: int = 2) -> str:
    tmp, final = pending_dir(root, step), iter_dir(root, step)
    files = {}
    for dirpath, _, names in os.walk(tmp):
        for f in names:
            full = os.path.join(dirpath, f)
            files[os.path.relpath(full, tmp)] = os.path.getsize(full)
    _write_json(os.path.join(tmp, "manifest.json"), {"step": step, "files": dict(sorted(files.items()))})
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_text_atomic(os.path.join(root, TRACKER), str(step))
    _prune(root, keep_last, step)
    return final


def _write_text_atomic(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _prune(root, keep_last, current):
    """Keep the newest ``keep_last`` checkpoints up to ``current``. Later-numbered ones belong to another
    run that used the same directory: they are not ours to delete (and never outrank the one just written)."""
    if keep_last <= 0:
        return
    steps = sorted(int(d[5:]) for d in os.listdir(root)
                   if d.startswith("iter_") and d[5:].isdigit() and int(d[5:]) <= current)
    for step in steps[:-keep_last]:
        shutil.rmtree(iter_dir(root, step), ignore_errors=True)


def resolve(load: str) -> str:
    """A checkpoint directory from ``load``: a save root (uses the tracker) or an ``iter_*`` directory."""
    if not os.path.exists(load):
        raise CheckpointError(f"{load}: checkpoint directory not found")
    tracker = os.path.join(load, TRACKER)
    if os.path.exists(tracker):
        with open(tracker) as fh:
            text = fh.read().strip()
        if not text.isdigit():
            raise CheckpointError(f"{tracker}: expected an iteration number, found {text!r}")
        return iter_dir(load, int(text))
    return load


def verify(directory: str) -> dict:
    """Check the manifest: every listed file present with its size. Returns the manifest."""
    path = os.path.join(directory, "manifest.json")
    if not os.path.exists(path):
        raise CheckpointError(f"{directory}: no manifest.json: not a complete mindrl checkpoint")
    with open(path) as fh:
        manifest = json.load(fh)
    for fname, size in manifest["files"].items():
        f = os.path.join(directory, fname)
        if not os.path.exists(f):
            raise CheckpointError(f"{f}: listed in the manifest but missing")
        if os.path.getsize(f) != size:
            raise CheckpointError(f"{f}: size {os.path.getsize(f)} differs from the manifest's {size} (corrupt)")
    return manifest


def load_trainer_state(directory: str) -> dict:
    verify(directory)
    with open(os.path.join(directory, "trainer_state.json")) as fh:
        return json.load(fh)


def load_optimizer_state(directory: str) -> dict:
    f = SafetensorsFile(os.path.join(directory, "optimizer.safetensors"))
    return {k: f.get(k) for k in f.keys()}
