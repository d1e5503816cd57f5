"""Model configuration: one dataclass read from an HF `config.json` or a MindFormers-style yaml.

No mindspore import here: configs are read and validated before anything compiles.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "qwen3")
DTYPES = ("float32", "float16", "bfloat16")


class ModelConfigError(ValueError):
    """A model config that cannot be built; the message names the file and key."""


@dataclass
class ModelConfig:
    model_type: str = "qwen2"
    vocab_size: int = 32000
    hidden_size: int = 512
    intermediate_size: int = 1408
    num_layers: int = 8
    num_heads: int = 8
    n_kv_heads: int = 8
    head_dim: Optional[int] = None          # None: hidden_size // num_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None     # llama3: {"rope_type": "llama3", "factor", ...}
    max_position_embeddings: int = 4096     # MindFormers' seq_length
    tie_word_embeddings: bool = False
    qkv_bias: bool = False                  # Qwen2: true; LLaMA/Qwen3: false
    qk_norm: bool = False                   # Qwen3: RMSNorm on q and k per head
    compute_dtype: str = "float32"
    param_init_type: str = "float32"
    initializer_range: float = 0.02
    bos_token_id: Optional[int] = None
    eos_token_id: Any = None                # int or list of ints
    pad_token_id: Optional[int] = None
    # MindFormers' recompute_config.recompute: True (every layer), False, or N (the first N layers): those layers'
    # activations are recomputed in the backward instead of kept (MindSpore's Cell.recompute)
    recompute: Any = False
    # parallel_config as MindFormers spells it; the trainer's config can override it per stage
    data_parallel: int = 1
    model_parallel: int = 1
    source: str = field(default="<defaults>", compare=False)

    def __post_init__(self):
        if self.head_dim is None and self.num_heads:
            self.head_dim = self.hidden_size // self.num_heads

    # -- validation -----------------------------------------------------------------------
    def validate(self) -> "ModelConfig":
        where = self.source

        def bad(key, msg):
            raise ModelConfigError(f"{where}: {key}: {msg}")

        if self.model_type not in SUPPORTED_MODEL_TYPES:
            bad("model_type", f"unknown model_type {self.model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "n_kv_heads",
                    "head_dim", "max_position_embeddings"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                bad(key, f"must be a positive integer, got {value!r}")
        if self.num_heads % self.n_kv_heads:
            bad("n_kv_heads", f"num_heads={self.num_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        for key in ("compute_dtype", "param_init_type"):
            if getattr(self, key) not in DTYPES:
                bad(key, f"{getattr(self, key)!r} is not one of {', '.join(DTYPES)}")
        if not self.rms_norm_eps > 0:
            bad("rms_norm_eps", f"must be > 0, got {self.rms_norm_eps!r}")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("llama3", "linear", "default"):
                bad("rope_scaling", f"rope_type {kind!r} is not supported (llama3, linear, default)")
        r = self.recompute
        if not (isinstance(r, bool) or (isinstance(r, int) and 0 <= r <= self.num_layers)):
            bad("recompute_config.recompute", f"must be true, false or a layer count in [0, {self.num_layers}] (the first N layers), "
                             f"got {r!r}")
        if self.model_parallel > 1:
            for key in ("num_heads", "n_kv_heads", "intermediate_size", "vocab_size"):
                if getattr(self, key) % self.model_parallel:
                    bad(key, f"{getattr(self, key)} is not divisible by model_parallel={self.model_parallel}")
        return self

    def recompute_layers(self) -> int:
        """How many layers, from the first, recompute their forward in the backward."""
        return self.num_layers if self.recompute is True else int(self.recompute)

    @property
    def eos_token_ids(self) -> list:
        if self.eos_token_id is None:
            return []
        return list(self.eos_token_id) if isinstance(self.eos_token_id, (list, tuple)) else [self.eos_token_id]

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes).validate()

    # -- HF config.json ---------------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, cfg: dict, source: str = "<dict>") -> "ModelConfig":
        model_type = cfg.get("model_type")
        if model_type is None:
            raise ModelConfigError(f"{source}: model_type: missing")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ModelConfigError(
                f"{source}: model_type: unknown model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            out = cls(
                model_type=model_type,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_layers=int(cfg["num_hidden_layers"]),
                num_heads=heads,
                n_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=float(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))),
                rope_scaling=_hf_rope_scaling(cfg),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                qkv_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
                qk_norm=model_type == "qwen3",
                initializer_range=float(cfg.get("initializer_range", 0.02)),
                bos_token_id=cfg.get("bos_token_id"),
                eos_token_id=cfg.get("eos_token_id"),
                pad_token_id=cfg.get("pad_token_id"),
                source=source,
            )
        except KeyError as err:
            raise ModelConfigError(f"{source}: {err.args[0]}: missing") from None
        if model_type == "qwen2":
            out.qkv_bias = True  # Qwen2 always has q/k/v bias; HF has no flag for it
        return out.validate()

    def to_hf_dict(self) -> dict:
        arch = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[self.model_type]
        out = {
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "initializer_range": self.initializer_range,
            "torch_dtype": self.param_init_type,
            "use_cache": True,
        }
        if self.model_type == "llama":
            out["attention_bias"] = self.qkv_bias
            out["mlp_bias"] = False
        if self.model_type == "qwen3":
            out["attention_bias"] = False
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    # -- MindFormers-style yaml -------------------------------------------------------------
    @classmethod
    def from_yaml_dict(cls, doc: dict, source: str = "<yaml>") -> "ModelConfig":
        try:
            mc = doc["model"]["model_config"]
        except (KeyError, TypeError):
            raise ModelConfigError(f"{source}: model.model_config: missing (expected MindFormers yaml layout)") from None
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in mc.items():
            if key == "type":
                if value not in _YAML_CLASS_TYPES and value not in SUPPORTED_MODEL_TYPES:
                    raise ModelConfigError(f"{source}: model.model_config.type: unknown config class {value!r}; "
                                           f"supported: {', '.join(_YAML_CLASS_TYPES)}")
                if "model_type" not in mc:
                    kwargs["model_type"] = _YAML_CLASS_TYPES.get(value, value)
                continue
            name = _YAML_ALIASES.get(key, key)
            if name in _YAML_IGNORED:
                continue
            if name not in known or name == "source":
                raise ModelConfigError(f"{source}: model.model_config.{key}: unknown key")
            kwargs[name] = value
        par = doc.get("parallel_config") or {}
        for key in par:
            if key not in ("data_parallel", "model_parallel", "pipeline_stage", "micro_batch_num", "vocab_emb_dp",
                           "use_seq_parallel", "gradient_aggregation_group"):
                raise ModelConfigError(f"{source}: parallel_config.{key}: unknown key")
        recompute = _yaml_recompute(doc.get("recompute_config"), source)
        if recompute is not None:
            kwargs["recompute"] = recompute
        kwargs["data_parallel"] = int(par.get("data_parallel", 1))
        kwargs["model_parallel"] = int(par.get("model_parallel", 1))
        if "model_type" not in kwargs:
            raise ModelConfigError(f"{source}: model.model_config.model_type: missing")
        if kwargs["model_type"] == "qwen2":
            kwargs.setdefault("qkv_bias", True)
        if kwargs["model_type"] == "qwen3":
            kwargs.setdefault("qk_norm", True)
        for key in ("rms_norm_eps", "rope_theta", "initializer_range"):
            if key in kwargs:
                try:
                    kwargs[key] = float(kwargs[key])
                except (TypeError, ValueError):
                    raise ModelConfigError(f"{source}: model.model_config.{key}: not a number: {kwargs[key]!r}") from None
        return cls(source=source, **kwargs).validate()

    def to_yaml_dict(self) -> dict:
        mc = {"type": {v: k for k, v in _YAML_CLASS_TYPES.items()}[self.model_type]}
        inverse = {v: k for k, v in _YAML_ALIASES.items()}
        for f in dataclasses.fields(self):
            if f.name in ("source", "data_parallel", "model_parallel", "recompute"):
                continue
            mc[inverse.get(f.name, f.name)] = getattr(self, f.name)
        out = {"model": {"model_config": mc},
               "parallel_config": {"data_parallel": self.data_parallel, "model_parallel": self.model_parallel}}
        if self.recompute:
            out["recompute_config"] = {"recompute": self.recompute}
        return out


# MindFormers names -> ours (both spellings accepted in yaml)
_YAML_ALIASES = {"seq_length": "max_position_embeddings", "theta": "rope_theta", "n_layers": "num_layers",
                 "dim": "hidden_size", "ffn_hidden_size": "intermediate_size", "num_key_value_heads": "n_kv_heads",
                 "qkv_has_bias": "qkv_bias"}
# MindFormers names the config *class* in `type`; it tells the architecture when model_type is absent
_YAML_CLASS_TYPES = {"LlamaConfig": "llama", "Qwen2Config": "qwen2", "Qwen3Config": "qwen3"}
# MindFormers keys that have no meaning for us (kernels, fusion switches)
_YAML_IGNORED = {"use_flash_attention", "use_past", "is_dynamic", "softmax_compute_type", "rotary_dtype",
                 "layernorm_compute_type", "checkpoint_name_or_path", "batch_size", "use_attn_mask_compression",
                 "qkv_concat", "use_rope_slice", "offset", "repetition_penalty", "max_decode_length", "top_k",
                 "top_p", "do_sample", "block_size", "num_blocks", "emb_dropout_prob", "hidden_act",
                 # MindRLHF's Qwen2 yamls: the RoPE table size (seq_length is the context mindrl uses), and kernel
                 # switches of MindFormers' Ascend implementation
                 "max_position_embedding", "extend_method", "fine_grain_interleave"}


# recompute_config keys besides `recompute`: the values that describe what mindrl does, and why others cannot be
_RECOMPUTE_KEYS = {
    "select_recompute": ((False,), "mindrl recomputes whole layers, not selected operators"),
    "select_comm_recompute": ((False,), "mindrl recomputes whole layers, not selected operators"),
    "mp_comm_recompute": ((True,), "a recomputed layer's tensor-parallel all-reduce is recomputed with it"),
    "parallel_optimizer_comm_recompute": ((False,), "mindrl does not shard the optimizer state"),
    "recompute_slice_activation": ((False,), "each tensor-parallel rank keeps the whole input of a recomputed layer"),
}


def _yaml_recompute(section, source: str):
    """MindFormers' recompute_config -> ModelConfig.recompute (None when the yaml has no such section)."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ModelConfigError(f"{source}: recompute_config: expected a mapping, got {section!r}")
    value = section.get("recompute", False)
    if isinstance(value, list):  # one count per pipeline stage; mindrl runs one stage
        if len(value) != 1:
            raise ModelConfigError(f"{source}: recompute_config.recompute: {value!r} lists {len(value)} pipeline "
                                   f"stages; mindrl runs one (give one layer count, or true)")
        value = value[0]
    for key, setting in section.items():
        if key == "recompute":
            continue
        if key not in _RECOMPUTE_KEYS:
            raise ModelConfigError(f"{source}: recompute_config.{key}: unknown key")
        allowed, why = _RECOMPUTE_KEYS[key]
        if value and setting not in allowed:
            raise ModelConfigError(f"{source}: recompute_config.{key}: {setting!r} is not supported: {why} "
                                   f"(set it to {allowed[0]!r})")
    return value


