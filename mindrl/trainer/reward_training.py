"""`mindrl train-rm`: an outcome reward model from preference pairs, with the Bradley-Terry loss

    loss = -log sigmoid(r(chosen) - r(rejected) - margin)

where ``r`` is a score head on the backbone, read at each sequence's last real token. Held-out pairs give
``rm/accuracy`` (share of pairs ranked right), ``rm/margin_mean``, ``rm/chosen_mean`` and ``rm/rejected_mean``;
the mean and std of all held-out rewards are stored in the saved config.json (OpenRLHF's ``mean`` / ``std``) so
PPO can normalise scores. The output is an HF sequence-classification directory: transformers'
AutoModelForSequenceClassification and mindrl's ``reward_config.load`` both read it.
"""
from __future__ import annotations

import logging
import os
import sys
import time

import numpy as np
import mindspore as ms
from mindspore import nn, ops

from mindrl.trainer.context import bucket

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


class RewardModelTrainer:
    def __init__(self, cfg):
        from mindrl.data.reader import PromptDataset
        from mindrl.data.tokenizer import load_tokenizer
        from mindrl.models.config import load_model_config
        from mindrl.parallel.exchange import Exchange
        from mindrl.parallel.topology import build_topology
        from mindrl.runtime import setup_context
        from mindrl.trainer.roles.base import build_net, load_weights
        from mindrl.trainer.updater import Updater
        self.cfg = cfg
        rm, tr, d = cfg.rm_config, cfg.train, cfg.data
        setup_context(cfg.runtime.mode, cfg.runtime.threads)
        self.topo = build_topology({"train": (rm.tensor_model_parallel_size, None,
                                              "rm_config.tensor_model_parallel_size")})
        self.layout, self.exchange = self.topo.train, Exchange(self.topo.world)
        if tr.global_batch_size % (self.layout.dp * tr.micro_batch_size):
            raise ValueError(f"train.global_batch_size={tr.global_batch_size} must split into data parallel size "
                             f"{self.layout.dp} x train.micro_batch_size {tr.micro_batch_size}")
        self.tokenizer = load_tokenizer(rm.tokenizer_name_or_path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        config = load_model_config(rm.model)
        if rm.compute_dtype:
            config = config.replace(compute_dtype=rm.compute_dtype)
        self.model_config = config
        self.net = build_net(config, "reward", self.layout, seed=cfg.runtime.seed, init=rm.load is None)
        if rm.load is not None:
            log.info("initial weights from %s", load_weights(self.net, rm.load, allow_missing=("score.",)))
        grad_reduce = None
        if self.layout.dp > 1:
            from mindrl.parallel.comm import AllReduceSum
            grad_reduce = AllReduceSum(self.layout.dp_group())
        self.loss_cell = PairwiseLossCell(self.net)
        self.updater = Updater(self.loss_cell, self.net.trainable_params(), rm, grad_reduce,
                               (ms.int32, ms.int32, ms.int32, ms.int32, ms.float32))
        columns = [d.chosen_key, d.rejected_key] + ([d.margin_key] if d.margin_key else [])
        self.dataset = PromptDataset(d.path, batch_size=tr.global_batch_size // self.layout.dp,
                                     dp_rank=self.layout.dp_rank, dp_size=self.layout.dp, seed=d.seed,
                                     shuffle=d.shuffle, columns=columns)
        self.total = tr.train_iters or max(1, tr.epochs * (self.dataset.samples_per_epoch // tr.global_batch_size))
        self._eval = None

    # -- one step ---------------------------------------------------------------------------------
    def _batches(self):
        while True:
            yield from iter(self.dataset)

    def _arrays(self, batch, rows):
        d = self.cfg.data
        chosen = [batch[d.chosen_key][i] for i in rows]
        rejected = [batch[d.rejected_key][i] for i in rows]
        length = bucket(max(len(s) for s in chosen + rejected))
        c_ids, c_mask = pad_right(chosen, length, self.pad_id)
        r_ids, r_mask = pad_right(rejected, length, self.pad_id)
        margin = (np.asarray([float(batch[d.margin_key][i]) for i in rows], np.float32) if d.margin_key
                  else np.zeros(len(rows), np.float32))
        return [c_ids, c_mask, r_ids, r_mask, margin]

    def train_step(self, batch, step: int) -> dict:
        from mindrl.trainer.optim import lr_at
        rm, tr = self.cfg.rm_config, self.cfg.train
        warmup = int(round(rm.lr_warmup_fraction * self.total)) if rm.lr_warmup_fraction else rm.lr_warmup_iters
        lr = lr_at(step, lr=rm.lr, min_lr=rm.min_lr, warmup=warmup, total=self.total, style=rm.lr_decay_style)
        n = len(batch[self.cfg.data.chosen_key])
        acc = np.zeros(len(self.updater.metrics))
        for u0 in range(0, n, tr.micro_batch_size):
            outs = self.updater.micro_step(self._arrays(batch, range(u0, min(n, u0 + tr.micro_batch_size))),
                                           tr.global_batch_size)
            acc += outs[1:]
        if self.topo.world > 1:
            acc = self.exchange.all_sum(acc) / self.layout.tp
        out = {f"rm/{name}": float(v) for (name, _), v in zip(self.updater.metrics, acc)}
        out["rm/grad_norm"] = self.updater.apply(lr)
        out["rm/lr"] = lr
        return out

    # -- held-out pairs ------------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Pairwise accuracy and reward statistics on eval.path; every rank gets the same numbers."""
        from mindspore import Tensor
        from mindrl.parallel.topology import shard_rows
        ev, d, tr = self.cfg.eval, self.cfg.data, self.cfg.train
        if self._eval is None:
            import mindspore.dataset as mds
            columns = [d.chosen_key, d.rejected_key] + ([d.margin_key] if d.margin_key else [])
            rows = list(mds.MindDataset(ev.path, columns_list=columns, shuffle=False).create_dict_iterator(
                output_numpy=True, num_epochs=1))[:ev.num_samples]
            self._eval = {k: [np.asarray(r[k]) for r in rows] for k in columns}
        pairs = len(self._eval[d.chosen_key])
        mine = range(pairs)[shard_rows(pairs - pairs % self.layout.dp, self.layout)]
        scores = []
        self.net.set_train(False)
        for s in range(0, len(mine), tr.micro_batch_size):
            c_ids, c_mask, r_ids, r_mask, _ = self._arrays(self._eval, mine[s:s + tr.micro_batch_size])
            rc = self.net(Tensor(c_ids), Tensor(c_mask)).asnumpy()
            rr = self.net(Tensor(r_ids), Tensor(r_mask)).asnumpy()
            scores.append(np.stack([rc, rr], 1))
        self.net.set_train(True)
        both = self.exchange.from_each(np.concatenate(scores).astype(np.float32), self.layout).astype(np.float64)
        gap = both[:, 0] - both[:, 1]
        return {"rm/accuracy": float((gap > 0).mean()), "rm/margin_mean": float(gap.mean()),
                "rm/chosen_mean": float(both[:, 0].mean()), "rm/rejected_mean": float(both[:, 1].mean()),
                "rm/reward_mean": float(both.mean()), "rm/reward_std": float(both.std(ddof=1)),
                "rm/num_pairs": int(len(both))}

    # -- the run ------------------------------------------------------------------------------------------
    def fit(self) -> dict:
        from mindrl.io import write_text
        from mindrl.trainer.metrics import MetricsLogger
        from mindrl.trainer.run_dir import set_up_run_dir
        cfg, main = self.cfg, self.topo.is_main
        lg, ev = cfg.logging, cfg.eval
        set_up_run_dir(lg, main, self.exchange, checkpoints=cfg.rm_config.save)
        logger = MetricsLogger(lg.log_dir, lg.jsonl, lg.tensorboard, enabled=main)
        if main:
            write_text(os.path.join(lg.log_dir, "config.yaml"), _to_yaml(cfg))
        summary = {}
        if ev.path:
            summary["eval_before"] = self.evaluate()
            logger.log(0, summary["eval_before"])
            _say(main, "eval before training: " + _fmt(summary["eval_before"]))
        from mindrl.trainer.metrics import progress_bar
        bar = progress_bar(self.total, "train-rm", lg.progress_bar and main)
        batches, started = self._batches(), time.perf_counter()
        for step in range(self.total):
            metrics = self.train_step(next(batches), step)
            done = step + 1
            if ev.path and ev.interval and done % ev.interval == 0 and done < self.total:
                metrics.update(self.evaluate())
            logger.log(done, metrics)
            bar.update(1)
            bar.set_postfix({"loss": f"{metrics['rm/loss']:.3f}", "acc": f"{metrics['rm/accuracy']:.2f}"})
            if main and (done % lg.log_interval == 0 or done == self.total):
                bar.write(f"step {done}/{self.total}  loss={metrics['rm/loss']:.4f}  "
                          f"accuracy={metrics['rm/accuracy']:.3f}  ({time.perf_counter() - started:.0f} s)")
            summary["last"] = metrics
        bar.close()
        if ev.path:
            summary["eval_after"] = self.evaluate()
            logger.log(self.total, summary["eval_after"])
            _say(main, "eval after training: " + _fmt(summary["eval_after"]))
        self.save(summary.get("eval_after"))
        logger.close()
        return summary

    def save(self, stats=None) -> str:
        """Gather the weights and write the HF sequence-classification directory (main rank), atomically."""
        from mindrl.io import atomic_path
        from mindrl.trainer.roles.base import export_hf, gathered_state
        from mindrl.trainer.roles.critic import value_model_hf_config
        rm = self.cfg.rm_config
        full = gathered_state(self.net, self.layout)
        extra = {"normalize_reward": False}
        if stats:  # OpenRLHF's keys: PPO's reward_config.normalize reads them
            extra.update(mean=stats["rm/reward_mean"], std=max(stats["rm/reward_std"], 1e-8))
        if self.topo.is_main:
            with atomic_path(rm.save, directory=True) as tmp:
                export_hf(full, self.model_config, tmp, value_model_hf_config(self.model_config, self.pad_id, extra),
                          rm.tokenizer_name_or_path if os.path.isdir(rm.tokenizer_name_or_path) else
                          os.path.dirname(rm.tokenizer_name_or_path))
            _say(True, f"saved the reward model to {rm.save}")
        self.exchange.barrier()
        return rm.save


def _say(main: bool, text: str) -> None:
    if main:
        print(text, flush=True)


def _fmt(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def _to_yaml(cfg) -> str:
    from mindrl.config.loader import dump_yaml
    return dump_yaml(cfg.to_dict())


def cli_main(argv=None) -> int:
    import argparse
    from mindrl.config import ConfigError
    from mindrl.config.reward_training import load_reward_training_config
    ap = argparse.ArgumentParser(prog="mindrl train-rm", description="train an outcome reward model on preference "
                                 "pairs (Bradley-Terry); see docs/reward_model.md")
    ap.add_argument("--config", required=True, help="reward-model training yaml")
    ap.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override any config key")
    args = ap.parse_args(argv)
    try:
        cfg = load_reward_training_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"mindrl: config error:\n{err}", file=sys.stderr)
        return 2
    from mindrl.trainer.cli import _setup_logging
    _setup_logging()
    RewardModelTrainer(cfg).fit()
    return 0
