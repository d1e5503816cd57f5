"""`mindrl dpo` (trainer/dpo_training.py), each part against an independent reference:

- the loss, TRL's metrics and every parameter's gradient of DPOLossCell equal TRL 1.12's own DPOTrainer._compute_loss
  (called on a transformers model of the same weights, with a reference model of other weights) for sigmoid, ipo and
  hinge; conservative DPO (label_smoothing) equals TRL's sigmoid loss of the pair and of the flipped pair, mixed;
- a step of two micro-batches equals one micro-batch of the whole batch (metrics and weights);
- a short `mindrl dpo` run writes its run directory with a finite, falling loss, held-out eval/* rows and an HF
  model; the same run stopped by Ctrl-C and resumed with the command it printed ends as the uninterrupted one;
- refusals before anything is built (exit status 2, one line naming the key or file).
"""
import json
import os
import random
import sys
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))

TOKENIZER = os.path.join(ROOT, "examples", "tiny", "tokenizer")
PAIRS_DATASET = os.path.join(ROOT, "configs", "datasets", "tiny_math_pairs.yaml")


# ---------------------------------------------------------------------------------------------
# 1. the loss cell against TRL's DPOTrainer

def _trl_trainer(policy, ref, beta, loss_type):
    """TRL's DPOTrainer with the state its _compute_loss reads (one process: gathers are the identity); its
    __init__ (datasets, tokenizer, accelerate) is not what is compared."""
    torch = pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    assert trl.__version__.startswith("1.12")
    t = trl.DPOTrainer.__new__(trl.DPOTrainer)
    acc = SimpleNamespace(device=torch.device("cpu"), gather=lambda x: x, gather_for_metrics=lambda x: x,
                          unwrap_model=lambda m: m)
    t.__dict__.update(model=policy, ref_model=ref, accelerator=acc, aux_loss_enabled=False, ld_alpha=None,
                      precompute_ref_logps=False, f_divergence_type="reverse_kl", loss_types=[loss_type],
                      loss_weights=[1.0], beta=beta, label_smoothing=0.0, use_weighting=False,
                      _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0,
                      args=SimpleNamespace(gradient_checkpointing_kwargs=None))
    return t


def _pairs(rng, vocab, n=4):
    """``n`` pairs of one prompt each (lengths 3-6) with a chosen and a rejected response (lengths 1-7)."""
    chosen, rejected, plen = [], [], []
    for _ in range(n):
        p = list(rng.integers(1, vocab, int(rng.integers(3, 7))))
        chosen.append(p + list(rng.integers(1, vocab, int(rng.integers(1, 8)))))
        rejected.append(p + list(rng.integers(1, vocab, int(rng.integers(1, 8)))))
        plen.append(len(p))
    return chosen, rejected, plen


def _trl_inputs(a, flip=False):
    """TRL's collated batch: chosen rows then rejected rows, right-padded, with its completion mask."""
    import torch
    c, r = ("rejected", "chosen") if flip else ("chosen", "rejected")
    ids = np.concatenate([a[f"{c}_ids"], a[f"{r}_ids"]])
    real = np.concatenate([a[f"{c}_real"], a[f"{r}_real"]])
    comp = np.concatenate([a[f"{c}_mask"], a[f"{r}_mask"]])
    return {"input_ids": torch.tensor(ids, dtype=torch.long), "attention_mask": torch.tensor(real),
            "completion_mask": torch.tensor(comp)}


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """A tiny Qwen2 policy and a reference of other weights, as HF directories and torch float64 models."""
    from conftest import make_hf_checkpoint
    d = tmp_path_factory.mktemp("dpo_hf")
    policy = make_hf_checkpoint(d / "policy", "qwen2", seed=0)
    ref = make_hf_checkpoint(d / "ref", "qwen2", seed=1)
    return d, policy.double(), ref.double()


@pytest.mark.parametrize("loss_type,label_smoothing", [("sigmoid", 0.0), ("ipo", 0.0), ("hinge", 0.0),
                                                        ("sigmoid", 0.2)])
