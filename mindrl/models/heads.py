"""Value head (PPO critic) and scalar reward head (outcome reward model) on the shared backbone.

Both use one linear ``score`` [1, hidden] like HF ``*ForSequenceClassification`` (num_labels=1), so an
HF reward-model checkpoint's ``score.weight`` loads as is (``v_head``/``value_head`` are accepted too).
"""
from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops

from mindrl.models.config import ModelConfig
from mindrl.models.decoder import Backbone
from mindrl.parallel.layers import SINGLE, TPContext, _Linear


class _Score(_Linear):
    def __init__(self, hidden, std, seed):
        super().__init__(hidden, 1, False, "float32", "float32", std, seed)

    def construct(self, x):
        return self._shaped(self._project(x.astype(ms.float32)), x)


class ValueModel(nn.Cell):
    """Per-token values [B, T] (float32)."""

    def __init__(self, cfg: ModelConfig, tp: TPContext = SINGLE, seed: int = 0):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg, tp, seed)
        self.score = _Score(cfg.hidden_size, cfg.initializer_range, seed + 11)

    def construct(self, input_ids, attention_mask):
        return self.head(self.model(input_ids, attention_mask))

    def head(self, h):
        """Normed hidden states [B, T, H] -> values [B, T]."""
        return self.score(h).squeeze(-1)


class RewardModel(ValueModel):
    """One scalar per sequence: the score at its last real token (padding on either side)."""

    def construct(self, input_ids, attention_mask):
        return self.tail(self.model.run_layers(*self.stem(input_ids, attention_mask)), input_ids, attention_mask)

    def stem(self, input_ids, attention_mask):
        """The first decoder layer's inputs (Backbone.stem); trainer/layer_graphs.py runs stem, layers, tail apart."""
        return self.model.stem(input_ids, attention_mask)

    def tail(self, h, input_ids, attention_mask):
        """The last decoder layer's output -> the score at each row's last real token."""
        values = self.head(self.model.norm(h))
        t = input_ids.shape[1]
        slots = ops.arange(t).astype(ms.int32).reshape(1, t)
        last = ops.max(slots * attention_mask.astype(ms.int32), 1)[0]  # index of the last real token
        onehot = (slots == last.reshape(-1, 1)).astype(values.dtype)
        return (values * onehot).sum(1)
