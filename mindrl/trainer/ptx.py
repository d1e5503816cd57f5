"""PPO-ptx (InstructGPT, eq. 2; MindRLHF's ``pretrain_coef``): a supervised term mixed into the actor's update,

    actor loss += pretrain_coef * (token-mean negative log-likelihood of SFT rows' response tokens),

so that RL does not erode what supervised training taught. The rows come from ``data.ptx_path`` (default
``data.path``): its ``pretrain_ids`` (prompt + response) and ``loss_mask`` (1 on response tokens) columns, as
`mindrl preprocess` with the sft handler and the MindRLHF tutorial's rlhf_data.py write them.

Each actor update reads the next ``rl_config.global_batch_size`` rows of its own pass over the file (shuffled with
``data.seed`` like the prompts, but its own position: it does not move during ``critic_warmup``), cut to the actor's
train width ``bucket(max_prompt_length) + bucket(max_tokens)``, at most the model's ``max_position_embeddings``.
They are split evenly over the step's mini-batches; each mini-batch's ptx
micro-steps add their gradients into the actor's accumulation buffers before its one optimizer step, with the
chunk's token count as denominator on every replica, so data-parallel sums are exact.
"""
from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from mindrl.data.reader import PTX_COLUMNS, PromptDataset
from mindrl.data.widths import bucket
from mindrl.trainer.sft import NextTokenNLL, loss_positions
from mindrl.trainer.updater import AccumulateGrad


class PtxLossCell(nn.Cell):
    """(sft_ids [B, W], sft_positions [B, W], denominator) -> (pretrain_coef * nll, nll): nll is the masked
    next-token negative log-likelihood (trainer/sft.py) over the chunk's masked token count. The positions have the
    rows' full width, one shape for every chunk (the actor's graphs are compiled before the first step)."""

    METRICS = (("ptx_loss", "sum"),)

    def __init__(self, lm, pretrain_coef: float):
        super().__init__(auto_prefix=False)
        self.nll = NextTokenNLL(lm)
        self.coef = float(pretrain_coef)

    def construct(self, sft_ids, sft_positions, denom):
        nll = self.nll(sft_ids, sft_positions, denom)
        return self.coef * nll, ops.stop_gradient(nll)


def ptx_rows(batch: dict, width: int, pad_id: int) -> tuple:
    """A batch of ``pretrain_ids``/``loss_mask`` rows -> right-padded (ids, mask) [B, width], each cut to width."""
    n = len(batch["pretrain_ids"])
    ids = np.full((n, width), pad_id, np.int32)
    mask = np.zeros((n, width), np.int32)
    for i, (row, m) in enumerate(zip(batch["pretrain_ids"], batch["loss_mask"])):
        k = min(len(row), width)
        ids[i, :k] = row[:k]
        mask[i, :k] = np.asarray(m[:k]) > 0
    return ids, mask


class PtxTerm:
    """The supervised term of one run: its data stream, loss cell and accumulation graph (sharing the actor's
    gradient buffers). ``begin_step`` reads the step's rows; ``run(k, count)`` adds mini-batch k of count."""

    def __init__(self, run, lm, params, accum):
        plan, ro = run.plan, run.plan.rollout
        self.run, self.layout = run, run.topo.train
        # the actor's widest train sequence, within the model's positions; longer rows are cut to it
        self.width = min(bucket(ro.max_prompt_length) + bucket(ro.max_tokens, 4),
                         run.model_config.max_position_embeddings)
        # every rank reads the whole global batch (no sharding): denominators and replica shares then need no
        # communication, and a data-parallel run sums to exactly the single-process gradient
        self.stream = PromptDataset(ro.ptx_path, batch_size=plan.batch.prompts, seed=ro.data_seed,
                                    shuffle=ro.shuffle, columns=list(PTX_COLUMNS))
        self.cell = PtxLossCell(lm, plan.schedule.pretrain_coef)
        self.accumulate = AccumulateGrad(self.cell, params, accum=accum)
        self.micro_batch = plan.batch.micro_batch
        self.metrics = tuple(self.cell.METRICS)
        self._it = None
        self.ids = self.mask = self.positions = None

    def begin_step(self) -> None:
        if self._it is None:
            self._it = self.stream.forever()
        batch = next(self._it)
        self.ids, self.mask = ptx_rows(batch, self.width, self.run.pad_id)
        self.positions = loss_positions(self.mask, self.width)  # one shape for all chunks (compiled ahead)

    def run_chunk(self, k: int, count: int) -> np.ndarray:
        """Forward + backward of this replica's share of chunk ``k`` of ``count``; returns the metric partials."""
        n = len(self.ids)
        rows = np.arange(k * n // count, (k + 1) * n // count)
        denom = max(float(self.mask[rows, 1:].sum()), 1.0)
        share = len(rows) // self.layout.dp
        mine = rows[self.layout.dp_rank * share:(self.layout.dp_rank + 1) * share]
        micro = min(self.micro_batch, share)
        total = np.zeros(len(self.metrics))
        for u0 in range(0, len(mine), micro):
            r = mine[u0:u0 + micro]
            total += self.accumulate.run({"sft_ids": self.ids[r], "sft_positions": self.positions[r]}, denom)[1:]
        return total

    def compile(self) -> None:
        chunk_rows = self.run.plan.batch.ptx_rows_per_update
        micro = min(self.micro_batch, chunk_rows // self.layout.dp)
        self.accumulate.compile_for(micro, self.width, 0)

    def state_dict(self) -> dict:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.stream.load_state_dict(state)