def test_loss_metrics_and_gradients_equal_trl(hf_pair, loss_type, label_smoothing):
    import mindspore as ms
    from mindspore import Tensor
    from mindrl.models import from_pretrained
    from mindrl.parallel.layout import to_external, transposed_names
    from mindrl.trainer.dpo_training import TRL_METRICS, DPOLossCell, pairs_arrays
    from mindrl.trainer.sft import SummedResponseLogProbs
    d, policy, ref = hf_pair
    beta = 0.5  # large enough that the hinge is active for some pairs and not for others
    chosen, rejected, plen = _pairs(np.random.default_rng(7), policy.config.vocab_size)
    a = pairs_arrays(chosen, rejected, plen, pad_id=0, max_width=256)
    for side, seqs in (("chosen", chosen), ("rejected", rejected)):
        a[f"{side}_real"] = (np.arange(a[f"{side}_ids"].shape[1])[None] < np.array([len(s) for s in seqs])[:, None])
        a[f"{side}_real"] = a[f"{side}_real"].astype(np.int64)
        a[f"{side}_mask"] = a[f"{side}_real"] * (np.arange(a[f"{side}_ids"].shape[1])[None] >= np.array(plen)[:, None])

    # TRL: cDPO is its sigmoid loss of the pair and of the flipped pair, mixed (TRL 1.12's sigmoid has no smoothing)
    policy.zero_grad()
    t = _trl_trainer(policy, ref, beta, loss_type)
    loss = t._compute_loss(policy, _trl_inputs(a), False)
    metrics = {k: v[0] for mode in ("train", "eval") for k, v in t._metrics[mode].items()}
    if label_smoothing:
        flipped = _trl_trainer(policy, ref, beta, loss_type)._compute_loss(policy, _trl_inputs(a, flip=True), False)
        loss = (1 - label_smoothing) * loss + label_smoothing * flipped
    loss.backward()
    want = {n: p.grad.numpy() for n, p in policy.named_parameters()}

    # mindrl: the reference's log-probs from its own network, then the loss cell's value and gradient
    prev = ms.get_context("mode")
    ref_lm = from_pretrained(str(d / "ref"), mode="pynative").net
    both = SummedResponseLogProbs(ref_lm)(Tensor(np.concatenate([a["chosen_ids"], a["rejected_ids"]])),
                                    Tensor(np.concatenate([a["chosen_positions"], a["rejected_positions"]]))).asnumpy()
    n = len(chosen)
    lm = from_pretrained(str(d / "policy"), mode="pynative").net
    cell = DPOLossCell(lm, beta, loss_type, label_smoothing)
    params = lm.trainable_params()
    grad_fn = ms.value_and_grad(cell, None, params, has_aux=True)
    outs, grads = grad_fn(*[Tensor(a[k]) for k in ("chosen_ids", "chosen_positions", "rejected_ids",
                                                          "rejected_positions")],
                          Tensor(both[:n]), Tensor(both[n:]), Tensor(np.float32(n)))
    outs = [float(o.asnumpy()) for o in outs]
    ms.set_context(mode=prev)
    assert outs[0] == pytest.approx(float(loss.detach()), rel=1e-4, abs=1e-6)
    for name, value in zip(TRL_METRICS, outs[2:]):
        assert value == pytest.approx(metrics[name], rel=1e-4, abs=1e-5), name
    trans = transposed_names(lm)
    got = {p.name: to_external(g.asnumpy(), p.name in trans) for p, g in zip(params, grads)}
    assert sorted(got) == sorted(want)
    for name, g in want.items():
        scale = max(np.abs(g).max(), 1e-6)
        err = np.abs(got[name] - g).max() / scale
        assert err < 1e-3, f"{name}: max error {err:.2e} of the gradient's largest entry"


# ---------------------------------------------------------------------------------------------
# 2. the trainer on a pairwise MindRecord

