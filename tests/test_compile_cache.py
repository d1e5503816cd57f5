"""The compile cache must never hand back a stale graph: a warm launch repeats the cold launch's numbers,
and another config gets another cache directory."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_warm_cache_repeats_cold_results(grpo_workdir_for_cache):
    d = grpo_workdir_for_cache

    def launch(run, *extra):
        cmd = [sys.executable, "-m", "mindrl.cli", "train", "--config",
               os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"), *d["overrides"],
               f"logging.log_dir={d['dir'] / run}", "runtime.enable_compile_cache=true",
               f"runtime.compile_cache_path={d['dir'] / 'cache'}", *extra]
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
        assert res.returncode == 0, res.stderr[-3000:]
        rows = [json.loads(x) for x in open(d["dir"] / run / "metrics.jsonl")]
        return [r for r in rows if "timing/all" in r]

    cold = launch("cold")
    assert len(os.listdir(d["dir"] / "cache")) == 1
    warm = launch("warm")
    assert len(os.listdir(d["dir"] / "cache")) == 1  # same key reused
    for a, b in zip(cold, warm):
        for key in ("grpo/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key
    launch("other", "rl_config.micro_batch_size=4")
    assert len(os.listdir(d["dir"] / "cache")) == 2  # another shape, another key


@pytest.fixture(scope="module")
def grpo_workdir_for_cache(tmp_path_factory):
    from conftest import make_grpo_workdir
    work = make_grpo_workdir(tmp_path_factory.mktemp("grpo_cache"))
    over = ["rl_config.train_iters=2", "rl_config.global_batch_size=4", "rl_config.n_samples_per_prompt=4",
            "rl_config.mini_batch_size=4", "rl_config.micro_batch_size=8", "rl_config.dynamic_sampling=false",
            "rl_config.verifier_function=[last_number,ones]", "rl_config.verifier_weight=[1.0,1.0]",
            f"rl_config.custom_reward_file={work / 'digits.py'}", f"actor_config.model={work / 'policy'}",
            f"actor_config.load={work / 'policy'}", "actor_config.save=null", "actor_config.save_interval=0",
            "actor_config.lr=1e-3", "actor_config.lr_warmup_iters=0", f"data.path={work / 'train.mindrecord'}",
            "eval.path=null", "logging.progress_bar=false", "logging.tensorboard=false"]
    return {"dir": work, "overrides": over}


# -- the key, without a launch ----------------------------------------------------------------------------------------

def tiny_config(tmp_path, *over):
    from mindrl.config import load_train_config
    return load_train_config(os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml"),
                             [f"runtime.compile_cache_path={tmp_path}", "runtime.enable_compile_cache=true", *over],
                             check_paths=False)


def test_each_rank_and_world_size_gets_its_own_directory(tmp_path, monkeypatch):
    from mindrl.parallel.topology import Topology
    from mindrl.trainer.compile_cache import compile_cache_dir
    monkeypatch.chdir(ROOT)  # the config's model path is relative to the checkout
    cfg = tiny_config(tmp_path)
    places = [(0, 1), (0, 2), (1, 2), (0, 4), (3, 4)]
    dirs = [compile_cache_dir(cfg, Topology(rank, world)) for rank, world in places]
    assert len(set(dirs)) == len(places) and all(os.path.dirname(d) == str(tmp_path) for d in dirs)
    assert compile_cache_dir(cfg, Topology(1, 2)) == dirs[2]  # the same place, the same key
    assert compile_cache_dir(tiny_config(tmp_path, "rl_config.micro_batch_size=4"), Topology(1, 2)) != dirs[2]
    # LoRA's adapters and their scale are in the update graphs: each setting its own directory
    lora = [compile_cache_dir(tiny_config(tmp_path, *over), Topology(1, 2)) for over in (
        ["actor_config.lora_rank=8"], ["actor_config.lora_rank=8", "actor_config.lora_alpha=32"],
        ["actor_config.lora_rank=8", "actor_config.lora_target_modules=[q_proj]"])]
    assert len(set(lora + [dirs[2]])) == 4


def test_enabling_keys_by_the_launchers_place_and_sets_mindspores_switches(tmp_path, monkeypatch):
    """The run context enables the cache before communication starts: msrun's announced rank and world key it."""
    from mindrl.parallel.topology import Topology
    from mindrl.trainer.compile_cache import compile_cache_dir, enable_compile_cache
    monkeypatch.chdir(ROOT)
    cfg = tiny_config(tmp_path)
    for name, value in (("MS_WORKER_NUM", "4"), ("RANK_ID", "3"), ("MS_COMPILER_CACHE_ENABLE", "0"),
                        ("MS_COMPILER_CACHE_PATH", "elsewhere")):
        monkeypatch.setenv(name, value)
    path = enable_compile_cache(cfg)
    assert path == compile_cache_dir(cfg, Topology(3, 4)) and os.path.isdir(path)
    assert os.environ["MS_COMPILER_CACHE_ENABLE"] == "1" and os.environ["MS_COMPILER_CACHE_PATH"] == path
