"""Loss functions for the training graph (MindSpore).

Every function here runs inside ``nn.Cell.construct`` in GRAPH_MODE and in PyNative, uses only
ops with CPU kernels in MindSpore 2.10, and is differentiable w.r.t. ``log_prob`` / ``values``.
String and float options (``loss_agg_mode``, clip ratios, ...) are Python constants: in
GRAPH_MODE the branches on them are resolved when the graph compiles, never per call, so pass
them from Python (or store them on the Cell), not as tensors.

Shapes: ``[B, T]`` per-token tensors (B sequences, T response positions) and a ``mask`` of the
same shape, 1 for a valid response token and 0 for padding (any numeric dtype).
"""
import math

from mindspore import nn, ops

from .kl import get_kl_estimator
from .registry import LOSS_AGG_MODES, POLICY_LOSS_NAMES, check_loss_agg_mode, check_policy_loss_name

# log-ratios beyond this are clamped before exp: exp(20) ~ 5e8 is already far outside any clip range
_MAX_LOG_RATIO = 20.0


# ---------------------------------------------------------------------------------------------
# masked reductions


def masked_mean(x, mask, axis=None):
    """Mean over valid entries; 0 (not NaN) where there is none."""
    mask = ops.cast(mask, x.dtype)
    if axis is None:
        return (x * mask).sum() / ops.clamp(mask.sum(), min=1.0)
    return (x * mask).sum(axis) / ops.clamp(mask.sum(axis), min=1.0)


# ---------------------------------------------------------------------------------------------
# aggregation


