"""`mindrl convert`: move weights between Hugging Face directories and MindSpore checkpoints.

A conversion is tensors plus names, so no MindSpore network is built: the source is read through
:class:`~mindrl.models.weights.TensorSource` (which also maps MindFormers' parameter names), every
tensor the config asks for is checked by name and shape against the header before any data is read,
and safetensors outputs are streamed one tensor at a time. A 7B bf16 model therefore converts in
about one tensor's worth of extra memory (a ``.ckpt`` output is the exception: MindSpore's writer
wants every tensor in memory at once).

Directions, chosen from the paths:

=========================================  =============================================
input                                      output
=========================================  =============================================
HF dir                                     ``X.ckpt`` / ``X.safetensors`` (MindSpore)
``X.ckpt`` / ``X.safetensors``             HF dir (config.json + model*.safetensors)
HF dir                                     HF dir (re-export, e.g. a dtype change)
HF dir, config.json or model yaml          ``X.yaml`` (with ``--to-yaml``): a model yaml
``X.gguf`` (llama.cpp)                     any of the above; an HF dir gets the GGUF's tokenizer
=========================================  =============================================
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from mindrl.models.config import ModelConfig, ModelConfigError, load_model_config
from mindrl.io import atomic_path, write_text
from mindrl.models.safetensors_io import (CheckpointError, SafetensorsFile, TensorEntry, open_hf_checkpoint,
                                         to_bf16_bits, write_hf_weights, write_safetensors)

# Inside functions: the GGUF reader (gguf, only for .gguf input), the tokenizer and yaml (only for the
# outputs that need them), MindSpore's checkpoint writer

MS_SUFFIXES = (".ckpt", ".safetensors")
YAML_SUFFIXES = (".yaml", ".yml")
_CODE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
_DTYPE_OF_CODE = {v: k for k, v in _CODE.items()}
_ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2}
DEFAULT_MAX_SHARD_BYTES = 4 * 2**30


class ConvertError(ValueError):
    """A conversion the user asked for that cannot be done; the message names the path."""


# ---------------------------------------------------------------------------------------------
# What a config needs
# ---------------------------------------------------------------------------------------------
def expected_tensors(config: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    """Full (unsharded, HF-layout) name -> shape of every weight of a causal LM with ``config``.

    Mirrors the parameters of :class:`mindrl.models.decoder.CausalLM` (tests check they agree), so
    shapes are verified without building the network.
    """
    c = config
    h, d = c.hidden_size, c.head_dim
    q_out, kv_out = c.num_heads * d, c.n_kv_heads * d
    out = {"model.embed_tokens.weight": (c.vocab_size, h)}
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attn.q_proj.weight"] = (q_out, h)
        out[p + "self_attn.k_proj.weight"] = (kv_out, h)
        out[p + "self_attn.v_proj.weight"] = (kv_out, h)
        if c.qkv_bias:
            out[p + "self_attn.q_proj.bias"] = (q_out,)
            out[p + "self_attn.k_proj.bias"] = (kv_out,)
            out[p + "self_attn.v_proj.bias"] = (kv_out,)
        out[p + "self_attn.o_proj.weight"] = (h, q_out)
        if c.qk_norm:
            out[p + "self_attn.q_norm.weight"] = (d,)
            out[p + "self_attn.k_norm.weight"] = (d,)
        out[p + "post_attention_layernorm.weight"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (c.intermediate_size, h)
        out[p + "mlp.up_proj.weight"] = (c.intermediate_size, h)
        out[p + "mlp.down_proj.weight"] = (h, c.intermediate_size)
    out["model.norm.weight"] = (h,)
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (c.vocab_size, h)
    return out


def _source_codes(path: str) -> Dict[str, str]:
    """Canonical tensor name -> safetensors dtype code of a safetensors-backed source ({} for .ckpt)."""
    from mindrl.models.weights import canonical_name
    if os.path.isdir(path):
        files = open_hf_checkpoint(path)
        return {canonical_name(n): f.dtype(n) for n, f in files.items()}
    if path.endswith(".safetensors"):
        f = SafetensorsFile(path)
        return {canonical_name(n): f.dtype(n) for n in f.keys()}
    return {}


class _Plan:
    """The checked list of tensors to write: names, shapes, output dtype codes, and notes."""

    def __init__(self, source, config: ModelConfig, dtype: Optional[str]):
        self.source = source
        self.config = config
        want = expected_tensors(config)
        for name, shape in want.items():
            if name not in source:
                hint = ""
                if name == "lm_head.weight":
                    hint = " (the model config says tie_word_embeddings: false; is that right?)"
                raise CheckpointError(f"{source.path}: missing tensor {name!r} required by the model config "
                                      f"{config.source}{hint}")
            have = tuple(source.shape(name))
            if have != shape:
                raise CheckpointError(f"{source.path}: tensor {name!r} has shape {list(have)} but the model config "
                                      f"{config.source} expects {list(shape)}; does the checkpoint match the config?")
        self.names: List[str] = list(want)
        self.shapes = dict(want)
        self.notes: List[str] = []
        # value/reward heads ride along: they are parameters of mindrl's value and reward models
        heads = [n for n in source.names() if n.startswith("score.") and n not in want]
        for n in heads:
            self.names.append(n)
            self.shapes[n] = tuple(source.shape(n))
        if heads:
            self.notes.append(f"kept {len(heads)} head tensor(s): {', '.join(heads)}")
        if config.tie_word_embeddings and "lm_head.weight" in source:
            self.notes.append("dropped lm_head.weight (tie_word_embeddings: true; the head is the embedding)")
        ignored = [n for n in source.names() if n not in self.shapes and n != "lm_head.weight"]
        if ignored:
            self.notes.append(f"ignored {len(ignored)} tensor(s) that are not model weights, e.g. "
                              f"{', '.join(ignored[:3])}")
        codes = _source_codes(source.path)
        self.codes = {}
        for n in self.names:
            if dtype is not None:
                self.codes[n] = _CODE[dtype]
            else:  # keep the source's precision; a .ckpt source is read as float32
                self.codes[n] = codes.get(n, "F32") if codes.get(n, "F32") in _ITEMSIZE else "F32"
        kinds = sorted(set(self.codes.values()))
        self.dtype_label = "/".join(_DTYPE_OF_CODE[k] for k in kinds)
        # config.json's torch_dtype: the dtype of the bulk of the weights (the embedding's)
        self.dtype = dtype or _DTYPE_OF_CODE[self.codes["model.embed_tokens.weight"]]

    def nbytes(self, name) -> int:
        return int(np.prod(self.shapes[name], dtype=np.int64)) * _ITEMSIZE[self.codes[name]]

    @property
    def num_params(self) -> int:
        return sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes.values())

    def array(self, name) -> np.ndarray:
        arr = np.asarray(self.source.get(name))
        if tuple(arr.shape) != self.shapes[name]:
            raise CheckpointError(f"{self.source.path}: tensor {name!r} read as shape {list(arr.shape)}, header says "
                                  f"{list(self.shapes[name])}")
        return arr

    def entry(self, name) -> TensorEntry:
        return TensorEntry(name, self.codes[name], self.shapes[name], lambda: self.encoded(name))

    def encoded(self, name, chunk_bytes: int = 64 * 2**20):
        """The tensor's bytes in its output dtype (little-endian), in pieces of about ``chunk_bytes``,
        so casting a 2 GB embedding does not need several 2 GB temporaries."""
        arr = self.array(name)
        code = self.codes[name]
        rows = max(1, chunk_bytes // max(1, arr[:1].nbytes)) if arr.ndim else 1
        for start in range(0, max(1, arr.shape[0] if arr.ndim else 1), rows):
            part = arr[start:start + rows] if arr.ndim else arr
            if code == "BF16":
                yield to_bf16_bits(part.astype(np.float32, copy=False)).astype("<u2").tobytes()
            elif code == "F16":
                with np.errstate(over="ignore"):
                    out = part.astype("<f2")
                if not np.isfinite(out).all() and np.isfinite(part).all():
                    raise ConvertError(f"{self.source.path}: tensor {name!r} overflows float16 (max abs x = "
                                       f"{float(np.abs(part).max()):.3g}); use --dtype bfloat16 or float32")
                yield out.tobytes()
            else:
                yield part.astype("<f4").tobytes()


# ---------------------------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------------------------
def _write_ms_ckpt(path: str, plan: _Plan) -> None:
    from mindrl.models.weights import save_ms_checkpoint
    save_ms_checkpoint({n: plan.array(n) for n in plan.names}, path,
                       dtypes={n: _DTYPE_OF_CODE[plan.codes[n]] for n in plan.names})


def _hf_config_json(config: ModelConfig, dtype: Optional[str]) -> dict:
    doc = config.to_hf_dict()
    doc["torch_dtype"] = dtype or "float32"
    if doc.get("rope_scaling") is None:
        doc.pop("rope_scaling", None)
    return doc


def model_yaml_dict(config: ModelConfig) -> dict:
    """A MindFormers-style model yaml (the key spelling of ``model_configs/*.yaml``)."""
    c = config
    mc = {"model_type": c.model_type, "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
          "intermediate_size": c.intermediate_size, "num_layers": c.num_layers, "num_heads": c.num_heads,
          "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim, "seq_length": c.max_position_embeddings,
          "rms_norm_eps": float(c.rms_norm_eps), "theta": float(c.rope_theta)}
    if c.rope_scaling:
        mc["rope_scaling"] = dict(c.rope_scaling)
    mc.update({"tie_word_embeddings": c.tie_word_embeddings, "qkv_bias": c.qkv_bias, "qk_norm": c.qk_norm,
               "compute_dtype": c.compute_dtype, "param_init_type": c.param_init_type,
               "initializer_range": float(c.initializer_range)})
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(c, key) is not None:
            mc[key] = getattr(c, key)
    return {"model": {"model_config": mc},
            "parallel_config": {"data_parallel": c.data_parallel, "model_parallel": c.model_parallel}}


# ---------------------------------------------------------------------------------------------
# Output handling: refuse, stage, swap
# ---------------------------------------------------------------------------------------------
def _occupied(path: str) -> bool:
    if os.path.isdir(path) and not os.path.islink(path):
        return bool(os.listdir(path))
    return os.path.lexists(path)


def _check_output(output: str, overwrite: bool) -> None:
    if _occupied(output) and not overwrite:
        raise ConvertError(f"{output}: already exists; pass --overwrite to replace it")
    parent = os.path.dirname(os.path.abspath(output))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ConvertError(f"{output}: parent {parent} is not a directory")


def _resolve_config(input_path: str, model_config: Optional[str]) -> ModelConfig:
    if model_config is not None:
        if not os.path.exists(model_config):
            raise ModelConfigError(f"{model_config}: model config not found")
        return load_model_config(model_config)
    if os.path.isdir(input_path):
        if not os.path.exists(os.path.join(input_path, "config.json")):
            raise ConvertError(f"{input_path}: no config.json in the directory; pass --model-config")
        return load_model_config(input_path)
    if input_path.endswith((".json",) + YAML_SUFFIXES):
        return load_model_config(input_path)
    sibling = os.path.join(os.path.dirname(os.path.abspath(input_path)), "config.json")
    if not os.path.exists(sibling):
        raise ConvertError(f"{input_path}: a checkpoint file needs --model-config (a model yaml or config.json); "
                           f"there is no config.json beside it")
    return load_model_config(sibling)


def _open_gguf(input_path: str, model_config: Optional[str]):
    if model_config is not None:
        raise ConvertError(f"{input_path}: a GGUF file carries its own architecture; drop --model-config")
    if not os.path.isfile(input_path):
        raise CheckpointError(f"{input_path}: a .gguf input must be a file")
    from mindrl.models.gguf_import import GGUFModel
    return GGUFModel(input_path)


def convert(input_path: str, output: str, *, model_config: Optional[str] = None, dtype: Optional[str] = None,
            overwrite: bool = False, tokenizer: Optional[str] = None, to_yaml: bool = False,
            write_config: bool = True, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
            log: Callable[[str], None] = print, status: Callable[[str], None] = lambda _: None) -> str:
    """Convert ``input_path`` to ``output`` (direction from the paths, see the module docstring).

    Returns the kind of output written: "yaml", "mindspore" or "hf". Raises ConvertError,
    CheckpointError or ModelConfigError with a one-line message naming the path. ``status`` hears one line when
    the checks have passed and the (possibly long) reading and writing starts.
    """
    input_path, output = os.fspath(input_path), os.fspath(output)
    if dtype is not None and dtype not in _CODE:
        raise ConvertError(f"--dtype {dtype!r} is not one of {', '.join(_CODE)}")
    if not os.path.exists(input_path):
        raise CheckpointError(f"{input_path}: not found")
    if tokenizer is not None and not os.path.isdir(tokenizer):
        raise ConvertError(f"{tokenizer}: tokenizer directory not found")
    if os.path.abspath(input_path) == os.path.abspath(output):
        raise ConvertError(f"{output}: output is the input; write to another path")
    to_yaml = to_yaml or output.endswith(YAML_SUFFIXES)
    gguf_model = _open_gguf(input_path, model_config) if input_path.endswith(".gguf") else None
    config = gguf_model.config if gguf_model else _resolve_config(input_path, model_config)

    if to_yaml:
        import yaml
        if not output.endswith(YAML_SUFFIXES):
            raise ConvertError(f"{output}: --to-yaml writes a .yaml file")
        _check_output(output, overwrite)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        text = f"# model yaml written by `mindrl convert` from {input_path}\n"
        text += yaml.safe_dump(model_yaml_dict(config), sort_keys=False, default_flow_style=False)
        write_text(output, text)
        load_model_config(output)  # what we wrote must read back
        log(f"wrote {output} ({config.model_type}, {config.num_layers} layers, hidden {config.hidden_size})")
        return "yaml"

    if input_path.endswith((".json",) + YAML_SUFFIXES):
        raise ConvertError(f"{input_path}: is a model config, not weights; give a checkpoint, or --to-yaml with a "
                           f".yaml output")
    _check_output(output, overwrite)
    from mindrl.models.weights import TensorSource
    source = gguf_model.source() if gguf_model else TensorSource(input_path)
    plan = _Plan(source, config, dtype)
    tok_files = {}
    if gguf_model and not tokenizer and not output.endswith(MS_SUFFIXES):
        from mindrl.models.gguf_tokenizer import tokenizer_files
        tok_files = tokenizer_files(gguf_model)  # before anything is written: an unsupported tokenizer is refused
    parent = os.path.dirname(os.path.abspath(output))
    status(f"converting {input_path} -> {output} ...")

    if output.endswith(MS_SUFFIXES):
        sibling = os.path.join(parent, "config.json")
        hf_doc = _hf_config_json(config, plan.dtype)
        if write_config and os.path.exists(sibling):
            try:
                same = _comparable(load_model_config(sibling).to_hf_dict()) == _comparable(config.to_hf_dict())
            except ModelConfigError:
                same = False
            if not same and not overwrite:
                raise ConvertError(f"{sibling}: exists and describes another model; pass --overwrite to replace it, "
                                   f"--no-config to leave it, or write to another directory")
            write_config = not same
        os.makedirs(parent, exist_ok=True)
        if output.endswith(".ckpt"):
            _write_ms_ckpt(output, plan)  # staged and renamed inside
        else:
            write_safetensors(output, [plan.entry(n) for n in plan.names], {"format": "ms"})
        if write_config:
            write_text(sibling, json.dumps(hf_doc, indent=2) + "\n")
        kind = "mindspore"
    else:
        os.makedirs(parent, exist_ok=True)
        from mindrl.data.tokenizer import copy_tokenizer_files
        with atomic_path(output, directory=True) as staged:
            files = write_hf_weights(staged, [plan.entry(n) for n in plan.names], max_shard_bytes)
            tok_src = tokenizer or (input_path if os.path.isdir(input_path) else None)
            copied = copy_tokenizer_files(tok_src, staged) if tok_src else []
            for fname, text in tok_files.items():
                write_text(os.path.join(staged, fname), text)
            with open(os.path.join(staged, "config.json"), "w") as fh:
                json.dump(_hf_config_json(config, plan.dtype), fh, indent=2)
        if copied:
            plan.notes.append(f"copied {', '.join(copied)}")
        if tok_files:
            plan.notes.append(f"wrote {', '.join(tok_files)} from the GGUF's tokenizer metadata")
        if len(files) > 1:
            plan.notes.append(f"{len(files) - 1} shards + index")
        kind = "hf"
    size = sum(plan.nbytes(n) for n in plan.names)
    log(f"converted {input_path} -> {output}: {len(plan.names)} tensors, {_count(plan.num_params)} parameters, "
        f"{plan.dtype_label}, {size / 2**20:.1f} MiB")
    for note in plan.notes:
        log(f"  note: {note}")
    return kind


def _count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _comparable(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("torch_dtype", "dtype")}


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mindrl convert",
        description="Convert weights between a Hugging Face directory and a MindSpore checkpoint, or import a "
                    "llama.cpp GGUF file. The direction follows the paths: an output ending in .ckpt/.safetensors is "
                    "a MindSpore checkpoint, an output ending in .yaml is a model yaml (--to-yaml), anything else is "
                    "an HF directory.",
    )
    p.add_argument("--input", required=True, help="HF directory, MindSpore .ckpt/.safetensors, a llama.cpp .gguf "
                                                  "(llama/qwen2/qwen3), or (for --to-yaml) a config.json / model yaml")
    p.add_argument("--output", required=True, help="output path (.ckpt, .safetensors, .yaml or a directory)")
    p.add_argument("--model-config", help="model yaml or config.json (default: the input directory's config.json, "
                                          "or a config.json beside a checkpoint file)")
    p.add_argument("--dtype", choices=list(_CODE), help="dtype of the written tensors (default: keep the source's; "
                                                        "a .ckpt or .gguf source is written as float32)")
    p.add_argument("--tokenizer", help="directory whose tokenizer files are copied into an HF output "
                                       "(default: the input directory's, when the input is an HF directory; "
                                       "rebuilt from the metadata of a .gguf input)")
    p.add_argument("--to-yaml", action="store_true", help="write a MindFormers-style model yaml from the config")
    p.add_argument("--no-config", action="store_true",
                   help="with a MindSpore output, do not write config.json beside the checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return p


def cli_main(argv=None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse has printed the message
        return int(exc.code or 0)
    import time
    started = time.perf_counter()
    try:  # the status line comes once the checks pass, so a refused command prints its error line alone
        convert(args.input, args.output, model_config=args.model_config, dtype=args.dtype, overwrite=args.overwrite,
                tokenizer=args.tokenizer, to_yaml=args.to_yaml, write_config=not args.no_config,
                status=lambda line: print(line, file=sys.stderr, flush=True))
    except (ConvertError, CheckpointError, ModelConfigError) as err:
        print(f"mindrl convert: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        where = err.filename or args.output
        print(f"mindrl convert: error: {where}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"wrote {args.output} ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
