"""Low-rank adapters (LoRA) on the decoder's projections: y = x W + (alpha / r) * x A B, with W frozen.

Names, init and files follow PEFT, so an adapter trained here loads with ``peft`` on the Hugging Face base and one
trained there loads here:
- a projection ``model.layers.0.self_attn.q_proj`` gets ``...q_proj.lora_A.weight`` [r, in] and ``...lora_B.weight``
  [out, r] (stored transposed, like every weight of this model); A is drawn as PEFT's default
  (kaiming-uniform, a=sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B starts at zero, so the adapted model starts equal
  to the base;
- the PEFT adapter directory holds ``adapter_config.json`` and ``adapter_model.safetensors`` whose tensors are named
  ``base_model.model.<name>``.

Tensor parallel follows Megatron's LoRA: a column-parallel projection (output split) keeps A whole and B split like
its output; a row-parallel one (input split) splits A like its input and keeps B whole. The product A B is then
split exactly like W, so merging (W + s A B) needs no communication, and the factor every rank holds whole gets its
gradient summed over the tensor-parallel group (layers.py, ``_Linear.weights``).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

# the projections of a decoder layer, by their Hugging Face / PEFT names
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# MindSpeed-LLM / Megatron spell two of the same layers by their own names...
MEGATRON_NAMES = {"linear_proj": ("o_proj",), "linear_fc2": ("down_proj",)}
# ...and fuse the others: one adapter on [q; k; v] (or [gate; up]) shares its A across them, which separate
# adapters on separate projections are not
MEGATRON_FUSED = {"linear_qkv": "q_proj, k_proj, v_proj", "linear_fc1": "gate_proj, up_proj"}
PEFT_PREFIX = "base_model.model."
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
BASE_RECORD = "mindrl_base.json"  # beside PEFT's files (PEFT ignores it): which base, and its files' checksums


def target_projections(modules) -> Tuple[str, ...]:
    """The projections ``lora_target_modules`` names: PEFT's names, MindSpeed-LLM's ``linear_proj`` and
    ``linear_fc2``, or ``all-linear`` (every projection of every layer; never the output head, as PEFT). Raises
    ValueError on an unknown name, on Megatron's fused ones and on an empty list."""
    if isinstance(modules, str):  # MindSpeed-LLM's command line habit: "linear_qkv linear_proj"
        modules = modules.replace(",", " ").split()
    names = list(modules)
    out = []
    for name in names:
        if name == "all-linear":
            out += PROJECTIONS
        elif name in MEGATRON_NAMES:
            out += MEGATRON_NAMES[name]
        elif name in MEGATRON_FUSED:
            raise ValueError(f"{name!r} is Megatron's fused projection, whose one adapter shares its A across "
                             f"{MEGATRON_FUSED[name]}; mindrl's projections are separate, each with its own adapter "
                             f"(PEFT's layout): name them ({MEGATRON_FUSED[name]}) for that")
        elif name in PROJECTIONS:
            out.append(name)
        else:
            raise ValueError(f"{name!r} is not a projection of the decoder: one of {', '.join(PROJECTIONS)}, "
                             f"{', '.join(MEGATRON_NAMES)} (MindSpeed-LLM's names) or 'all-linear'")
    if not out:
        raise ValueError("names no projection: give at least one (or all-linear)")
    return tuple(p for p in PROJECTIONS if p in out)


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    targets: Tuple[str, ...]   # projection names (target_projections)
    seed: int = 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def text(self) -> str:
        return f"LoRA r={self.rank}, alpha={self.alpha:g} on {', '.join(self.targets)}"