def agg_loss(loss_mat, mask, loss_agg_mode="token-mean", denominator=None, norm_len=None):
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    With ``s_b = sum_t mask*loss`` (token sum of sequence b), ``n_b = sum_t mask`` and ``D`` the
    denominator:

    - ``token-mean``:              ``sum_b s_b / D``,           default ``D`` = number of valid tokens.
    - ``seq-mean-token-mean``:     ``sum_b (s_b / n_b) / D``,   default ``D`` = number of sequences with n_b > 0.
    - ``seq-mean-token-sum``:      ``sum_b s_b / D``,           default ``D`` = number of sequences with n_b > 0.
    - ``seq-mean-token-sum-norm``: ``sum_b (s_b / L) / D``,     default ``D`` as above; ``L = norm_len``
      (a constant, e.g. the max response length; default T) - Dr.GRPO's length-unbiased loss.
    - ``token-mean-per-micro-batch``: ``token-mean`` of this batch; the trainer's denominator (the batch's tokens
      times the number of micro-batches) makes the accumulated loss the mean of the micro-batches' token means,
      as MindSpeed-RL's losses are.

    Default denominators are clamped to >= 1, so all-masked rows or batches give 0, never NaN.

    ``denominator`` (float or 0-d tensor) replaces the default D. For gradient accumulation, pass
    D computed over the whole mini-batch (``denominators.loss_denominator(mini_batch_mask, mode)``)
    to every micro-batch: the micro-batch losses then *sum* to exactly the mini-batch loss, and so
    do their gradients. An explicit denominator must be > 0.
    """
    check_loss_agg_mode(loss_agg_mode)
    mask = ops.cast(mask, loss_mat.dtype)
    tok_sum = (loss_mat * mask).sum(-1)
    if loss_agg_mode in ("token-mean", "token-mean-per-micro-batch"):
        denom = ops.clamp(mask.sum(), min=1.0) if denominator is None else denominator
        return tok_sum.sum() / denom
    n_tok = mask.sum(-1)
    if loss_agg_mode == "seq-mean-token-mean":
        seq = tok_sum / ops.clamp(n_tok, min=1.0)
    elif loss_agg_mode == "seq-mean-token-sum":
        seq = tok_sum
    else:  # seq-mean-token-sum-norm
        seq = tok_sum / float(loss_mat.shape[-1] if norm_len is None else norm_len)
    # an all-masked row has seq == 0 already; it only must not count in the default denominator
    n_seq = ops.cast(n_tok > 0, loss_mat.dtype).sum()
    denom = ops.clamp(n_seq, min=1.0) if denominator is None else denominator
    return seq.sum() / denom


# ---------------------------------------------------------------------------------------------
# policy loss


def policy_loss(
    log_prob,
    old_log_prob,
    advantages,
    mask,
    clip_ratio_low=0.2,
    clip_ratio_high=0.2,
    clip_ratio_c=None,
    loss_agg_mode="token-mean",
    denominator=None,
    norm_len=None,
):
    """PPO clipped surrogate with asymmetric clipping (DAPO clip-higher) and optional dual-clip.

    Per token, with ``ratio = exp(clamp(log_prob - old_log_prob, -20, 20))`` and advantage ``A``:
    ``l = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high))``;
    with dual-clip (``clip_ratio_c`` > 1, e.g. 3.0) tokens with ``A < 0`` use ``min(l, -A * clip_ratio_c)``,
    which bounds the loss when the ratio explodes on a bad action.

    Returns ``(pg_loss, pg_clipfrac, ppo_kl)``:
    - ``pg_loss``: ``agg_loss(l, mask, loss_agg_mode, denominator)``, the only differentiable output.
    - ``pg_clipfrac``: fraction of valid tokens where the clipped term is the larger one (clipping active).
    - ``ppo_kl``: mean over valid tokens of ``old_log_prob - log_prob`` (approximate KL(old || new)).
    The two metrics are means over *this* call's valid tokens (not scaled by ``denominator``).
    """
    if clip_ratio_c is not None and not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {clip_ratio_c}")
    mask = ops.cast(mask, log_prob.dtype)
    log_ratio = ops.clamp(log_prob - old_log_prob, -_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = ops.exp(log_ratio)
    surr = -advantages * ratio
    surr_clip = -advantages * ops.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    # where() rather than maximum(): its gradient goes to exactly one branch, also at ties
    clipped = surr_clip > surr
    loss = ops.where(clipped, surr_clip, surr)
    if clip_ratio_c is not None:
        bound = -advantages * clip_ratio_c
        loss = ops.where(ops.logical_and(advantages < 0, loss > bound), bound, loss)
    pg_loss = agg_loss(loss, mask, loss_agg_mode, denominator, norm_len)
    pg_clipfrac = ops.stop_gradient(masked_mean(ops.cast(clipped, log_prob.dtype), mask))
    ppo_kl = ops.stop_gradient(masked_mean(-log_ratio, mask))
    return pg_loss, pg_clipfrac, ppo_kl


def gspo_policy_loss(
    log_prob,
    old_log_prob,
    advantages,
    mask,
    clip_ratio_low=3e-4,
    clip_ratio_high=4e-4,
    clip_ratio_c=None,
    loss_agg_mode="seq-mean-token-mean",
    denominator=None,
    norm_len=None,
):
    """GSPO (Zheng et al. 2025): the importance ratio of a whole sequence, clipped as one.

    ``s_b = exp(mean over b's valid tokens of (log_prob - old_log_prob))``. Each token carries
    ``exp(sg[log s_b] + log_prob_t - sg[log_prob_t])``: its value is ``s_b`` and its gradient flows through the
    token's own log-prob, so with ``seq-mean-token-mean`` aggregation the gradient is exactly the paper's
    sequence-level one. Per token ``l = max(-A * s, -A * clip(s, 1 - clip_ratio_low, 1 + clip_ratio_high))``.
    The paper's clip range is two orders of magnitude below PPO's (3e-4 / 4e-4). There is no dual clip.
    Returns ``(pg_loss, pg_clipfrac, ppo_kl)`` like :func:`policy_loss`.
    """
    if clip_ratio_c is not None:
        raise ValueError("GSPO has no dual clip: clip_ratio_c must be None")
    mask = ops.cast(mask, log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = (log_ratio * mask).sum(-1) / ops.clamp(mask.sum(-1), min=1.0)
    log_s = ops.stop_gradient(seq_log_ratio).expand_dims(-1) + log_prob - ops.stop_gradient(log_prob)
    ratio = ops.exp(ops.clamp(log_s, max=10.0))
    surr = -advantages * ratio
    surr_clip = -advantages * ops.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    clipped = surr_clip > surr
    loss = ops.where(clipped, surr_clip, surr)
    pg_loss = agg_loss(loss, mask, loss_agg_mode, denominator, norm_len)
    pg_clipfrac = ops.stop_gradient(masked_mean(ops.cast(clipped, log_prob.dtype), mask))
    ppo_kl = ops.stop_gradient(masked_mean(-log_ratio, mask))
    return pg_loss, pg_clipfrac, ppo_kl


POLICY_LOSSES = {"vanilla": policy_loss, "gspo": gspo_policy_loss}
assert set(POLICY_LOSSES) == set(POLICY_LOSS_NAMES)


def get_policy_loss(name):
    """Policy loss by name: ``vanilla`` (the clipped token-level surrogate) or ``gspo`` (sequence-level ratio)."""
    return POLICY_LOSSES[check_policy_loss_name(name)]


# ---------------------------------------------------------------------------------------------
# entropy and value loss


def value_loss(
    values,
    old_values,
    returns,
    mask,
    cliprange_value=0.5,
    loss_agg_mode="token-mean",
    denominator=None,
):
    """PPO clipped value loss: ``0.5 * agg(max((v - R)^2, (v_clip - R)^2))`` with
    ``v_clip = old_values + clip(values - old_values, -cliprange_value, cliprange_value)``.

    Returns ``(vf_loss, vf_clipfrac)``; ``vf_clipfrac`` is the fraction of valid tokens where the
    clipped error is the larger one. Inside the clip range ``v_clip`` is ``values`` itself, not
    ``old + (values - old)``: in float32 that sum can miss ``values`` by a rounding step and count an
    unclipped token as clipped.
    """
    mask = ops.cast(mask, values.dtype)
    delta = values - old_values
    outside = ops.abs(delta) > cliprange_value
    v_clip = ops.where(outside, old_values + ops.clamp(delta, -cliprange_value, cliprange_value), values)
    err = (values - returns) ** 2
    err_clip = (v_clip - returns) ** 2
    clipped = err_clip > err
    loss = ops.where(clipped, err_clip, err)
    vf_loss = 0.5 * agg_loss(loss, mask, loss_agg_mode, denominator)
    vf_clipfrac = ops.stop_gradient(masked_mean(ops.cast(clipped, values.dtype), mask))
    return vf_loss, vf_clipfrac


def _discounts(n: int, base: float, dtype):
    """[n, n]: entry (l, t) is base^(l - t) for l >= t, else 0."""
    steps = ops.arange(n).astype(dtype)
    ahead = steps.reshape(-1, 1) - steps.reshape(1, -1)  # (l, t): how far l is after t
    return ops.select(ahead >= 0, ops.pow(ops.fill(dtype, (), float(base)), ops.relu(ahead)), ops.zeros_like(ahead))


def gae_returns(token_rewards, values, mask, gamma=1.0, lam=0.95, block=None):
    """GAE's raw advantages and returns in the graph, for masks that are a prefix of each row (a response's tokens,
    then padding): ``delta_t = r_t + gamma * V_{t+1} - V_t`` (V is 0 after the last valid token) and
    ``A_t = sum_{l >= t} c^(l - t) * delta_l`` with ``c = gamma * lam``; ``returns = A + V``. Both are 0 at masked
    positions, not whitened: the host's ``advantages.gae_advantages`` on the same inputs (whose loop also skips
    masked positions inside a row).

    Products with discount matrices instead of a loop over positions. The R positions go in blocks of ``block``
    (default about sqrt(R)): a [block, block] product sums within each block, a [blocks, blocks] one carries each
    block's start back over the blocks after it, so no [R, R] matrix is formed (256 MiB at R = 8192)."""
    mask = ops.cast(mask, values.dtype)
    dtype, (b, r) = values.dtype, mask.shape
    c = float(gamma) * float(lam)
    v = values * mask
    nxt = ops.concat((v[:, 1:], ops.zeros_like(v[:, :1])), 1)
    delta = (token_rewards + gamma * nxt - v) * mask
    k = int(block) if block else (r if r <= 256 else int(math.ceil(math.sqrt(r))))
    n = -(-r // k)
    if n == 1:
        adv = ops.matmul(delta, _discounts(r, c, dtype))
    else:
        padded = ops.pad(delta, (0, n * k - r)) if n * k > r else delta
        local = ops.matmul(padded.reshape(b * n, k), _discounts(k, c, dtype)).reshape(b, n, k)
        starts = ops.matmul(local[:, :, 0], _discounts(n, c ** k, dtype))  # A at each block's first position
        later = ops.concat((starts[:, 1:], ops.zeros_like(starts[:, :1])), 1)  # ... at the next block's
        tail = ops.pow(ops.fill(dtype, (), c), k - ops.arange(k).astype(dtype))  # c^(k - i) at offset i
        adv = (local + later.reshape(b, n, 1) * tail.reshape(1, 1, k)).reshape(b, n * k)[:, :r]
    adv = adv * mask
    return adv, (adv + v) * mask


# ---------------------------------------------------------------------------------------------
# the actor objective as one Cell, configured once


class ActorLoss(nn.Cell):
    """``pg_loss + kl_coef * kl_loss - entropy_coeff * entropy`` for the actor update.

    All options are fixed at construction (validated here, so a bad config fails before any graph
    compiles). ``construct(log_prob, old_log_prob, advantages, mask, ref_log_prob=None,
    entropy=None, denominator=None)`` returns the flat tuple
    ``(loss, pg_loss, pg_clipfrac, ppo_kl, kl_loss, entropy_loss)``; use it with
    ``ms.value_and_grad(..., has_aux=True)``. ``kl_loss`` / ``entropy_loss`` are 0 when disabled.
    The KL and entropy terms use the same ``loss_agg_mode``, mask and ``denominator`` as pg_loss.
    """

    def __init__(
        self,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=None,
        loss_agg_mode="token-mean",
        use_kl_in_loss=False,
        kl_penalty="low_var_kl",
        kl_coef=0.0,
        entropy_coeff=0.0,
        policy_loss_name="vanilla",
        norm_len=None,
    ):
        super().__init__()
        if clip_ratio_c is not None and not clip_ratio_c > 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {clip_ratio_c}")
        if policy_loss_name == "gspo" and clip_ratio_c is not None:
            raise ValueError("GSPO has no dual clip: clip_ratio_c must be None")
        self.pg_fn = get_policy_loss(policy_loss_name)
        self.kl_fn = get_kl_estimator(kl_penalty)
        self.loss_agg_mode = check_loss_agg_mode(loss_agg_mode)
        self.clip_ratio_low = float(clip_ratio_low)
        self.clip_ratio_high = float(clip_ratio_high)
        self.clip_ratio_c = None if clip_ratio_c is None else float(clip_ratio_c)
        self.use_kl = bool(use_kl_in_loss)
        self.kl_coef = float(kl_coef)
        self.entropy_coeff = float(entropy_coeff)
        # seq-mean-token-sum-norm divides by a constant length (Dr.GRPO: the max response length),
        # never by the padded width of a batch, which changes from step to step
        self.norm_len = None if norm_len is None else float(norm_len)

    def construct(self, log_prob, old_log_prob, advantages, mask, ref_log_prob=None, entropy=None, denominator=None):
        pg_loss, pg_clipfrac, ppo_kl = self.pg_fn(
            log_prob, old_log_prob, advantages, mask,
            self.clip_ratio_low, self.clip_ratio_high, self.clip_ratio_c, self.loss_agg_mode, denominator,
            self.norm_len,
        )
        loss = pg_loss
        kl_loss = ops.zeros((), log_prob.dtype)
        if self.use_kl:
            if ref_log_prob is None:
                raise ValueError("use_kl_in_loss is set, so ActorLoss needs ref_log_prob")
            kl_loss = agg_loss(self.kl_fn(log_prob, ref_log_prob), mask, self.loss_agg_mode, denominator,
                               self.norm_len)
            loss = loss + self.kl_coef * kl_loss
        ent_loss = ops.zeros((), log_prob.dtype)
        if entropy is not None:
            ent_loss = agg_loss(entropy, mask, self.loss_agg_mode, denominator, self.norm_len)
            loss = loss - self.entropy_coeff * ent_loss
        return loss, pg_loss, pg_clipfrac, ppo_kl, kl_loss, ent_loss


__all__ = [
    "LOSS_AGG_MODES", "masked_mean", "agg_loss",
    "policy_loss", "gspo_policy_loss", "POLICY_LOSSES", "get_policy_loss", "value_loss", "ActorLoss",
]
