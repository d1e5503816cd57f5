"""Model configuration: one dataclass read from an HF `config.json` or a MindFormers-style yaml.

No mindspore import here: configs are read and validated before anything compiles.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

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
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (self.hidden_size, self.num_heads))
        if self.head_dim is None and self.num_heads and ints:  # else validate() names the key that is not a number
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

    # -- MindSpeed-RL's (Megatron) model files ----------------------------------------------
    @classmethod
    def from_megatron_dict(cls, args: dict, source: str = "<yaml>") -> "ModelConfig":
        """A MindSpeed-RL ``configs/model/<name>.yaml`` section: Megatron's model arguments with Megatron's defaults
        (see _MEGATRON_KEYS). The architecture follows from the switches: ``qk_layernorm`` is Qwen3, ``add_qkv_bias``
        Qwen2, neither LLaMA."""
        where = source

        def bad(key, msg):
            raise ModelConfigError(f"{where}: {key}: {msg}")

        known = {**_MEGATRON_KEYS, **{k: None for k in _MEGATRON_NO_EFFECT}}
        for key, value in args.items():
            if key in MEGATRON_TRAINING_KEYS:
                continue  # the run config's translation judged it (megatron_training_keys)
            if key not in known:
                bad(key, "not a Megatron model argument mindrl knows (docs/models.md lists them)")
            if key in _MEGATRON_REQUIRED_VALUES and not _same(value, _MEGATRON_REQUIRED_VALUES[key][0]):
                want, why = _MEGATRON_REQUIRED_VALUES[key]
                bad(key, f"{value!r} is not supported: {why} (mindrl needs {want!r})")
        for key, (want, why) in _MEGATRON_REQUIRED_VALUES.items():
            if key not in args and want != _MEGATRON_DEFAULTS.get(key, want):
                bad(key, f"missing: Megatron's default {_MEGATRON_DEFAULTS[key]!r} is not supported ({why}); "
                         f"set {key}: {want!r}")
        a = {**_MEGATRON_DEFAULTS, **args}
        for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "padded_vocab_size"):
            if a.get(key) is None:
                bad(key, "missing" + (" (mindrl does not pad the tokenizer's vocabulary: give the model's)"
                                      if key == "padded_vocab_size" else ""))
        heads = int(a["num_attention_heads"])
        scaling = None
        if a.get("rope_scaling_type") is not None:
            if a["rope_scaling_type"] != "llama3":
                bad("rope_scaling_type", f"{a['rope_scaling_type']!r} is not supported (llama3)")
            scaling = {"rope_type": "llama3", "factor": float(a["rope_scaling_factor"]),
                       "low_freq_factor": float(a["low_freq_factor"]), "high_freq_factor": float(a["high_freq_factor"]),
                       "original_max_position_embeddings": int(a["original_max_position_embeddings"])}
        model_type = "qwen3" if a["qk_layernorm"] else "qwen2" if a["add_qkv_bias"] else "llama"
        try:
            return cls(
                model_type=model_type, vocab_size=int(a["padded_vocab_size"]), hidden_size=int(a["hidden_size"]),
                intermediate_size=int(a["ffn_hidden_size"]), num_layers=int(a["num_layers"]), num_heads=heads,
                n_kv_heads=int(a["num_query_groups"]) if a["group_query_attention"] else heads,
                head_dim=int(a["kv_channels"]) if a.get("kv_channels") else None,
                rms_norm_eps=float(a["norm_epsilon"]), rope_theta=float(a["rotary_base"]), rope_scaling=scaling,
                max_position_embeddings=int(a["max_position_embeddings"] or a.get("seq_length") or 4096),
                tie_word_embeddings=not a["untie_embeddings_and_output_weights"], qkv_bias=bool(a["add_qkv_bias"]),
                qk_norm=bool(a["qk_layernorm"]), initializer_range=float(a["init_method_std"]), source=source,
            ).validate()
        except (TypeError, ValueError) as err:
            raise ModelConfigError(f"{where}: {err}") from None

    # -- MindFormers-style yaml -------------------------------------------------------------
    @classmethod
    def from_yaml_dict(cls, doc: dict, source: str = "<yaml>") -> "ModelConfig":
        try:
            mc = doc["model"]["model_config"]
        except (KeyError, TypeError):
            raise ModelConfigError(f"{source}: model.model_config: missing (expected MindFormers yaml layout)") from None
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        restated = {}  # MindFormers keys its LLaMA stores but never reads: checked against what it does use
        for key, value in mc.items():
            if key in _YAML_RESTATED:
                restated[key] = value
                continue
            if key == "type":
                if value not in _YAML_CLASS_TYPES and value not in SUPPORTED_MODEL_TYPES:
                    raise ModelConfigError(f"{source}: model.model_config.type: unknown config class {value!r}; "
                                           f"supported: {', '.join(_YAML_CLASS_TYPES)}")
                if "model_type" not in mc:
                    kwargs["model_type"] = _YAML_CLASS_TYPES.get(value, value)
                continue
            name = _YAML_ALIASES.get(key, key)
            if name in _YAML_FIXED:  # what mindrl's decoders do: any other value would be a different model
                allowed, why = _YAML_FIXED[name]
                if value not in allowed:
                    raise ModelConfigError(f"{source}: model.model_config.{key}: {value!r} is not supported: {why}")
                continue
            if name in _YAML_IGNORED:
                continue
            if name not in known or name == "source":
                raise ModelConfigError(f"{source}: model.model_config.{key}: not a MindFormers LLaMA/Qwen key mindrl "
                                       f"reads, so it would change nothing; remove it (docs/models.md lists the keys)")
            kwargs[name] = value
        par = doc.get("parallel_config") or {}
        for key in par:
            if key not in ("data_parallel", "model_parallel", "pipeline_stage", "micro_batch_num", "vocab_emb_dp",
                           "use_seq_parallel", "gradient_aggregation_group"):
                raise ModelConfigError(f"{source}: parallel_config.{key}: not a MindFormers parallel_config key "
                                       f"mindrl reads; remove it")
        # a pipeline mindrl does not have would run another layout than the file says; sequence parallelism (which
        # MindRLHF's yamls turn on) only shards activations, the numbers are the same without it
        if par.get("pipeline_stage", 1) != 1:
            raise ModelConfigError(f"{source}: parallel_config.pipeline_stage: {par['pipeline_stage']!r} is not "
                                   f"supported: mindrl runs one pipeline stage (tensor and data parallel only)")
        recompute = _yaml_recompute(doc.get("recompute_config"), source)
        if recompute is not None:
            kwargs["recompute"] = recompute
        kwargs["data_parallel"] = int(par.get("data_parallel", 1))
        kwargs["model_parallel"] = int(par.get("model_parallel", 1))
        if "model_type" not in kwargs:
            raise ModelConfigError(f"{source}: model.model_config.model_type: missing")
        _mindformers_ffn(kwargs)
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
        out = cls(source=source, **kwargs).validate()
        _check_restated(out, restated, source)
        return out

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
                 "top_p", "do_sample", "block_size", "num_blocks",
                 # MindRLHF's Qwen2 yamls: the RoPE table size (seq_length is the context mindrl uses), and kernel
                 # switches of MindFormers' Ascend implementation
                 "max_position_embedding", "fine_grain_interleave", "ignore_token_id", "temperature",
                 "use_past_shard", "auto_map"}


# MindFormers keys that change the model: mindrl accepts the value its decoders implement, and refuses another
_YAML_FIXED = {
    "hidden_act": (("silu", "swiglu"), "mindrl's decoders use SiLU in a gated (SwiGLU) MLP, as LLaMA and Qwen do"),
    "emb_dropout_prob": ((0, 0.0), "mindrl trains without dropout (RL and SFT recipes set it to 0)"),
}


# recompute_config keys besides `recompute`: the values that describe what mindrl does, and why others cannot be
_RECOMPUTE_KEYS = {
    "select_recompute": ((False,), "mindrl recomputes whole layers, not selected operators"),
    "select_comm_recompute": ((False,), "mindrl recomputes whole layers, not selected operators"),
    "mp_comm_recompute": ((True,), "a recomputed layer's tensor-parallel all-reduce is recomputed with it"),
    "parallel_optimizer_comm_recompute": ((False,), "mindrl does not shard the optimizer state"),
    "recompute_slice_activation": ((False,), "each tensor-parallel rank keeps the whole input of a recomputed layer"),
}


# MindFormers' LlamaConfig stores these Qwen-style keys (MindRLHF's Qwen2 yamls carry them) but LlamaForCausalLM never
# reads them: the head size is hidden_size / num_heads, the rotary base is `theta`, over the whole head. mindrl does the
# same, and refuses a value that says otherwise rather than ignore it: key -> (what MindFormers uses, why)
_YAML_RESTATED = {
    "kv_channels": "the head size, which MindFormers' LLaMA computes as hidden_size / num_heads",
    "rotary_emb_base": "the rotary base, which MindFormers' LLaMA reads from theta",
    "rotary_pct": "the rotated share of each head, which is all of it in MindFormers' LLaMA",
    "compute_in_2d": None,  # a sharding layout switch (deprecated in LlamaConfig): any value, the same math
    "multiple_of": None, "ffn_dim_multiplier": None,  # read by _mindformers_ffn
    "extend_method": "the rotary extension; MindFormers' None is the only one mindrl builds",
}


def _check_restated(cfg: "ModelConfig", restated: dict, source: str) -> None:
    """The validated config's head size, rotary base and rotation against the keys that restate them."""
    def bad(key, msg):
        raise ModelConfigError(f"{source}: model.model_config.{key}: {msg}")

    uses = {"kv_channels": cfg.head_dim, "rotary_emb_base": cfg.rope_theta, "rotary_pct": 1.0, "extend_method": "None"}
    for key, value in restated.items():
        if key not in uses:
            continue
        if key == "extend_method" and value in (None, "None"):
            continue
        try:
            same = float(value) == float(uses[key]) if key != "extend_method" else False
        except (TypeError, ValueError):
            same = False
        if not same:
            bad(key, f"{value!r} is not what runs: it restates {_YAML_RESTATED[key]} ({uses[key]!r}); remove it, or "
                     f"change the key the model reads")