def write_pairs(path, ids, seed):
    """examples/tiny/task.py's pairs: the right answer chosen, a plausible mistake rejected."""
    import task
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for pid in ids:
            prompt, answer = task.problem(pid)
            fh.write(json.dumps({"prompt": prompt, "chosen": answer, "rejected": task.wrong_answer(pid, rng)}) + "\n")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    import task
    from conftest import make_grpo_workdir
    from mindrl.data.preprocess import cli_main
    d = make_grpo_workdir(tmp_path_factory.mktemp("dpo"))
    write_pairs(d / "pairs.jsonl", task.training_ids(16, seed=21), seed=3)
    write_pairs(d / "pairs_heldout.jsonl", task.heldout_ids()[:8], seed=4)
    for name in ("pairs", "pairs_heldout"):
        assert cli_main(["--config", PAIRS_DATASET, f"input={d / name}.jsonl", f"output_prefix={d / name}",
                         f"tokenizer_name_or_path={TOKENIZER}"]) == 0
    return d


def dpo_yaml(d, name, **sections):
    """A `mindrl dpo` yaml on the workdir; ``sections`` update its sections."""
    doc = {"dpo_config": dict(model=str(d / "policy"), tokenizer_name_or_path=TOKENIZER, load=str(d / "policy"),
                              lr=0.01),
           "train": dict(global_batch_size=8, micro_batch_size=4, train_iters=1),
           "data": dict(path=str(d / "pairs.mindrecord"), shuffle=False),
           "logging": dict(log_dir=str(d / name), tensorboard=False)}
    for section, values in sections.items():
        doc.setdefault(section, {}).update(values)
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("multiple, width", [(0, 32), (8, 24), (5, 20)])
def test_pairs_are_padded_as_data_pad_to_multiple_of_says(multiple, width):
    """Both sides at one width (the longest row is 19 tokens: a power of two, or the next multiple), and each side's
    positions are exactly its response tokens' (from the prompt length to the row's end), in order, then 0."""
    from mindrl.trainer.dpo_training import pairs_arrays
    chosen, rejected, plen = [list(range(1, 20)), list(range(1, 9))], [list(range(1, 12)), list(range(1, 7))], [6, 3]
    a = pairs_arrays(chosen, rejected, plen, pad_id=0, max_width=256, multiple=multiple)
    assert a["chosen_ids"].shape == a["rejected_ids"].shape == (2, width)
    assert a["chosen_positions"].shape == a["rejected_positions"].shape
    for side, seqs in (("chosen", chosen), ("rejected", rejected)):
        for i, (s, p) in enumerate(zip(seqs, plen)):
            want = list(range(p, len(s)))
            got = a[f"{side}_positions"][i]
            assert got[:len(want)].tolist() == want and not got[len(want):].any()
            assert a[f"{side}_ids"][i, :len(s)].tolist() == s and not a[f"{side}_ids"][i, len(s):].any()


def test_micro_batches_add_up_to_the_whole_batch(workdir):
    from mindrl.config.dpo import load_dpo_config
    from mindrl.models.weights import state_numpy
    from mindrl.trainer.dpo_training import DPOTrainer
    results = []
    for micro in (8, 4):
        trainer = DPOTrainer(load_dpo_config(dpo_yaml(workdir, f"dpo_micro{micro}",
                                                      train={"micro_batch_size": micro})))
        metrics = trainer.train_step(next(trainer._batches()), 0)
        results.append((metrics, state_numpy(trainer.net)))
    (m1, w1), (m2, w2) = results
    assert m1.keys() == m2.keys() and {"dpo/loss", "dpo/grad_norm", "dpo/lr", "rewards/chosen", "rewards/rejected",
                                       "rewards/accuracies", "rewards/margins", "logps/chosen",
                                       "logps/rejected"} <= set(m1)
    assert m1["dpo/loss"] == pytest.approx(np.log(2), rel=1e-5)  # the policy is its reference at step 0
    for key in m1:
        assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-6), key
    for name in w1:
        if name.endswith("k_proj.bias"):
            # its true gradient is 0 (a bias on the keys adds the same q.b to every score of a query, which softmax
            # ignores), so Adam's first step turns float noise into a full-size step of either sign: nothing to compare
            continue
        np.testing.assert_allclose(w2[name], w1[name], rtol=1e-4, atol=1e-6, err_msg=name)


