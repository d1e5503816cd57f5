"""`mindrl sft`: supervised fine-tuning of a causal LM on SFT rows (prompt + response), the loss on the response
tokens only:

    loss = sum over the global batch's response tokens of -log p(token | the tokens before it)
           / (the global batch's response token count)

The rows are SFT MindRecord, as PPO-ptx reads them (trainer/ptx.py): ``pretrain_ids`` (prompt + response) and
``loss_mask`` (1 on the response tokens), written by `mindrl preprocess` with the sft handler. Micro-batches and
data-parallel replicas each add their share with the global batch's token count as denominator, so the gradient
is that of one big batch. Held-out rows (``eval.path``) give ``sft/eval_loss``, the same token mean over all of
them. The output, ``<run dir>/model``, is an HF causal-LM directory (`mindrl train`'s ``actor_config.load`` and
transformers read it); checkpoints hold the model as ``iter_*/policy/`` (so an RL run can start from one too), its
optimizer and the data position, and a stopped run resumes as `mindrl train-rm`'s does (trainer/offline.py has the
loop both share).
"""
from __future__ import annotations

import logging
import time

import numpy as np
from mindspore import Tensor

from mindrl.config.sft import load_sft_config
from mindrl.data.widths import padded_width
from mindrl.parallel.topology import shard_rows
from mindrl.trainer.offline import OfflineTrainer, run_command
from mindrl.trainer.ptx import PTX_COLUMNS, ptx_rows
from mindrl.trainer.roles.base import Stage, TrainedNetwork
from mindrl.trainer.sft import PackedSFTLossCell, SFTLossCell, loss_positions, pack_rows

log = logging.getLogger("mindrl.sft")


class TrainedCausalLM(TrainedNetwork):
    """The model `mindrl sft` trains, as a trained network (roles/base.py): its checkpoint part is ``<iter>/policy/``
    (an HF causal-LM directory with the optimizer beside it), the part an RL run's actor_config.load reads."""

    name = "policy"

    def __init__(self, run, spec, packed: bool = False):
        super().__init__(run, spec)
        self._build("causal_lm")
        self.loss_cell = PackedSFTLossCell(self.net) if packed else SFTLossCell(self.net)
        self._train_with(self.loss_cell)

    def stages(self):
        return [Stage("train_policy", self.net, self.layout, with_optimizer=True)]


class SFTTrainer(OfflineTrainer):
    command, section, prefix, what, loss_key = "sft", "sft_config", "sft", "the model", "sft/loss"
    role_name = "policy"

    def __init__(self, cfg):
        self._tokens = 0.0  # the current step's real tokens (prompt and response, all replicas)
        self._cut = False   # a row longer than the model's positions was cut (said once)
        super().__init__(cfg)
        self.max_width = self.model_config.max_position_embeddings

    def columns(self) -> list:
        return list(PTX_COLUMNS)

    def data_hint(self) -> str:
        return ("sft trains on SFT rows: `mindrl preprocess` with handler_name sft writes them (pretrain_ids = "
                "prompt + response, loss_mask = 1 on the response)")

    def make_role(self, run):
        return TrainedCausalLM(run, self.spec, packed=self.cfg.data.packing)

    def _arrays(self, batch, rows, training: bool = True) -> dict:
        """Right-padded ids and loss positions of ``rows``, at the padded width of the longest (data.pad_to_multiple_of;
        at most the model's positions; a longer row is cut to them); with data.packing (training only), the rows
        packed into as few sequences of that width as they fit in (trainer/sft.py, pack_rows)."""
        ids = [batch["pretrain_ids"][i] for i in rows]
        masks = [batch["loss_mask"][i] for i in rows]
        longest = max(len(r) for r in ids)
        if longest > self.max_width and not self._cut:
            self._cut = True
            log.warning("rows longer than the model's %d positions (max_position_embeddings) are cut to them; the "
                        "longest has %d tokens", self.max_width, longest)
        width = min(padded_width(longest, self.cfg.data.pad_to_multiple_of), self.max_width)
        if training and self.cfg.data.packing:
            sft_ids, sft_mask, segments = pack_rows([r[:width] for r in ids], [m[:width] for m in masks], width,
                                                    self.pad_id)
            return {"sft_ids": sft_ids, "sft_positions": loss_positions(sft_mask), "sft_segments": segments}
        sft_ids, sft_mask = ptx_rows({"pretrain_ids": ids, "loss_mask": masks}, width, self.pad_id)
        return {"sft_ids": sft_ids, "sft_positions": loss_positions(sft_mask)}

    def _denominator(self, batch) -> float:
        """The global batch's response tokens (every replica's rows), each row as the model sees it (cut to its
        positions); the step's real tokens too, for tokens/s."""
        w = self.max_width
        counts = np.array([sum(float((np.asarray(m[1:w]) > 0).sum()) for m in batch["loss_mask"]),
                           sum(float(min(len(r), w)) for r in batch["pretrain_ids"])])
        if self.topo.world > 1:
            counts = self.exchange.all_sum(counts) / self.layout.tp
        self._tokens = float(counts[1])
        return max(float(counts[0]), 1.0)

    def train_step(self, batch, step: int) -> dict:
        t0 = time.perf_counter()
        out = super().train_step(batch, step)
        out["sft/tokens_per_second"] = self._tokens / max(time.perf_counter() - t0, 1e-9)
        return out

    def line(self, metrics: dict) -> str:
        return (f"loss={metrics['sft/loss']:.4f}  grad_norm={metrics['sft/grad_norm']:.3f}  "
                f"tokens/s={metrics['sft/tokens_per_second']:.0f}")

    # -- held-out rows -----------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """The token-mean NLL of the held-out rows' response tokens (``sft/eval_loss``) and their count; every
        rank gets the same numbers."""
        held_out, micro = self._eval_rows(), self.cfg.train.micro_batch_size
        n = len(held_out["pretrain_ids"])
        mine = range(n)[shard_rows(n - n % self.layout.dp, self.layout)]
        total = np.zeros(2)
        nll, one = self.role.loss_cell.nll, Tensor(np.float32(1.0))
        self.net.set_train(False)
        for s in range(0, len(mine), micro):
            a = self._arrays(held_out, mine[s:s + micro], training=False)
            total += [float(nll(Tensor(a["sft_ids"]), Tensor(a["sft_positions"]), one).asnumpy()),
                      float((a["sft_positions"] > 0).sum())]
        self.net.set_train(True)
        if self.topo.world > 1:
            total = self.exchange.all_sum(total) / self.layout.tp
        return {"sft/eval_loss": float(total[0] / max(total[1], 1.0)), "sft/eval_tokens": int(total[1])}


def cli_main(argv=None) -> int:
    return run_command(SFTTrainer, load_sft_config, argv,
                       "supervised fine-tuning of a causal LM on SFT rows (loss on the response tokens); "
                       "see docs/sft.md")