def _hf_rope_scaling(cfg: dict) -> Optional[dict]:
    scaling = cfg.get("rope_scaling")
    if scaling is None and isinstance(cfg.get("rope_parameters"), dict):
        params = cfg["rope_parameters"]
        if params.get("rope_type", "default") != "default":
            scaling = params
    if not scaling:
        return None
    scaling = dict(scaling)
    if scaling.get("rope_type", scaling.get("type")) == "default":
        return None
    return scaling


def load_model_config(path: str) -> ModelConfig:
    """Read a model config from an HF directory / config.json, or a MindFormers-style yaml."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.exists(path):
        raise ModelConfigError(f"{path}: model config not found")
    if path.endswith(".json"):
        try:
            with open(path) as fh:
                doc = json.load(fh)
        except json.JSONDecodeError as err:
            raise ModelConfigError(f"{path}: not valid JSON: {err}") from None
        return ModelConfig.from_hf_dict(doc, source=path)
    if path.endswith((".yaml", ".yml")):
        import yaml
        try:
            with open(path) as fh:
                doc = yaml.safe_load(fh)
        except yaml.YAMLError as err:
            raise ModelConfigError(f"{path}: not valid yaml: {err}") from None
        return ModelConfig.from_yaml_dict(doc or {}, source=path)
    raise ModelConfigError(f"{path}: expected a directory with config.json, a .json or a .yaml model config")
