"""Run under msrun by tests/test_parallel.py. Rank 0 writes its findings as JSON to argv[2].

    parallel_worker.py layers <hf_dir> <out.json>     TP=2 vs TP=1: logits, log-probs, gradients, reshard
    parallel_worker.py grpo <out.json> <config> [overrides...]   one mindrl training run

With a reward model, every rank also writes <out.json>.rank<r>.json: how many rows it passed through the reward
model, its layout, and the step's rows (prompt and response tokens, reward-model scores, sequence scores).
"""
import functools
import json
import sys

import numpy as np


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-30))


def _adapt(net, tp1):
    """Rank-4 adapters on every projection of ``net``, B set from one full array per module (split like the
    factor), so a tp=1 and a tp=2 network get the same full adapters."""
    from mindspore import Tensor
    from mindrl.models.lora import PROJECTIONS, LoraSpec, add_lora, adapted_projections
    spec = LoraSpec(4, 8.0, PROJECTIONS)
    add_lora(net, spec, name_prefix="lora1" if tp1 else "lora2")
    for name, cell in adapted_projections(net, spec.targets).items():
        factor = cell.lora_B
        local = factor.weight.shape  # stored [r, out(/tp)]
        full = list(local)
        if factor.split is not None:
            full[factor.split] *= factor.tp.size
        seed = sum(ord(c) * (i + 1) for i, c in enumerate(name))
        b = np.random.default_rng(seed).normal(0, 0.3, size=full).astype(np.float32)
        if factor.split is not None:
            n, r = local[factor.split], factor.tp.rank
            b = np.take(b, np.arange(r * n, (r + 1) * n), axis=factor.split)
        factor.weight.set_data(Tensor(b))
    return spec


def check_layers(hf_dir, out):
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.models import from_pretrained
    from mindrl.models.scoring import LogProbsAndEntropy
    from mindrl.parallel.reshard import Resharder, rename_parameters
    from mindrl.parallel.state import init_distributed, make_layout
    from mindrl.runtime import setup_context
    setup_context("graph")
    rank, world = init_distributed()
    tp2 = make_layout(world, rank, tp=2).tp_context()
    one = from_pretrained(hf_dir)                       # every rank: the full model, no collectives
    two = from_pretrained(hf_dir, tp=tp2)
    rename_parameters(two.net, "tp2")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, one.config.vocab_size, size=(3, 11)).astype(np.int32)
    res = {"logits_rel": rel(two.logits(ids), one.logits(ids))}

    # log-probs and their gradients through the vocab-parallel path vs the plain one
    class Score(ms.nn.Cell):
        def __init__(self, lm):
            super().__init__(auto_prefix=False)
            self.lm, self.stats = lm, LogProbsAndEntropy(lm.tp)

        def construct(self, x, mask):
            h = self.lm.model(x, mask)[:, :-1]
            lp, ent = self.stats(self.lm.head(h), x[:, 1:])
            return (lp * 0.7).sum() + (ent * 0.3).sum(), lp

    mask = Tensor(np.ones_like(ids))
    outs = {}
    for name, lm in (("one", one.net), ("two", two.net)):
        cell = Score(lm)
        grad = ms.value_and_grad(cell, None, cell.lm.trainable_params(), has_aux=True)
        (loss, lp), grads = grad(Tensor(ids), mask)
        names = [n for n, _ in lm.parameters_and_names()]
        outs[name] = (float(loss.asnumpy()), lp.asnumpy(), dict(zip(names, [g.asnumpy() for g in grads])))
    res["logprob_rel"] = rel(outs["two"][1], outs["one"][1])
    res["loss_rel"] = rel(outs["two"][0], outs["one"][0])
    from mindrl.parallel.layout import split_axes, take_shard
    axes = split_axes(two.net)
    worst = 0.0
    for n, g2 in outs["two"][2].items():
        g1 = take_shard(outs["one"][2][n], axes[n], 2, tp2.rank)
        worst = max(worst, rel(g2, g1))
        res.setdefault("bad", {})[n] = rel(g2, g1) if rel(g2, g1) > 1e-4 else None
    res["grad_rel_max"] = worst

    # large logits through the vocab-parallel path: entropy and log p against float64 (each rank holds half the vocab)
    z = rng.normal(0, 3, (2, 3, 16))
    z[0, 0] += 1e4      # a huge shift: lse - E_p[z] would cancel its digits away
    z[1, 2, 4] = 60.0   # nearly one-hot
    z = z.astype(np.float32).astype(np.float64)  # the reference sees the logits the ranks see
    tgt = rng.integers(0, 16, size=(2, 3)).astype(np.int32)
    lp, ent = LogProbsAndEntropy(tp2)(Tensor(z[..., tp2.rank * 8:(tp2.rank + 1) * 8], ms.float32), Tensor(tgt))
    v = z - z.max(-1, keepdims=True)
    logp = v - np.log(np.exp(v).sum(-1, keepdims=True))
    res["large_entropy_err"] = float(np.abs(ent.asnumpy() - -(np.exp(logp) * logp).sum(-1)).max())
    res["large_logp_err"] = float(np.abs(lp.asnumpy() - np.take_along_axis(logp, tgt[..., None], -1)[..., 0]).max())

    # reshard: tp1 (train) -> tp2 (infer) -> fresh tp1 must be exact
    fresh = from_pretrained(hf_dir)
    rename_parameters(fresh.net, "fresh")
    for _, p in fresh.net.parameters_and_names():
        p.set_data(Tensor(np.zeros(p.shape, np.float32)))
    for _, p in two.net.parameters_and_names():
        p.set_data(Tensor(np.zeros(p.shape, np.float32)))
    storage_before = {n: p.data_ptr() if hasattr(p, "data_ptr") else id(p) for n, p in two.net.parameters_and_names()}
    Resharder(one.net, two.net, one.net.tp, tp2)()
    res["reshard_logits_rel"] = rel(two.logits(ids), one.logits(ids))
    res["storage_kept"] = all((p.data_ptr() if hasattr(p, "data_ptr") else id(p)) == storage_before[n]
                              for n, p in two.net.parameters_and_names())
    Resharder(two.net, fresh.net, tp2, fresh.net.tp)()
    a, b = one.state_dict(), fresh.state_dict()
    res["roundtrip_exact"] = all(np.array_equal(a[k], b[k]) for k in a)

    # LoRA between layouts: the rollout copy receives W + s A B, merged on each rank's shard before any gather.
    # The same full adapters at tp=1 and tp=2 (A drawn per module name; B set from one full array per module)
    lora1, lora2 = from_pretrained(hf_dir), from_pretrained(hf_dir, tp=tp2)
    rename_parameters(lora1.net, "lora1")
    rename_parameters(lora2.net, "lora2")
    spec = _adapt(lora1.net, tp1=True)
    _adapt(lora2.net, tp1=False)
    want = lora1.logits(ids)
    res["lora_tp_logits_rel"] = rel(lora2.logits(ids), want)        # the adapted models agree across layouts
    res["lora_changes_logits_rel"] = rel(one.logits(ids), want)     # and differ from the base
    Resharder(lora1.net, two.net, lora1.net.tp, tp2, spec.scale)()  # tp=1 -> tp=2: local slices of the merge
    res["lora_reshard_to_tp2_rel"] = rel(two.logits(ids), want)
    Resharder(lora2.net, fresh.net, tp2, fresh.net.tp, spec.scale)()  # tp=2 -> tp=1: the merged shards gathered
    res["lora_reshard_to_tp1_rel"] = rel(fresh.logits(ids), want)
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(res, fh)


