"""`mindrl sft` (issue 27): supervised fine-tuning on SFT MindRecord, each check against an independent reference.

- the loss of a training step (several micro-batches of one global batch, prompts masked) and its gradient norm
  equal transformers' causal-LM loss (torch, float32) with the same masking on the same model, and the held-out
  loss equals it on the held-out rows;
- gradient accumulation: micro-batches of 2 and one micro-batch of the whole global batch give the same losses,
  gradient norms and weights;
- packing (data.packing): each packed row's logits equal the row's alone, and a packed step's loss and gradient
  equal the unpacked step's;
- a run of a few steps via the CLI writes its run directory, a finite loss that goes down, and an HF directory
  transformers reads;
- a run stopped by SIGINT and resumed with the command it printed ends as an uninterrupted run (metrics and weights);
- refusals before anything is built or written (exit 2, one line naming the key): a missing data file, a
  MindRecord that is not SFT rows, MindSpeed-RL keys mindrl does not read with their meaning;
- docs/sft.md lists every key with its default.
"""
import json
import os
import sys

import numpy as np
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "tiny"))

POLICY = os.path.join(ROOT, "examples", "tiny", "policy")
TOKENIZER = os.path.join(ROOT, "examples", "tiny", "tokenizer")
EXAMPLE = os.path.join(ROOT, "examples", "sft", "tiny_math.yaml")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """SFT MindRecords of the tiny task (32 training rows, 12 held-out), written by `mindrl preprocess` with the
    demo's sft config, and a prompt MindRecord (not SFT rows)."""
    import task
    from mindrl.data.preprocess import cli_main
    d = tmp_path_factory.mktemp("sft")
    task.write_jsonl(str(d / "train.jsonl"), task.training_ids(32, seed=7))
    task.write_jsonl(str(d / "heldout.jsonl"), task.heldout_ids()[:12])
    for name, dataset in (("train", "sft"), ("heldout", "sft"), ("prompts", "tiny_math")):
        source = "train" if name == "prompts" else name
        rc = cli_main(["--config", os.path.join(ROOT, "configs", "datasets", f"{dataset}.yaml"),
                       f"input={d / source}.jsonl", f"output_prefix={d / name}", f"tokenizer_name_or_path={TOKENIZER}"])
        assert rc == 0
    return d


def sft_yaml(d, name, **sections):
    """A `mindrl sft` yaml on the workdir (the shipped tiny policy, 4 rows per step in micro-batches of 2)."""
    doc = {"sft_config": dict(model=POLICY, tokenizer_name_or_path=TOKENIZER, load=POLICY, lr=0.003),
           "train": dict(global_batch_size=4, micro_batch_size=2, train_iters=6),
           "data": dict(path=str(d / "train.mindrecord")),
           "eval": dict(path=str(d / "heldout.mindrecord")),
           "logging": dict(log_dir=str(d / name), tensorboard=False, progress_bar=False)}
    for section, values in sections.items():
        doc.setdefault(section, {}).update(values)
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


# the runs below: from random weights (a loss far from its floor, so that 6 small steps lower it)
RUN = {"load": None, "lr": 0.01}


def rows(d, name):
    return [json.loads(line) for line in open(d / name / "metrics.jsonl")]


def weights(path):
    from mindrl.models.weights import TensorSource
    src = TensorSource(str(path))
    return {n: src.get(n) for n in src.names()}


# ---------------------------------------------------------------------------------------------
# 1. the loss against transformers