def _check_run_directory(workdir, run):
    """A short run's directory: a finite, falling loss (every step sees the file's 16 pairs), held-out eval/* rows
    before and after, the HF model, the reference named in config.yaml, the report."""
    from mindrl.models.weights import TensorSource
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    train = [r for r in rows if "dpo/loss" in r]
    held_out = [r for r in rows if "eval/num_pairs" in r]
    losses = [r["dpo/loss"] for r in train]
    assert len(losses) == 6 and all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert [r["step"] for r in held_out] == [0, 6] and held_out[0]["eval/num_pairs"] == 8
    assert held_out[0]["eval/dpo/loss"] == pytest.approx(np.log(2), rel=1e-5)  # the policy is its reference
    assert held_out[1]["eval/rewards/margins"] != 0
    assert "model.embed_tokens.weight" in TensorSource(str(run / "model")).names()
    assert json.loads((run / "model" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    config = yaml.safe_load(open(run / "config.yaml"))
    assert config["dpo_config"]["ref_load"] == str(workdir / "policy")  # what a resume reads the reference from
    assert "rewards/accuracies" in (run / "report.md").read_text()


def whole_run_config(workdir, name, lora=None, **train):
    """6 steps of 16 pairs (the file's 16, shuffled), held-out eval before and after, a checkpoint every 2 steps."""
    return dpo_yaml(workdir, name, dpo_config={"save": "<run_dir>/ckpt", "save_interval": 2, **(lora or {})},
                    train={"global_batch_size": 16, "micro_batch_size": 8, "train_iters": 6, **train},
                    data={"shuffle": True}, eval={"path": str(workdir / "pairs_heldout.mindrecord")})


@pytest.fixture(scope="module")
def whole_run(workdir):
    """The uninterrupted one-process CLI run the tests below compare with (its directory: workdir/dpo_whole)."""
    from mindrl.trainer.dpo_training import cli_main
    assert cli_main(["--config", whole_run_config(workdir, "dpo_whole")]) == 0
    return workdir / "dpo_whole"


def test_stopped_and_resumed_ends_as_an_uninterrupted_run(workdir, whole_run):
    """The uninterrupted run is also the short CLI run whose directory is checked (_check_run_directory)."""
    from conftest import stop_then_resume
    from mindrl.config.dpo import load_dpo_config
    from mindrl.models.weights import TensorSource
    from mindrl.trainer.dpo_training import DPOTrainer, cli_main
    _check_run_directory(workdir, whole_run)
    stop_then_resume(DPOTrainer(load_dpo_config(whole_run_config(workdir, "dpo_stopped"))), cli_main, "dpo")

    def rows(name):
        return [json.loads(line) for line in open(workdir / name / "metrics.jsonl")]
    whole, resumed = rows("dpo_whole"), rows("dpo_stopped")
    assert [r["step"] for r in resumed] == [r["step"] for r in whole] == [0, 1, 2, 3, 4, 5, 6, 6]
    for a, b in zip(whole, resumed):
        assert a.keys() == b.keys()
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (a["step"], key)
    want, got = TensorSource(str(workdir / "dpo_whole" / "model")), TensorSource(str(workdir / "dpo_stopped" / "model"))
    assert sorted(want.names()) == sorted(got.names())
    for name in want.names():
        np.testing.assert_array_equal(got.get(name), want.get(name), err_msg=name)


@pytest.mark.slow
@pytest.mark.msrun
def test_two_data_parallel_workers_end_as_the_one_process_run(workdir, whole_run, tmp_path):
    """`mindrl dpo` under msrun, 2 workers (data-parallel 2, 8 pairs per replica and step): every step's metrics
    (the reference's log-probs, TRL's reward metrics, the loss and gradient norm from all-reduced partial sums),
    the held-out eval and the final model equal the one-process run's."""
    from mindrl.models.weights import TensorSource
    from test_parallel import msrun
    msrun(["python", "-m", "mindrl.cli", "dpo", "--config", whole_run_config(workdir, "dpo_dp2"),
           "dpo_config.save=null", "dpo_config.save_interval=0"], str(tmp_path / "msrun"))
    want = [json.loads(line) for line in open(whole_run / "metrics.jsonl")]
    got = [json.loads(line) for line in open(workdir / "dpo_dp2" / "metrics.jsonl")]
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for a, b in zip(want, got):
        for key in a:
            if not key.startswith("timing/") and "per_s" not in key and "tps" not in key:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), (a["step"], key)
    w, g = TensorSource(str(whole_run / "model")), TensorSource(str(workdir / "dpo_dp2" / "model"))
    assert sorted(w.names()) == sorted(g.names())
    for name in w.names():
        if not name.endswith("k_proj.bias"):  # no true gradient (see test_micro_batches_add_up_to_the_whole_batch)
            np.testing.assert_allclose(g.get(name), w.get(name), rtol=1e-4, atol=1e-5, err_msg=name)


# ---------------------------------------------------------------------------------------------
# 3. refusals before anything is built

@pytest.mark.parametrize("override,names", [
    ("dpo_config.loss_type=kto", "dpo_config.loss_type"),
    ("dpo_config.label_smoothing=0.1 dpo_config.loss_type=ipo", "dpo_config.label_smoothing"),
    ("dpo_config.load=null", "dpo_config.load"),
    ("data.path=MISSING", "data.path"),
    ("data.path=TRAIN", "chosen_ids"),                       # a prompts MindRecord, not pairs
    ("eval.path=TRAIN", "eval.path"),
])
def test_refusals_exit_2_before_compute(workdir, capsys, override, names):
    from mindrl.trainer.dpo_training import cli_main
    args = [a.replace("MISSING", str(workdir / "nope.mindrecord")).replace("TRAIN", str(workdir / "train.mindrecord"))
            for a in override.split()]
    rc = cli_main(["--config", dpo_yaml(workdir, "dpo_refused"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and names in err, err
    assert not (workdir / "dpo_refused").exists()


def test_lora_dpo_shares_the_base_as_its_reference_and_resumes_exactly(workdir):
    """dpo_config.lora_rank: the reference is the policy's base with the adapters off (the same Parameters, no
    second copy); the loss starts at log 2 and falls; stopped at step 3 and resumed, the run ends as the whole one."""
    from conftest import stop_then_resume
    from mindrl.config.dpo import load_dpo_config
    from mindrl.trainer.dpo_training import DPOTrainer, cli_main
    lora = {"lora_rank": 4, "lora_alpha": 8, "lr": 0.01}
    whole = DPOTrainer(load_dpo_config(whole_run_config(workdir, "dpo_lora", lora=lora)))
    policy = dict(whole.net.parameters_and_names())
    assert all(p is policy[n] for n, p in whole.role.ref_net.parameters_and_names())  # shared base
    whole.fit()
    _check_run_directory(workdir, workdir / "dpo_lora")
    assert (workdir / "dpo_lora" / "model" / "adapter" / "adapter_model.safetensors").exists()
    stop_then_resume(DPOTrainer(load_dpo_config(whole_run_config(workdir, "dpo_lora_stopped", lora=lora))),
                     cli_main, "dpo")
    a = [json.loads(line) for line in open(workdir / "dpo_lora" / "metrics.jsonl")]
    b = [json.loads(line) for line in open(workdir / "dpo_lora_stopped" / "metrics.jsonl")]
    assert [r["step"] for r in b] == [r["step"] for r in a]
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if "per_second" not in k} == {k: v for k, v in y.items()
                                                                          if "per_second" not in k}