def run_grpo(out, config, overrides):
    from mindrl.config import load_train_config
    from mindrl.trainer import RLTrainer
    cfg = load_train_config(config, overrides)
    trainer = RLTrainer(cfg)
    seen = watch_reward_model(trainer) if trainer.reward_model is not None else None
    for _ in range(cfg.rl_config.train_iters):  # the metrics of the last step
        metrics = trainer.train_step()
    if cfg.actor_config.save:
        trainer.save()
    if trainer.run.topo.rank == 0:
        with open(out, "w") as fh:
            json.dump({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, fh)
    if seen is not None:
        exp, layout = seen["exp"], trainer.reward_model.layout
        with open(f"{out}.rank{trainer.run.topo.rank}.json", "w") as fh:
            json.dump({"rm_rows_scored": seen["rows"], "rm_dp": layout.dp, "rm_tp": layout.tp,
                       "prompts": [row[m > 0].tolist() for row, m in zip(exp.prompt_ids, exp.prompt_mask)],
                       "responses": exp.responses(), "rm_scores": exp.rm_score.tolist(),
                       "scores": exp.score.tolist()}, fh)


def watch_reward_model(trainer) -> dict:
    """Record the step's experience and the rows this rank's reward model scored (wrapping, not changing, them)."""
    import mindrl.trainer.roles.reward_model as module
    seen = {"rows": 0}
    score_in_shares, make = module.score_in_shares, trainer.maker.make

    def counting(cell, exp, *args):
        @functools.wraps(cell.construct)  # the scorer reads the cell's input names from its signature
        def call(*tensors):
            seen["rows"] += int(tensors[0].shape[0])
            return cell(*tensors)
        return score_in_shares(call, exp, *args)

    def capture(timers):
        seen["exp"], m = make(timers)
        return seen["exp"], m
    module.score_in_shares, trainer.maker.make = counting, capture
    return seen


if __name__ == "__main__":
    if sys.argv[1] == "layers":
        check_layers(sys.argv[2], sys.argv[3])
    else:
        run_grpo(sys.argv[2], sys.argv[3], sys.argv[4:])
