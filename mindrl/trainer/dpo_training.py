"""`mindrl dpo`: Direct Preference Optimization of a causal LM on preference pairs (Rafailov et al. 2023), as TRL's
DPOTrainer computes it. For a pair (x, y_w, y_l) of a prompt and a chosen and a rejected response,

    log pi(y | x)  = the sum of log p(token | tokens before it) over the response's tokens (not the prompt's)
    h              = [log pi(y_w|x) - log pi_ref(y_w|x)] - [log pi(y_l|x) - log pi_ref(y_l|x)]
    sigmoid        = -(1 - ls) log sigmoid(beta h) - ls log sigmoid(-beta h)          (DPO; ls > 0: cDPO)
    hinge          = max(0, 1 - beta h)                                                  (SLiC)
    ipo            = (h' - 1 / (2 beta))^2, h' with each log-ratio divided by its response's token count   (IPO)

``pi`` is the policy (trained) and ``pi_ref`` the reference: a frozen copy of the starting weights (no optimizer),
whose log-probs of each micro-batch are computed before the policy's forward and backward. The loss is the mean
over the global batch's pairs: micro-batches and data-parallel replicas each add their share with the global pair
count as denominator, so the gradient is that of one big batch. The metrics are TRL's: ``rewards/chosen`` and
``rewards/rejected`` (beta times the log-ratios), ``rewards/accuracies`` (share of pairs whose chosen reward is the
higher), ``rewards/margins``, ``logps/chosen`` and ``logps/rejected`` (the policy's summed response log-probs), with
``dpo/loss``, ``dpo/grad_norm`` and ``dpo/lr``; held-out pairs (``eval.path``) give the same under ``eval/``.

The rows are pairwise MindRecord, as `mindrl train-rm` reads them (`mindrl preprocess`, pairwise handler):
``chosen_ids`` and ``rejected_ids`` (prompt + response) and ``prompt_length``, where the responses start. The
output, ``<run dir>/model``, is an HF causal-LM directory; checkpoints hold the policy as ``iter_*/policy/`` (an RL
run's actor_config.load reads it) with its optimizer and the data position; the reference is read again from
``dpo_config.ref_load`` (which the run's config.yaml names) when a stopped run resumes. trainer/offline.py has the
loop, saving and command line.
"""
from __future__ import annotations

import logging

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

from mindrl.config.dpo import load_dpo_config
from mindrl.config.plan import WeightsSpec
from mindrl.data.widths import padded_width
from mindrl.parallel.reshard import rename_parameters
from mindrl.parallel.topology import shard_rows
from mindrl.trainer.offline import OfflineTrainer, run_command
from mindrl.trainer.roles.base import Stage, TrainedNetwork, build_net, load_weights, same_weights
from mindrl.trainer.roles.reference import share_base
from mindrl.trainer.sft import SummedResponseLogProbs, loss_positions

log = logging.getLogger("mindrl.dpo")

# TRL's metric names (DPOTrainer._compute_loss), in the order the loss cell returns them after the loss
TRL_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
               "logps/rejected")


class DPOLossCell(nn.Cell):
    """(chosen_ids, chosen_positions, rejected_ids, rejected_positions, ref_chosen_logps, ref_rejected_logps,
    denominator)
    -> (loss, *TRL_METRICS), each a sum over the pairs divided by the denominator (the global batch's pair count).
    Chosen and rejected rows go through the policy as one batch, as TRL's concatenated forward does."""

    METRICS = (("loss", "sum"),) + tuple((name, "sum") for name in TRL_METRICS)

    def __init__(self, lm, beta: float, loss_type: str, label_smoothing: float = 0.0):
        super().__init__(auto_prefix=False)
        self.logps = SummedResponseLogProbs(lm)
        self.beta, self.loss_type, self.ls = float(beta), loss_type, float(label_smoothing)

    def construct(self, chosen_ids, chosen_positions, rejected_ids, rejected_positions, ref_chosen_logps,
                  ref_rejected_logps, denom):
        n = chosen_ids.shape[0]
        both = self.logps(ops.concat((chosen_ids, rejected_ids), 0),
                          ops.concat((chosen_positions, rejected_positions), 0))
        chosen, rejected = both[:n], both[n:]
        chosen_ratio, rejected_ratio = chosen - ref_chosen_logps, rejected - ref_rejected_logps
        if self.loss_type == "ipo":  # TRL: per-token means of the log-ratios (its completion mask's counts)
            n_c = ops.maximum((chosen_positions > 0).astype(ms.float32).sum(-1), 1.0)
            n_r = ops.maximum((rejected_positions > 0).astype(ms.float32).sum(-1), 1.0)
            losses = ops.square(chosen_ratio / n_c - rejected_ratio / n_r - 0.5 / self.beta)
        elif self.loss_type == "hinge":
            losses = ops.relu(1.0 - self.beta * (chosen_ratio - rejected_ratio))
        else:  # sigmoid; -log sigmoid(z) = softplus(-z), stable at both ends (reward_training.py says why not relu)
            z = self.beta * (chosen_ratio - rejected_ratio)
            losses = ops.softplus(-z)
            if self.ls > 0:
                losses = (1.0 - self.ls) * losses + self.ls * ops.softplus(z)
        loss = losses.sum() / denom
        r_c = ops.stop_gradient(chosen_ratio) * self.beta
        r_r = ops.stop_gradient(rejected_ratio) * self.beta
        return (loss, ops.stop_gradient(loss), r_c.sum() / denom, r_r.sum() / denom,
                (r_c > r_r).astype(ms.float32).sum() / denom, (r_c - r_r).sum() / denom,
                ops.stop_gradient(chosen).sum() / denom, ops.stop_gradient(rejected).sum() / denom)


