"""Decoder-only causal LM (Qwen2 / Qwen2.5 / LLaMA / LLaMA-3 / Qwen3) in MindSpore, top to bottom.

Three entry points share the same weights:
- ``construct(input_ids, attention_mask)``: full-sequence hidden states (training, scoring).
- ``prefill(...)`` / ``decode(...)``: the KV-cache path used by rollout (see mindrl/rollout).

Attention never broadcasts a BatchMatMul (unsupported on CPU): for grouped-query attention the
R = num_heads / n_kv_heads query heads of one KV head are stacked along the sequence axis, so q is
[B, KV, R*S, d] against k [B, KV, S, d]; K/V are never repeated.

Weights and computation are apart: DecoderLayer cells hold each layer's weights under Hugging Face's names, and
one parameterless block per path (LayerBlock, PrefillBlock, DecodeBlock) computes every layer of a graph with
that layer's weights as its inputs, so a graph compiles one layer, not num_layers of them (see _LayerMath).
"""
from __future__ import annotations

import contextlib
import logging
import math

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from mindrl.models.broadcast import expand, expand_in_bprop, row_mean, row_sum
from mindrl.models.config import ModelConfig
from mindrl.parallel.comm import GatherLastAxis
from mindrl.parallel.layers import SINGLE, ColumnLinear, Projection, RowLinear, TPContext, VocabEmbedding

NEG_INF = -1e9  # finite, so a fully masked (padding) query row gives uniform weights, not NaN


_SAID = set()


def resolve_compute_dtype(config: ModelConfig) -> str:
    """bf16 MatMul has no CPU kernel: fall back to fp32 with a warning (once per process, a log line without a
    source line) instead of failing mid-compile."""
    if config.compute_dtype == "bfloat16" and ms.get_context("device_target") == "CPU":
        if "bf16" not in _SAID:
            _SAID.add("bf16")
            logging.getLogger("mindrl.models").warning(
                "compute_dtype bfloat16 is not supported on CPU (no bf16 MatMul kernel); computing in float32")
        return "float32"
    return config.compute_dtype


def resolve_param_dtype(config: ModelConfig) -> str:
    if config.param_init_type == "bfloat16" and ms.get_context("device_target") == "CPU":
        return "float32"  # checkpoints in bf16 are cast on load
    return config.param_init_type


# ----------------------------------------------------------------------------------------------
# Rotary position embedding
# ----------------------------------------------------------------------------------------------
def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    scaling = config.rope_scaling
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return inv / factor
    if kind == "llama3":
        # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth ramp between.
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        smooth = np.clip((old_ctx / wavelen - low) / (high - low), 0.0, 1.0)
        scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        return np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv


