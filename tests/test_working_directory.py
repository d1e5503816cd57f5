"""Nothing of MindSpore's lands in the working directory: a failed compile's report (rank_<id>/om/analyze_fail.ir)
goes to the run directory, or, outside a run, to a directory of the process under the system's temporary directory;
a user's MS_OM_PATH is kept."""
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")

# a graph that fails to compile: [2, 3] @ [2, 3]
FAILED_COMPILE = textwrap.dedent("""
    import os, sys
    import numpy as np
    import mindspore as ms
    from mindspore import nn, ops
    from mindrl.runtime import setup_context
    setup_context("graph")

    class Bad(nn.Cell):
        def construct(self, x):
            return ops.matmul(x, x)

    try:
        Bad()(ms.Tensor(np.ones((2, 3), np.float32)))
    except (RuntimeError, ValueError) as e:
        print(next(line for line in str(e).splitlines() if "analyze_fail.ir" in line))
    print("pid", os.getpid())
""")


@pytest.mark.parametrize("users", [False, True], ids=["default", "MS_OM_PATH"])
def test_a_failed_compile_reports_outside_the_working_directory(tmp_path, users):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (tmp_path / "failing.py").write_text(FAILED_COMPILE)
    env = {k: v for k, v in os.environ.items() if k != "MS_OM_PATH"}
    env["GLOG_v"] = "3"
    if users:
        env["MS_OM_PATH"] = str(tmp_path / "mine")
    res = subprocess.run([sys.executable, str(tmp_path / "failing.py")], cwd=str(cwd), env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    pid = res.stdout.split("pid ")[-1].strip()
    place = str(tmp_path / "mine") if users else os.path.join(tempfile.gettempdir(), f"mindrl-{os.getuid()}",
                                                               f"mindspore-{pid}")
    report = os.path.join(place, "rank_0", "om", "analyze_fail.ir")
    assert f"'{report}'" in res.stdout  # MindSpore's message names it
    assert os.path.isfile(report)
    assert os.listdir(cwd) == []
    if not users:
        import shutil
        shutil.rmtree(place)


def test_a_run_places_compile_reports_in_its_directory(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import as_overrides, make_grpo_workdir, tiny_run_settings
    from mindrl import runtime
    from mindrl.config import load_train_config
    from mindrl.trainer.context import RunContext
    monkeypatch.delenv("MS_OM_PATH", raising=False)
    monkeypatch.setitem(runtime._STATE, "reports", None)
    d = make_grpo_workdir(tmp_path)
    cfg = load_train_config(CONFIG, as_overrides(tiny_run_settings(d, d / "logs")))
    RunContext.create(cfg)
    assert os.environ["MS_OM_PATH"] == os.path.join(cfg.logging.log_dir, "mindspore")
    monkeypatch.setenv("MS_OM_PATH", str(tmp_path / "mine"))  # the user's: kept
    RunContext.create(load_train_config(CONFIG, as_overrides(tiny_run_settings(d, d / "logs2"))))
    assert os.environ["MS_OM_PATH"] == str(tmp_path / "mine")


def test_a_train_run_leaves_the_working_directory_clean(tmp_path):
    """`mindrl train` from an empty directory, every path absolute: nothing is written there. The model is the one
    whose first update failed to compile (hidden 64, 4 heads, 2 KV heads, micro-batches of 32 rows) and left
    rank_0/om/analyze_fail.ir behind."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import as_overrides, make_grpo_workdir, tiny_run_settings
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import PretrainedLM, build_network
    d = make_grpo_workdir(tmp_path)
    cfg = ModelConfig(model_type="qwen2", vocab_size=192, hidden_size=64, intermediate_size=128, num_layers=1,
                      num_heads=4, n_kv_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
                      qkv_bias=True, eos_token_id=2, pad_token_id=0).validate()
    PretrainedLM(build_network(cfg, seed=3), cfg).save_pretrained(str(d / "policy64"))
    settings = tiny_run_settings(d, d / "logs", **{
        "actor_config.model": str(d / "policy64"), "actor_config.load": str(d / "policy64"),
        "rl_config.global_batch_size": 8, "rl_config.mini_batch_size": 8, "rl_config.micro_batch_size": 32})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG] + as_overrides(settings),
                         cwd=str(cwd), env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert os.listdir(cwd) == []


TRIMMED = textwrap.dedent("""
    import numpy as np
    import mindspore as ms
    from mindspore import nn, ops
    from mindrl import runtime
    calls = []
    runtime._release_free_heap = lambda: calls.append(1)
    runtime.setup_context("graph")
    runtime.setup_context("graph")  # once per process: the compile is wrapped once

    class Double(nn.Cell):
        def construct(self, x):
            return x * 2

    class Square(nn.Cell):
        def construct(self, x):
            return ops.square(x)

    net, x = Double(), ms.Tensor(np.arange(3, dtype=np.float32))
    print("values", net(x).asnumpy().tolist(), net(x).asnumpy().tolist(), Square()(x).asnumpy().tolist())
    print("trims", len(calls))
    import gc
    print("frozen at set-up", gc.get_freeze_count() > 100000)
""")


def test_the_c_heap_is_trimmed_once_after_each_new_compile(tmp_path):
    """mindrl/runtime.py gives glibc's free pages back after each new graph compile (a lower peak: see
    docs/performance.md#real-model): two graphs compiled, one of them called twice -> two trims, and the graphs
    compute what they should. And the objects alive at set-up are frozen (gc.freeze), so that MindSpore's full
    collection before each compile does not walk them."""
    (tmp_path / "trimmed.py").write_text(TRIMMED)
    res = subprocess.run([sys.executable, str(tmp_path / "trimmed.py")], cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, GLOG_v="3"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "values [0.0, 2.0, 4.0] [0.0, 2.0, 4.0] [0.0, 1.0, 4.0]" in res.stdout, res.stdout
    assert "trims 2" in res.stdout, res.stdout
    # what the imports made is out of the collector's reach (MindSpore collects before every compile)
    assert "frozen at set-up True" in res.stdout, res.stdout