def _mindformers_ffn(kwargs: dict) -> None:
    """MindFormers' LLaMA FFN width when intermediate_size is not given: 2/3 of 4 x hidden, times
    ffn_dim_multiplier, rounded up to multiple_of (LlamaFeedForward). Values that are not numbers are left for
    validate() to name."""
    multiple, mult = kwargs.pop("multiple_of", 256), kwargs.pop("ffn_dim_multiplier", None)
    if "intermediate_size" in kwargs or "hidden_size" not in kwargs:
        return
    try:
        h = int(2 * 4 * int(kwargs["hidden_size"]) / 3)
        if mult is not None:
            h = int((float(mult) + 0.01) * h)
        kwargs["intermediate_size"] = int(multiple) * ((h + int(multiple) - 1) // int(multiple))
    except (TypeError, ValueError):
        kwargs["intermediate_size"] = kwargs["hidden_size"]  # invalid: validate() reports hidden_size


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


# Megatron's model arguments (MindSpeed-RL's configs/model/*.yaml), with Megatron's defaults
_MEGATRON_DEFAULTS = {
    "num_layers": None, "hidden_size": None, "ffn_hidden_size": None, "num_attention_heads": None, "kv_channels": None,
    "group_query_attention": False, "num_query_groups": 1, "rotary_base": 10000, "max_position_embeddings": None,
    "padded_vocab_size": None, "make_vocab_size_divisible_by": 128, "untie_embeddings_and_output_weights": False,
    "add_qkv_bias": False, "qk_layernorm": False, "norm_epsilon": 1e-5, "init_method_std": 0.02,
    "disable_bias_linear": False, "attention_bias": False, "position_embedding_type": "learned_absolute",
    "normalization": "LayerNorm", "swiglu": False,
    "rope_scaling_type": None, "rope_scaling_factor": 1.0, "low_freq_factor": None, "high_freq_factor": None,
    "original_max_position_embeddings": None, "seq_length": None, "num_experts": None,
    "multi_latent_attention": False,
}
_MEGATRON_KEYS = dict(_MEGATRON_DEFAULTS)
# keys whose only supported value is the architecture mindrl builds: (value, why)
_MEGATRON_REQUIRED_VALUES = {
    "position_embedding_type": ("rope", "mindrl's decoders use rotary position embeddings"),
    "normalization": ("RMSNorm", "mindrl's decoders use RMSNorm"),
    "swiglu": (True, "mindrl's MLP is SwiGLU"),
    "disable_bias_linear": (True, "mindrl's linear layers have no bias (only q/k/v with add_qkv_bias)"),
    "attention_bias": (False, "mindrl's attention output projection has no bias"),
    "num_experts": (None, "mindrl's models have no experts (MoE)"),
    "multi_latent_attention": (False, "mindrl has no multi-latent attention"),
}
# accepted with any value: kernel, fusion and memory switches that do not change the model's math
_MEGATRON_NO_EFFECT = ("use_mcore_models", "attention_softmax_in_fp32", "use_flash_attn", "use_fused_rmsnorm",
                       "use_fused_swiglu", "use_fused_rotary_pos_emb", "use_rotary_position_embeddings", "use_mc2",
                       "sequence_parallel", "no_masked_softmax_fusion", "no_gradient_accumulation_fusion", "bf16",
                       "make_vocab_size_divisible_by")


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, str) and isinstance(b, (int, float)):
        try:
            return float(a) == b
        except ValueError:
            return False
    return a == b


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