def rope_tables(config: ModelConfig, length: int):
    """cos/sin tables [length, head_dim] in float32 (computed in float64)."""
    inv = rope_inv_freq(config)
    freqs = np.outer(np.arange(length, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def rotation_matrix(d: int) -> np.ndarray:
    """R with x @ R == rotate_half(x) == concat(-x[d/2:], x[:d/2]): one MatMul kernel instead of two slices, a
    negation and a concatenation, per rotated tensor (decode runs a kernel count, not FLOPs, per token)."""
    h = d // 2
    r = np.zeros((d, d), np.float32)
    r[np.arange(h) + h, np.arange(h)] = -1.0
    r[np.arange(h), np.arange(h) + h] = 1.0
    return r


def rope_matrices(cos, sin, rot, q_scale):
    """Decode's rotation as one matrix per row, shared by every layer: x @ M == x * cos + rotate_half(x) * sin
    with M = diag(cos) + rot * sin (two terms per output), so each layer rotates q and k with one BatchMatMul each
    instead of a MatMul, two Muls and an Add each, and q's attention scale rides in its matrix.
    cos/sin [b, d] -> (M_q, M_k), [b, d, d]."""
    b, d = cos.shape
    eye = ops.eye(d, d, cos.dtype).reshape(1, d, d)
    m = eye * cos.reshape(b, 1, d) + rot.astype(cos.dtype).reshape(1, d, d) * sin.reshape(b, 1, d)
    return m * q_scale, m


def apply_rope(x, cos, sin, rot):
    """x [..., S, H, d]; cos/sin at x's shape (Backbone expands them once per forward: see models/broadcast.py);
    rot = rotation_matrix(d)."""
    shape = x.shape
    turned = ops.matmul(x.reshape(-1, shape[-1]), rot.astype(x.dtype)).reshape(shape)
    cos, sin = expand(cos, x), expand(sin, x)
    return x * cos + turned * sin


# ----------------------------------------------------------------------------------------------
# Blocks
# ----------------------------------------------------------------------------------------------
class RMSNorm(nn.Cell):
    """RMSNorm's weight, and the norm over the last axis (the final norm's; a layer's norms run in its block).
    ``shared_over``: a TPContext when the norm runs on tensor-parallel *shards* (Qwen3's per-head q/k norms see only
    local heads), so its replicated weight's gradient is summed over the tp ranks (in ``value()``: a copy region
    of its own, as for LoRA factors in parallel/layers.py)."""

    def __init__(self, dim, eps, param_dtype="float32", shared_over: TPContext = SINGLE):
        super().__init__()
        self.weight = Parameter(Tensor(np.ones(dim, np.float32), ms.float32 if param_dtype != "float16" else ms.float16),
                                name="weight")
        self.weight_copy = shared_over.copy_region()
        self.norm = _RMSNormFunction(eps)

    def value(self):
        return self.weight if self.weight_copy is None else self.weight_copy(self.weight)

    def construct(self, x):
        return self.norm(x, self.value())


class _RMSNormFunction(nn.Cell):
    """y = w * x / sqrt(mean(x^2) + eps) over the last axis, statistics in float32, with its own backward:
        n = x * r,  g = w * dy,  dx = r * (g - n * mean(g * n)),  dw = sum over rows of dy * n
    (r = 1 / sqrt(mean(x^2) + eps)). Row means are products with a constant vector (row_mean) and the weight's
    gradient one product over the rows: through autodiff, MindSpore's reductions of the broadcasts took about 0.5 s
    of a 31M-parameter GRPO update on CPU, and kept broadcast-sized tensors alive (see models/broadcast.py)."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def _normed(self, x):
        """(x * r, r expanded to x's shape) in float32."""
        x = x.astype(ms.float32)
        r = expand(ops.rsqrt(row_mean(x * x) + self.eps), x)
        return x * r, r

    def _normed_in_bprop(self, x):
        """_normed with expand's twin (models/broadcast.py): one norm cell now serves every layer of a graph, and
        with expand's own function in both its forward and its backward, a shape for which expand returns its
        input compiled to an empty graph ("The func graph is empty", tensor-parallel tutorial shapes)."""
        x = x.astype(ms.float32)
        r = expand_in_bprop(ops.rsqrt(row_mean(x * x) + self.eps), x)
        return x * r, r

    def construct(self, x, w):
        n, _ = self._normed(x)
        return (expand(w.astype(ms.float32), n) * n).astype(x.dtype)

    def bprop(self, x, w, out, dout):
        n, r = self._normed_in_bprop(x)
        dy = dout.astype(ms.float32)
        g = dy * expand_in_bprop(w.astype(ms.float32), dy)
        dx = r * (g - n * expand_in_bprop(row_mean(g * n), n))
        rows = (dy * n).reshape(-1, x.shape[-1])
        dw = ops.matmul(ops.ones((1, rows.shape[0]), ms.float32), rows).reshape(w.shape)
        return dx.astype(x.dtype), dw.astype(w.dtype)


class MaskedSoftmax(nn.Cell):
    """softmax(scores + mask) over the last axis; the additive mask (broadcast over leading axes) gets no gradient.

    Its own backward, dx = p * (dout - sum(dout * p)), keeps only p and expands the row sums explicitly:
    through MindSpore's Softmax backward, which broadcasts them implicitly, an update kept about six scores-sized
    tensors per layer alive until the backward finished, and about three with this one (see models/broadcast.py)."""

    def __init__(self):
        super().__init__()
        self.softmax = ops.Softmax(-1)

    def construct(self, scores, mask):
        return self.softmax(scores + expand(mask, scores))  # a full sequence's mask comes expanded already

    def bprop(self, scores, mask, out, dout):
        g = dout * out
        return g - out * expand_in_bprop(row_sum(g), out), ops.zeros_like(mask)


class Attention(nn.Cell):
    """One layer's attention weights (its computation is the layer blocks' below)."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, cdt: str, pdt: str, seed: int):
        super().__init__()
        if cfg.n_kv_heads % tp.size:
            raise ValueError(f"n_kv_heads={cfg.n_kv_heads} not divisible by tensor parallel size {tp.size}")
        kw = dict(tp=tp, compute_dtype=cdt, param_dtype=pdt, std=cfg.initializer_range)
        q_out, kv_out = cfg.num_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.q_proj = ColumnLinear(cfg.hidden_size, q_out, cfg.qkv_bias, seed=seed + 1, **kw)
        self.k_proj = ColumnLinear(cfg.hidden_size, kv_out, cfg.qkv_bias, seed=seed + 2, **kw)
        self.v_proj = ColumnLinear(cfg.hidden_size, kv_out, cfg.qkv_bias, seed=seed + 3, **kw)
        self.o_proj = RowLinear(q_out, cfg.hidden_size, False, seed=seed + 4, **kw)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, pdt, shared_over=tp)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, pdt, shared_over=tp)

    def weights(self):
        if self.qk_norm:
            norms = (self.q_norm.value(), self.k_norm.value())
        else:
            norms = (None, None)
        return (self.q_proj.weights(), self.k_proj.weights(), self.v_proj.weights(), self.o_proj.weights()) + norms


class MLP(nn.Cell):
    """One layer's SwiGLU weights."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, cdt: str, pdt: str, seed: int):
        super().__init__()
        kw = dict(tp=tp, compute_dtype=cdt, param_dtype=pdt, std=cfg.initializer_range)
        self.gate_proj = ColumnLinear(cfg.hidden_size, cfg.intermediate_size, False, seed=seed + 5, **kw)
        self.up_proj = ColumnLinear(cfg.hidden_size, cfg.intermediate_size, False, seed=seed + 6, **kw)
        self.down_proj = RowLinear(cfg.intermediate_size, cfg.hidden_size, False, seed=seed + 7, **kw)

    def weights(self):
        return self.gate_proj.weights(), self.up_proj.weights(), self.down_proj.weights()


class DecoderLayer(nn.Cell):
    """One layer's weights, under Hugging Face's names (``input_layernorm``, ``self_attn.q_proj``, ``mlp``...).

    It computes nothing itself: a graph runs all its layers through one layer block (below), each layer's
    ``weights()`` its inputs."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, cdt: str, pdt: str, seed: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, pdt)
        self.self_attn = Attention(cfg, tp, cdt, pdt, seed)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, pdt)
        self.mlp = MLP(cfg, tp, cdt, pdt, seed)

    def weights(self):
        """(input norm, attention (q, k, v, o, q norm, k norm), post-attention norm, MLP (gate, up, down)), each
        projection as Projection takes it, None for what the model has not (biases, Qwen3's q/k norms, adapters)."""
        return (self.input_layernorm.weight, self.self_attn.weights(), self.post_attention_layernorm.weight,
                self.mlp.weights())


class _LayerMath(nn.Cell):
    """One decoder layer's computation, its weights given as inputs (DecoderLayer.weights()).

    Why: MindSpore parses, infers and optimizes a Cell's graph once per Cell, so 30 layers each computing in a
    Cell of their own cost 30 times one layer's compile, while one block called by all 30 with their weights as
    inputs costs about half as much in all, and keeps less memory (``python bench/compile_layer_sharing.py``).
    The block must be *called* (its ``construct``): a method of a shared Cell is compiled at each call site. So
    each path has its block class: LayerBlock (full sequences, training and scoring), PrefillBlock, DecodeBlock.

    Attention never broadcasts a BatchMatMul (unsupported on CPU): for grouped-query attention the R query heads
    of one KV head are stacked along the sequence axis (see the module's docstring)."""

    def __init__(self, cfg: ModelConfig, tp: TPContext, cdt: str):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.n_heads = cfg.num_heads // tp.size          # local heads
        self.n_kv = cfg.n_kv_heads // tp.size            # local KV heads
        self.rep = cfg.num_heads // cfg.n_kv_heads       # query heads per KV head
        self.norm = _RMSNormFunction(cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm
        self.column = Projection(cdt, tp)
        self.row = Projection(cdt, tp, row=True)
        # attention's and the MLP's input enter the tensor-parallel region (backward: summed)
        self.attn_copy, self.mlp_copy = tp.copy_region(), tp.copy_region()
        self.bmm_t = ops.BatchMatMul(transpose_b=True)
        self.bmm = ops.BatchMatMul()
        self.softmax = MaskedSoftmax()
        self.rot = Tensor(rotation_matrix(cfg.head_dim))


    def _project(self, x, attn):
        """q [B,S,H,d], k/v [B,S,KV,d] (local heads under tensor parallelism), q and k normed (Qwen3), not rotated."""
        if self.attn_copy is not None:
            x = self.attn_copy(x)
        b, s, _ = x.shape
        q = self.column(x, attn[0]).reshape(b, s, self.n_heads, self.head_dim)
        k = self.column(x, attn[1]).reshape(b, s, self.n_kv, self.head_dim)
        v = self.column(x, attn[2]).reshape(b, s, self.n_kv, self.head_dim)
        if self.qk_norm:
            q = self.norm(q, attn[4])
            k = self.norm(k, attn[5])
        return q, k, v

    def _qkv(self, x, cos, sin, attn):
        """Project and rotate. cos/sin: (for q, for k) pairs of rotary tables at q's and k's shapes, q's scaled by
        1/sqrt(d) (Backbone._rope_and_mask): q comes out with the attention scale applied."""
        q, k, v = self._project(x, attn)
        return apply_rope(q, cos[0], sin[0], self.rot), apply_rope(k, cos[1], sin[1], self.rot), v

    def _attend(self, q, k, v, mask):
        """q [B,S,H,d] (scaled by 1/sqrt(d)); k/v [B,KV,L,d]; mask additive, [B,1,R*S,L] or broadcastable to it ->
        [B,S,H*d].

        Few operations touch the [B, KV, R*S, L] scores, and none reshapes them: each one differentiated costs a
        scores-sized tensor per layer in the update. The scale is on q already, the mask comes tiled to the R*S
        rows."""
        b, s, _, d = q.shape
        q = q.reshape(b, s, self.n_kv, self.rep, d).transpose(0, 2, 3, 1, 4)
        scores = self.bmm_t(q.reshape(b, self.n_kv, self.rep * s, d), k)  # [B, KV, R*S, L]
        if scores.dtype != ms.float32:
            scores = scores.astype(ms.float32)
        probs = self.softmax(scores, mask)
        if probs.dtype != v.dtype:
            probs = probs.astype(v.dtype)
        out = self.bmm(probs, v)                                             # [B, KV, R*S, d]
        out = out.reshape(b, self.n_kv, self.rep, s, d).transpose(0, 3, 1, 2, 4)
        return out.reshape(b, s, self.n_heads * d)

    def _rest(self, x, attended, w):
        """The attention's output projection and residual, then the MLP with its norm and residual."""
        x = x + self.row(attended, w[1][3])
        h = self.norm(x, w[2])
        if self.mlp_copy is not None:
            h = self.mlp_copy(h)
        gate, up, down = w[3]
        return x + self.row(ops.silu(self.column(h, gate)) * self.column(h, up), down)


class LayerBlock(_LayerMath):
    """A layer over full sequences (training, scoring)."""

    def construct(self, x, cos, sin, mask, w):
        """``x`` [B, T, H]; for Backbone.shared_prompt_forward the tokens of all prompts and responses in one row,
        with ``mask`` the pair (prompts' mask, responses' mask): only attention tells the parts apart."""
        h = self.norm(x, w[0])
        if isinstance(mask, tuple):
            return self._rest(x, self._shared_prompt(h, cos, sin, mask[0], mask[1], w[1]), w)
        q, k, v = self._qkv(h, cos, sin, w[1])
        return self._rest(x, self._attend(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), mask), w)

    def _shared_prompt(self, x, cos, sin, mask_p, mask_r, attn):
        """``x`` [1, K*P + K*G*R, H]: K prompts of P tokens, then their K*G responses of R tokens; ``mask_p``
        [K, KV, rep*P, P] and ``mask_r`` [K*G, KV, rep*R, P + R] (Backbone.shared_prompt_forward). The projections
        run on all tokens at once; each prompt attends to itself, each response to its prompt's keys and its own.
        Returns the attention before its output projection."""
        k, p = mask_p.shape[0], mask_p.shape[-1]
        g, r = mask_r.shape[0] // k, mask_r.shape[-1] - p
        n, d = self.n_kv, self.head_dim
        q, kx, vx = self._qkv(x, cos, sin, attn)
        split = k * p
        kp = kx[:, :split].reshape(k, p, n, d).transpose(0, 2, 1, 3)   # [K, KV, P, d]
        vp = vx[:, :split].reshape(k, p, n, d).transpose(0, 2, 1, 3)
        out_p = self._attend(q[:, :split].reshape(k, p, self.n_heads, d), kp, vp, mask_p)

        def with_prompt(own, prompt):  # [K*G, KV, P + R, d]: the group's prompt keys (values), then the response's
            prompt = ops.broadcast_to(prompt.reshape(k, 1, n, p, d), (k, g, n, p, d)).reshape(k * g, n, p, d)
            return ops.concat((prompt, own[:, split:].reshape(k * g, r, n, d).transpose(0, 2, 1, 3)), 2)

        out_r = self._attend(q[:, split:].reshape(k * g, r, self.n_heads, d), with_prompt(kx, kp),
                             with_prompt(vx, vp), mask_r)
        return ops.concat((out_p.reshape(1, split, -1), out_r.reshape(1, k * g * r, -1)), 1)


class PrefillBlock(_LayerMath):
    """A layer over the prompts: full attention, and their K/V written into cache rows ``rows``, slots [0, S)."""

    def construct(self, x, cos, sin, mask, k_cache, v_cache, rows, w):
        q, k, v = self._qkv(self.norm(x, w[0]), cos, sin, w[1])
        k = k.transpose(0, 2, 1, 3)
        v = v.transpose(0, 2, 1, 3)
        out = self._rest(x, self._attend(q, k, v, mask), w)
        pad = k_cache.shape[2] - k.shape[2]
        k_rows = ops.pad(k.astype(k_cache.dtype), (0, 0, 0, pad))
        v_rows = ops.pad(v.astype(v_cache.dtype), (0, 0, 0, pad))
        done = ops.depend(ops.scatter_nd_update(k_cache, rows, k_rows), ops.scatter_nd_update(v_cache, rows, v_rows))
        return ops.depend(out, done)


class DecodeBlock(_LayerMath):
    """A layer over one new token per row: write its K/V at (row, kv, pos), attend over the cache rows in use.
    rope: (M_q, M_k) from rope_matrices(), this step's rotation (and q's scale) for every row.
    (A flat cache written with ScatterUpdate was tried: its write is 4x cheaper than ScatterNdUpdate's, which
    copies the buffer, but reading it back as [b, KV, L, d] costs a Reshape copy, and the step was no faster.)"""

    def construct(self, x, rope, mask, k_cache, v_cache, write_idx, w):
        b, d = x.shape[0], self.head_dim
        q, k, v = self._project(self.norm(x, w[0]), w[1])                   # q [b,1,H,d], k/v [b,1,KV,d]
        q = self.bmm(q.reshape(b, self.n_heads, d), rope[0]).reshape(b, 1, self.n_heads, d)
        k = self.bmm(k.reshape(b, self.n_kv, d), rope[1])
        k_all = ops.depend(k_cache, ops.scatter_nd_update(k_cache, write_idx, k))
        v_all = ops.depend(v_cache, ops.scatter_nd_update(v_cache, write_idx, v.reshape(b, self.n_kv, d)))
        if k_all.shape[0] != b:
            k_all = k_all[:b]
            v_all = v_all[:b]
        return self._rest(x, self._attend(q, k_all, v_all, mask), w)


_RECOMPUTE = "recompute_"


def _recompute_marks(layer, on: bool) -> None:
    """Put MindSpore's graph-mode recompute marks of ``layer`` on or off: Cell.recompute() prefixes the scope of the
    cell and of every cell inside it with "recompute_", which the compiler reads when it builds a graph."""
    for _, cell in layer.cells_and_names():
        scope = cell._scope  # noqa: SLF001 - MindSpore's own mark; no public API turns it off
        if on and not (scope or "").startswith(_RECOMPUTE):
            cell._scope = _RECOMPUTE + (scope or "")
        elif not on and scope and scope.startswith(_RECOMPUTE):
            cell._scope = scope[len(_RECOMPUTE):] or None


def recomputed_layers(cell) -> list:
    """The layer blocks inside ``cell`` that recompute their forward in the backward (ModelConfig.recompute)."""
    return [c for _, c in cell.cells_and_names()
            if isinstance(c, LayerBlock) and getattr(c, "_recompute_cell", None) is not None]


@contextlib.contextmanager
def recomputing(layers):
    """Graphs compiled inside recompute ``layers`` (recomputed_layers); outside, a graph that runs the same layers
    (the rollout's prefill and decode, a scoring pass) carries no recompute marks. With the marks on, the rollout's
    prefill graph of bench_real's GRPO held 0.65 GiB more memory for nothing: it has no backward."""
    off = [layer for layer in layers if not (layer._scope or "").startswith(_RECOMPUTE)]  # noqa: SLF001
    for layer in off:
        _recompute_marks(layer, True)
    try:
        yield
    finally:
        for layer in off:  # a nested use (Cell.__call__ compiles through Cell.compile) leaves them to the outer one
            _recompute_marks(layer, False)


class RecomputingCell(nn.Cell):
    """A training graph (forward and backward) whose compile turns the recompute marks of its layers on: those
    inside it, or inside the network given to :meth:`recomputes` (a loss cell held by ``value_and_grad`` only)."""

    def recomputes(self, net) -> None:
        object.__setattr__(self, "_recomputed", recomputed_layers(net))  # a plain list: not registered as cells

    def _layers(self) -> list:
        if getattr(self, "_recomputed", None) is None:
            self.recomputes(self)
        return self._recomputed

    def __call__(self, *args, **kwargs):
        with recomputing(self._layers()):
            return super().__call__(*args, **kwargs)

    def compile(self, *args, **kwargs):
        with recomputing(self._layers()):
            return super().compile(*args, **kwargs)




class Backbone(nn.Cell):
    """Embeddings, layers, final norm: shared by the LM, the value head and the reward head."""

    def __init__(self, cfg: ModelConfig, tp: TPContext = SINGLE, seed: int = 0):
        super().__init__()
        cdt, pdt = resolve_compute_dtype(cfg), resolve_param_dtype(cfg)
        self.config, self.tp, self.compute_dtype = cfg, tp, cdt
        self.embed_tokens = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, tp, pdt, cfg.initializer_range, seed)
        self.layers = nn.CellList([DecoderLayer(cfg, tp, cdt, pdt, seed + 100 * (i + 1)) for i in range(cfg.num_layers)])
        # the computation, one block per path for every layer (see _LayerMath)
        self.block = LayerBlock(cfg, tp, cdt)
        self.prefill_block = PrefillBlock(cfg, tp, cdt)
        self.decode_block = DecodeBlock(cfg, tp, cdt)
        # MindFormers' recompute_config.recompute: MindSpore's own pass, on the first layers' own block
        self.n_recompute = min(cfg.recompute_layers(), cfg.num_layers)
        self.recompute_block = None
        if self.n_recompute:
            self.recompute_block = LayerBlock(cfg, tp, cdt)
            self.recompute_block.recompute()
            _recompute_marks(self.recompute_block, False)  # on only in the training graphs: see recomputing()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, pdt)
        self.local_heads, self.local_kv_heads = cfg.num_heads // tp.size, cfg.n_kv_heads // tp.size
        # True: ``attention_mask`` holds each token's segment of a packed row (`mindrl sft` with data.packing);
        # a Python constant of the compiled graph, set before the first call
        self.segment_attention = False
        cos, sin = rope_tables(cfg, cfg.max_position_embeddings)
        # constants, not Parameters: they are never trained nor saved
        self.cos_table = Tensor(cos)
        self.sin_table = Tensor(sin)
        self.rot = Tensor(rotation_matrix(cfg.head_dim))
        self.q_scale = 1.0 / math.sqrt(cfg.head_dim)  # attention's, applied to q with its rotation
        self.cdt = {"float32": ms.float32, "float16": ms.float16}[cdt]

    def _rope(self, positions):
        cos = ops.gather(self.cos_table, positions, 0)
        sin = ops.gather(self.sin_table, positions, 0)
        return ops.expand_dims(cos, -2).astype(self.cdt), ops.expand_dims(sin, -2).astype(self.cdt)

    def _embed(self, input_ids):
        return self.embed_tokens(input_ids).astype(self.cdt)

    def _allowed_and_positions(self, mask_i):
        """[B, T, T]: 1 where query i may attend to key j; [B, T]: each token's position."""
        b, t = mask_i.shape
        causal = ops.broadcast_to(ops.tril(ops.ones((t, t), ms.int32)).reshape(1, t, t), (b, t, t))
        if self.segment_attention:
            same = ops.logical_and(ops.equal(mask_i.reshape(b, t, 1), mask_i.reshape(b, 1, t)),
                                   (mask_i > 0).reshape(b, 1, t))
            allowed = causal * same.astype(ms.int32)
            return allowed, ops.relu(allowed.astype(ms.float32).sum(-1).astype(ms.int32) - 1)
        return causal * ops.broadcast_to(mask_i.reshape(-1, 1, t), (b, t, t)), ops.relu(ops.cumsum(mask_i, 1) - 1)

    def _rope_and_mask(self, attention_mask):
        """Rotary tables at each token's position (padding skipped), as (for q, for k) pairs, q's scaled by the
        attention scale 1/sqrt(d) (one multiply per forward instead of one per layer), and the additive
        causal+padding mask at the attention scores' shape [B, KV, R*T, T] (R query heads per KV head; see
        Attention._attend).

        With ``segment_attention``, the mask holds segments instead (1, 2, ... left to right, 0 = padding): a token
        sees the earlier tokens of its own segment only, and its position counts from its segment's first token, so
        each segment is computed as if it were a row of its own."""
        allowed, positions = self._allowed_and_positions(attention_mask.astype(ms.int32))
        cos, sin = self._tables(positions)
        return cos, sin, self._scores_mask(allowed)

    def _tables(self, positions):
        """Rotary (cos, sin) at ``positions`` [B, T], each a (for q, for k) pair at q's and k's full shapes, q's
        scaled by 1/sqrt(d): once for every layer (see models/broadcast.py); constants of the step, so no gradient
        is formed for them (each layer's would be summed)."""
        cos, sin = self._rope(positions)
        b, t, d = cos.shape[0], cos.shape[1], cos.shape[-1]
        tables = []
        for table in (cos, sin):
            tables.append((ops.stop_gradient(ops.broadcast_to(table * self.q_scale, (b, t, self.local_heads, d))),
                           ops.stop_gradient(ops.broadcast_to(table, (b, t, self.local_kv_heads, d)))))
        return tables[0], tables[1]

    def _scores_mask(self, allowed):
        """[B, S, L] 1/0 -> the additive mask at the attention scores' shape [B, KV, R*S, L]."""
        b, s, length = allowed.shape
        add_mask = ops.select(allowed > 0, ops.zeros(allowed.shape, ms.float32),
                              ops.full(allowed.shape, NEG_INF, dtype=ms.float32))
        rep = self.config.num_heads // self.config.n_kv_heads
        mask = ops.broadcast_to(ops.tile(add_mask.reshape(b, 1, s, length), (1, 1, rep, 1)),
                                (b, self.local_kv_heads, rep * s, length))
        return ops.stop_gradient(mask)

    def construct(self, input_ids, attention_mask):
        """input_ids/attention_mask [B, T] (mask 1 = real token; padding may be on either side)."""
        return self.norm(self.run_layers(*self.stem(input_ids, attention_mask)))

    def stem(self, input_ids, attention_mask):
        """What the first layer takes: (embeddings, cos, sin, additive mask). A graph is stem, every layer, norm;
        trainer/layer_graphs.py runs the three apart."""
        cos, sin, add_mask = self._rope_and_mask(attention_mask)
        return self._embed(input_ids), cos, sin, add_mask

    def run_layers(self, h, cos, sin, mask):
        """Every decoder layer in turn, from the stem's outputs (``stem``, ``shared_prompt_stem``)."""
        for i, layer in enumerate(self.layers):
            if i < self.n_recompute:
                h = self.recompute_block(h, cos, sin, mask, layer.weights())
            else:
                h = self.block(h, cos, sin, mask, layer.weights())
        return h

    def shared_prompt_forward(self, input_ids, segments, group: int, response: int):
        """Packed groups of responses to one prompt each: rows [prompt (P) | response 1 | ... | response G (R each)]
        (trainer/actor_graphs.py pack_groups; ``segments`` > 0 on real tokens) -> (prompt hidden states [K, P, H],
        response hidden states [K*G, R, H]). The prompt goes through every layer once; each response attends to the
        prompt's keys and its own, at the positions it has in the unpacked row [prompt | response], so every hidden
        state is that row's. Attention costs what it costs unpacked (scores [K*G, R, P + R], never the packed row's
        square), and every other layer runs on all K*P + K*G*R tokens at once."""
        h = self.run_layers(*self.shared_prompt_stem(input_ids, segments, group, response))
        return self.shared_prompt_tail(h, input_ids.shape[0], group, response)

    def shared_prompt_tail(self, h, k: int, group: int, response: int):
        """The last layer's output [1, K*P + K*G*R, H] -> normed (prompts [K, P, H], responses [K*G, R, H])."""
        h = self.norm(h)
        p = h.shape[1] // k - group * response
        return h[:, :k * p].reshape(k, p, -1), h[:, k * p:].reshape(k * group, response, -1)

    def shared_prompt_stem(self, input_ids, segments, group: int, response: int):
        """shared_prompt_forward's first layer's inputs: (embeddings [1, K*P + K*G*R, H], cos, sin, (prompts' mask,
        responses' mask))."""
        k, t = input_ids.shape
        p = t - group * response
        real = (segments > 0).astype(ms.int32)
        pm, rm = real[:, :p], real[:, p:].reshape(k * group, response)
        prompt_len = ops.broadcast_to(pm.sum(1).reshape(k, 1), (k, group)).reshape(k * group, 1)
        positions = ops.concat((ops.relu(ops.cumsum(pm, 1) - 1).reshape(1, k * p),
                                (ops.relu(ops.cumsum(rm, 1) - 1) + prompt_len).reshape(1, k * group * response)), 1)
        cos, sin = self._tables(positions)
        causal_p = ops.tril(ops.ones((p, p), ms.int32)).reshape(1, p, p)
        causal_r = ops.tril(ops.ones((response, response), ms.int32)).reshape(1, response, response)
        mask_p = self._scores_mask(causal_p * pm.reshape(k, 1, p))
        sees_prompt = ops.broadcast_to(pm.reshape(k, 1, 1, p), (k, group, response, p)).reshape(k * group, response, p)
        mask_r = self._scores_mask(ops.concat((sees_prompt, causal_r * rm.reshape(k * group, 1, response)), -1))
        h = self._embed(ops.concat((input_ids[:, :p].reshape(1, k * p), input_ids[:, p:].reshape(1, -1)), 1))
        return h, cos, sin, (mask_p, mask_r)


class CausalLM(nn.Cell):
    """Backbone + LM head. Tied heads reuse ``model.embed_tokens.weight``."""

    def __init__(self, cfg: ModelConfig, tp: TPContext = SINGLE, seed: int = 0):
        super().__init__()
        self.config, self.tp = cfg, tp
        self.model = Backbone(cfg, tp, seed)
        self.tied = cfg.tie_word_embeddings
        if not self.tied:
            self.lm_head = ColumnLinear(cfg.hidden_size, cfg.vocab_size, False, tp,
                                        self.model.compute_dtype, resolve_param_dtype(cfg), cfg.initializer_range,
                                        seed + 9)
        self.matmul_t = ops.MatMul(transpose_b=True)
        self.copy = tp.copy_region()
        self.gather_vocab = None
        if tp.size > 1:
            self.gather_vocab = GatherLastAxis(tp.group, tp.rank, tp.size)

    def head(self, h, head_t=None):
        """Hidden [.., H] -> logits [.., V_local] in float32 (this rank's vocabulary slice under TP). ``head_t``: a
        tied head's [H, V_local] copy (the generator keeps one): a MatMul with a transposed operand is 2.5-3x
        slower on CPU at decode shapes, where every step reads the whole head."""
        if self.copy is not None:
            h = self.copy(h)
        if head_t is not None:
            shape = h.shape
            logits = ops.matmul(h.reshape(-1, shape[-1]), head_t.astype(h.dtype)).reshape(shape[:-1] + (head_t.shape[1],))
        elif self.tied:
            shape = h.shape
            w = self.model.embed_tokens.weight.astype(h.dtype)
            logits = self.matmul_t(h.reshape(-1, shape[-1]), w).reshape(shape[:-1] + (w.shape[0],))
        else:
            logits = self.lm_head(h)
        return logits.astype(ms.float32)

    def full_logits(self, h, head_t=None):
        """Logits over the whole vocabulary (gathered across tensor-parallel ranks, no gradient)."""
        logits = self.head(h, head_t)
        if self.gather_vocab is not None:
            logits = self.gather_vocab(logits)
        return logits

    def construct(self, input_ids, attention_mask):
        return self.full_logits(self.model(input_ids, attention_mask))

    # -- KV-cache path (driven by mindrl.rollout.generator) -------------------------------------
    def prefill(self, input_ids, attention_mask, k_caches, v_caches, rows, head_t=None):
        """Prompt [b, S] (left padded) -> last-position logits [b, V]; fills cache rows `rows`."""
        bb = self.model
        s = input_ids.shape[1]
        cos, sin, add_mask = bb._rope_and_mask(attention_mask)
        h = bb._embed(input_ids)
        for i, layer in enumerate(bb.layers):
            h = bb.prefill_block(h, cos, sin, add_mask, k_caches[i], v_caches[i], rows, layer.weights())
        h = bb.norm(h[:, s - 1:s, :])
        return self.full_logits(h, head_t).squeeze(1)

    def decode(self, tokens, pos, start, k_caches, v_caches, head_t=None):
        """tokens [b], each at its row's cache slot `pos` [b] int32; `start` [b] = first real slot of each row.
        Rows keep their own positions, so a row can start decoding while others are midway (continuous batching)."""
        bb = self.model
        b = tokens.shape[0]
        length = k_caches[0].shape[2]
        pos = pos.reshape(b, 1)
        cos, sin = bb._rope(ops.relu(pos - start.reshape(b, 1)))
        rope = rope_matrices(cos.reshape(b, -1), sin.reshape(b, -1), bb.rot, bb.q_scale)
        slots = ops.arange(length).astype(ms.int32).reshape(1, length)
        valid = ops.logical_and(slots >= start.reshape(b, 1), slots <= pos)
        add_mask = ops.select(valid, ops.zeros(valid.shape, ms.float32),
                              ops.full(valid.shape, NEG_INF, dtype=ms.float32)).reshape(b, 1, 1, length)
        rows = ops.arange(b).astype(ms.int32).reshape(b, 1, 1)
        kv = ops.arange(k_caches[0].shape[1]).astype(ms.int32).reshape(1, -1, 1)
        write_idx = ops.concat((ops.broadcast_to(rows, (b, kv.shape[1], 1)),
                                ops.broadcast_to(kv, (b, kv.shape[1], 1)),
                                ops.broadcast_to(pos.reshape(b, 1, 1), (b, kv.shape[1], 1))), -1)
        h = bb._embed(tokens.reshape(b, 1))
        for i, layer in enumerate(bb.layers):
            h = bb.decode_block(h, rope, add_mask, k_caches[i], v_caches[i], write_idx, layer.weights())
        return self.full_logits(bb.norm(h), head_t).squeeze(1)
