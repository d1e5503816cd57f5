"""Advantage estimators and reward shaping on rollout results (numpy, outside the graph).

Everything here runs on the host between rollout and update, so it is plain numpy: computed in
float64 (group statistics of a few 0/1 rewards lose nothing, and GAE sums many small terms) and
returned as float32, the dtype the training graph takes. No MindSpore import on purpose: this
module must stay cheap to import.
"""
import numpy as np

# ---------------------------------------------------------------------------------------------
# grouping


def group_ids(groups, n):
    """Return an int64 array [n] of group ids.

    ``groups`` is either an int ``k`` (``n_samples_per_prompt``: rows ``[i*k, (i+1)*k)`` belong to
    prompt ``i``, the order rollout produces) or an array-like of ``n`` hashable ids.
    """
    if isinstance(groups, (int, np.integer)):
        k = int(groups)
        if k <= 0 or n % k != 0:
            raise ValueError(f"{n} samples cannot be split into groups of n_samples_per_prompt={k}")
        return np.arange(n, dtype=np.int64) // k
    ids = np.asarray(groups)
    if ids.shape != (n,):
        raise ValueError(f"group index has shape {ids.shape}, expected ({n},)")
    # np.unique maps arbitrary ids (strings, uids) to 0..G-1
    return np.unique(ids, return_inverse=True)[1].reshape(n).astype(np.int64)


def _group_stats(scores, gid):
    """Per-sample group mean, unbiased group std, group size, and 'all equal' flag (float64)."""
    num = int(gid.max()) + 1 if gid.size else 0
    count = np.bincount(gid, minlength=num).astype(np.float64)
    mean = np.bincount(gid, weights=scores, minlength=num) / np.maximum(count, 1)
    dev = scores - mean[gid]
    sq = np.bincount(gid, weights=dev * dev, minlength=num)
    # unbiased (ddof=1) like torch.std / verl; undefined for singletons -> treated as 0
    std = np.sqrt(sq / np.maximum(count - 1, 1))
    gmax = np.full(num, -np.inf)
    gmin = np.full(num, np.inf)
    np.maximum.at(gmax, gid, scores)
    np.minimum.at(gmin, gid, scores)
    same = gmax == gmin
    return mean[gid], std[gid], count[gid], same[gid]


# ---------------------------------------------------------------------------------------------
# outcome (one score per sample) estimators


def grpo_advantages(scores, groups, norm_adv_by_std=True, eps=1e-6):
    """GRPO advantage per sample: ``(r - mean_g) / (std_g + eps)``.

    ``std_g`` is the *unbiased* (ddof=1) standard deviation of the group, as ``torch.std`` and verl.
    ``norm_adv_by_std=False`` gives Dr.GRPO's ``r - mean_g``. A group whose rewards are all equal,
    and a group of one sample (no baseline to compare with), gets exactly 0.
    Returns float32 [N].
    """
    r = np.asarray(scores, dtype=np.float64).reshape(-1)
    gid = group_ids(groups, r.shape[0])
    if r.size == 0:
        return np.zeros(0, np.float32)
    mean, std, count, same = _group_stats(r, gid)
    adv = r - mean
    if norm_adv_by_std:
        adv = adv / (std + eps)
    # exact zeros: the float mean of equal values can differ from them in the last bit
    adv[same | (count < 2)] = 0.0
    return adv.astype(np.float32)


def dr_grpo_advantages(scores, groups, eps=1e-6):
    """Dr.GRPO: group-mean baseline without the std normalisation (``r - mean_g``)."""
    return grpo_advantages(scores, groups, norm_adv_by_std=False, eps=eps)