# Megatron training arguments a MindSpeed-RL model file may carry beside the architecture (configs/model/qwen25_32b.yaml
# has adam_beta2). The model reader skips them; mindrl.config.mindspeed_rl translates them as the run's keys, and a
# mindrl config naming such a file is refused (megatron_training_keys). tests/test_mindspeed_config.py checks this set
# is that module's table less the model arguments.
MEGATRON_TRAINING_KEYS = frozenset((
    "adam_beta1", "adam_beta2", "adam_eps", "attention_dropout", "clip_grad", "coc_fused_kernel", "coc_parallel_num",
    "context_parallel_size", "data_path", "dataset_additional_keys", "distributed_backend",
    "expert_model_parallel_size", "finetune", "fp16", "full_shuffle_instruction_dataset", "global_batch_size",
    "hidden_dropout", "initial_loss_scale", "load", "lora_alpha", "lora_fusion", "lora_r", "lora_target_modules",
    "lr", "lr_decay_style", "lr_warmup_fraction", "lr_warmup_iters",
    "micro_batch_size", "min_lr", "no_load_optim", "no_load_rng", "no_save_optim", "no_save_rng", "no_shared_storage",
    "no_shuffle", "num_workers", "overlap_grad_reduce", "overlap_param_gather", "pipeline_model_parallel_size",
    "recompute_granularity", "recompute_method", "recompute_num_layers", "reuse_fp32_param", "save", "save_interval",
    "seed", "split", "swap_attention", "tensor_model_parallel_size", "tokenizer_name_or_path",
    "tokenizer_not_use_fast", "tokenizer_type", "train_iters", "use_ascend_coc", "use_distributed_optimizer",
    "variable_seq_lengths", "weight_decay"))


