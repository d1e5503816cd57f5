"""Reading a llama.cpp GGUF file as a Hugging Face checkpoint: the config, the tensors, the tokenizer.

The file is read with ggml's own reader (the ``gguf`` package, memory-mapped) and every tensor is
dequantized with ``gguf.quants.dequantize``, one tensor at a time when it is written. Three things undo
what llama.cpp's ``convert_hf_to_gguf.py`` did, as transformers' GGUF loader does
(``transformers/modeling_gguf_pytorch_utils.py``):

* tensor names: ``blk.N.attn_q.weight`` -> ``model.layers.N.self_attn.q_proj.weight`` and so on;
* for ``llama`` only, the rows of q and k: llama.cpp interleaves the two rotary halves of every head
  (its rope pairs neighbouring dimensions, HF's pairs dimension i with i + head_dim/2);
* the HF config, from ``<arch>.*`` metadata; tied embeddings when there is no ``output.weight``.

Anything this cannot reproduce exactly (another architecture, a quant type the library cannot dequantize,
a tensor with no HF counterpart, rope scaling other than linear or LLaMA 3's) is refused, naming it.
"""
from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np

from mindrl.models.config import ModelConfig
from mindrl.models.safetensors_io import CheckpointError
from mindrl.models.weights import TensorSource

ARCHITECTURES = ("llama", "qwen2", "qwen3")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


class GGUFError(CheckpointError):
    """A GGUF file mindrl cannot turn into an HF checkpoint; the message names the file and the reason."""


