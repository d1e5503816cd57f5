"""The actor's graphs: log-probs of response tokens, and the policy objective as a loss cell for the Updater."""
from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from mindrl.algorithms.losses import ActorLoss
from mindrl.models.scoring import LogProbsAndEntropy
from mindrl.trainer.inputs import INPUTS


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
        return self.tail(self.lm.model.run_layers(*self.stem(input_ids, attention_mask, response_mask)),
                         input_ids, attention_mask, response_mask)

    def stem(self, input_ids, attention_mask, response_mask):
        """The first decoder layer's inputs (Backbone.stem)."""
        return self.lm.model.stem(input_ids, attention_mask)

    def tail(self, h, input_ids, attention_mask, response_mask):
        """The last decoder layer's output -> log p and entropy of the response tokens."""
        r = response_mask.shape[1]
        p = input_ids.shape[1] - r
        h = self.lm.model.norm(h[:, p - 1:p - 1 + r])
        logits = self.lm.head(h)
        if self.inv_t != 1.0:
            logits = logits * self.inv_t
        return self.stats(logits, input_ids[:, p:])


class SharedPromptLogProbs(nn.Cell):
    """ResponseLogProbs over packed groups (models/decoder.py ``shared_prompt_forward``): (input_ids [K, P + G*R],
    segments [K, P + G*R], response_mask [K, G, R]) -> log p and entropy [K*G, R] of the K*G responses, in the order
    of the unpacked rows. The prompt's positions are computed once per group instead of once per response."""

    def __init__(self, lm, temperature: float, group: int):
        super().__init__(auto_prefix=False)
        self.lm = lm
        self.group = int(group)
        self.inv_t = 1.0 / float(temperature)
        self.stats = LogProbsAndEntropy(lm.tp)

    def construct(self, input_ids, attention_mask, response_mask):
        return self.tail(self.lm.model.run_layers(*self.stem(input_ids, attention_mask, response_mask)),
                         input_ids, attention_mask, response_mask)

    def stem(self, input_ids, attention_mask, response_mask):
        """The first decoder layer's inputs (Backbone.shared_prompt_stem)."""
        return self.lm.model.shared_prompt_stem(input_ids, attention_mask, self.group, response_mask.shape[-1])

    def tail(self, h, input_ids, attention_mask, response_mask):
        """The last decoder layer's output -> log p and entropy of the responses."""
        g, r = self.group, response_mask.shape[-1]
        k, p = input_ids.shape[0], input_ids.shape[1] - g * r
        h_p, h_r = self.lm.model.shared_prompt_tail(h, k, g, r)
        # response token t is predicted from the token before it: the prompt's last for t = 0, its own t - 1 after
        last = ops.broadcast_to(h_p[:, p - 1:p].reshape(k, 1, 1, -1), (k, g, 1, h_p.shape[-1]))
        h = last.reshape(k * g, 1, -1)
        if r > 1:
            h = ops.concat((h, h_r[:, :r - 1]), 1)
        logits = self.lm.head(h)
        if self.inv_t != 1.0:
            logits = logits * self.inv_t
        return self.stats(logits, input_ids[:, p:].reshape(k * g, r))


def pack_groups(input_ids, attention_mask, response_width: int, group: int):
    """Rows [N, P + R] (left-padded prompt, right-padded response; N = groups x ``group``, each group's rows one
    prompt's samples, consecutive) -> (ids, segments), each [N / group, P + group * R]: the prompt once, then each
    response (SharedPromptLogProbs' input). Raises ValueError if a group's rows do not share their prompt."""
    n, width = input_ids.shape
    p, r, k = width - response_width, response_width, n // group
    ids = input_ids.reshape(k, group, width)
    mask = attention_mask.reshape(k, group, width)
    if n % group or (ids[:, :, :p] != ids[:, :1, :p]).any() or (mask[:, :, :p] != mask[:, :1, :p]).any():
        raise ValueError(f"pack_groups: {n} rows are not groups of {group} rows with one prompt each")
    seg = mask[:, :, p:] * np.arange(2, group + 2, dtype=mask.dtype).reshape(1, group, 1)
    return (np.concatenate([ids[:, 0, :p], ids[:, :, p:].reshape(k, group * r)], 1),
            np.concatenate([mask[:, 0, :p], seg.reshape(k, group * r)], 1))


