"""`mindrl convert`, `mindrl generate` and the shipped model yamls."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mindrl.models.config import ModelConfig, load_model_config  # noqa: E402
from mindrl.models.convert import cli_main, convert, expected_tensors  # noqa: E402
from mindrl.models.safetensors_io import SafetensorsFile, open_hf_checkpoint  # noqa: E402
from mindrl.models.weights import TensorSource  # noqa: E402

from conftest import VOCAB  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, GLOG_v="3", MINDRL_THREADS="1")


def run_cli(*args, cwd=None):
    """`python -m mindrl.cli ...` in a subprocess (the console script may not be on PATH)."""
    return subprocess.run([sys.executable, "-m", "mindrl.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=300)


def hf_tensors(directory):
    return {name: f.get(name) for name, f in open_hf_checkpoint(directory).items()}


def torch_logits(directory, ids, dtype=torch.float32):
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()


@pytest.fixture(scope="module")
def ids():
    return np.random.default_rng(7).integers(0, VOCAB, size=(2, 19))


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3"])
def test_expected_tensors_match_the_network(hf_models, arch):
    from mindrl.models.lm import build_network
    from mindrl.models.weights import state_numpy
    config = load_model_config(hf_models[arch][0])
    net = build_network(config, init=False)
    # the network's tensors in the external (HF) orientation, which files use
    assert {n: tuple(a.shape) for n, a in state_numpy(net).items()} == expected_tensors(config)


@pytest.mark.parametrize("arch,ext", [("qwen2", ".ckpt"), ("llama", ".safetensors"), ("qwen3", ".ckpt")])
def test_hf_to_mindspore_to_hf_round_trip(hf_models, tmp_path, arch, ext, ids):
    src = hf_models[arch][0]
    ckpt = str(tmp_path / "ms" / f"model{ext}")
    assert cli_main(["--input", src, "--output", ckpt]) == 0
    assert os.path.exists(os.path.join(os.path.dirname(ckpt), "config.json"))  # so the .ckpt is usable alone
    back = str(tmp_path / "hf")
    assert cli_main(["--input", ckpt, "--output", back]) == 0
    before, after = hf_tensors(src), hf_tensors(back)
    assert sorted(after) == sorted(before)
    for name in before:
        assert after[name].dtype == np.float32
        assert np.array_equal(before[name], after[name]), name
    assert load_model_config(back) == load_model_config(src)
    assert np.array_equal(torch_logits(back, ids), torch_logits(src, ids))


def test_mindspore_checkpoint_loads_in_mindrl(hf_models, tmp_path, ids):
    from mindrl.models import from_pretrained
    src = hf_models["qwen2"][0]
    ckpt = str(tmp_path / "model.ckpt")
    convert(src, ckpt, log=lambda _: None)
    ours = from_pretrained(ckpt).logits(ids.astype(np.int32))  # config.json beside the checkpoint
    ref = from_pretrained(src).logits(ids.astype(np.int32))
    assert np.array_equal(ours, ref)


def test_bf16_export(hf_models, tmp_path, ids):
    src = hf_models["qwen2"][0]
    out = str(tmp_path / "bf16")
    assert cli_main(["--input", src, "--output", out, "--dtype", "bfloat16"]) == 0
    f = SafetensorsFile(os.path.join(out, "model.safetensors"))
    assert {f.dtype(n) for n in f.keys()} == {"BF16"}
    with open(os.path.join(out, "config.json")) as fh:
        assert json.load(fh)["torch_dtype"] == "bfloat16"
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    for name, param in model.state_dict().items():  # torch's own fp32 -> bf16 rounding, bit for bit
        want = param.to(torch.bfloat16).float().numpy()
        assert np.array_equal(f.get(name), want), name
    ref = torch_logits(src, ids)
    got = torch_logits(out, ids)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05
    # bf16 stays bf16 through a MindSpore checkpoint, and re-exporting keeps it without --dtype
    ckpt = str(tmp_path / "ms" / "bf16.safetensors")
    assert cli_main(["--input", out, "--output", ckpt]) == 0
    assert {SafetensorsFile(ckpt).dtype(n) for n in SafetensorsFile(ckpt).keys()} == {"BF16"}
    again = str(tmp_path / "bf16_again")
    assert cli_main(["--input", ckpt, "--output", again]) == 0
    assert open(os.path.join(again, "model.safetensors"), "rb").read() == \
        open(os.path.join(out, "model.safetensors"), "rb").read()
    # a bf16 .ckpt reads back exactly too
    ck = str(tmp_path / "ms2" / "bf16.ckpt")
    assert cli_main(["--input", out, "--output", ck, "--dtype", "bfloat16"]) == 0
    src_t, ck_t = TensorSource(out), TensorSource(ck)
    for name in src_t.names():
        assert np.array_equal(src_t.get(name), ck_t.get(name)), name


def test_sharded_export_and_tokenizer_copy(hf_models, tmp_path):
    src = hf_models["qwen3"][0]
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text('{"eos_token": "x"}')
    (tok / "config.json").write_text("{}")  # not a tokenizer file: must not replace the model's
    out = str(tmp_path / "sharded")
    convert(src, out, tokenizer=str(tok), max_shard_bytes=40_000, log=lambda _: None)
    files = sorted(os.listdir(out))
    assert "model.safetensors.index.json" in files and "model-00001-of-" in " ".join(files)
    assert "tokenizer_config.json" in files
    assert load_model_config(out) == load_model_config(src)
    before, after = hf_tensors(src), hf_tensors(out)
    assert sorted(before) == sorted(after) and all(np.array_equal(before[k], after[k]) for k in before)
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_hidden_layers == 2


def test_refuses_existing_output(hf_models, tmp_path, capsys):
    src = hf_models["qwen2"][0]
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert cli_main(["--input", src, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and "--overwrite" in err
    assert os.listdir(out) == ["keep.txt"]
    ckpt = tmp_path / "m.ckpt"
    ckpt.write_bytes(b"old")
    assert cli_main(["--input", src, "--output", str(ckpt)]) == 2
    assert ckpt.read_bytes() == b"old"
    # --overwrite replaces, and nothing is left behind from staging
    assert cli_main(["--input", src, "--output", str(out), "--overwrite"]) == 0
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors"]
    assert cli_main(["--input", src, "--output", str(ckpt), "--overwrite"]) == 0
    assert set(TensorSource(str(ckpt)).names()) == set(hf_tensors(src))
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f or ".old-" in f]
    # an empty directory is not "existing output"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_main(["--input", src, "--output", str(empty)]) == 0


def test_config_beside_checkpoint_is_not_clobbered(hf_models, tmp_path, capsys):
    d = tmp_path / "ckpts"
    assert cli_main(["--input", hf_models["qwen2"][0], "--output", str(d / "a.ckpt")]) == 0
    assert cli_main(["--input", hf_models["qwen2"][0], "--output", str(d / "b.ckpt")]) == 0  # same model: fine
    capsys.readouterr()
    assert cli_main(["--input", hf_models["llama"][0], "--output", str(d / "c.ckpt")]) == 2
    assert "config.json: exists and describes another model" in capsys.readouterr().err
    assert not (d / "c.ckpt").exists()
    assert cli_main(["--input", hf_models["llama"][0], "--output", str(d / "c.ckpt"), "--no-config"]) == 0
    assert load_model_config(str(d)).model_type == "qwen2"


def test_missing_and_corrupt_input_errors(hf_models, tmp_path):
    missing = str(tmp_path / "no_such_model")
    proc = run_cli("convert", "--input", missing, "--output", str(tmp_path / "x.ckpt"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"mindrl convert: error: {missing}: not found"
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.ckpt").exists()

    # truncated safetensors (an interrupted download)
    broken = tmp_path / "broken"
    broken.mkdir()
    src = hf_models["qwen2"][0]
    (broken / "config.json").write_text(open(os.path.join(src, "config.json")).read())
    data = open(os.path.join(src, "model.safetensors"), "rb").read()
    (broken / "model.safetensors").write_bytes(data[:len(data) // 2])
    assert cli_main(["--input", str(broken), "--output", str(tmp_path / "y.ckpt")]) == 2
    # a corrupt .ckpt, and a checkpoint file with no config anywhere
    bad_ckpt = tmp_path / "alone" / "bad.ckpt"
    bad_ckpt.parent.mkdir()
    bad_ckpt.write_bytes(b"\x00garbage" * 100)
    assert cli_main(["--input", str(bad_ckpt), "--output", str(tmp_path / "z"),
                     "--model-config", os.path.join(src, "config.json")]) == 2
    assert cli_main(["--input", str(bad_ckpt), "--output", str(tmp_path / "z")]) == 2
    assert not any(p.startswith(("y.ckpt", "z")) for p in os.listdir(tmp_path))


def test_error_messages_name_the_problem(hf_models, tmp_path, capsys):
    src = hf_models["qwen2"][0]
    (tmp_path / "ck").mkdir()
    ckpt = str(tmp_path / "ck" / "m.safetensors")
    assert cli_main(["--input", src, "--output", ckpt]) == 0
    capsys.readouterr()
    # the wrong architecture's config: a named tensor and both shapes
    assert cli_main(["--input", ckpt, "--output", str(tmp_path / "o"),
                     "--model-config", os.path.join(hf_models["qwen3"][0], "config.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mindrl convert: error: {ckpt}: ") and "\n" not in err
    assert "q_norm" in err or "shape" in err
    # a config file is not weights
    assert cli_main(["--input", os.path.join(src, "config.json"), "--output", str(tmp_path / "o")]) == 2
    assert "not weights" in capsys.readouterr().err
    assert cli_main(["--input", src, "--output", str(tmp_path / "o"), "--model-config", "nope.yaml"]) == 2
    assert "nope.yaml: model config not found" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_chunked_encoding_matches_whole_tensor(hf_models, dtype):
    from mindrl.models.convert import _Plan
    src = hf_models["qwen2"][0]
    plan = _Plan(TensorSource(src), load_model_config(src), dtype)
    for name in ("model.embed_tokens.weight", "model.norm.weight"):
        pieces = list(plan.encoded(name, chunk_bytes=1000))
        assert len(pieces) > 1 or name == "model.norm.weight"
        assert b"".join(pieces) == b"".join(plan.encoded(name)) and len(b"".join(pieces)) == plan.nbytes(name)


def test_float16_overflow_is_an_error(hf_models, tmp_path, capsys):
    from mindrl.models.safetensors_io import save_safetensors
    src = hf_models["qwen2"][0]
    big = tmp_path / "big"
    big.mkdir()
    tensors = hf_tensors(src)
    tensors["model.norm.weight"] = tensors["model.norm.weight"] * 0 + 7e4
    save_safetensors(tensors, str(big / "model.safetensors"))
    (big / "config.json").write_text(open(os.path.join(src, "config.json")).read())
    assert cli_main(["--input", str(big), "--output", str(tmp_path / "f16"), "--dtype", "float16"]) == 2
    assert "'model.norm.weight' overflows float16" in capsys.readouterr().err
    assert not (tmp_path / "f16").exists() and not [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    assert cli_main(["--input", str(big), "--output", str(tmp_path / "bf16"), "--dtype", "bfloat16"]) == 0


def test_to_yaml(hf_models, tmp_path):
    for arch in ("qwen2", "llama", "qwen3"):
        src = hf_models[arch][0]
        out = str(tmp_path / f"{arch}.yaml")
        assert cli_main(["--input", src, "--output", out, "--to-yaml"]) == 0
        assert load_model_config(out).to_hf_dict() == load_model_config(src).to_hf_dict()


def test_generate_cli_prints_the_same_ids_as_generate(hf_models):
    from mindrl.models import from_pretrained
    from mindrl.rollout import generate
    src = hf_models["qwen2"][0]
    proc = run_cli("generate", "--model", src, "--prompt-ids", "5 17 3 99", "--prompt-ids", "42,7",
                   "--max-new-tokens", "12", "--do-sample", "--n", "3", "--seed", "11", "--top-k", "20",
                   "--temperature", "0.8")
    assert proc.returncode == 0, proc.stderr
    printed = [[int(t) for t in line.split()] for line in proc.stdout.strip().splitlines()]
    want = generate(from_pretrained(src), [[5, 17, 3, 99], [42, 7]], max_new_tokens=12, do_sample=True, n=3,
                    seed=11, top_k=20, temperature=0.8)
    assert printed == want and len(printed) == 6  # prompt-major, n rows per prompt, same seed -> same samples


def test_generate_cli_errors(hf_models, capsys):
    from mindrl.rollout.cli import generate_main
    src = hf_models["qwen2"][0]
    assert generate_main(["--model", src, "--prompt", "hello"]) == 2
    assert "needs a tokenizer" in capsys.readouterr().err
    assert generate_main(["--model", src, "--prompt-ids", f"1 {VOCAB}"]) == 2
    assert f"token id {VOCAB} is outside" in capsys.readouterr().err
    assert generate_main(["--model", "no/such/dir", "--prompt-ids", "1"]) == 2
    assert "no/such/dir: not found" in capsys.readouterr().err


def test_generate_cli_with_tokenizer_and_template(capsys):
    from mindrl.rollout.cli import generate_main
    tok = os.path.join(REPO, "examples", "tiny", "tokenizer")
    if not os.path.exists(os.path.join(tok, "tokenizer.model")):
        pytest.skip("tiny tokenizer not shipped")
    model = os.path.join(REPO, "model_configs", "tiny_qwen2.yaml")
    rc = generate_main(["--model", model, "--tokenizer", tok, "--prompt", "12+34-05=", "--prompt", "hi",
                        "--template", "chatml", "--max-new-tokens", "5"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert captured.out.count("--- prompt ") == 2 and "weights are random" in captured.err


def test_shipped_model_yamls_load():
    files = sorted(glob.glob(os.path.join(REPO, "model_configs", "*.yaml")))
    names = {os.path.basename(f) for f in files}
    assert {"qwen2_5_0_5b.yaml", "qwen2_5_7b.yaml", "qwen2_5_32b.yaml", "llama3_8b.yaml", "llama3_1_8b.yaml",
            "qwen3_8b.yaml", "bench_qwen2_30m.yaml"} <= names
    params = {}
    for f in files:
        config = load_model_config(f)
        assert isinstance(config, ModelConfig)
        params[os.path.basename(f)] = sum(int(np.prod(s)) for s in expected_tensors(config).values())
    # the public parameter counts (to 3 significant digits) pin the shapes
    assert round(params["qwen2_5_0_5b.yaml"] / 1e6) == 494
    assert round(params["qwen2_5_7b.yaml"] / 1e8) == 76
    assert round(params["qwen3_8b.yaml"] / 1e8) == 82
    assert round(params["llama3_1_8b.yaml"] / 1e7) == 803
    assert round(params["bench_qwen2_30m.yaml"] / 1e5) == 309
    scaling = load_model_config(os.path.join(REPO, "model_configs", "llama3_1_8b.yaml")).rope_scaling
    assert scaling["rope_type"] == "llama3" and scaling["factor"] == 8.0