def hf_name(name: str) -> Optional[str]:
    """The HF name of a GGUF tensor, or None when the decoders mindrl implements have no such tensor."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _BLOCK.match(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``LlamaModel.permute`` of a q or k projection (weight or bias) with ``n_head`` heads."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GGUFModel:
    """One GGUF file: its metadata, an HF :class:`ModelConfig`, and a tensor source under HF names."""

    def __init__(self, path: str):
        import gguf
        self.path = path
        try:
            self.reader = gguf.GGUFReader(path)
        except Exception as err:  # the reader raises ValueError, struct errors, IndexError... on a bad file
            raise GGUFError(f"{path}: not a readable GGUF file ({type(err).__name__}: {err})") from None
        self.meta = {}
        for key, field in self.reader.fields.items():
            try:
                self.meta[key] = field.contents()
            except Exception:  # a value type this reader cannot decode: only fatal if we need it (then "missing")
                continue
        self.arch = self.meta.get("general.architecture")
        if self.arch not in ARCHITECTURES:
            raise GGUFError(f"{path}: architecture {self.arch!r} is not supported; mindrl imports "
                            f"{', '.join(ARCHITECTURES)}")
        self.tensors = {t.name: t for t in self.reader.tensors}
        self._check_tensors(gguf)
        self.config = self._config()

    def need(self, key: str, kind=int):
        value = self.meta.get(key)
        if value is None:
            raise GGUFError(f"{self.path}: metadata {key!r} is missing")
        if isinstance(value, list) or not isinstance(value, (int, float)) or isinstance(value, bool):
            raise GGUFError(f"{self.path}: metadata {key!r} is {value!r}; expected one number")
        return kind(value)

    def _check_tensors(self, gguf) -> None:
        tried = set()
        for t in self.tensors.values():
            if t.name == "rope_freqs.weight":
                continue  # read by _rope_scaling
            if hf_name(t.name) is None:
                raise GGUFError(f"{self.path}: tensor {t.name!r} has no counterpart in a {self.arch} model")
            if t.tensor_type not in tried:  # one row of each type: the library says itself what it cannot do
                try:
                    gguf.quants.dequantize(t.data[:1] if t.data.ndim > 1 else t.data, t.tensor_type)
                except (NotImplementedError, ValueError) as err:
                    why = "" if isinstance(err, NotImplementedError) else f" ({err})"
                    raise GGUFError(f"{self.path}: tensor {t.name!r} is {t.tensor_type.name}, which the gguf library "
                                    f"cannot dequantize{why}") from None
                tried.add(t.tensor_type)

    def _config(self) -> ModelConfig:
        a = self.arch
        hidden = self.need(f"{a}.embedding_length")
        heads = self.need(f"{a}.attention.head_count")
        head_dim = int(self.meta.get(f"{a}.attention.key_length") or hidden // heads)
        rotary = self.meta.get(f"{a}.rope.dimension_count")
        if rotary is not None and int(rotary) != head_dim:
            raise GGUFError(f"{self.path}: rope.dimension_count {rotary} differs from the head size {head_dim} "
                            f"(partial rotary is not supported)")
        if "token_embd.weight" not in self.tensors:
            raise GGUFError(f"{self.path}: tensor 'token_embd.weight' is missing")
        vocab = int(self.tensors["token_embd.weight"].shape[1])  # ggml lists dimensions innermost first
        kv_key = f"{a}.attention.head_count_kv"
        ids = {k: self.meta.get(f"tokenizer.ggml.{g}_token_id") for k, g in
               (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding"))}
        # llama.cpp also stops at end-of-turn / end-of-message tokens (LLaMA 3's <|eot_id|>): every one stops here too
        stops = [ids["eos_token_id"]] + [self.meta.get(f"tokenizer.ggml.{g}_token_id") for g in ("eot", "eom")]
        stops = [i for n, i in enumerate(stops) if i is not None and i not in stops[:n]]
        ids["eos_token_id"] = stops[0] if len(stops) == 1 else (stops or None)
        cfg = ModelConfig(
            model_type=a, vocab_size=vocab, hidden_size=hidden, num_heads=heads, head_dim=head_dim,
            n_kv_heads=self.need(kv_key) if kv_key in self.meta else heads,
            intermediate_size=self.need(f"{a}.feed_forward_length"), num_layers=self.need(f"{a}.block_count"),
            rms_norm_eps=self.need(f"{a}.attention.layer_norm_rms_epsilon", float),
            rope_theta=float(self.meta.get(f"{a}.rope.freq_base", 10000.0)), rope_scaling=self._rope_scaling(head_dim),
            max_position_embeddings=self.need(f"{a}.context_length"),
            tie_word_embeddings="output.weight" not in self.tensors,
            qkv_bias="blk.0.attn_q.bias" in self.tensors, qk_norm=a == "qwen3", source=self.path, **ids)
        # float32 metadata: 1e-5 is stored as 9.99999974e-06; the float32 nearest to it is what was meant
        cfg.rms_norm_eps = float(np.format_float_positional(np.float32(cfg.rms_norm_eps), unique=True))
        cfg.rope_theta = float(np.format_float_positional(np.float32(cfg.rope_theta), unique=True))
        try:
            return cfg.validate()
        except ValueError as err:
            raise GGUFError(str(err)) from None

    def _rope_scaling(self, head_dim: int) -> Optional[dict]:
        a = self.arch
        kind = self.meta.get(f"{a}.rope.scaling.type", "none")
        factor = self.meta.get(f"{a}.rope.scaling.factor")
        if kind == "linear" and factor:
            return {"rope_type": "linear", "factor": float(factor)}
        if kind != "none":
            raise GGUFError(f"{self.path}: rope scaling {kind!r} (factor {factor}) is not supported (linear, or "
                            f"LLaMA 3's)")
        if "rope_freqs.weight" in self.tensors:
            return self._llama3_scaling(head_dim)
        return None

    def _llama3_scaling(self, head_dim: int) -> dict:
        """LLaMA 3.1+ files carry rope scaling as per-frequency divisors (``rope_freqs``), computed by llama.cpp from
        the HF config's factor, low/high_freq_factor and original context. Meta's models all use 1, 4 and 8192;
        recompute with those and the largest divisor as the factor, and accept only an exact match."""
        got = np.asarray(self.tensors["rope_freqs.weight"].data, np.float64).reshape(-1)
        theta = float(self.meta.get(f"{self.arch}.rope.freq_base", 10000.0))
        factor, low, high, old = float(got.max()), 1.0, 4.0, 8192
        wavelen = 2 * math.pi * theta ** (np.arange(0, head_dim, 2) / head_dim)
        # long wavelengths are divided by factor (smooth 0), short ones kept (smooth 1), a blend in between
        smooth = np.clip((old / wavelen - low) / (high - low), 0.0, 1.0)
        want = 1 / ((1 - smooth) / factor + smooth)
        if got.shape != (head_dim // 2,) or not np.allclose(got, want, rtol=1e-4):
            raise GGUFError(f"{self.path}: tensor 'rope_freqs.weight' is not LLaMA 3's rope scaling (low_freq_factor "
                            f"1, high_freq_factor 4, original context 8192); this rope scaling is not supported")
        return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                "original_max_position_embeddings": old}

    def source(self) -> "GGUFSource":
        return GGUFSource(self)


class GGUFSource(TensorSource):
    """The tensors of a :class:`GGUFModel` under HF names, in HF orientation, dequantized when read."""

    def __init__(self, model: GGUFModel):  # not the parent's: that one opens files by their suffix
        self.path, self.extras, self._get, self._shape = model.path, {}, {}, {}
        c = model.config
        heads = {"attn_q": c.num_heads, "attn_k": c.n_kv_heads} if model.arch == "llama" else {}
        for t in model.tensors.values():
            name = hf_name(t.name)
            if name is None:
                continue
            n_head = heads.get(t.name.split(".")[2]) if t.name.startswith("blk.") else None
            self._shape[name] = tuple(int(d) for d in reversed(t.shape))
            self._get[name] = lambda t=t, n_head=n_head: self._read(t, n_head)

    @staticmethod
    def _read(tensor, n_head: Optional[int]) -> np.ndarray:
        import gguf
        shape = tuple(int(d) for d in reversed(tensor.shape))
        arr = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False).reshape(shape)
        return unpermute_rows(arr, n_head) if n_head else arr
