"""Hugging Face <-> MindSpore weights.

mindrl's parameter names *are* the Hugging Face names (``model.layers.0.self_attn.q_proj.weight``),
so mapping a checkpoint is: find the tensor (accepting MindFormers' names too), check its full shape,
take this rank's tensor-parallel slice, cast. Tied models have no ``lm_head.weight``.
"""
from __future__ import annotations

import json
import os
import re
from typing import Callable, Dict, Optional

import numpy as np

from mindrl.models.safetensors_io import CheckpointError, SafetensorsFile, open_hf_checkpoint, save_sharded

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
            for name, f in open_hf_checkpoint(path).items():
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
    """This process's parameters as numpy arrays in Hugging Face orientation (full tensors when tp == 1)."""
    from mindrl.parallel.layout import to_external, transposed_names
    transposed = transposed_names(net)
    return {name: to_external(p.float().asnumpy() if str(p.dtype) == "BFloat16" else p.asnumpy(), name in transposed)
            for name, p in net.parameters_and_names()}


def save_hf(net, config, directory: str, dtype: Optional[str] = None, tokenizer_dir: Optional[str] = None) -> None:
    """Export as an HF directory: config.json + model.safetensors (sharded above 4 GiB)."""
    tensors = state_numpy(net)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    os.makedirs(directory, exist_ok=True)
    save_sharded(tensors, directory, dtype)
    hf = config.to_hf_dict()
    if dtype:
        hf["torch_dtype"] = dtype
    tmp = os.path.join(directory, "config.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(hf, fh, indent=2)
    os.replace(tmp, os.path.join(directory, "config.json"))
    copy_tokenizer_files(tokenizer_dir, directory)


def copy_tokenizer_files(tokenizer_dir: Optional[str], directory: str) -> None:
    """Copy tokenizer files next to exported weights, so the directory is self-contained."""
    if not tokenizer_dir or not os.path.isdir(tokenizer_dir):
        return
    import shutil
    for fname in os.listdir(tokenizer_dir):
        if fname.startswith("tokenizer") or fname in ("vocab.json", "merges.txt", "special_tokens_map.json",
                                                       "generation_config.json"):
            shutil.copy(os.path.join(tokenizer_dir, fname), os.path.join(directory, fname))


def save_ms_checkpoint(tensors: Dict[str, np.ndarray], path: str, append: Optional[dict] = None) -> None:
    """A MindSpore checkpoint (.ckpt or .safetensors, by extension), written to a temp name then renamed."""
    import mindspore as ms
    fmt = "safetensors" if path.endswith(".safetensors") else "ckpt"
    tmp = f"{path[:-len(fmt) - 1]}.tmp-{os.getpid()}.{fmt}"
    items = [{"name": k, "data": ms.Tensor(np.ascontiguousarray(v))} for k, v in tensors.items()]
    ms.save_checkpoint(items, tmp, format=fmt, append_dict=append or None)
    os.replace(tmp, path)