def broadcast_to_tokens(adv, response_mask):
    """Copy each sample's scalar advantage to its valid tokens: ``adv[:, None] * mask`` (float32 [N, T])."""
    a = np.asarray(adv, dtype=np.float64).reshape(-1, 1)
    m = np.asarray(response_mask, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != a.shape[0]:
        raise ValueError(f"response_mask shape {m.shape} does not match {a.shape[0]} advantages")
    return (a * m).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# token-level (PPO) helpers


def masked_mean_np(x, mask, axis=None):
    x = np.asarray(x, np.float64)
    m = np.asarray(mask, np.float64)
    return (x * m).sum(axis=axis) / np.maximum(m.sum(axis=axis), 1.0)


def masked_whiten_np(x, mask, shift_mean=True, eps=1e-8):
    """Whiten ``x`` with the mean and unbiased variance of its valid entries.

    ``(x - mean) / sqrt(var + eps)``; with ``shift_mean=False`` the mean is added back (only the
    scale changes). Invalid entries come back as 0. Fewer than 2 valid entries: variance is taken
    as 0. Returns float32.
    """
    x = np.asarray(x, np.float64)
    m = np.asarray(mask, np.float64)
    n = m.sum()
    mean = (x * m).sum() / max(n, 1.0)
    var = (((x - mean) ** 2) * m).sum() / max(n - 1.0, 1.0)
    out = (x - mean) / np.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return (out * m).astype(np.float32)


def kl_penalty_np(log_prob, ref_log_prob, kl_penalty="kl"):
    """Per-token KL estimate on the host (for a KL penalty folded into the reward).

    Same formulas as the in-graph ``mindrl.algorithms.kl`` estimators, in float64.
    """
    from .registry import canonical_kl_name

    d = np.asarray(log_prob, np.float64) - np.asarray(ref_log_prob, np.float64)
    name = canonical_kl_name(kl_penalty)
    if name == "kl":
        return d.astype(np.float32)
    if name == "abs":
        return np.abs(d).astype(np.float32)
    if name == "mse":
        return (0.5 * d * d).astype(np.float32)
    # low_var_kl (k3): exp(-d) + d - 1 with d = logp - ref, clamped like verl
    nd = np.clip(-d, -20.0, 20.0)
    return np.clip(np.exp(nd) - nd - 1.0, -10.0, 10.0).astype(np.float32)


def last_valid_index(response_mask):
    """Index of the last valid token of each row, -1 for an all-masked row."""
    m = np.asarray(response_mask) > 0
    t = m.shape[1]
    last = t - 1 - np.argmax(m[:, ::-1], axis=1)
    return np.where(m.any(axis=1), last, -1)


def kl_penalized_token_rewards(scores, kl, response_mask, kl_coef):
    """Token-level rewards for PPO: ``-kl_coef * kl`` on every valid token, plus the sequence score
    on the last valid token (the reward arrives when the response ends).

    An all-masked row has nowhere to put its score and gets all zeros. Returns float32 [N, T].
    """
    m = np.asarray(response_mask, np.float64)
    r = -float(kl_coef) * np.asarray(kl, np.float64) * m
    s = np.asarray(scores, np.float64).reshape(-1)
    last = last_valid_index(m)
    rows = np.nonzero(last >= 0)[0]
    r[rows, last[rows]] += s[rows]
    return r.astype(np.float32)


def gae_advantages(token_rewards, values, response_mask, gamma=1.0, lam=0.95, whiten=True):
    """Generalised advantage estimation over the response tokens.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t+1}``, where
    "t+1" means the next *valid* token (masked tokens in between are skipped; after the last
    valid token V and A are 0). ``returns = A + V`` (before whitening). With ``whiten=True`` the
    advantages are whitened over the valid tokens of the whole batch (``masked_whiten_np``).
    Masked positions are 0 in both outputs. Returns (advantages, returns), float32 [N, T].
    """
    r = np.asarray(token_rewards, np.float64)
    v = np.asarray(values, np.float64)
    m = np.asarray(response_mask, np.float64)
    n, t = r.shape
    adv = np.zeros((n, t))
    next_v = np.zeros(n)
    next_a = np.zeros(n)
    for i in range(t - 1, -1, -1):
        delta = r[:, i] + gamma * next_v - v[:, i]
        a = delta + gamma * lam * next_a
        # a masked token neither produces an advantage nor breaks the chain across it
        next_v = np.where(m[:, i] > 0, v[:, i], next_v)
        next_a = np.where(m[:, i] > 0, a, next_a)
        adv[:, i] = a
    adv *= m
    returns = (adv + v) * m
    if whiten:
        adv = masked_whiten_np(adv, m)
    return adv.astype(np.float32), returns.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# more outcome estimators (RLOO, REINFORCE++ and its group-baseline variant)


def rloo_advantages(scores, groups):
    """RLOO (Ahmadian et al. 2024): each sample's baseline is the mean reward of the *other* samples of its group,
    ``A_i = r_i - (sum_g - r_i) / (n_g - 1)``, i.e. ``n/(n-1) * (r_i - mean_g)``. No std scaling, no whitening.
    A group of one has no other sample to compare with and gets 0. Returns float32 [N]."""
    r = np.asarray(scores, dtype=np.float64).reshape(-1)
    gid = group_ids(groups, r.shape[0])
    if r.size == 0:
        return np.zeros(0, np.float32)
    mean, _, count, _ = _group_stats(r, gid)
    adv = (r - mean) * count / np.maximum(count - 1.0, 1.0)
    adv[count < 2] = 0.0
    return adv.astype(np.float32)


def discounted_returns(token_rewards, response_mask, gamma=1.0):
    """``G_t = r_t + gamma * G_{t+1}`` over each response's tokens, right to left; the carried return is reset at
    masked positions, so padding never leaks into a response. Returns float64 [N, T] (0 where masked)."""
    r = np.asarray(token_rewards, np.float64)
    m = np.asarray(response_mask, np.float64)
    out = np.zeros_like(r)
    running = np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        running = r[:, t] + gamma * running
        out[:, t] = running
        running = running * m[:, t]
    return out * m


def reinforce_plus_plus_advantages(token_rewards, response_mask, gamma=1.0):
    """REINFORCE++ (Hu 2025): the token-level discounted return of the (KL-shaped) rewards, whitened over every
    valid token of the batch. Returns (advantages, returns), float32 [N, T]."""
    ret = discounted_returns(token_rewards, response_mask, gamma)
    return masked_whiten_np(ret, response_mask), ret.astype(np.float32)


def reinforce_plus_plus_baseline_advantages(scores, groups, response_mask):
    """REINFORCE++-baseline: subtract the group mean from each sequence reward, copy it to the tokens, then
    whiten over every valid token of the batch. Returns float32 [N, T]."""
    r = np.asarray(scores, np.float64).reshape(-1)
    gid = group_ids(groups, r.shape[0])
    mean, _, _, _ = _group_stats(r, gid)
    m = np.asarray(response_mask, np.float64)
    return masked_whiten_np((r - mean)[:, None] * m, m)


# ---------------------------------------------------------------------------------------------
# registry (rl_config.adv_estimator)

class AdvantageEstimator:
    """A registry entry: the estimator and what it needs from the run.

    ``compute(inputs)`` takes an :class:`AdvantageInputs` and returns ``(advantages [N, T], returns [N, T] or
    None)`` in float32. ``needs_critic``: values from a value model. ``needs_groups``: several samples per prompt.
    ``token_level``: reads per-token rewards (KL in the reward shapes every token), which the trainer builds only
    for these; the others read each sequence's total. ``options``: the rl_config keys it reads (the config
    refuses them for other estimators).
    """

    def __init__(self, name, compute, needs_critic=False, needs_groups=False, token_level=False, options=()):
        self.name, self.compute = name, compute
        self.needs_critic, self.needs_groups, self.token_level = needs_critic, needs_groups, token_level
        self.options = tuple(options)


class AdvantageInputs:
    """What an estimator may read. ``sequence_rewards`` [N] float64 (each row's reward total),
    ``token_rewards`` [N, T] (None unless the estimator is ``token_level``), ``mask`` [N, T] (the tokens that
    enter the loss), ``groups`` [N] (prompt ids), ``values`` [N, T] or None, ``options`` {key: value} of
    rl_config."""

    def __init__(self, sequence_rewards, token_rewards, mask, groups, values=None, options=None):
        self.sequence_rewards, self.token_rewards, self.mask = sequence_rewards, token_rewards, mask
        self.groups, self.values, self.options = groups, values, dict(options or {})


ADVANTAGE_ESTIMATORS = {}


def register_advantage_estimator(name, needs_critic=False, needs_groups=False, token_level=False, options=()):
    """Decorator: register ``compute(inputs: AdvantageInputs) -> (advantages, returns)`` as
    ``rl_config.adv_estimator: name``."""

    def deco(fn):
        ADVANTAGE_ESTIMATORS[name] = AdvantageEstimator(name, fn, needs_critic, needs_groups, token_level, options)
        return fn

    return deco


@register_advantage_estimator("grpo", needs_groups=True, options=("norm_adv_by_std",))
def _grpo(x):
    adv = grpo_advantages(x.sequence_rewards, x.groups, norm_adv_by_std=x.options.get("norm_adv_by_std", True))
    return broadcast_to_tokens(adv, x.mask), None


@register_advantage_estimator("dr_grpo", needs_groups=True)
def _dr_grpo(x):
    return broadcast_to_tokens(dr_grpo_advantages(x.sequence_rewards, x.groups), x.mask), None


@register_advantage_estimator("rloo", needs_groups=True)
def _rloo(x):
    return broadcast_to_tokens(rloo_advantages(x.sequence_rewards, x.groups), x.mask), None


@register_advantage_estimator("reinforce_plus_plus", token_level=True, options=("gamma",))
def _reinforce_pp(x):
    return reinforce_plus_plus_advantages(x.token_rewards, x.mask, x.options.get("gamma", 1.0))


@register_advantage_estimator("reinforce_plus_plus_baseline", needs_groups=True)
def _reinforce_pp_baseline(x):
    return reinforce_plus_plus_baseline_advantages(x.sequence_rewards, x.groups, x.mask), None


@register_advantage_estimator("gae", needs_critic=True, token_level=True,
                              options=("gamma", "lam", "advantage_whiten"))
def _gae(x):
    return gae_advantages(x.token_rewards, x.values, x.mask, x.options.get("gamma", 1.0), x.options.get("lam", 0.95),
                          whiten=x.options.get("advantage_whiten", True))


def get_advantage_estimator(name) -> AdvantageEstimator:
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown adv_estimator {name!r}; valid names: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}"
        ) from None
