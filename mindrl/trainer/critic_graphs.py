"""The critic's graphs: values of the response tokens, and the clipped value loss as a loss cell for the Updater."""
from __future__ import annotations

from mindspore import nn, ops

from mindrl.algorithms.losses import gae_returns, masked_mean, value_loss


class ResponseValues(nn.Cell):
    """(input_ids [B, P+R], attention_mask, R) -> V [B, R]: the value of the state before each response token,
    read at the position that predicts it (p - 1 + t), as the policy's log-probs are."""

    def __init__(self, value_model):
        super().__init__(auto_prefix=False)
        self.value_model = value_model

    def construct(self, input_ids, attention_mask, response_mask):
        return self.tail(self.value_model.model.run_layers(*self.stem(input_ids, attention_mask, response_mask)),
                         input_ids, attention_mask, response_mask)

    def stem(self, input_ids, attention_mask, response_mask):
        """The first decoder layer's inputs (Backbone.stem)."""
        return self.value_model.model.stem(input_ids, attention_mask)

    def tail(self, h, input_ids, attention_mask, response_mask):
        """The last decoder layer's output -> the response positions' values."""
        r = response_mask.shape[1]
        p = input_ids.shape[1] - r
        return self.value_model.head(self.value_model.model.norm(h[:, p - 1:p - 1 + r]))


class _LayerParts(nn.Cell):
    """What trainer/layer_graphs.py needs of a critic loss cell: its backbone, its ``stem`` (the first layer's
    inputs); no tied head, no shared prompts. The cell's ``construct`` is its ``tail`` over every layer from its
    stem (written out in each cell: the updater matches inputs by construct's parameter names)."""

    def _parts(self, value_model):
        object.__setattr__(self, "backbone", value_model.model)  # not registered again: the values' cell has it
        self.tied_embeddings = False
        self.shared_prompts = False

    def stem(self, input_ids, attention_mask, loss_mask, *rest):
        return self.values.stem(input_ids, attention_mask, loss_mask)


class CriticLossCell(_LayerParts):
    """(input_ids, attention_mask, loss_mask, old_values, returns, denominator) ->
    (loss, vf_loss, vf_clipfrac, vpred_mean): PPO's clipped value loss, aggregated by ``loss_agg_mode``
    (critic_config.loss_agg_mode; token-mean, verl's default)."""

    METRICS = (("vf_loss", "sum"), ("vf_clipfrac", "token_mean"), ("vpred_mean", "token_mean"))

    def __init__(self, value_model, cliprange_value: float, loss_agg_mode: str = "token-mean"):
        super().__init__(auto_prefix=False)
        self.values = ResponseValues(value_model)
        self.cliprange_value = float(cliprange_value)
        self.loss_agg_mode = loss_agg_mode
        self._parts(value_model)

    def construct(self, input_ids, attention_mask, loss_mask, old_values, returns, denom):
        inputs = (input_ids, attention_mask, loss_mask, old_values, returns, denom)
        return self.tail(self.backbone.run_layers(*self.stem(*inputs)), *inputs)

    def tail(self, h, input_ids, attention_mask, loss_mask, old_values, returns, denom):
        vpred = self.values.tail(h, input_ids, attention_mask, loss_mask)
        vf_loss, vf_clipfrac = value_loss(vpred, old_values, returns, loss_mask, self.cliprange_value,
                                          self.loss_agg_mode, denom)
        return vf_loss, vf_loss, vf_clipfrac, ops.stop_gradient(masked_mean(vpred, loss_mask))


class CriticValuesLossCell(_LayerParts):
    """(input_ids, attention_mask, loss_mask, token_rewards, denominator) -> (loss, vf_loss, vf_clipfrac, vpred_mean,
    values): the critic's update when a step makes one optimizer update, with its forward as the step's value pass.

    With one update per step every micro-batch's forward runs on the weights the separate value pass would have
    read, so its values are those values: GAE's returns are computed from them in the graph (algorithms/losses.py
    ``gae_returns``, no gradient through them) and the values come out for the actor's advantages (the host's GAE,
    whitened). The clipped loss keeps its form with the old values equal to these, where the clip never binds, as
    in the separate-pass update's single update. This saves a forward pass of the critic and its graph."""

    METRICS = CriticLossCell.METRICS
    ROW_OUTPUTS = ("values",)  # after the metrics: one row per response, not summed over micro-batches

    def __init__(self, value_model, cliprange_value: float, loss_agg_mode: str, gamma: float, lam: float):
        super().__init__(auto_prefix=False)
        self.values = ResponseValues(value_model)
        self.cliprange_value = float(cliprange_value)
        self.loss_agg_mode = loss_agg_mode
        self.gamma = float(gamma)
        self.lam = float(lam)
        self._parts(value_model)

    def construct(self, input_ids, attention_mask, loss_mask, token_rewards, denom):
        inputs = (input_ids, attention_mask, loss_mask, token_rewards, denom)
        return self.tail(self.backbone.run_layers(*self.stem(*inputs)), *inputs)

    def tail(self, h, input_ids, attention_mask, loss_mask, token_rewards, denom):
        vpred = self.values.tail(h, input_ids, attention_mask, loss_mask)
        old = ops.stop_gradient(vpred)
        _, returns = gae_returns(token_rewards, old, loss_mask, self.gamma, self.lam)
        vf_loss, vf_clipfrac = value_loss(vpred, old, ops.stop_gradient(returns), loss_mask, self.cliprange_value,
                                          self.loss_agg_mode, denom)
        return vf_loss, vf_loss, vf_clipfrac, ops.stop_gradient(masked_mean(vpred, loss_mask)), old
