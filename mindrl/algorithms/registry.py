"""Names accepted by the algorithm config keys, importable without MindSpore.

The trainer validates a config (and prints helpful errors) before it builds any graph, so the
valid names live here rather than next to the MindSpore code that implements them.
"""

# rl_config.kl_penalty: canonical name -> aliases (verl and the k1/k2/k3 naming of Schulman's note).
KL_ESTIMATOR_ALIASES = {
    "kl": ("k1",),
    "mse": ("k2",),
    "low_var_kl": ("k3",),
    "abs": (),
}

# rl_config.loss_agg_mode
LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    # MindSpeed-RL's losses: a token mean within each micro-batch, then the mean over micro-batches and ranks
    "token-mean-per-micro-batch",
)

# rl_config.policy_loss: the clipped token-level PPO surrogate, or GSPO's sequence-level ratio
POLICY_LOSS_NAMES = ("vanilla", "gspo")


def canonical_kl_name(name):
    """Map ``k1``/``k2``/``k3`` (or a canonical name) to the canonical estimator name."""
    for canon, aliases in KL_ESTIMATOR_ALIASES.items():
        if name == canon or name in aliases:
            return canon
    valid = sorted(list(KL_ESTIMATOR_ALIASES) + [a for al in KL_ESTIMATOR_ALIASES.values() for a in al])
    raise ValueError(f"unknown kl_penalty {name!r}; valid names: {', '.join(valid)}")


def check_loss_agg_mode(mode):
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")
    return mode


def check_policy_loss_name(name):
    if name not in POLICY_LOSS_NAMES:
        raise ValueError(f"unknown policy loss {name!r}; valid names: {', '.join(POLICY_LOSS_NAMES)}")
    return name
