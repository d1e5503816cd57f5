"""Hugging Face <-> MindSpore weights.

mindrl's parameter names *are* the Hugging Face names (``model.layers.0.self_attn.q_proj.weight``),
so mapping a checkpoint is: find the tensor (accepting MindFormers' names too), check its full shape,
take this rank's tensor-parallel slice, cast. Tied models have no ``lm_head.weight``.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Dict, Optional

import numpy as np

from mindrl.io import write_json
from mindrl.models.safetensors_io import CheckpointError, SafetensorsFile, open_hf_checkpoint, save_sharded

# Inside functions: MindSpore (only the loaders and .ckpt writers need it; convert and preflight read
# safetensors without it), the tokenizer copy and the layout helpers (parallel/, which import the layers)

# MindFormers / MindRLHF llama-style names -> HF names, so their .ckpt files load too.
_MINDFORMERS_RENAMES = [
    (r"^model\.tok_embeddings\.embedding_weight$", "model.embed_tokens.weight"),
    (r"^model\.norm_out\.weight$", "model.norm.weight"),
    (r"\.attention\.wq\.", ".self_attn.q_proj."),
    (r"\.attention\.wk\.", ".self_attn.k_proj."),
    (r"\.attention\.wv\.", ".self_attn.v_proj."),
    (r"\.attention\.wo\.", ".self_attn.o_proj."),
    (r"\.attention\.q_norm\.", ".self_attn.q_norm."),
    (r"\.attention\.k_norm\.", ".self_attn.k_norm."),
    (r"\.feed_forward\.w1\.", ".mlp.gate_proj."),
    (r"\.feed_forward\.w3\.", ".mlp.up_proj."),
    (r"\.feed_forward\.w2\.", ".mlp.down_proj."),
    (r"\.attention_norm\.", ".input_layernorm."),
    (r"\.ffn_norm\.", ".post_attention_layernorm."),
    (r"^(value_head|v_head)\.", "score."),
]


# Where the weights are inside a mindrl training checkpoint (mindrl/trainer/checkpoint.py writes them):
# `<save>/latest_checkpointed_iteration.txt` names the newest `iter_*` directory, which holds one subdirectory
# per trained role; checkpoints from before roles existed hold the policy's files at the `iter_*` root.
TRACKER = "latest_checkpointed_iteration.txt"
TRAINER_STATE = "trainer_state.json"


def iter_dir(root: str, step: int) -> str:
    return os.path.join(root, f"iter_{step:07d}")


def resolve(load: str, key: str = "actor_config.load") -> str:
    """A checkpoint directory from ``load``: a save root (uses the tracker) or an ``iter_*`` directory. ``key``: the
    config key that names ``load``, for the advice when a save root has lost its tracker."""
    if not os.path.exists(load):
        raise CheckpointError(f"{load}: checkpoint directory not found")
    tracker = os.path.join(load, TRACKER)
    if os.path.exists(tracker):
        with open(tracker) as fh:
            text = fh.read().strip()
        if not text.isdigit():
            raise CheckpointError(f"{tracker}: expected an iteration number, found {text!r}")
        return iter_dir(load, int(text))
    if checkpoint_steps(load) and not os.path.exists(os.path.join(load, TRAINER_STATE)):
        # a save root without its tracker is no model directory: name the checkpoints that can still be loaded
        intact = [d for d in (iter_dir(load, step) for step in checkpoint_steps(load)) if is_intact(d)]
        raise CheckpointError(
            f"{load}: no {TRACKER} (the pointer to its newest complete checkpoint is missing); intact checkpoints: "
            + (f"{', '.join(os.path.basename(d) for d in intact)}; load one by its own directory, e.g. "
               f"{key}={intact[0]} (the newest)" if intact else "none"))
    return load


def checkpoint_steps(root: str, below: Optional[int] = None) -> list:
    """The steps of the ``iter_*`` directories in ``root`` (those below ``below``), newest first."""
    return sorted((int(d[5:]) for d in os.listdir(root) if d.startswith("iter_") and d[5:].isdigit()
                   and (below is None or int(d[5:]) < below)), reverse=True) if os.path.isdir(root) else []


def is_intact(directory: str) -> bool:
    from mindrl.manifest import DamagedFile, verify_manifest
    try:
        verify_manifest(directory)
        return True
    except DamagedFile:
        return False


def is_training_checkpoint(directory: str) -> bool:
    return os.path.isdir(directory) and (os.path.exists(os.path.join(directory, TRAINER_STATE))
                                         or os.path.exists(os.path.join(directory, TRACKER)))


def role_dir(directory: str, role: str) -> str:
    """Where ``role``'s files are in checkpoint ``directory`` (the newer one-subdirectory-per-role layout, or,
    for the policy, the older layout with its files at the root)."""
    sub = os.path.join(directory, role)
    if os.path.isdir(sub):
        return sub
    if role == "policy" and os.path.exists(os.path.join(directory, "config.json")):
        return directory
    raise CheckpointError(f"{directory}: the checkpoint holds no {role} (no {role}/ subdirectory)")


def weights_path(load: str, role: str = "policy", verify: bool = False, key: str = "actor_config.load") -> str:
    """The weights to load for ``role`` from ``load``: an HF directory or a weights file as given, or the
    role's directory inside a mindrl checkpoint (a save root or an ``iter_*`` directory). With ``verify``, the
    files of that role's weights are checked against the checkpoint's manifest first (:func:`verify_checkpoint`)."""
    if os.path.isfile(load):
        return load
    directory = resolve(load, key)
    if is_training_checkpoint(directory):
        part = role_dir(directory, role)
        if verify:
            sealed_names(part)
        return part
    return directory


def sealed_names(part: str) -> Optional[set]:
    """When ``part`` is a role's directory in a sealed mindrl checkpoint (or an older checkpoint's root): check its
    weight files against the manifest and return the names the manifest lists directly in it, the only files a
    load may read there. None for any other directory (an HF model directory)."""
    from mindrl.manifest import MANIFEST, read_manifest
    part = os.path.normpath(part)
    for directory in (part, os.path.dirname(part)):
        if os.path.isfile(os.path.join(directory, MANIFEST)) and is_training_checkpoint(directory):
            verify_checkpoint(directory, weight_files(directory, part))
            prefix = "" if directory == part else os.path.basename(part) + "/"
            return {rel[len(prefix):] for rel in read_manifest(directory)["files"]
                    if rel.startswith(prefix) and "/" not in rel[len(prefix):]}
    return None


# files directly in a role's part that only resuming reads
_RESUME_ONLY = ("optimizer.safetensors", TRAINER_STATE)


def weight_files(directory: str, part: str):
    """A manifest filter: the files holding the weights of the role stored at ``part`` inside ``directory``."""
    prefix = os.path.relpath(part, directory)
    prefix = "" if prefix == "." else prefix + os.sep

    def select(rel: str) -> bool:  # weights, config and tokenizer files sit directly in the part's directory
        inner = rel[len(prefix):]
        return rel.startswith(prefix) and os.sep not in inner and inner not in _RESUME_ONLY
    return select


def verify_checkpoint(directory: str, select=None) -> None:
    """Check ``directory``'s files against its manifest (sizes and checksums). A damaged checkpoint is never
    used in place of another: the error names the damaged file and offers, by name, the newest older
    checkpoint of the same save directory that is intact."""
    from mindrl.manifest import DamagedFile, ManifestFormat, verify_manifest
    from mindrl.parallel.topology import launch_topology
    if launch_topology().scheduler:
        return  # msrun's scheduler process stops at init(): the workers check before they read
    try:
        verify_manifest(directory, select)
    except ManifestFormat as err:  # not damage: its message says what to do
        raise CheckpointError(str(err)) from None
    except DamagedFile as err:
        older = intact_before(directory)
        offer = (f"; the newest intact checkpoint before it is {older}: load that one (e.g. actor_config.load={older})"
                 if older else "; no older intact checkpoint was found beside it")
        raise CheckpointError(f"{err}{offer}") from None


def intact_before(directory: str) -> Optional[str]:
    """The newest ``iter_*`` sibling older than ``directory`` whose every file matches its manifest, or None."""
    root, name = os.path.split(os.path.abspath(directory))
    if not name.startswith("iter_") or not name[5:].isdigit():
        return None
    return newest_intact(root, int(name[5:]) - 1)


def newest_intact(root: str, at_most: Optional[int] = None) -> Optional[str]:
    """The newest ``iter_*`` directory of save root ``root`` (at step ``at_most`` or before) whose every file matches
    its manifest, or None."""
    below = None if at_most is None else at_most + 1
    return next((iter_dir(root, step) for step in checkpoint_steps(root, below) if is_intact(iter_dir(root, step))),
                None)



def canonical_name(name: str) -> str:
    for pattern, repl in _MINDFORMERS_RENAMES:
        name = re.sub(pattern, repl, name)
    return name


class TensorSource:
    """Name -> numpy tensor (full, unsharded) from an HF dir, a .safetensors or a .ckpt file."""

    def __init__(self, path: str):
        self.path = path
        self._get: Dict[str, Callable[[], np.ndarray]] = {}
        self._shape: Dict[str, tuple] = {}
        self.extras: Dict[str, np.ndarray] = {}
        if os.path.isdir(path):
            path = self.path = weights_path(path)  # a mindrl training checkpoint: its policy
            for name, f in open_hf_checkpoint(path, sealed_names(path)).items():  # a sealed one: listed files only
                self._add(name, f)
        elif path.endswith(".safetensors"):
            f = SafetensorsFile(path)
            for name in f.keys():
                self._add(name, f)
        elif path.endswith(".ckpt"):
            self._load_ckpt(path)
        elif not os.path.exists(path):
            raise CheckpointError(f"{path}: checkpoint not found")
        else:
            raise CheckpointError(f"{path}: unknown checkpoint format (expected an HF directory, .safetensors or .ckpt)")

    def _add(self, name, f: SafetensorsFile):
        key = canonical_name(name)
        self._get[key] = lambda f=f, name=name: f.get(name)
        self._shape[key] = f.shape(name)

    def _load_ckpt(self, path):
        if not os.path.exists(path):
            raise CheckpointError(f"{path}: checkpoint not found")
        import mindspore as ms
        try:
            params = ms.load_checkpoint(path)
        except Exception as err:  # mindspore raises bare ValueError/RuntimeError on corrupt files
            raise CheckpointError(f"{path}: cannot read MindSpore checkpoint: {err}") from None
        for name, p in params.items():
            arr = p.asnumpy() if hasattr(p, "asnumpy") else np.asarray(p)
            if p.dtype == ms.bfloat16:
                arr = p.float().asnumpy()
            key = canonical_name(name)
            self._get[key] = lambda arr=arr: arr
            self._shape[key] = tuple(arr.shape)

    def names(self):
        return list(self._get)

    def __contains__(self, name):
        return name in self._get

    def shape(self, name):
        return self._shape[name]

    def get(self, name) -> np.ndarray:
        return self._get[name]()


def load_into(net, source, *, strict: bool = True, allow_missing=()) -> list:
    """Copy tensors from ``source`` (a path or TensorSource) into ``net``'s parameters.

    Each parameter receives this rank's tensor-parallel slice, cast to its dtype. Returns the list
    of source tensors that were not used. Raises CheckpointError naming the file and parameter on a
    missing tensor or a shape mismatch.
    """
    import mindspore as ms
    from mindrl.parallel.layout import (external_shape, full_shape, split_axes, take_shard, to_internal, tp_of,
                                        transposed_names)

    src = source if isinstance(source, TensorSource) else TensorSource(source)
    tp = tp_of(net)
    axes = split_axes(net)
    transposed = transposed_names(net)
    used = set()
    for name, param in net.parameters_and_names():  # names relative to net: wrappers cannot rename them
        if name not in src:
            if any(name.startswith(prefix) for prefix in allow_missing):
                continue
            if strict:
                raise CheckpointError(f"{src.path}: missing tensor {name!r} (checkpoint has {len(src.names())} tensors, "
                                      f"e.g. {src.names()[:3]})")
            continue
        t = name in transposed
        want = external_shape(full_shape(param.shape, axes.get(name), tp.size), t)
        have = tuple(src.shape(name))
        if have != want:
            raise CheckpointError(f"{src.path}: tensor {name!r} has shape {list(have)} but the model config expects "
                                  f"{list(want)}; does the checkpoint match the config?")
        local = take_shard(to_internal(src.get(name), t), axes.get(name), tp.size, tp.rank)
        param.set_data(ms.Tensor(np.ascontiguousarray(local).astype(np.float32), dtype=param.dtype))
        used.add(name)
    return [n for n in src.names() if n not in used]


def state_numpy(net) -> Dict[str, np.ndarray]:
    """A snapshot of this process's parameters as numpy arrays in Hugging Face orientation (full tensors when
    tp == 1). Copies: ``Parameter.asnumpy()`` on CPU is a view of the live buffer, which the next optimizer step
    overwrites in place."""
    from mindrl.parallel.layout import to_external, transposed_names
    transposed = transposed_names(net)
    return {name: np.array(to_external(p.float().asnumpy() if str(p.dtype) == "BFloat16" else p.asnumpy(),
                                       name in transposed), copy=True)
            for name, p in net.parameters_and_names()}


def export_hf(tensors: Dict[str, np.ndarray], config, directory: str, hf_config: Optional[dict] = None,
              tokenizer_dir: Optional[str] = None, dtype: Optional[str] = None) -> None:
    """The one HF-directory writer: full tensors (HF names and orientation) as model.safetensors (sharded above
    4 GiB), ``hf_config`` (default: the model config's) as config.json, and ``tokenizer_dir``'s tokenizer files."""
    from mindrl.data.tokenizer import copy_tokenizer_files
    tensors = dict(tensors)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)  # the embedding is the head: HF loaders tie it again
    os.makedirs(directory, exist_ok=True)
    save_sharded(tensors, directory, dtype)
    hf = dict(config.to_hf_dict() if hf_config is None else hf_config)
    if dtype:
        hf["torch_dtype"] = dtype
    write_json(os.path.join(directory, "config.json"), hf)
    copy_tokenizer_files(tokenizer_dir, directory)


def save_hf(net, config, directory: str, dtype: Optional[str] = None, tokenizer_dir: Optional[str] = None) -> None:
    """Export ``net`` as an HF directory (:func:`export_hf`)."""
    export_hf(state_numpy(net), config, directory, tokenizer_dir=tokenizer_dir, dtype=dtype)


def save_ms_checkpoint(tensors: Dict[str, np.ndarray], path: str, append: Optional[dict] = None,
                       dtypes: Optional[Dict[str, str]] = None) -> str:
    """The one MindSpore checkpoint writer (.ckpt or .safetensors, by extension), staged then renamed.

    ``dtypes`` maps names to "float32" / "float16" / "bfloat16" (default: each array's own dtype). The staging
    name is hidden and keeps the extension last, so MindSpore adds none and ``transform_checkpoints``, which
    globs ``*.ckpt``, never picks up a leftover.
    """
    import mindspore as ms
    from mindrl.io import atomic_path
    fmt = "safetensors" if path.endswith(".safetensors") else "ckpt"
    ms_dtype = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}
    items = []
    for name, value in tensors.items():
        arr = np.ascontiguousarray(value)
        want = (dtypes or {}).get(name)
        data = ms.Tensor(arr.astype(np.float32), ms_dtype[want]) if want else ms.Tensor(arr)
        items.append({"name": name, "data": data})
    with atomic_path(path, suffix=f".{fmt}") as tmp:
        ms.save_checkpoint(items, tmp, format=fmt, append_dict=append or None)
    return path