def is_lora_name(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def _init_a(name: str, rank: int, fan_in: int, seed: int) -> np.ndarray:
    """A [r, in] as PEFT draws it (kaiming-uniform with a=sqrt(5)), from a stream of (seed, module name): the same
    full tensor in every layout, whatever the order modules are visited in."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    rng = np.random.default_rng([int(seed), digest])
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=(rank, fan_in)).astype(np.float32)


def adapted_projections(net, targets) -> Dict[str, object]:
    """{module name: projection cell} of ``net``'s projections a LoRA with these targets adapts."""
    from mindrl.parallel.layers import ColumnLinear, RowLinear
    return {name: cell for name, cell in net.cells_and_names()
            if isinstance(cell, (ColumnLinear, RowLinear)) and name.rsplit(".", 1)[-1] in targets}


def add_lora(net, spec: LoraSpec, name_prefix: str = "", trainable=("score.",)) -> list:
    """Attach adapters to ``net``'s target projections (A drawn, B zero) and freeze every other parameter except
    those starting with one of ``trainable`` (a value head). Returns the adapter parameter names (relative to net).
    ``name_prefix``: the in-process prefix of the net's Parameter names (``rename``), given to the new ones too."""
    from mindrl.parallel.layers import ColumnLinear, LoraFactor
    added = []
    for name, cell in adapted_projections(net, spec.targets).items():
        tp = cell.tp
        n_in, n_out = cell.weight.shape  # stored [in, out], this rank's slice
        if isinstance(cell, ColumnLinear):  # output split: A whole, B split on its output axis
            a = _init_a(name, spec.rank, n_in, spec.seed).T
            a_cell = LoraFactor(a, None, tp)
            b_cell = LoraFactor(np.zeros((spec.rank, n_out), np.float32), 1 if tp.size > 1 else None, tp)
        else:  # RowLinear, input split: A split on its input axis, B whole
            full = _init_a(name, spec.rank, n_in * tp.size, spec.seed).T
            a = full[tp.rank * n_in:(tp.rank + 1) * n_in]
            a_cell = LoraFactor(a, 0 if tp.size > 1 else None, tp)
            b_cell = LoraFactor(np.zeros((spec.rank, n_out), np.float32), None, tp)
        cell.attach_lora(a_cell, b_cell, spec.scale, tp.copy_region())
        added += [f"{name}.lora_A.weight", f"{name}.lora_B.weight"]
    if not added:
        raise ValueError(f"LoRA targets {spec.targets} match no projection of the model")
    adapters = set(added)
    for name, p in net.parameters_and_names():
        if name in adapters:
            p.name = f"{name_prefix}.{name}" if name_prefix else name  # unique names in the process' graphs
        elif not name.startswith(tuple(trainable)):
            p.requires_grad = False
    return added


def merged(state: Dict[str, np.ndarray], scale: float) -> Dict[str, np.ndarray]:
    """HF-oriented full tensors with adapters -> the same model without them: W [out, in] + scale * B @ A."""
    out = {k: v for k, v in state.items() if not is_lora_name(k)}
    for key in state:
        if key.endswith(".lora_A.weight"):
            module = key[:-len(".lora_A.weight")]
            a, b = state[key].astype(np.float64), state[f"{module}.lora_B.weight"].astype(np.float64)
            w = out[f"{module}.weight"]
            out[f"{module}.weight"] = (w.astype(np.float64) + scale * (b @ a)).astype(w.dtype)
    return out


def adapters_of(state: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return {k: v for k, v in state.items() if is_lora_name(k)}


def peft_config(spec: LoraSpec, base: Optional[str], task_type: str = "CAUSAL_LM",
                modules_to_save: Optional[list] = None) -> dict:
    """PEFT's adapter_config.json for this adapter (the keys PEFT reads; dropout is 0: mindrl trains without it)."""
    return {"peft_type": "LORA", "task_type": task_type, "r": spec.rank, "lora_alpha": spec.alpha,
            "lora_dropout": 0.0, "target_modules": list(spec.targets), "bias": "none", "fan_in_fan_out": False,
            "use_rslora": False, "use_dora": False, "init_lora_weights": True, "modules_to_save": modules_to_save,
            "inference_mode": True, "base_model_name_or_path": base}


def write_peft_adapter(directory: str, trained: Dict[str, np.ndarray], spec: LoraSpec, base: Optional[str],
                       task_type: str = "CAUSAL_LM") -> None:
    """``directory``/adapter_config.json and adapter_model.safetensors (PEFT's names and orientation). ``trained``:
    the adapters, and a value model's head (PEFT's ``modules_to_save``, trained whole)."""
    from mindrl.io import write_json
    from mindrl.models.safetensors_io import save_safetensors
    os.makedirs(directory, exist_ok=True)
    whole = sorted({k.split(".")[0] for k in trained if not is_lora_name(k)})
    save_safetensors({PEFT_PREFIX + k: np.ascontiguousarray(v, np.float32) for k, v in trained.items()},
                     os.path.join(directory, ADAPTER_WEIGHTS))
    write_json(os.path.join(directory, ADAPTER_CONFIG), peft_config(spec, base, task_type, whole or None))


def read_peft_adapter(directory: str, tensors: bool = True) -> Tuple[dict, Dict[str, np.ndarray]]:
    """(adapter_config.json, {name without PEFT's prefix: HF-oriented tensor}) of a PEFT adapter directory."""
    from mindrl.models.safetensors_io import SafetensorsFile
    with open(os.path.join(directory, ADAPTER_CONFIG)) as f:
        config = json.load(f)
    if not tensors:
        return config, {}
    f = SafetensorsFile(os.path.join(directory, ADAPTER_WEIGHTS))
    out = {}
    for k in f.keys():
        name = k[len(PEFT_PREFIX):] if k.startswith(PEFT_PREFIX) else k
        out[name] = f.get(k).astype(np.float32)
    return config, out


def base_files(base: str) -> Dict[str, str]:
    """{file name: xxh3 checksum} of the weight files a base (an HF directory or a weights file) is read from:
    what a resume checks before it rebuilds a run from this base plus its adapter."""
    from mindrl.manifest import file_digest
    if os.path.isfile(base):
        return {os.path.basename(base): file_digest(base)}
    names = sorted(n for n in os.listdir(base) if n.endswith((".safetensors", ".ckpt")) or n.endswith(".index.json"))
    return {n: file_digest(os.path.join(base, n)) for n in names}


def write_base_record(directory: str, base: Optional[str], files: Optional[Dict[str, str]]) -> None:
    from mindrl.io import write_json
    write_json(os.path.join(directory, BASE_RECORD), {"base": base, "files": files})


def read_base_record(directory: str) -> Optional[Dict[str, str]]:
    """The base file checksums an adapter directory's record holds (None without a record or for a random base)."""
    path = os.path.join(directory, BASE_RECORD)
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        return json.load(fh).get("files")


def base_changed(directory: str) -> Optional[str]:
    """Why the base an adapter directory's record names is no longer the one it was trained on (None: it is, or
    the adapter has no record, or its base was a random initialisation)."""
    path = os.path.join(directory, BASE_RECORD)
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        record = json.load(fh)
    base, files = record.get("base"), record.get("files") or {}
    if base is None:
        return None
    if not os.path.exists(base):
        return f"the base weights its adapter was trained on, {base}, are gone"
    now = base_files(base)
    changed = sorted(n for n in set(files) | set(now) if files.get(n) != now.get(n))
    if changed:
        return (f"the base weights its adapter was trained on, {base}, have changed since ({', '.join(changed[:3])} "
                f"differ from their checksums at training time)")
    return None
