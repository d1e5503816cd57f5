"""A loaded causal LM with a numpy-facing API: what users and outside checks call."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from mindrl.models.config import ModelConfig, ModelConfigError, gguf_hint, load_model_config
from mindrl.models.safetensors_io import CheckpointError

# Inside functions: MindSpore and the network modules, so that reading a model config or a checkpoint header
# (convert, preflight, `mindrl plan`) does not load MindSpore


class PretrainedLM:
    """Holds the MindSpore network (``.net``), its config and where it came from."""

    def __init__(self, net, config: ModelConfig, path: Optional[str] = None):
        self.net = net
        self.config = config
        self.path = path
        self._logits_cell = None
        self._scorers = {}

    @property
    def eos_token_ids(self):
        return self.config.eos_token_ids

    def logits(self, input_ids, attention_mask=None) -> np.ndarray:
        """int32 numpy [B, T] -> float32 numpy logits [B, T, V]."""
        from mindspore import Tensor
        ids = np.asarray(input_ids)
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be 2-D [batch, seq], got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"input_ids out of range [0, {self.config.vocab_size})")
        mask = np.ones_like(ids, dtype=np.int32) if attention_mask is None else np.asarray(attention_mask, np.int32)
        out = self.net(Tensor(ids.astype(np.int32)), Tensor(mask))
        return out.asnumpy().astype(np.float32)

    def log_probs(self, input_ids, attention_mask=None, micro_batch_size: int = 8, temperature: float = 1.0,
                  with_entropy: bool = False):
        """Log-prob of each next token: numpy [B, T-1] (and entropy [B, T-1] when asked)."""
        from mindrl.models.scoring import LogProbCell, score_sequences
        key = (float(temperature), bool(with_entropy))
        if key not in self._scorers:
            self._scorers[key] = LogProbCell(self.net, temperature, with_entropy)
        ids = np.asarray(input_ids, np.int32)
        mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, np.int32)
        lp, ent = score_sequences(self._scorers[key], ids, mask, micro_batch_size)
        return (lp, ent) if with_entropy else lp

    def state_dict(self):
        from mindrl.models.weights import state_numpy
        return state_numpy(self.net)

    def load_weights(self, path: str, strict: bool = True):
        from mindrl.models.weights import load_into
        return load_into(self.net, path, strict=strict)

    def save_pretrained(self, directory: str, dtype: Optional[str] = None, tokenizer_dir: Optional[str] = None):
        """HF directory (config.json + safetensors) that transformers and mindrl both load."""
        from mindrl.models.weights import save_hf
        save_hf(self.net, self.config, directory, dtype, tokenizer_dir)

    def save_checkpoint(self, path: str):
        """MindSpore checkpoint, .ckpt or .safetensors by extension."""
        from mindrl.models.weights import save_ms_checkpoint
        save_ms_checkpoint(self.state_dict(), path)


def build_network(config: ModelConfig, kind: str = "causal_lm", tp=None, seed: int = 0, init: bool = True):
    from mindrl.parallel.layers import SINGLE, skip_init
    tp = tp or SINGLE
    if kind == "causal_lm":
        from mindrl.models.decoder import CausalLM as cls
    elif kind == "value":
        from mindrl.models.heads import ValueModel as cls
    elif kind == "reward":
        from mindrl.models.heads import RewardModel as cls
    else:
        raise ValueError(f"unknown model kind {kind!r} (causal_lm, value, reward)")
    if init:
        return cls(config, tp, seed)
    with skip_init():
        return cls(config, tp, seed)


def resolve_checkpoint(path: str, model_config: Optional[str] = None):
    """(config, weights path or None) for an HF dir, a mindrl checkpoint, a model yaml, or a weights file +
    model_config."""
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: not found")
    if os.path.isdir(path):
        from mindrl.models.weights import weights_path
        path = weights_path(path, verify=True)  # a mindrl training checkpoint: its policy
        if not os.path.exists(os.path.join(path, "config.json")) and model_config is None:
            raise CheckpointError(f"{path}: no config.json in the directory (pass model_config=...)")
        return load_model_config(model_config or path), path
    if path.endswith(".gguf"):
        raise CheckpointError(f"{path}: {gguf_hint(path)}")
    if path.endswith((".yaml", ".yml", ".json")):
        return load_model_config(path), None  # config only: random init
    if path.endswith((".ckpt", ".safetensors")):
        if model_config is None:
            sibling = os.path.join(os.path.dirname(path), "config.json")
            if not os.path.exists(sibling):
                raise ModelConfigError(f"{path}: a weights file needs model_config= (a model yaml or config.json)")
            model_config = sibling
        return load_model_config(model_config), path
    raise CheckpointError(f"{path}: expected an HF directory, a model yaml, or a .ckpt/.safetensors file")


def from_pretrained(path, *, mode="graph", tp=None, dtype=None, kind="causal_lm", model_config=None,
                    seed: int = 0) -> PretrainedLM:
    from mindrl.runtime import setup_context
    from mindrl.models.weights import load_into
    config, weights = resolve_checkpoint(str(path), model_config)
    if dtype is not None:
        config = config.replace(compute_dtype=dtype)
    setup_context(mode)
    net = build_network(config, kind, tp, seed, init=weights is None)
    if weights is not None:
        load_into(net, weights, allow_missing=("score.",) if kind != "causal_lm" else ())
    net.set_train(False)
    return PretrainedLM(net, config, str(path))
