"""`mindrl train-rm`: an outcome reward model from preference pairs, with the Bradley-Terry loss

    loss = -log sigmoid(r(chosen) - r(rejected) - margin)

where ``r`` is a score head on the backbone, read at each sequence's last real token. Held-out pairs give
``rm/accuracy`` (share of pairs ranked right), ``rm/margin_mean``, ``rm/chosen_mean`` and ``rm/rejected_mean``;
the mean and std of all held-out rewards are stored in the saved config.json (OpenRLHF's ``mean`` / ``std``) so
PPO can normalise scores. The output, ``<run dir>/model``, is an HF sequence-classification directory: transformers'
AutoModelForSequenceClassification and mindrl's ``reward_config.load`` both read it (``runs/<name>/latest/model``
names the newest run's). With ``rm_config.save``, checkpoints (``iter_*/reward/``, the optimizer, the data position)
let a stopped run resume (``rm_config.finetune: false``, ``load: <checkpoint>``), as `mindrl train`'s do.
"""
from __future__ import annotations

import logging

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.config.reward_training import load_reward_training_config
from mindrl.data.widths import bucket
from mindrl.models.safetensors_io import CheckpointError
from mindrl.models.weights import weights_path
from mindrl.parallel.topology import shard_rows
from mindrl.trainer.offline import OfflineTrainer, run_command
from mindrl.trainer.roles.base import Stage, TrainedNetwork
from mindrl.trainer.roles.critic import value_model_hf_config


log = logging.getLogger("mindrl.train_rm")


class PairwiseLossCell(nn.Cell):
    """(chosen_ids, chosen_mask, rejected_ids, rejected_mask, margin, denominator) -> (loss, accuracy,
    margin_mean, chosen_mean, rejected_mean), each a sum over the pairs divided by the denominator (the global
    batch's pair count), so micro-batches and data-parallel replicas add up to the batch's means."""

    METRICS = (("loss", "sum"), ("accuracy", "sum"), ("margin_mean", "sum"), ("chosen_mean", "sum"),
               ("rejected_mean", "sum"))

    def __init__(self, reward_model):
        super().__init__(auto_prefix=False)
        self.rm = reward_model

    def construct(self, chosen_ids, chosen_mask, rejected_ids, rejected_mask, margin, denom):
        r_c = self.rm(chosen_ids, chosen_mask)
        r_r = self.rm(rejected_ids, rejected_mask)
        z = r_c - r_r - margin
        # -log sigmoid(z) = softplus(-z); MindSpore's softplus is stable at both ends and has the right gradient
        # at z = 0, where every pair starts (a new score head is zero). relu + log1p(exp(-|z|)) does not: its
        # subgradient there is 0, and training never leaves the start.
        nll = ops.softplus(-z)
        loss = nll.sum() / denom
        gap = ops.stop_gradient(r_c - r_r)
        acc = (gap > 0).astype(ms.float32).sum() / denom
        return loss, loss, acc, gap.sum() / denom, ops.stop_gradient(r_c).sum() / denom, \
            ops.stop_gradient(r_r).sum() / denom


def pad_right(seqs, length: int, pad_id: int):
    ids = np.full((len(seqs), length), pad_id, np.int32)
    mask = np.zeros((len(seqs), length), np.int32)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return ids, mask