def dpo_losses(chosen, rejected, ref_chosen, ref_rejected, n_chosen, n_rejected, beta, loss_type, ls=0.0):
    """The per-pair losses DPOLossCell computes, in float64 numpy (the held-out pairs' ``eval/dpo/loss``)."""
    c, r = np.float64(chosen) - ref_chosen, np.float64(rejected) - ref_rejected
    if loss_type == "ipo":
        return (c / np.maximum(n_chosen, 1) - r / np.maximum(n_rejected, 1) - 0.5 / beta) ** 2
    if loss_type == "hinge":
        return np.maximum(0.0, 1.0 - beta * (c - r))
    z = beta * (c - r)
    return (1 - ls) * np.logaddexp(0.0, -z) + ls * np.logaddexp(0.0, z)


def pairs_arrays(chosen, rejected, prompt_lengths, pad_id: int, max_width: int, multiple: int = 0):
    """Right-padded ids of both sides at one width (the padded width of the longest, data/widths.padded_width with
    ``multiple``, at most ``max_width``) and the
    positions of their response tokens (trainer/sft.py loss_positions: from each row's prompt length to its end),
    both sides at one count of positions, as the policy scores them in one batch."""
    width = min(padded_width(max(len(s) for s in list(chosen) + list(rejected)), multiple), max_width)
    out, masks = {}, {}
    for side, seqs in (("chosen", chosen), ("rejected", rejected)):
        ids = np.full((len(seqs), width), pad_id, np.int32)
        mask = np.zeros((len(seqs), width), np.int32)
        for i, (s, p) in enumerate(zip(seqs, prompt_lengths)):
            s = np.asarray(s)[:width]
            ids[i, :len(s)] = s
            mask[i, int(p):len(s)] = 1
        out[f"{side}_ids"], masks[side] = ids, mask
    both = loss_positions(np.concatenate([masks["chosen"], masks["rejected"]]))  # one count of positions for both
    out["chosen_positions"], out["rejected_positions"] = both[:len(chosen)], both[len(chosen):]
    return out


def score_pairs(logps, a: dict) -> tuple:
    """(chosen, rejected) summed response log-probs of ``pairs_arrays``' pairs by ``logps`` (a
    SummedResponseLogProbs), both sides in one batch as the loss cell scores them; numpy [n] each."""
    n = len(a["chosen_ids"])
    both = logps(Tensor(np.concatenate([a["chosen_ids"], a["rejected_ids"]])),
                 Tensor(np.concatenate([a["chosen_positions"], a["rejected_positions"]]))).asnumpy()
    return both[:n], both[n:]


class DPOPolicy(TrainedNetwork):
    """The policy DPO trains, as a trained network (roles/base.py): its checkpoint part is ``<iter>/policy/`` (an HF
    causal-LM directory with the optimizer beside it). The reference is a second network of the same architecture,
    frozen, with the reference weights and no optimizer (never saved: ``dpo_config.ref_load`` names it)."""

    name = "policy"

    def __init__(self, run, spec, reference: WeightsSpec, dpo):
        super().__init__(run, spec)
        source = self._build("causal_lm")
        self.ref_net = build_net(spec, "causal_lm", self.layout, self.model_config, train=False, init=False)
        if spec.lora is not None and same_weights(reference.path, source):
            share_base(self.ref_net, self.net)  # the frozen base with the adapters off: no second copy
            log.info("reference: the policy's frozen base (%s)", source)
        else:
            log.info("reference weights from %s", load_weights(self.ref_net, reference))
            rename_parameters(self.ref_net, "ref")  # after loading: files name the parameters without the prefix
        for p in self.ref_net.get_parameters():
            p.requires_grad = False
        self.ref_logps = SummedResponseLogProbs(self.ref_net)
        self.ref_logps.set_train(False)
        self.loss_cell = DPOLossCell(self.net, dpo.beta, dpo.loss_type, dpo.label_smoothing)
        self.policy_logps = self.loss_cell.logps  # the held-out pairs' forward (no gradient)
        self._train_with(self.loss_cell)

    def stages(self):
        return [Stage("train_policy", self.net, self.layout, with_optimizer=True)]


