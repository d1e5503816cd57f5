"""The actor's graphs: log-probs of response tokens, and the policy objective as a loss cell for the Updater."""
from __future__ import annotations

from mindspore import nn, ops

from mindrl.algorithms.losses import ActorLoss
from mindrl.models.scoring import LogProbsAndEntropy


class ResponseLogProbs(nn.Cell):
    """(input_ids [B, P+R], attention_mask, R) -> log p and entropy of the R response tokens [B, R].

    Only the response positions go through the LM head: the prompt's logits are never formed.
    """

    def __init__(self, lm, temperature: float):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.inv_t = 1.0 / float(temperature)
        self.stats = LogProbsAndEntropy(lm.tp)

    def construct(self, input_ids, attention_mask, response_mask):
        r = response_mask.shape[1]
        p = input_ids.shape[1] - r
        h = self.lm.model(input_ids, attention_mask)[:, p - 1:p - 1 + r]
        logits = self.lm.head(h)
        if self.inv_t != 1.0:
            logits = logits * self.inv_t
        return self.stats(logits, input_ids[:, p:])


class ActorLossCell(nn.Cell):
    """(input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denominator) ->
    (loss, pg_loss, pg_clipfrac, ppo_kl, kl_loss, entropy)."""

    METRICS = (("pg_loss", "sum"), ("pg_clipfrac", "token_mean"), ("ppo_kl", "token_mean"), ("kl_loss", "sum"),
               ("entropy", "sum"))

    def __init__(self, lm, actor_loss: ActorLoss, temperature: float, entropy_in_loss: bool):
        super().__init__(auto_prefix=False)
        self.scorer = ResponseLogProbs(lm, temperature)
        self.loss = actor_loss
        self.entropy_in_loss = entropy_in_loss

    def construct(self, input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denom):
        log_prob, entropy = self.scorer(input_ids, attention_mask, loss_mask)
        if not self.entropy_in_loss:
            entropy = ops.stop_gradient(entropy)
        loss, pg, clipfrac, ppo_kl, kl, ent = self.loss(log_prob, old_log_probs, advantages, loss_mask,
                                                         ref_log_probs, entropy, denom)
        return loss, pg, clipfrac, ppo_kl, kl, ent