def megatron_training_keys(path: str) -> list:
    """The training arguments a MindSpeed-RL model file at ``path`` carries (none for any other model config)."""
    if not str(path).endswith((".yaml", ".yml")) or not os.path.isfile(path):
        return []
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return []  # load_model_config says what is wrong with it
    if not _is_megatron_model_file(doc):
        return []
    return sorted(set(next(iter(doc.values()))) & MEGATRON_TRAINING_KEYS)


def _is_megatron_model_file(doc) -> bool:
    """MindSpeed-RL's model file: one top-level key (the model's name) holding Megatron's arguments."""
    return (isinstance(doc, dict) and len(doc) == 1 and "model" not in doc
            and isinstance(next(iter(doc.values())), dict) and "num_layers" in next(iter(doc.values())))


def gguf_hint(path: str) -> str:
    """Said of a .gguf given where an HF model is needed: the exact command that converts it (mindrl does not
    convert behind the user's back: the output is 4x the file and worth keeping)."""
    out = re.sub(r"[.]gguf$", "", path) + "-hf"
    return (f"is a GGUF file; convert it first with `mindrl convert --input {shlex.quote(path)} --output "
            f"{shlex.quote(out)}` and use that directory")


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
        try:
            with open(path) as fh:
                doc = yaml.safe_load(fh)
        except yaml.YAMLError as err:
            raise ModelConfigError(f"{path}: not valid yaml: {err}") from None
        if _is_megatron_model_file(doc):
            (args,) = doc.values()
            return ModelConfig.from_megatron_dict(args, source=path)
        return ModelConfig.from_yaml_dict(doc or {}, source=path)
    raise ModelConfigError(f"{path}: expected a directory with config.json, a .json or a .yaml model config")


def reward_statistics(path: str):
    """(mean, std) that `mindrl train-rm` (or OpenRLHF) stored in the model's config.json, or None."""
    cfg = os.path.join(path, "config.json") if os.path.isdir(path) else None
    if cfg is None or not os.path.exists(cfg):
        return None
    with open(cfg) as fh:
        doc = json.load(fh)
    if "mean" in doc and "std" in doc:
        return float(doc["mean"]), float(doc["std"])
    return None
