"""rl_config.use_kl_in_loss with kl_coef 0: the default (no KL) loads, a KL term the user asked for is refused."""
import os
import subprocess
import sys

import pytest
import yaml

from mindrl.config import ConfigError, load_train_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = {"actor_config": {"model": "model_configs/tiny.yaml", "tokenizer_name_or_path": "tok"},
        "data": {"path": "train.mindrecord"}}


# the files the config names (the loader checks that they exist)
FILES = {"model_configs/tiny.yaml": "hidden_size: 8\n", "tok/tokenizer.json": "{}", "train.mindrecord": "",
         "train.mindrecord.db": ""}


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def write(ws, rl):
    (ws / "cfg.yaml").write_text(yaml.safe_dump({**BASE, "rl_config": rl}))
    return "cfg.yaml"


def refusal(ws, rl, overrides=()):
    return refusal_of(write(ws, rl), overrides)


def refusal_of(path, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_train_config(path, list(overrides))
    return str(info.value).splitlines()


KL_IN_LOSS_LINE = ("cfg.yaml: rl_config.kl_coef: is 0 but rl_config.use_kl_in_loss is true; set kl_coef > 0 (alias "
                   "init_kl_coef), or drop the KL keys")


def test_the_default_kl_in_loss_without_a_coefficient_loads(ws):
    """use_kl_in_loss defaults to true (MindSpeed-RL's default) and kl_coef to 0: no KL term, no reference model."""
    rl = load_train_config(write(ws, {}), []).rl_config
    assert rl.use_kl_in_loss is True and rl.kl_coef == 0 and not rl.use_kl_in_reward
    rl = load_train_config(write(ws, {"kl_coef": 0.05, "use_kl_in_loss": True}), []).rl_config
    assert rl.use_kl_in_loss is True and rl.kl_coef == 0.05


@pytest.mark.parametrize("rl, overrides", [
    ({"use_kl_in_loss": True}, []),                      # in the yaml, kl_coef left at its default 0
    ({"use_kl_in_loss": True, "kl_coef": 0.0}, []),      # both written
    ({}, ["rl_config.use_kl_in_loss=true"]),             # on the command line
    ({"use_kl_in_loss": True, "kl_coef": 0.1}, ["rl_config.kl_coef=0"]),
    ({"use_kl_in_loss": True, "init_kl_coef": 0.0}, []),  # MindSpeed-RL's spelling of kl_coef
])
def test_kl_in_loss_asked_for_with_kl_coef_0_is_refused_naming_both_keys(ws, rl, overrides):
    lines = refusal(ws, rl, overrides)
    assert len(lines) == 1, lines
    assert lines[0].startswith(KL_IN_LOSS_LINE), lines


def test_kl_in_reward_with_kl_coef_0_is_still_refused(ws):
    assert refusal(ws, {"use_kl_in_reward": True, "use_kl_in_loss": False}) == [
        "cfg.yaml: rl_config.kl_coef: is 0 but rl_config.use_kl_in_reward is true; set kl_coef > 0 (alias "
        "init_kl_coef), or drop the KL keys"]


def test_cli_refuses_before_anything_runs_with_exit_2(ws):
    proc = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", write(ws, {}),
                           "rl_config.use_kl_in_loss=true"], cwd=ws, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3"), timeout=300)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert err[0] == "mindrl: config error:" and len(err) == 2, err
    assert err[1].startswith(KL_IN_LOSS_LINE), err


def test_a_saved_config_reloads_with_the_derived_placement_left_out(ws):
    """A run's config.yaml (to_yaml) must not turn the derived use_kl_in_loss into one the user wrote: the default
    config saved and loaded again is still valid; a placement the user gave is kept, and judged again."""
    cfg = load_train_config(write(ws, {}), [])
    saved = yaml.safe_load(cfg.to_yaml())
    assert "use_kl_in_loss" not in saved.get("rl_config", {})
    (ws / "saved.yaml").write_text(cfg.to_yaml())
    assert load_train_config("saved.yaml", []) == cfg
    given = load_train_config(write(ws, {"use_kl_in_loss": True, "kl_coef": 0.05}), [])
    assert yaml.safe_load(given.to_yaml())["rl_config"]["use_kl_in_loss"] is True
    (ws / "saved.yaml").write_text(given.to_yaml())
    assert refusal_of("saved.yaml", ["rl_config.kl_coef=0"])[0].startswith(KL_IN_LOSS_LINE.replace("cfg", "saved"))