class DPOTrainer(OfflineTrainer):
    command, section, prefix, what, loss_key = "dpo", "dpo_config", "dpo", "the policy", "dpo/loss"
    role_name, rows_word = "policy", "pairs"

    def __init__(self, cfg):
        m = cfg.dpo_config
        if m.ref_load is None:  # the starting weights; written into config.yaml, so a resume keeps them
            m.ref_load = m.load
        self._cut = False
        self._ref_eval = None  # the held-out pairs' reference log-probs (the reference never changes)
        super().__init__(cfg)

    def columns(self) -> list:
        d = self.cfg.data
        return [d.chosen_key, d.rejected_key, d.prompt_length_key]

    def data_hint(self) -> str:
        return ("dpo trains on preference pairs with their prompt length (`mindrl preprocess` with handler_name "
                "pairwise writes chosen_ids, rejected_ids and prompt_length)")

    def weights_part(self, load: str, finetune: bool) -> str:
        return "policy"

    def make_role(self, run):
        return DPOPolicy(run, self.spec, WeightsSpec(self.cfg.dpo_config.ref_load, "policy", "dpo_config.ref_load"),
                         self.cfg.dpo_config)

    def _pairs(self, batch, rows) -> dict:
        d, width = self.cfg.data, self.model_config.max_position_embeddings
        chosen = [batch[d.chosen_key][i] for i in rows]
        rejected = [batch[d.rejected_key][i] for i in rows]
        if not self._cut and max(len(s) for s in chosen + rejected) > width:
            self._cut = True
            log.warning("pairs longer than the model's %d positions (max_position_embeddings) are cut to them", width)
        return pairs_arrays(chosen, rejected, [int(batch[d.prompt_length_key][i]) for i in rows], self.pad_id, width,
                            d.pad_to_multiple_of)

    def _reference(self, a: dict) -> tuple:
        return score_pairs(self.role.ref_logps, a)

    def _arrays(self, batch, rows, training: bool = True) -> dict:
        a = self._pairs(batch, rows)
        a["ref_chosen_logps"], a["ref_rejected_logps"] = self._reference(a)
        return a

    def train_step(self, batch, step: int) -> dict:
        out = super().train_step(batch, step)
        return {k[len("dpo/"):] if k[len("dpo/"):] in TRL_METRICS else k: v for k, v in out.items()}

    def line(self, metrics: dict) -> str:
        return (f"loss={metrics['dpo/loss']:.4f}  accuracy={metrics['rewards/accuracies']:.3f}  "
                f"margin={metrics['rewards/margins']:.3f}")

    def postfix(self, metrics: dict) -> dict:
        return {"loss": f"{metrics['dpo/loss']:.3f}", "acc": f"{metrics['rewards/accuracies']:.2f}"}

    # -- held-out pairs ------------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """The loss and TRL's metrics on eval.path's pairs, as ``eval/<name>``; every rank gets the same numbers."""
        held_out, micro, m = self._eval_rows(), self.cfg.train.micro_batch_size, self.cfg.dpo_config
        pairs = len(held_out[self.cfg.data.chosen_key])
        mine = range(pairs)[shard_rows(pairs - pairs % self.layout.dp, self.layout)]
        rows = []
        self.net.set_train(False)
        for s in range(0, len(mine), micro):
            a = self._pairs(held_out, mine[s:s + micro])
            chosen, rejected = score_pairs(self.role.policy_logps, a)
            ref = self._reference(a) if self._ref_eval is None else (None, None)
            rows.append(np.stack([chosen, rejected, *(ref if ref[0] is not None else (chosen * 0,) * 2),
                                  (a["chosen_positions"] > 0).sum(-1), (a["rejected_positions"] > 0).sum(-1)], 1))
        self.net.set_train(True)
        got = self.exchange.from_each(np.concatenate(rows).astype(np.float32), self.layout).astype(np.float64)
        if self._ref_eval is None:
            self._ref_eval = got[:, 2:4].copy()
        pc, pr, (rc, rr), nc, nr = got[:, 0], got[:, 1], self._ref_eval.T, got[:, 4], got[:, 5]
        losses = dpo_losses(pc, pr, rc, rr, nc, nr, m.beta, m.loss_type, m.label_smoothing)
        r_c, r_r = m.beta * (pc - rc), m.beta * (pr - rr)
        return {"eval/dpo/loss": float(losses.mean()), "eval/rewards/chosen": float(r_c.mean()),
                "eval/rewards/rejected": float(r_r.mean()), "eval/rewards/accuracies": float((r_c > r_r).mean()),
                "eval/rewards/margins": float((r_c - r_r).mean()), "eval/logps/chosen": float(pc.mean()),
                "eval/logps/rejected": float(pr.mean()), "eval/num_pairs": int(len(got))}


def cli_main(argv=None) -> int:
    return run_command(DPOTrainer, load_dpo_config, argv,
                       "Direct Preference Optimization of a causal LM on preference pairs against a frozen reference "
                       "(TRL's sigmoid, ipo and hinge losses); see docs/dpo.md")
