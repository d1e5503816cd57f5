"""GRPO (and DAPO / Dr.GRPO) training loop: one controller per process.

Each step reads like the algorithm:
    prompts -> rollout (n samples each) -> rule rewards -> group advantages
    -> [old log-probs] -> [reference log-probs] -> clipped policy update -> weights to the rollout model
and logs MindSpeed-RL's metrics. The stages live in their own packages; this file only orders and times them.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import Optional

import numpy as np

from mindrl.config import TrainConfig
from mindrl.trainer.metrics import MetricsLogger, Timers, stats, summary_line, throughput

log = logging.getLogger("mindrl.train")


def _seed(*parts) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def _bucket(n: int, minimum: int = 8) -> int:
    b = minimum
    while b < n:
        b *= 2
    return b


class GRPOTrainer:
    def __init__(self, cfg: TrainConfig):
        import time
        started = time.perf_counter()
        from mindrl.runtime import setup_context
        from mindrl.trainer.distributed import Exchange, build_topology
        self.cfg = cfg
        rt, actor, rl, gen = cfg.runtime, cfg.actor_config, cfg.rl_config, cfg.generate_config
        # Fixed graph shapes and a fixed compile order whenever graphs may be cached or exported.
        self.static_shapes = bool(rt.enable_compile_cache or rt.only_save_strategy)
        if rt.enable_compile_cache:
            enable_compile_cache(cfg)
        setup_context(rt.mode, rt.threads)
        self.topo = build_topology(cfg)
        self.exchange = Exchange(self.topo)
        from mindrl.data.tokenizer import load_tokenizer
        from mindrl.models.config import load_model_config
        from mindrl.rewards.computer import RewardComputer
        from mindrl.rollout.generator import Generator
        from mindrl.rollout.sampling import SamplingParams
        from mindrl.trainer.actor import ActorUpdater

        # Rewards first: a bad verifier name fails before anything compiles.
        self.rewards = RewardComputer(rl.verifier_function, rl.verifier_weight, rl.custom_reward_file,
                                      math_timeout=rl.verifier_timeout)
        self.tokenizer = load_tokenizer(actor.tokenizer_name_or_path)
        self.model_config = load_model_config(actor.model)
        if actor.compute_dtype:
            self.model_config = self.model_config.replace(compute_dtype=actor.compute_dtype)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        stops = list(gen.stop_token_ids)
        if self.tokenizer.eos_token_id is not None:
            stops.append(self.tokenizer.eos_token_id)
        stops += self.model_config.eos_token_ids
        self.sampling = SamplingParams(n=rl.n_samples_per_prompt, max_tokens=gen.max_tokens, min_tokens=gen.min_tokens,
                                       do_sample=True, temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p,
                                       repetition_penalty=gen.repetition_penalty,
                                       stop_token_ids=sorted(set(stops))).validate()

        # ppo_model_train and ppo_model_infer, each in its own layout. When the layouts are equal they are
        # one network and the swap after each update costs nothing.
        from mindrl.parallel.reshard import Resharder
        self.policy = self._build_policy()
        self.train_net = self.policy.net
        self.infer_net = self._build_infer_net()
        self.resharder = Resharder(self.train_net, self.infer_net, self.topo.train.tp_context(),
                                   self.topo.infer.tp_context())
        self.ref = self._build_ref()
        rows = rl.global_batch_size * rl.n_samples_per_prompt // self.topo.infer.dp
        self.generator = Generator(self.infer_net, max_batch=gen.micro_batch_size or rows,
                                   max_prompt_len=gen.max_prompt_length, max_new_tokens=gen.max_tokens,
                                   pad_id=self.pad_id, static_prompt_shape=self.static_shapes)
        grad_reduce = None
        if self.topo.train.dp > 1:
            from mindrl.parallel.comm import AllReduceSum
            grad_reduce = AllReduceSum(self.topo.train.dp_group())
        self.updater = ActorUpdater(self.train_net, rl, actor, gen.temperature, grad_reduce, max_tokens=gen.max_tokens)
        self.dataset = self._build_dataset()
        self.step = 0
        self.draws = 0
        self._resume()
        self.resharder()  # the infer model starts from the loaded (or resumed) train weights
        self.logger = MetricsLogger(cfg.logging.log_dir, cfg.logging.jsonl, cfg.logging.tensorboard,
                                    enabled=self.topo.is_main and not rt.only_save_strategy)
        self._eval_set = None
        if self.static_shapes:
            self.compile_all()
        if self.topo.is_main:
            log.info("start-up took %.2f s (build, load, %s)", time.perf_counter() - started,
                     "compile all graphs" if self.static_shapes else "graphs compile on first use")

    # -- setup ------------------------------------------------------------------------------------
    def _build_policy(self):
        from mindrl.models.lm import PretrainedLM, build_network
        from mindrl.models.weights import load_into
        from mindrl.trainer import checkpoint as ck
        actor = self.cfg.actor_config
        net = build_network(self.model_config, "causal_lm", tp=self.topo.train.tp_context(), seed=self.cfg.runtime.seed,
                            init=actor.load is None)
        if actor.load:
            path = ck.resolve(actor.load)
            load_into(net, path)
            log.info("policy weights loaded from %s", path)
        return PretrainedLM(net, self.model_config, actor.load)

    def _build_infer_net(self):
        """The rollout model: the train network itself when layouts match, else a copy in the infer layout
        whose weights come from the train model by reshard (no checkpoint is read twice)."""
        from mindrl.models.lm import build_network
        from mindrl.parallel.reshard import rename_parameters
        if self.topo.infer.tp == self.topo.train.tp:
            return self.train_net
        net = build_network(self.model_config, "causal_lm", tp=self.topo.infer.tp_context(), init=False)
        rename_parameters(net, "infer")
        net.set_train(False)
        return net

    def _build_ref(self):
        from mindrl.models.lm import PretrainedLM, build_network
        from mindrl.models.weights import load_into
        from mindrl.trainer import checkpoint as ck
        rl = self.cfg.rl_config
        if not (rl.use_kl_in_loss and rl.kl_coef > 0):
            return None
        from mindrl.parallel.reshard import rename_parameters
        path = self.cfg.ref.ref_model_load_path or self.cfg.actor_config.load
        tp = self.topo.train.tp_context()
        if path is None:
            net = build_network(self.model_config, "causal_lm", tp=tp, seed=self.cfg.runtime.seed)  # = policy init
        else:
            net = build_network(self.model_config, "causal_lm", tp=tp, init=False)
            load_into(net, ck.resolve(path))
        rename_parameters(net, "ref")
        net.set_train(False)
        from mindrl.trainer.actor import ResponseLogProbs
        self.ref_scorer = ResponseLogProbs(net, self.cfg.generate_config.temperature)
        return PretrainedLM(net, self.model_config, path)

    def _build_dataset(self):
        from mindrl.data.reader import PromptDataset
        d = self.cfg.data
        infer = self.topo.infer  # each rollout replica reads its own share of every global batch
        return PromptDataset(d.path, batch_size=self.cfg.rl_config.global_batch_size // infer.dp, dp_rank=infer.dp_rank,
                             dp_size=infer.dp, seed=d.seed, shuffle=d.shuffle, columns=[d.prompt_key, d.label_key])

    def _resume(self):
        from mindrl.trainer import checkpoint as ck
        actor = self.cfg.actor_config
        if actor.finetune or not actor.load:
            return
        directory = ck.resolve(actor.load)
        state = ck.load_trainer_state(directory)
        self.step = int(state["step"])
        self.draws = int(state.get("draws", 0))
        self.dataset.load_state_dict(state["data"])
        if not actor.no_load_optim:
            self.updater.load_optimizer_state(self._shard_optimizer_state(ck.load_optimizer_state(directory)),
                                              directory)
        if not actor.no_load_rng and state.get("rng", {}).get("seed") is not None:
            self.cfg.runtime.seed = int(state["rng"]["seed"])
        log.info("resumed from %s at step %d (%d samples consumed)", directory, self.step,
                 self.dataset.consumed_samples)

    # -- data -------------------------------------------------------------------------------------
    def _next_prompts(self):
        d = self.cfg.data
        while True:
            if getattr(self, "_it", None) is None:
                self._it = iter(self.dataset)
            try:
                batch = next(self._it)
                break
            except StopIteration:
                self._it = None  # next epoch
        prompts = [list(map(int, p)) for p in batch[d.prompt_key]]
        too_long = [i for i, p in enumerate(prompts) if len(p) > self.cfg.generate_config.max_prompt_length]
        if too_long:
            i = too_long[0]
            raise ValueError(f"{d.path}: row {int(batch['index'][i])} has a {len(prompts[i])}-token prompt, longer "
                             f"than generate_config.max_prompt_length={self.cfg.generate_config.max_prompt_length}")
        return prompts, [str(x) for x in batch[d.label_key]]

    # -- one step ---------------------------------------------------------------------------------
    def _rollout_and_score(self, timers):
        """Rollout + rewards, with DAPO dynamic sampling when enabled. Returns a dict of numpy arrays."""
        from mindrl.algorithms.dapo import dynamic_sampling_keep_mask, overlong_penalty
        rl, n = self.cfg.rl_config, self.cfg.rl_config.n_samples_per_prompt
        want = rl.global_batch_size // self.topo.infer.dp
        kept, spare, draws = [], [], 0
        while True:
            prompts, labels = self._next_prompts()
            with timers("rollout"):
                # replicas draw different samples; the tp ranks of one replica draw the same
                seed = _seed(self.cfg.runtime.seed, self.draws, self.topo.infer.dp_rank)
                out = self.generator.generate(prompts, self.sampling, seed=seed)
            self.draws += 1
            draws += 1
            texts = [self.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
            seq_labels = [labels[i] for i in out.prompt_index]
            with timers("rule_reward"):
                rew = self.rewards(texts, seq_labels)
            scores = rew.scores.astype(np.float64)
            if rl.overlong_buffer_len > 0:
                scores = scores + overlong_penalty(out.lengths, self.sampling.max_tokens,
                                                   rl.overlong_buffer_len, rl.overlong_penalty_factor)
            groups = [dict(prompt=prompts[g], tokens=out.tokens[g * n:(g + 1) * n],
                           log_probs=out.log_probs[g * n:(g + 1) * n], finished=out.finished[g * n:(g + 1) * n],
                           scores=scores[g * n:(g + 1) * n], rewards=rew.scores[g * n:(g + 1) * n],
                           per={k: v[g * n:(g + 1) * n] for k, v in rew.per_verifier.items()})
                      for g in range(len(prompts))]
            if not rl.dynamic_sampling:
                kept = groups
                break
            keep = dynamic_sampling_keep_mask(scores, n)
            for g, grp in enumerate(groups):
                (kept if keep[g * n] else spare).append(grp)
            if len(kept) >= want or draws >= rl.max_num_gen_batches:
                break
        filled = max(0, want - len(kept))
        kept = (kept + spare[:filled])[:want]  # zero-variance groups only fill a short batch: advantage 0
        batch = {k: [x for grp in kept for x in grp[k]] for k in ("tokens", "log_probs", "finished")}
        batch["prompts"] = [grp["prompt"] for grp in kept for _ in range(n)]
        batch["scores"] = np.concatenate([grp["scores"] for grp in kept])
        batch["rewards"] = np.concatenate([grp["rewards"] for grp in kept])
        batch["per"] = {k: np.concatenate([grp["per"][k] for grp in kept]) for k in kept[0]["per"]}
        batch["dapo"] = {"dapo/gen_batches": draws, "dapo/kept_groups": len(kept) - filled, "dapo/filled_groups": filled}
        if self.topo.world > 1:  # every rank gets the global batch, in rollout-replica order
            from mindrl.trainer.distributed import pack_rollout, unpack_rollout
            gen = self.cfg.generate_config
            mat = self.exchange.from_each(pack_rollout(batch, gen.max_prompt_length, gen.max_tokens), self.topo.infer)
            dapo = {k: float(v) for k, v in zip(batch["dapo"], self.exchange.all_sum(
                np.array(list(batch["dapo"].values()), np.float32)) / self.topo.infer.tp)}
            batch = unpack_rollout(mat, list(batch["per"]), gen.max_prompt_length, gen.max_tokens, dapo)
        return batch

    def _pack(self, batch):
        """Prompts left-padded to P, responses right-padded to R: input_ids [N, P+R] and masks."""
        prompts, tokens = batch["prompts"], batch["tokens"]
        gen = self.cfg.generate_config
        if self.static_shapes:
            p, r = _bucket(gen.max_prompt_length), _bucket(gen.max_tokens, 4)
        else:
            p = _bucket(max(len(x) for x in prompts))
            r = _bucket(max(len(t) for t in tokens), 4)
        n = len(tokens)
        ids = np.full((n, p + r), self.pad_id, np.int32)
        attn = np.zeros((n, p + r), np.int32)
        resp = np.zeros((n, r), np.float32)
        old = np.zeros((n, r), np.float32)
        for i, (pr, t, lp) in enumerate(zip(prompts, tokens, batch["log_probs"])):
            ids[i, p - len(pr):p] = pr
            attn[i, p - len(pr):p + len(t)] = 1
            ids[i, p:p + len(t)] = t
            resp[i, :len(t)] = 1
            old[i, :len(t)] = lp
        return ids, attn, resp, old

    def _score(self, scorer, ids, attn, resp):
        """Log-probs of the response tokens; each train replica scores its share, then all exchange."""
        from mindspore import Tensor
        mb = self.cfg.rl_config.micro_batch_size
        layout = self.topo.train
        share = len(ids) // layout.dp
        lo = layout.dp_rank * share
        out = []
        for s in range(lo, lo + share, mb):
            lp, _ = scorer(Tensor(ids[s:s + mb]), Tensor(attn[s:s + mb]), Tensor(resp[s:s + mb]))
            out.append(lp.asnumpy())
        return self.exchange.from_each(np.concatenate(out), layout)

    def train_step(self) -> dict:
        from mindrl.algorithms.advantages import grpo_advantages
        from mindrl.algorithms.denominators import loss_denominator
        from mindrl.trainer.optim import lr_at
        rl, actor, gen = self.cfg.rl_config, self.cfg.actor_config, self.cfg.generate_config
        n = rl.n_samples_per_prompt
        timers = Timers()
        metrics = {}
        with timers("all"):
            batch = self._rollout_and_score(timers)
            adv = grpo_advantages(batch["scores"], n, norm_adv_by_std=rl.norm_adv_by_std)
            ids, attn, resp, old = self._pack(batch)
            finished = np.asarray(batch["finished"], bool)
            if rl.mask_truncated_completions:
                resp[~finished] = 0.0
            updates_per_rollout = rl.ppo_epochs * (len(ids) // rl.mini_batch_size)
            if updates_per_rollout > 1:  # the rollout's log-probs are the old policy only for a single update
                with timers("old_log_p"):
                    old = self._score(self.updater.loss_cell.scorer, ids, attn, resp)
            ref = np.zeros_like(old)
            if self.ref is not None:
                with timers("reference_model"):
                    ref = self._score(self.ref_scorer, ids, attn, resp)
            adv_tok = (adv[:, None] * resp).astype(np.float32)
            lr = lr_at(self.step, lr=actor.lr, min_lr=actor.min_lr, warmup=self._warmup(), total=rl.train_iters,
                       style=actor.lr_decay_style)
            with timers("update"):
                upd = self._update(ids, attn, resp, old, adv_tok, ref, lr, loss_denominator)
            with timers("reshard_to_infer"):
                self.resharder()
            timers.values.setdefault("timing/reshard_to_train", 0.0)
        metrics.update(timers.values)
        for key in ("timing/old_log_p", "timing/reference_model"):
            metrics.setdefault(key, 0.0)
        lengths = np.array([len(t) for t in batch["tokens"]], np.float64)
        plens = np.array([len(p) for p in batch["prompts"]], np.float64)
        metrics.update(stats("response_length", lengths))
        metrics["response_length/clip_ratio"] = float(np.mean(~finished & (lengths >= gen.max_tokens)))
        metrics.update(stats("prompt_length", plens))
        metrics["grpo/score/mean"] = float(batch["scores"].mean())
        metrics["grpo/rewards/mean"] = float(batch["rewards"].mean())
        for name, vals in batch["per"].items():
            metrics[f"grpo/rewards/{name}/mean"] = float(np.mean(vals))
        metrics["grpo/advantages/mean"] = float(adv.mean())
        metrics.update(upd)
        metrics["actor/lr"] = lr
        metrics.update(throughput(metrics, rl.global_batch_size, n, world_size=self.topo.world))
        if rl.dynamic_sampling:
            metrics.update(batch["dapo"])
        self.step += 1
        return metrics

    def _warmup(self):
        a = self.cfg.actor_config
        if a.lr_warmup_fraction:
            return int(round(a.lr_warmup_fraction * self.cfg.rl_config.train_iters))
        return a.lr_warmup_iters

    def _update(self, ids, attn, resp, old, adv, ref, lr, loss_denominator):
        rl = self.cfg.rl_config
        mini, micro = rl.mini_batch_size, rl.micro_batch_size
        dp, dp_rank = self.topo.train.dp, self.topo.train.dp_rank
        sums = {k: [] for k in ("pg_loss", "kl_loss", "entropy", "pg_clipfrac", "ppo_kl", "grad_norm")}
        for epoch in range(rl.ppo_epochs):
            order = np.random.default_rng(_seed(self.cfg.runtime.seed, self.step, epoch)).permutation(len(ids))
            if rl.ppo_epochs == 1 and len(ids) == mini:
                order = np.arange(len(ids))
            for m0 in range(0, len(ids), mini):
                rows = order[m0:m0 + mini]
                # the whole mini-batch's denominator on every replica: summed gradients are exact
                denom = loss_denominator(resp[rows], rl.loss_agg_mode)
                acc = np.zeros(6)
                share = len(rows) // dp
                mine = rows[dp_rank * share:(dp_rank + 1) * share]
                for u0 in range(0, len(mine), micro):
                    r = mine[u0:u0 + micro]
                    loss, pg, clipfrac, ppo_kl, kl, ent = self.updater.micro_step(ids[r], attn[r], resp[r], old[r],
                                                                                  adv[r], ref[r], denom)
                    w = resp[r].sum() / max(resp[rows].sum(), 1.0)  # token share, for the per-token means
                    acc += [pg, kl, ent, clipfrac * w, ppo_kl * w, 0.0]
                if dp > 1:  # each replica holds a partial sum of the mini-batch's means
                    acc = self.exchange.all_sum(acc) / self.topo.train.tp
                sums["pg_loss"].append(acc[0])
                sums["kl_loss"].append(acc[1])
                sums["entropy"].append(acc[2])
                sums["pg_clipfrac"].append(acc[3])
                sums["ppo_kl"].append(acc[4])
                sums["grad_norm"].append(self.updater.apply(lr))
        return {f"actor/{k}": float(np.mean(v)) for k, v in sums.items()}

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Greedy decoding on the held-out set; mean of each verifier."""
        from mindrl.rollout.sampling import SamplingParams
        ev = self.cfg.eval
        if not ev.path:
            return {}
        if self._eval_set is None:
            self._eval_set = load_eval_set(ev.path, self.cfg.data.prompt_key, self.cfg.data.label_key, ev.num_samples)
        prompts, labels = self._eval_set
        params = SamplingParams(n=1, max_tokens=min(ev.max_tokens, self.generator.max_new_tokens), do_sample=False,
                                stop_token_ids=self.sampling.stop_token_ids)
        out = self.generator.generate(prompts, params, seed=0)
        texts = [self.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
        rew = self.rewards(texts, labels)
        res = {"eval/score/mean": float(rew.scores.mean()), "eval/num_samples": len(prompts)}
        for name, vals in rew.per_verifier.items():
            res[f"eval/{name}/mean"] = float(np.mean(vals))
        return res

    # -- the run ----------------------------------------------------------------------------------
    def fit(self) -> dict:
        from tqdm import tqdm
        rl, actor, lg, ev = self.cfg.rl_config, self.cfg.actor_config, self.cfg.logging, self.cfg.eval
        if self.topo.is_main:
            os.makedirs(lg.log_dir, exist_ok=True)
            with open(os.path.join(lg.log_dir, "config.yaml"), "w") as fh:
                fh.write(self.cfg.to_yaml())
        summary = {}
        from mindrl.trainer import checkpoint as ck
        tracker = os.path.join(actor.save or "", ck.TRACKER)
        if actor.save and actor.finetune and os.path.exists(tracker) and self.topo.is_main:
            log.warning("%s already holds checkpoints of another run (latest: %s); this run's are added beside "
                        "them and `load` of this directory will pick the newest written", actor.save,
                        open(tracker).read().strip())
        if ev.path:
            summary["eval_before"] = self.evaluate()
            self.logger.log(self.step, summary["eval_before"])
            if self.topo.is_main:
                print(f"eval before training (step {self.step}): " + _fmt(summary["eval_before"]), flush=True)
        main = self.topo.is_main
        bar = tqdm(total=rl.train_iters, initial=self.step, desc="grpo", disable=not (lg.progress_bar and main),
                   file=sys.stderr, dynamic_ncols=True)
        while self.step < rl.train_iters:
            metrics = self.train_step()
            if ev.path and ev.interval and self.step % ev.interval == 0 and self.step < rl.train_iters:
                metrics.update(self.evaluate())
            self.logger.log(self.step, metrics)
            bar.update(1)
            bar.set_postfix({"score": f"{metrics['grpo/score/mean']:.3f}", "tps": f"{metrics['e2e_tps']:.0f}"})
            if main and lg.log_interval and self.step % lg.log_interval == 0:
                bar.write(summary_line(self.step, metrics))
            if actor.save and actor.save_interval and self.step % actor.save_interval == 0:
                self.save()
            summary["last"] = metrics
        bar.close()
        if actor.save and (not actor.save_interval or self.step % actor.save_interval):
            self.save()
        if ev.path:
            summary["eval_after"] = self.evaluate()
            self.logger.log(self.step, summary["eval_after"])
            if self.topo.is_main:
                print(f"eval after training (step {self.step}): " + _fmt(summary["eval_after"]), flush=True)
        self.logger.close()
        self.rewards.close()
        return summary

    # -- checkpoints --------------------------------------------------------------------------------
    def _axes(self, net):
        from mindrl.parallel.layout import split_axes
        return split_axes(net)

    def _optimizer_axes(self):
        """(stored split axis, transposed) of every optimizer tensor: a moment is laid out like its parameter."""
        from mindrl.parallel.layout import transposed_names
        axes, trans = self._axes(self.train_net), transposed_names(self.train_net)
        out = {}
        for p in self.updater.optimizer.state_parameters():
            base = p.name.split(".", 1)[1] if p.name.startswith(("adam_m.", "adam_v.")) else None
            out[p.name] = (axes.get(base), base in trans) if base else (None, False)
        return out

    def _full_optimizer_state(self):
        """Every optimizer tensor, gathered over tp, in the external (HF) orientation."""
        from mindrl.parallel.layout import to_external
        from mindrl.parallel.reshard import gather_full_state
        named = {p.name: p for p in self.updater.optimizer.state_parameters()}
        spec = self._optimizer_axes()
        full = gather_full_state(named, {k: a for k, (a, _) in spec.items()}, self.topo.train.tp_context())
        return {k: to_external(v, spec[k][1]) for k, v in full.items()}

    def _shard_optimizer_state(self, full: dict) -> dict:
        from mindrl.parallel.layout import take_shard, to_internal
        tp = self.topo.train.tp_context()
        spec = self._optimizer_axes()
        return {k: take_shard(to_internal(v, spec[k][1]), spec[k][0], tp.size, tp.rank) if k in spec else v
                for k, v in full.items()}

    def save(self) -> str:
        """Rank 0 writes the gathered (full) policy and optimizer; every rank writes its own shards and the
        strategy file, so MindSpore's transform_checkpoints can also merge or re-split them offline."""
        from mindrl.models.lm import PretrainedLM
        from mindrl.parallel.reshard import gather_full_state
        from mindrl.parallel.strategy import save_rank_checkpoint
        from mindrl.trainer import checkpoint as ck
        state = {"step": self.step, "draws": self.draws, "data": self.dataset.state_dict(),
                 "rng": {"seed": self.cfg.runtime.seed, "sampler": "numpy PCG64 seeded from (seed, draw, replica)"},
                 "layout": {"train": [self.topo.train.dp, self.topo.train.tp],
                            "infer": [self.topo.infer.dp, self.topo.infer.tp]},
                 "config_fingerprint": self.cfg.fingerprint()}
        tok_dir = self.cfg.actor_config.tokenizer_name_or_path
        tok_dir = tok_dir if os.path.isdir(tok_dir) else os.path.dirname(tok_dir)
        from mindrl.parallel.layout import to_external, transposed_names
        root = self.cfg.actor_config.save
        tp = self.topo.train.tp_context()
        params = dict(self.train_net.parameters_and_names())
        trans = transposed_names(self.train_net)
        full = gather_full_state(params, self._axes(self.train_net), tp)
        full = {n: to_external(v, n in trans) for n, v in full.items()}
        optim = self._full_optimizer_state()
        shards = None
        if self.topo.world > 1:  # this rank's shards, in the orientation the strategy file describes
            shards = {name: to_external(p.asnumpy(), name in trans) for name, p in params.items()}
            spec = self._optimizer_axes()
            shards.update({p.name: to_external(p.asnumpy(), spec[p.name][1])
                           for p in self.updater.optimizer.state_parameters()})
        path = ck.iter_dir(root, self.step)
        if self.topo.is_main:
            holder = _StateDictModel(full, self.model_config)
            path = ck.save_checkpoint(root, self.step, holder, optim, state, self.cfg.actor_config.keep_last,
                                      tokenizer_dir=tok_dir, finalize=self.topo.world == 1)
        self.exchange.barrier()
        if shards is not None:  # per-rank MindSpore checkpoints, then the main rank seals the directory
            save_rank_checkpoint(os.path.join(ck.pending_dir(root, self.step), "rank_checkpoints"),
                                 self.topo.rank, shards)
            self.write_strategy(os.path.join(ck.pending_dir(root, self.step), "strategy"), models=("train_policy",))
            self.exchange.barrier()
            if self.topo.is_main:
                ck.finalize(root, self.step, self.cfg.actor_config.keep_last)
            self.exchange.barrier()
        log.info("saved checkpoint %s", path)
        return path

    # -- graphs and strategy files -------------------------------------------------------------------
    def _stage_models(self):
        """(stage_model name, network, layout) for every model this run builds, in a fixed order."""
        out = [("infer_policy", self.infer_net, self.topo.infer), ("train_policy", self.train_net, self.topo.train)]
        if self.ref is not None:
            out.append(("train_ref", self.ref.net, self.topo.train))
        return out

    def write_strategy(self, root: str, models=None):
        """MindSpore strategy JSON per rank: ``<root>/<stage>_<model>_strategy/strategy_<rank>.json``."""
        from mindrl.parallel.layout import external_axis, external_shape, full_shape, transposed_names
        from mindrl.parallel.strategy import write_strategy_files
        written = []
        for name, net, layout in self._stage_models():
            if models and name not in models:
                continue
            axes, trans = self._axes(net), transposed_names(net)
            tp = layout.tp_context()
            spec = {n: (external_shape(full_shape(p.shape, axes[n], tp.size), n in trans),
                        external_axis(axes[n], n in trans)) for n, p in net.parameters_and_names()}
            directory = os.path.join(root, f"{name}_strategy")
            if self.topo.is_main:  # one layout for all ranks: the main rank writes every rank's file
                write_strategy_files(directory, spec, layout.dp, layout.tp, self.topo.world,
                                     include_optimizer=name == "train_policy")
            written.append(directory)
        return written

    def compile_all(self):
        """Compile every graph of the run in a fixed order (the compile cache matches entries by order)."""
        from mindspore import Tensor
        rl, gen = self.cfg.rl_config, self.cfg.generate_config
        for bucket in self.generator.decode_buckets:  # prefill, every decode and reorder bucket
            self.generator.warmup(bucket)
        p, r = _bucket(gen.max_prompt_length), _bucket(gen.max_tokens, 4)
        mb = rl.micro_batch_size
        ids = np.full((mb, p + r), self.pad_id, np.int32)
        attn = np.ones_like(ids)
        zeros = np.zeros((mb, r), np.float32)
        args = (Tensor(ids), Tensor(attn), Tensor(zeros), Tensor(zeros), Tensor(zeros), Tensor(zeros),
                Tensor(np.float32(1.0)))
        self.updater.accumulate.compile(*args)
        self.updater.apply_cell.compile(Tensor(np.float32(0.0)))
        self.updater.loss_cell.scorer.compile(*args[:3])
        if self.ref is not None:
            self.ref_scorer.compile(*args[:3])


class _StateDictModel:
    """Adapter so checkpoint.save_checkpoint can export gathered numpy weights as an HF directory."""

    def __init__(self, tensors, config):
        self.tensors, self.config = tensors, config

    def save_pretrained(self, directory, tokenizer_dir=None):
        import json as _json
        from mindrl.models.safetensors_io import save_sharded
        from mindrl.models.weights import copy_tokenizer_files
        tensors = dict(self.tensors)
        if self.config.tie_word_embeddings:
            tensors.pop("lm_head.weight", None)
        os.makedirs(directory, exist_ok=True)
        save_sharded(tensors, directory)
        with open(os.path.join(directory, "config.json"), "w") as fh:
            _json.dump(self.config.to_hf_dict(), fh, indent=2)
        copy_tokenizer_files(tokenizer_dir, directory)


def enable_compile_cache(cfg):
    """Turn on MindSpore's compile cache in a directory keyed by everything that shapes the graphs.

    Measured traps: a cache built for other shapes or another config is silently reused (NaN or the wrong
    graph) and entries are matched by compile order. So the key covers the model config, layouts, batch and
    length settings, world size and rank, mode, and the mindrl and mindspore versions; compile_all() keeps the
    order fixed.
    """
    import hashlib
    import mindspore
    from mindrl import __version__
    from mindrl.models.config import load_model_config
    keyed = {
        "model": load_model_config(cfg.actor_config.model).to_hf_dict(),
        "fingerprint": cfg.fingerprint("rl_config", "generate_config", "actor_config.tensor_model_parallel_size",
                                       "actor_config.compute_dtype", "runtime.mode"),
        "world": os.environ.get("MS_WORKER_NUM", "1"), "rank": os.environ.get("RANK_ID", "0"),
        "mindrl": __version__, "mindspore": mindspore.__version__, "source": _source_digest(),
    }
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = os.path.abspath(os.path.join(cfg.runtime.compile_cache_path, key))
    os.makedirs(path, exist_ok=True)
    os.environ["MS_COMPILER_CACHE_ENABLE"] = "1"
    os.environ["MS_COMPILER_CACHE_PATH"] = path
    return path


def _source_digest() -> str:
    """Hash of mindrl's own source: a code change must not reuse graphs compiled from older code."""
    import hashlib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


def _fmt(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def load_eval_set(path: str, prompt_key: str, label_key: str, limit: Optional[int] = None):
    """(prompts, labels) from a MindRecord written by `mindrl preprocess`."""
    import mindspore.dataset as ds
    data = ds.MindDataset(path, columns_list=[prompt_key, label_key], shuffle=False)
    prompts, labels = [], []
    for row in data.create_dict_iterator(output_numpy=True, num_epochs=1):
        prompts.append([int(x) for x in row[prompt_key]])
        lab = row[label_key]
        labels.append(lab.item().decode() if isinstance(lab.item(), bytes) else str(lab.item()))
        if limit and len(prompts) >= limit:
            break
    return prompts, labels
