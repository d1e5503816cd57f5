"""Host-side loss denominators for exact gradient accumulation (numpy).

``agg_loss(..., denominator=D)`` returns (sum over this micro-batch) / D. Computing D once over
the whole mini-batch and passing the same D to every micro-batch makes the micro-batch losses
(and their gradients) add up exactly to the mini-batch loss.
"""
import numpy as np

from .registry import check_loss_agg_mode


def loss_denominator(response_mask, loss_agg_mode):
    """The denominator ``agg_loss`` uses by default, for a (mini-)batch mask [B, T].

    ``token-mean``: number of valid tokens. Every ``seq-mean-*`` mode: number of sequences with at
    least one valid token. Never below 1, so a fully masked batch gives a loss of 0, not NaN.
    With data parallelism the trainer can sum this over the dp ranks (gradients then all-reduced
    with a sum) to get the exact global-batch loss.
    """
    check_loss_agg_mode(loss_agg_mode)
    m = np.asarray(response_mask, np.float64)
    if loss_agg_mode in ("token-mean", "token-mean-per-micro-batch"):
        count = m.sum()
    else:
        count = (m.sum(axis=-1) > 0).sum()
    return float(max(count, 1.0))


def micro_batch_denominator(micro_mask, loss_agg_mode, mini_batch_denominator, micro_batches):
    """The denominator one micro-batch's loss is divided by.

    Every mode but ``token-mean-per-micro-batch`` divides each micro-batch by the whole mini-batch's denominator
    (``loss_denominator``), so the micro-batch losses add up to the mini-batch's. ``token-mean-per-micro-batch``
    divides by this micro-batch's own valid tokens times ``micro_batches`` (all micro-batches of the mini-batch, over
    every data-parallel rank): the sum is then the mean of the micro-batches' token means (MindSpeed-RL's loss
    average, with Megatron's per-micro-batch scaling and the data-parallel gradient mean).
    """
    if loss_agg_mode != "token-mean-per-micro-batch":
        return mini_batch_denominator
    tokens = float(np.asarray(micro_mask, np.float64).sum())
    return max(tokens, 1.0) * micro_batches