class RewardModelTrainer(OfflineTrainer):
    command, section, prefix, what, loss_key = "train-rm", "rm_config", "rm", "the reward model", "rm/loss"
    role_name, rows_word = "reward", "pairs"

    def columns(self) -> list:
        d = self.cfg.data
        return [d.chosen_key, d.rejected_key] + ([d.margin_key] if d.margin_key else [])

    def eval_columns(self) -> list:
        d = self.cfg.data
        return [d.chosen_key, d.rejected_key]  # no margin: held-out pairs are ranked, not trained on

    def data_hint(self) -> str:
        return "train-rm trains on preference pairs (`mindrl preprocess` with handler_name pairwise)"

    def weights_part(self, load: str, finetune: bool) -> str:
        """Which part of a mindrl checkpoint ``load`` gives the weights: a train-rm checkpoint's reward model, else
        (a new run from an RL checkpoint) its policy's backbone."""
        if not finetune:
            return "reward"
        try:
            weights_path(load, "reward")
            return "reward"
        except CheckpointError:
            return "policy"

    def make_role(self, run):
        return TrainedRewardModel(run, self.spec, self.pad_id)

    def _arrays(self, batch, rows, margins: bool = True):
        d = self.cfg.data
        chosen = [batch[d.chosen_key][i] for i in rows]
        rejected = [batch[d.rejected_key][i] for i in rows]
        length = bucket(max(len(s) for s in chosen + rejected))
        c_ids, c_mask = pad_right(chosen, length, self.pad_id)
        r_ids, r_mask = pad_right(rejected, length, self.pad_id)
        margin = (np.asarray([float(batch[d.margin_key][i]) for i in rows], np.float32) if d.margin_key and margins
                  else np.zeros(len(rows), np.float32))
        return {"chosen_ids": c_ids, "chosen_mask": c_mask, "rejected_ids": r_ids, "rejected_mask": r_mask,
                "margin": margin}

    def line(self, metrics: dict) -> str:
        return f"loss={metrics['rm/loss']:.4f}  accuracy={metrics['rm/accuracy']:.3f}"

    def postfix(self, metrics: dict) -> dict:
        return {"loss": f"{metrics['rm/loss']:.3f}", "acc": f"{metrics['rm/accuracy']:.2f}"}

    # -- held-out pairs ------------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Pairwise accuracy and reward statistics on eval.path; every rank gets the same numbers."""
        d, tr = self.cfg.data, self.cfg.train
        held_out = self._eval_rows()
        pairs = len(held_out[d.chosen_key])
        mine = range(pairs)[shard_rows(pairs - pairs % self.layout.dp, self.layout)]
        scores = []
        self.net.set_train(False)
        for s in range(0, len(mine), tr.micro_batch_size):
            a = self._arrays(held_out, mine[s:s + tr.micro_batch_size], False)
            rc = self.net(Tensor(a["chosen_ids"]), Tensor(a["chosen_mask"])).asnumpy()
            rr = self.net(Tensor(a["rejected_ids"]), Tensor(a["rejected_mask"])).asnumpy()
            scores.append(np.stack([rc, rr], 1))
        self.net.set_train(True)
        both = self.exchange.from_each(np.concatenate(scores).astype(np.float32), self.layout).astype(np.float64)
        gap = both[:, 0] - both[:, 1]
        return {"rm/accuracy": float((gap > 0).mean()), "rm/margin_mean": float(gap.mean()),
                "rm/chosen_mean": float(both[:, 0].mean()), "rm/rejected_mean": float(both[:, 1].mean()),
                "rm/reward_mean": float(both.mean()), "rm/reward_std": float(both.std(ddof=1)),
                "rm/num_pairs": int(len(both))}

    def finished(self, summary: dict) -> None:
        self.role.stats = summary.get("eval_after")  # the held-out mean/std, stored for PPO's normalize


class TrainedRewardModel(TrainedNetwork):
    """The reward model as a trained network (roles/base.py), as the policy and critic are: its checkpoint part is
    ``<iter>/reward/`` (an HF sequence-classification directory with the optimizer beside it)."""

    name = "reward"

    def __init__(self, run, spec, pad_id: int):
        super().__init__(run, spec)
        self.pad_id = pad_id
        self._build("reward", allow_missing=("score.",))  # with LoRA the score head trains whole beside adapters
        self._train_with(PairwiseLossCell(self.net))
        self.stats = None  # the final held-out statistics, stored for PPO's normalize

    def hf_config(self) -> dict:
        extra = {"normalize_reward": False}
        if self.stats:  # OpenRLHF's keys: PPO's reward_config.normalize reads them
            extra.update(mean=self.stats["rm/reward_mean"], std=max(self.stats["rm/reward_std"], 1e-8))
        return value_model_hf_config(self.model_config, self.pad_id, extra)

    def stages(self):
        return [Stage("train_reward", self.net, self.layout, with_optimizer=True)]


def cli_main(argv=None) -> int:
    return run_command(RewardModelTrainer, load_reward_training_config, argv,
                       "train an outcome reward model on preference pairs (Bradley-Terry); see docs/reward_model.md")
