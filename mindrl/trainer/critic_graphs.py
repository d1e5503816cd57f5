"""The critic's graphs: values of the response tokens, and the clipped value loss as a loss cell for the Updater."""
from __future__ import annotations

from mindspore import nn, ops

from mindrl.algorithms.losses import masked_mean, value_loss


class ResponseValues(nn.Cell):
    """(input_ids [B, P+R], attention_mask, R) -> V [B, R]: the value of the state before each response token,
    read at the position that predicts it (p - 1 + t), as the policy's log-probs are."""

    def __init__(self, value_model):
        super().__init__(auto_prefix=False)
        self.value_model = value_model

    def construct(self, input_ids, attention_mask, response_mask):
        r = response_mask.shape[1]
        p = input_ids.shape[1] - r
        return self.value_model(input_ids, attention_mask)[:, p - 1:p - 1 + r]


class CriticLossCell(nn.Cell):
    """(input_ids, attention_mask, loss_mask, old_values, returns, denominator) ->
    (loss, vf_loss, vf_clipfrac, vpred_mean): PPO's clipped value loss, aggregated by ``loss_agg_mode``
    (critic_config.loss_agg_mode; token-mean, verl's default)."""

    METRICS = (("vf_loss", "sum"), ("vf_clipfrac", "token_mean"), ("vpred_mean", "token_mean"))

    def __init__(self, value_model, cliprange_value: float, loss_agg_mode: str = "token-mean"):
        super().__init__(auto_prefix=False)
        self.values = ResponseValues(value_model)
        self.cliprange_value = float(cliprange_value)
        self.loss_agg_mode = loss_agg_mode

    def construct(self, input_ids, attention_mask, loss_mask, old_values, returns, denom):
        vpred = self.values(input_ids, attention_mask, loss_mask)
        vf_loss, vf_clipfrac = value_loss(vpred, old_values, returns, loss_mask, self.cliprange_value,
                                          self.loss_agg_mode, denom)
        return vf_loss, vf_loss, vf_clipfrac, ops.stop_gradient(masked_mean(vpred, loss_mask))
