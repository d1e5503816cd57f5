"""Models: decoder LMs (Qwen2/Qwen2.5/LLaMA/Qwen3), value and reward heads, weight I/O.

The public entry point is :func:`from_pretrained`; imports of mindspore happen inside it so that
``import mindrl.models`` stays cheap.
"""
from mindrl.models.config import ModelConfig, ModelConfigError, load_model_config  # noqa: F401


def from_pretrained(path, *, mode="graph", tp=None, dtype=None, kind="causal_lm", model_config=None):
    """Load a model from an HF directory (config.json + safetensors), a mindrl checkpoint directory, or a
    MindSpore .ckpt/.safetensors file together with ``model_config`` (yaml or config.json).

    Returns a :class:`mindrl.models.lm.PretrainedLM` (``kind="causal_lm"``) whose ``.logits(ids)`` takes
    int32 numpy [B, T] and returns float32 numpy [B, T, V].
    """
    from mindrl.models.lm import from_pretrained as _impl
    return _impl(path, mode=mode, tp=tp, dtype=dtype, kind=kind, model_config=model_config)