def pack_arrays(arrays, group: int) -> dict:
    """A graph's inputs by name (trainer/inputs.py), one row per response -> packed groups: ``input_ids`` and
    ``attention_mask`` by :func:`pack_groups`, every per-response array [N, R] as [N / group, group, R]."""
    r = next(a.shape[1] for n, a in arrays.items() if INPUTS[n].width == "response")
    out = {n: a.reshape(-1, group, r) for n, a in arrays.items() if n not in ("input_ids", "attention_mask")}
    out["input_ids"], out["attention_mask"] = pack_groups(arrays["input_ids"], arrays["attention_mask"], r, group)
    return out


def log_prob_scorer(lm, temperature: float, group: int):
    """The log-prob pass of response tokens: over packed groups when ``group`` > 0, else one row per response."""
    return SharedPromptLogProbs(lm, temperature, group) if group else ResponseLogProbs(lm, temperature)


class ActorLossCell(nn.Cell):
    """(input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denominator) ->
    (loss, pg_loss, pg_clipfrac, ppo_kl, kl_loss, entropy)."""

    METRICS = (("pg_loss", "sum"), ("pg_clipfrac", "token_mean"), ("ppo_kl", "token_mean"), ("kl_loss", "sum"),
               ("entropy", "sum"))

    def __init__(self, lm, actor_loss: ActorLoss, temperature: float, entropy_in_loss: bool, group: int = 0):
        """``group`` > 0: the inputs are packed groups of that many responses (pack_groups; the per-response ones
        [K, group, R]), whose prompt is computed once (SharedPromptLogProbs)."""
        super().__init__(auto_prefix=False)
        self.group = int(group)
        self.scorer = log_prob_scorer(lm, temperature, group)
        self.loss = actor_loss
        # for trainer/layer_graphs.py: the layers it runs, and whether the head reads the embedding table
        object.__setattr__(self, "backbone", lm.model)  # not registered again: lm is the scorer's
        self.tied_embeddings = lm.tied
        self.shared_prompts = bool(group)  # the stem's mask is then a pair (prompts', responses')
        self.entropy_in_loss = entropy_in_loss

    def construct(self, input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denom):
        h = self.backbone.run_layers(*self.stem(input_ids, attention_mask, loss_mask, old_log_probs,
                                                       advantages, ref_log_probs, denom))
        return self.tail(h, input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denom)

    def stem(self, input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denom):
        """The first decoder layer's inputs: (embeddings, cos, sin, mask). trainer/layer_graphs.py runs a
        micro-batch as stem, each layer, tail, each its own graph."""
        return self.scorer.stem(input_ids, attention_mask, loss_mask)

    def tail(self, h, input_ids, attention_mask, loss_mask, old_log_probs, advantages, ref_log_probs, denom):
        """The last decoder layer's output ``h`` -> the loss and its metrics."""
        log_prob, entropy = self.scorer.tail(h, input_ids, attention_mask, loss_mask)
        if self.group:
            r = loss_mask.shape[-1]
            loss_mask, old_log_probs = loss_mask.reshape(-1, r), old_log_probs.reshape(-1, r)
            advantages, ref_log_probs = advantages.reshape(-1, r), ref_log_probs.reshape(-1, r)
        if not self.entropy_in_loss:
            entropy = ops.stop_gradient(entropy)
        loss, pg, clipfrac, ppo_kl, kl, ent = self.loss(log_prob, old_log_probs, advantages, loss_mask,
                                                         ref_log_probs, entropy, denom)
        return loss, pg, clipfrac, ppo_kl, kl, ent