def hf_loss(model, ids_list, masks):
    """transformers' causal-LM loss (float32) of right-padded rows, labels -100 where the loss mask is 0: the mean
    over every unmasked token of the batch. Returns (loss, gradient norm over all parameters)."""
    import torch
    width = max(len(r) for r in ids_list)
    ids = torch.zeros((len(ids_list), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (r, m) in enumerate(zip(ids_list, masks)):
        r, m = torch.tensor(np.asarray(r, np.int64)), torch.tensor(np.asarray(m, np.int64))
        ids[i, :len(r)], attn[i, :len(r)] = r, 1
        labels[i, :len(r)] = torch.where(m > 0, r, torch.full_like(r, -100))
    model.zero_grad()
    loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    return float(loss.detach()), float(norm)


def test_step_and_held_out_loss_equal_transformers(workdir):
    """One step of 4 rows in micro-batches of 2 (rows of different lengths, prompts masked): the reported loss and
    pre-clip gradient norm are transformers' (Qwen2ForCausalLM, float32) on the same rows; the held-out loss before
    training is transformers' over all held-out rows."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer
    model = transformers.AutoModelForCausalLM.from_pretrained(POLICY, dtype=torch.float32).eval()
    trainer = SFTTrainer(load_sft_config(sft_yaml(workdir, "sft_vs_hf", data={"shuffle": False})))
    before = trainer.evaluate()
    held = trainer._eval_rows()
    want_eval, _ = hf_loss(model, held["pretrain_ids"], held["loss_mask"])
    assert before["sft/eval_tokens"] == sum(int(np.asarray(m)[1:].sum()) for m in held["loss_mask"])
    assert before["sft/eval_loss"] == pytest.approx(want_eval, rel=2e-5)
    batch = next(trainer._batches())
    lengths = {len(r) for r in batch["pretrain_ids"]}
    prompt_tokens = [int((np.asarray(m) == 0).sum()) for m in batch["loss_mask"]]
    assert len(lengths) > 1 and min(prompt_tokens) > 1, "the batch must mix lengths and have masked prompts"
    want_loss, want_norm = hf_loss(model, batch["pretrain_ids"], batch["loss_mask"])
    metrics = trainer.train_step(batch, 0)
    assert metrics["sft/loss"] == pytest.approx(want_loss, rel=2e-5)
    assert metrics["sft/grad_norm"] == pytest.approx(want_norm, rel=1e-4)
    assert metrics["sft/lr"] == pytest.approx(0.003)
    assert metrics["sft/tokens_per_second"] > 0


def test_recomputed_layers_step_equals_transformers(workdir):
    """sft_config's Megatron recompute keys (block, 1 layer): the trained network recomputes its first layer, and a
    step's loss and gradient norm are still transformers' on the same rows."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer
    model = transformers.AutoModelForCausalLM.from_pretrained(POLICY, dtype=torch.float32).eval()
    from mindspore import nn
    from mindrl.models.decoder import recomputed_layers
    trainer = SFTTrainer(load_sft_config(sft_yaml(workdir, "sft_recompute", data={"shuffle": False}, sft_config={
        "recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1})))
    marked = [name for name, c in trainer.net.cells_and_names() if getattr(c, "_recompute_cell", None) is not None]
    assert marked == ["model.recompute_block"] and trainer.net.model.n_recompute == 1, marked
    layer = recomputed_layers(trainer.net)[0]
    assert trainer.updater.accumulate._layers() == [layer]
    compiled, compile = {}, nn.Cell.compile

    def spy(cell, *args, **kwargs):  # MindSpore's recompute marks as each graph compiles: on for the update only
        compiled[type(cell).__name__] = (layer._scope or "").startswith("recompute_")
        return compile(cell, *args, **kwargs)
    batch = next(trainer._batches())
    want_loss, want_norm = hf_loss(model, batch["pretrain_ids"], batch["loss_mask"])
    nn.Cell.compile = spy
    try:
        metrics = trainer.train_step(batch, 0)
        trainer.evaluate()
    finally:
        nn.Cell.compile = compile
    assert compiled.pop("AccumulateGrad") is True and compiled and not any(compiled.values()), compiled
    assert not (layer._scope or "").startswith("recompute_")
    assert metrics["sft/loss"] == pytest.approx(want_loss, rel=2e-5)
    assert metrics["sft/grad_norm"] == pytest.approx(want_norm, rel=1e-4)


# ---------------------------------------------------------------------------------------------
# 2. a run via the CLI, gradient accumulation, stop and resume

@pytest.fixture(scope="module")
def whole_run(workdir):
    """`mindrl sft` for 6 steps of 4 rows in micro-batches of 2, checkpoints every 2 steps, held-out rows."""
    from mindrl.cli import main
    config = sft_yaml(workdir, "sft_whole", sft_config={**RUN, "save": "<run_dir>/ckpt", "save_interval": 2})
    assert main(["sft", "--config", config]) == 0
    return workdir / "sft_whole"


def test_cli_run_writes_its_directory_and_the_loss_goes_down(workdir, whole_run):
    transformers = pytest.importorskip("transformers")
    for name in ("config.yaml", "run.json", "metrics.jsonl", "report.md", "report.png", "model/config.json",
                 "model/model.safetensors", "ckpt/iter_0000006/policy/model.safetensors"):
        assert (whole_run / name).exists(), name
    metrics = rows(workdir, "sft_whole")
    train = [r for r in metrics if "sft/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    for r in train:
        for key in ("sft/loss", "sft/grad_norm", "sft/lr", "sft/tokens_per_second"):
            assert np.isfinite(r[key]), (r["step"], key)
    losses = [r["sft/loss"] for r in train]
    assert np.mean(losses[-2:]) < np.mean(losses[:2])
    held = [r for r in metrics if "sft/eval_loss" in r]
    assert [r["step"] for r in held] == [0, 6] and held[1]["sft/eval_loss"] < held[0]["sft/eval_loss"]
    # the model is an HF causal-LM directory with the tokenizer
    model = transformers.AutoModelForCausalLM.from_pretrained(str(whole_run / "model"))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (whole_run / "model" / "tokenizer.model").exists()


def test_gradient_accumulation_equals_one_big_batch(workdir, whole_run):
    """Micro-batches of 2 rows add up to the gradient of one micro-batch of the 4 rows of the global batch (each gets
    the batch's token count as denominator); and 6 steps with one micro-batch of 4 rows report the losses and
    gradient norms of the run with micro-batches of 2, and end with its weights."""
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer, cli_main
    trainer = SFTTrainer(load_sft_config(sft_yaml(workdir, "sft_accumulate", sft_config=RUN)))
    batch = next(trainer._batches())
    denom = trainer._denominator(batch)

    def gradient(micro):
        for u0 in range(0, 4, micro):
            trainer.updater.micro_step(trainer._arrays(batch, range(u0, u0 + micro)), denom)
        out = [g.asnumpy().copy() for g in trainer.updater.accumulate.accum]
        trainer.updater.reset_cell()
        return out
    one, two, four = gradient(1), gradient(2), gradient(4)
    for a, b, c in zip(one, two, four):
        scale = np.abs(c).max()
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6 * scale)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6 * scale)
    assert cli_main(["--config", sft_yaml(workdir, "sft_big_batch", sft_config=RUN), "train.micro_batch_size=4"]) == 0
    small, big = rows(workdir, "sft_whole"), rows(workdir, "sft_big_batch")
    assert [r["step"] for r in small] == [r["step"] for r in big]
    for a, b in zip(small, big):
        for key in a:
            if key.startswith("sft/") and key != "sft/tokens_per_second":
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (a["step"], key)
    want, got = weights(whole_run / "model"), weights(workdir / "sft_big_batch" / "model")
    assert sorted(want) == sorted(got)
    # float32 sums in another order: Adam divides each gradient by its own running scale, so an element whose
    # gradient is near zero can move differently on rounding alone (one element of 65,536 moved 1.2e-4 when the
    # softmax's division became a product with the reciprocal); 2e-4 is a fiftieth of one step of lr 0.01
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=2e-4, err_msg=name)


def varied_rows(seed=0, lengths=(30, 5, 7, 3, 12, 9, 6, 4)):
    """SFT rows of very different lengths (random ids of the tiny vocabulary), the loss on each row's second half."""
    rng = np.random.default_rng(seed)
    ids = [rng.integers(3, 190, n).astype(np.int32) for n in lengths]
    masks = [(np.arange(n) >= n // 2).astype(np.int32) for n in lengths]
    return {"pretrain_ids": ids, "loss_mask": masks}


def test_packed_rows_each_get_their_own_logits():
    """Rows packed into shared sequences (segment attention) give every row the logits it gets alone: attention stays
    inside each row and positions restart at each row's start."""
    from mindrl.models import from_pretrained
    from mindrl.trainer.sft import pack_rows
    rows = varied_rows(1)
    ids, mask, segments = pack_rows(rows["pretrain_ids"], rows["loss_mask"], 32, 0)
    assert ids.shape == (4, 32) and segments.max() == 4  # 8 rows in 3 sequences (30 | 12 9 7 4 | 6 5 3), and 1 empty
    alone, packed = from_pretrained(POLICY), from_pretrained(POLICY)
    packed.net.model.segment_attention = True  # before its first call: a constant of the compiled graph
    got = packed.logits(ids, segments)
    seen = 0
    for r in range(ids.shape[0]):
        for seg in range(1, segments[r].max() + 1):
            where = np.flatnonzero(segments[r] == seg)
            row = ids[r, where]
            match = [i for i, x in enumerate(rows["pretrain_ids"]) if np.array_equal(x, row)]
            assert len(match) == 1
            want = alone.logits(row[None])[0]
            np.testing.assert_allclose(got[r, where], want, rtol=1e-4, atol=1e-4)
            assert mask[r, where[0]] == 0  # a row's first token is never a target
            np.testing.assert_array_equal(mask[r, where[1:]], rows["loss_mask"][match[0]][1:])
            seen += 1
    assert seen == 8


def test_a_packed_step_equals_the_unpacked_step(workdir):
    """data.packing: the same loss and accumulated gradient as the rows unpacked, from fewer sequences; and
    data.pad_to_multiple_of: the same from rows padded to a multiple of 8 instead of a power of two."""
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer
    batch = varied_rows(2, lengths=(20, 5, 7, 3, 12, 9, 6, 4))
    longest = max(len(r) for r in batch["pretrain_ids"])
    results = []
    for packing, multiple, shape in ((False, 0, (8, 32)), (True, 0, (4, 32)), (False, 8, (8, -(-longest // 8) * 8))):
        trainer = SFTTrainer(load_sft_config(sft_yaml(workdir, f"sft_packing_{packing}_{multiple}", sft_config=RUN,
                                                      train={"global_batch_size": 8, "micro_batch_size": 8},
                                                      data={"packing": packing, "pad_to_multiple_of": multiple})))
        arrays = trainer._arrays(batch, range(8))
        assert arrays["sft_ids"].shape == shape
        loss = trainer.updater.micro_step(arrays, trainer._denominator(batch))[0]
        results.append((float(loss), [g.asnumpy().copy() for g in trainer.updater.accumulate.accum]))
    assert shape[1] < 32  # the rows really were padded less
    (loss, grads), *others = results
    for other_loss, other_grads in others:
        assert other_loss == pytest.approx(loss, rel=1e-5)
        for a, b in zip(grads, other_grads):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * max(np.abs(a).max(), 1e-3))


def test_stopped_and_resumed_ends_as_an_uninterrupted_run(workdir, whole_run):
    """Stopped by SIGINT during step 3, the run saves step 3 and prints the command that resumes; that command, as
    printed, ends with the weights and metrics of the run never stopped (bit-identical)."""
    from conftest import stop_then_resume
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer, cli_main
    config = sft_yaml(workdir, "sft_stopped", sft_config={**RUN, "save": "<run_dir>/ckpt", "save_interval": 2})
    resume = stop_then_resume(SFTTrainer(load_sft_config(config)), cli_main, "sft")
    assert "sft_config.finetune=false" in resume
    whole, resumed = rows(workdir, "sft_whole"), rows(workdir, "sft_stopped")
    assert [r["step"] for r in resumed] == [r["step"] for r in whole] == [0, 1, 2, 3, 4, 5, 6, 6]
    for a, b in zip(whole, resumed):
        assert a.keys() == b.keys()
        for key in a:
            if key != "sft/tokens_per_second":
                assert b[key] == a[key], (a["step"], key)
    want, got = weights(whole_run / "model"), weights(workdir / "sft_stopped" / "model")
    assert sorted(want) == sorted(got)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# ---------------------------------------------------------------------------------------------
# 3. refusals before anything is built or written

@pytest.mark.parametrize("over, key, fragment", [
    ({"data": {"path": "nowhere/train.mindrecord"}}, "data.path", "dataset not found"),
    ({"data": {"path": "<prompts>"}}, "data.path", "has no pretrain_ids or loss_mask column"),
    ({"eval": {"path": "<prompts>"}}, "eval.path", "has no pretrain_ids or loss_mask column"),
    ({"sft_config": {"seq_length": 512}}, "sft_config.seq_length", "sft has no length key"),
    ({"sft_config": {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 3}},
     "sft_config.recompute_num_layers", "3 is more than the 2 layers"),
    ({"sft_config": {"reset_position_ids": True}}, "sft_config.reset_position_ids", "packing"),
    ({"sft_config": {"no_shuffle": True}}, "sft_config.no_shuffle", "data.shuffle"),
    ({"sft_config": {"global_batch_size": 8}, "train": {"global_batch_size": 4}}, "sft_config.global_batch_size",
     "conflicts with train.global_batch_size"),
    ({"logging": {"log_max_throughput": False}}, "logging.log_max_throughput", "has no effect"),
    ({"sft_config": {"save_interval": 5}}, "sft_config.save_interval", "sft_config.save is not set"),
    ({"sft_config": {"finetune": False, "load": None}}, "sft_config.load", "the sft checkpoint to resume"),
    ({"sft_config": {"finetune": False}}, "sft_config.load", "not a complete mindrl checkpoint")])
def test_cli_refuses_before_anything_is_built(workdir, capsys, over, key, fragment):
    from mindrl.trainer.sft_training import cli_main
    for section in over.values():
        for k, v in section.items():
            if v == "<prompts>":
                section[k] = str(workdir / "prompts.mindrecord")
    name = f"sft_refused_{key.replace('.', '_')}"
    config = sft_yaml(workdir, name, **over)
    assert cli_main(["--config", config]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line != "mindrl: config error:"]
    assert len(err) == 1, err
    assert f"{key}: " in err[0] and fragment in err[0], err[0]
    assert not (workdir / name).exists()  # refused before the run directory was made


def test_mindspeed_rl_keys_read_with_their_meaning(workdir):
    """MindSpeed-RL's SFT keys inside sft_config (its flat `sft:` section) land on mindrl's keys."""
    from mindrl.config.sft import load_sft_config
    path = sft_yaml(workdir, "sft_mindspeed", sft_config={
        "global_batch_size": 8, "micro_batch_size": 4, "train_iters": 3, "seed": 7, "log_interval": 2,
        "lr_warmup_fraction": 0.1, "lr_decay_style": "cosine", "min_lr": 1e-5})
    doc = yaml.safe_load(open(path))
    del doc["train"]
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    cfg = load_sft_config(path, ["sft_config.eval_interval=2"])
    assert (cfg.train.global_batch_size, cfg.train.micro_batch_size, cfg.train.train_iters) == (8, 4, 3)
    assert (cfg.runtime.seed, cfg.data.seed, cfg.logging.log_interval, cfg.eval.interval) == (7, 7, 2, 2)


def test_docs_list_every_key_with_its_default():
    import dataclasses
    from mindrl.config.sft import SFT
    doc = open(os.path.join(ROOT, "docs", "sft.md"), encoding="utf-8").read()
    for section in SFT.sections:
        if section == "logging":
            continue  # the logging section is train's (configuration.md); sft.md names its keys in a line
        table = doc.split(f"### `{section}`\n", 1)[1].split("\n### ", 1)[0]
        for name, f in SFT.fields(section).items():
            row = next((line for line in table.splitlines() if line.startswith(f"| `{name}` |")), None)
            assert row is not None, f"{section}.{name} is not in docs/sft.md"
            if f.default is not dataclasses.MISSING and not isinstance(f.default, bool) and f.default is not None:
                assert f"`{f.default:g}`" in row if isinstance(f.default, float) else f"`{f.default}`" in row, row
    for key in ("sft/loss", "sft/grad_norm", "sft/lr", "sft/tokens_per_second", "sft/eval_loss", "sft/eval_tokens"):
        assert f"`{key}`" in doc, key


# ---------------------------------------------------------------------------------------------
# 4. LoRA

def test_lora_trains_adapters_writes_a_merged_model_and_resumes_exactly(workdir):
    """sft_config.lora_rank: the base frozen, the held-out loss goes down, model/ is the merged model with the PEFT
    adapter beside it (merged = W + (alpha/r) B A, from the files), and a run stopped at step 3 and resumed from the
    command it prints ends bit-identical to the run never stopped."""
    from conftest import stop_then_resume
    from mindrl.cli import main
    from mindrl.config.sft import load_sft_config
    from mindrl.models.lora import read_peft_adapter
    from mindrl.trainer.sft_training import SFTTrainer, cli_main
    lora = {"lora_rank": 4, "lora_alpha": 8, "lr": 0.001, "save": "<run_dir>/ckpt", "save_interval": 2}
    assert main(["sft", "--config", sft_yaml(workdir, "sft_lora", sft_config=lora)]) == 0
    held = [r["sft/eval_loss"] for r in rows(workdir, "sft_lora") if "sft/eval_loss" in r]
    assert held[1] < held[0]
    model = workdir / "sft_lora" / "model"
    config, adapters = read_peft_adapter(str(model / "adapter"))
    assert config["base_model_name_or_path"] == POLICY and len(adapters) == 2 * 7 * 2  # A, B; 7 projections, 2 layers
    base, merged = weights(POLICY), weights(model)
    for name, w in base.items():
        module = name[:-len(".weight")]
        want = w.astype(np.float64)
        if f"{module}.lora_A.weight" in adapters:
            want = want + 2.0 * (adapters[f"{module}.lora_B.weight"].astype(np.float64)
                                 @ adapters[f"{module}.lora_A.weight"].astype(np.float64))
        np.testing.assert_allclose(merged[name], want, rtol=0, atol=1e-6, err_msg=name)
    resume = stop_then_resume(SFTTrainer(load_sft_config(sft_yaml(workdir, "sft_lora_stopped", sft_config=lora))),
                              cli_main, "sft")
    assert "sft_config.finetune=false" in resume
    for a, b in zip(rows(workdir, "sft_lora"), rows(workdir, "sft_lora_stopped")):
        assert {k: v for k, v in a.items() if k != "sft/tokens_per_second"} == \
            {k: v for k, v in b.items() if k != "sft/tokens_per_second"}
    got = weights(workdir / "sft_lora_stopped" / "model")
    for name in merged:
        np.testing.assert_array_equal(got[name], merged[name], err_msg=name)
