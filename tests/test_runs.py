"""A user's run: one directory per run (runs/<name>/<run id>, `latest`), a resumed run continuing its own directory
with each step once, the report (report.png, report.md) at the end of a run and `mindrl plot` for several runs."""
import json
import os
import shlex
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
POLICY = os.path.join(ROOT, "examples", "tiny", "policy")  # the demo's warmed-up policy: its held-out score moves


# -- run directories without MindSpore -------------------------------------------------------------------------

def logging_section(log_dir, run_id=None, name="demo"):
    return SimpleNamespace(log_dir=str(log_dir), run_id=run_id, name=name)


def test_each_new_run_gets_its_own_directory_and_latest_follows(tmp_path):
    from mindrl.trainer.run_dir import set_up_run_dir
    made = []
    for _ in range(3):  # three runs started within the same second: three directories
        lg = logging_section(tmp_path / "runs" / "demo" / "<run_id>")
        made.append(set_up_run_dir(lg, True))
        assert lg.log_dir == made[-1] and os.path.basename(made[-1]) == lg.run_id
    assert len(set(made)) == 3 and all(os.path.isdir(d) for d in made)
    latest = tmp_path / "runs" / "demo" / "latest"
    assert os.path.islink(latest) and os.path.realpath(latest) == os.path.realpath(made[-1])
    info = json.loads((latest / "run.json").read_text())
    assert info["run_id"] == os.path.basename(made[-1]) and info["name"] == "demo" and "resumed" not in info


def test_a_resume_continues_the_directory_of_the_run_it_loads(tmp_path):
    from mindrl.trainer.run_dir import expand_run_dir, set_up_run_dir
    first = set_up_run_dir(logging_section(tmp_path / "<run_id>"), True, checkpoints="<run_dir>/ckpt")
    ckpt = os.path.join(first, "ckpt", "iter_0000002")
    os.makedirs(os.path.join(ckpt, "policy"))
    assert json.loads(open(os.path.join(first, "run.json")).read())["checkpoints"] == expand_run_dir(
        "<run_dir>/ckpt", first)
    for load in (ckpt, os.path.join(tmp_path, "latest", "ckpt")):  # an iter_* directory, or the save root via latest
        lg = logging_section(tmp_path / "<run_id>")
        assert set_up_run_dir(lg, True, load=load, resuming=True) == first
    assert len(json.loads(open(os.path.join(first, "run.json")).read())["resumed"]) == 2
    lg = logging_section(tmp_path / "<run_id>")  # the same checkpoint as a starting point: a new run
    assert set_up_run_dir(lg, True, load=ckpt, resuming=False) != first


def test_a_new_run_into_a_directory_holding_one_is_refused(tmp_path):
    from mindrl.config import ConfigError
    from mindrl.trainer.run_dir import set_up_run_dir
    first = set_up_run_dir(logging_section(tmp_path / "fixed"), True)
    assert set_up_run_dir(logging_section(tmp_path / "fixed"), True) == first  # built, never trained: not a run yet
    write_metrics(first, [{"step": 1, "e2e_tps": 1.0}])
    with pytest.raises(ConfigError, match=r"logging.log_dir: .*fixed already holds a run"):
        set_up_run_dir(logging_section(tmp_path / "fixed"), True)
    assert set_up_run_dir(logging_section(tmp_path / "fixed"), True, load="x", resuming=True) == first
    named = set_up_run_dir(logging_section(tmp_path / "<run_id>", run_id="baseline"), True)
    write_metrics(named, [{"step": 1, "e2e_tps": 1.0}])
    with pytest.raises(ConfigError, match=r"baseline already holds a run"):
        set_up_run_dir(logging_section(tmp_path / "<run_id>", run_id="baseline"), True)


CLAIM = """
import sys, time
from types import SimpleNamespace
from mindrl.trainer.run_dir import set_up_run_dir
print(set_up_run_dir(SimpleNamespace(log_dir=sys.argv[1], run_id="same", name="demo"), True), flush=True)
time.sleep(600)
"""


def test_a_run_directory_in_use_is_refused_until_its_process_is_gone(tmp_path):
    """Two runs started seconds apart with the same logging.run_id shared a directory (the check looked for a
    non-empty metrics.jsonl, which the first run writes only after its first step). The directory is claimed by a
    lock its process holds: a second run, new or resumed, is refused naming the pid while that process lives, and
    takes the directory over once it is gone."""
    from mindrl.config import ConfigError
    from mindrl.trainer.run_dir import set_up_run_dir
    template = str(tmp_path / "<run_id>")
    proc = subprocess.Popen([sys.executable, "-c", CLAIM, template], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        claimed = proc.stdout.readline().strip()
        assert claimed == str(tmp_path / "same")
        for resuming in (False, True):
            with pytest.raises(ConfigError, match=rf"logging.log_dir: {claimed} is in use by another run \(pid "
                                                  rf"{proc.pid}, .*run.lock\)"):
                set_up_run_dir(logging_section(template, run_id="same"), True, load="x", resuming=resuming)
    finally:
        proc.kill()
        proc.wait()
    assert set_up_run_dir(logging_section(template, run_id="same"), True) == claimed  # its process is gone


def test_a_run_name_is_one_path_part():
    """logging.name places the run under runs/<name>/: '../x' wrote outside runs/."""
    from mindrl.config import ConfigError, load_train_config
    for name in ("../x", "a/b", "..", "."):
        with pytest.raises(ConfigError, match=r"logging.name: .* is not a directory name"):
            load_train_config(CONFIG, [f"logging.name={name}"], check_paths=False)
    assert load_train_config(CONFIG, ["logging.name=kl001"], check_paths=False).logging.log_dir == \
        "runs/kl001/<run_id>"


def test_run_id_and_run_dir_keys_are_checked_at_load():
    from mindrl.config import ConfigError, load_train_config
    with pytest.raises(ConfigError, match=r"logging.run_id: 'a/b' is not a directory name"):
        load_train_config(CONFIG, ["logging.run_id=a/b"], check_paths=False)
    with pytest.raises(ConfigError, match=r"logging.run_id: 'x' has no effect: logging.log_dir .* has no <run_id>"):
        load_train_config(CONFIG, ["logging.run_id=x", "logging.log_dir=somewhere"], check_paths=False)
    with pytest.raises(ConfigError, match=r"actor_config.save: 'ckpt/<run_dir>': <run_dir> stands for the run dir"):
        load_train_config(CONFIG, ["actor_config.save=ckpt/<run_dir>"], check_paths=False)
    cfg = load_train_config(CONFIG, [], check_paths=False)
    assert cfg.logging.log_dir == "runs/tiny_math/<run_id>" and cfg.actor_config.save == "<run_dir>/ckpt"


# -- the report -----------------------------------------------------------------------------------------------

def write_metrics(run_dir, rows):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
        fh.write('{"step": 99, "grpo/sco')  # a torn last line, as a killed run leaves


def fake_rows(n, seed, ppo=False):
    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "eval/score/mean": 0.4, "eval/last_number/mean": 0.4}]
    for s in range(1, n + 1):
        row = {"step": s, "timing/all": 1.0 + rng.random(), "timing/rollout": 0.5, "timing/update": 0.4,
               "e2e_tps": 500 + s, "actor/entropy": 1.0 - s / 100, "actor/ppo_kl": 0.01 * rng.random(),
               "response_length/mean": 3 + rng.random(), "response_length/min": 2, "response_length/max": 6,
               ("critic/score/mean" if ppo else "grpo/score/mean"): 0.3 + s / n * 0.2}
        if ppo:
            row.update({"critic/values/mean": 0.1, "critic/rewards/mean": 0.2, "actor/reward_kl_penalty": 0.05,
                        "critic/vf_loss": 1.0 / s, "critic/vf_explained_var": s / n})
        if s % 5 == 0:
            row["eval/score/mean"] = row["eval/last_number/mean"] = 0.4 + s / n * 0.2 - (0.1 if s == 10 else 0)
        rows.append(row)
    return rows


def test_report_summarises_and_draws_a_run(tmp_path):
    from mindrl.trainer.report import read_rows, summarize, write_report
    run = tmp_path / "runs" / "demo" / "r1"
    rows = fake_rows(20, 0)
    write_metrics(run, rows)
    assert [r["step"] for r in read_rows(str(run))] == list(range(21))  # the torn line is skipped
    s = summarize(read_rows(str(run)))
    train = [r for r in rows if "timing/all" in r]
    assert s["steps"] == 20 and s["train_seconds"] == pytest.approx(sum(r["timing/all"] for r in train), abs=0.05)
    assert s["score_key"] == "grpo/score/mean"
    assert s["score_first"] == pytest.approx(np.mean([r["grpo/score/mean"] for r in train[:2]]))
    ev = s["eval"]["eval/last_number/mean"]
    assert (ev["first"], ev["first_step"], ev["last_step"], ev["best_step"]) == (0.4, 0, 20, 20)
    assert ev["best"] == pytest.approx(0.6) and ev["last"] == pytest.approx(0.6)
    lines = write_report(str(run), "somewhere/ckpt")
    assert any("eval/last_number/mean: 0.4000 (step 0) -> 0.6000 (step 20); best 0.6000 at step 20" in line
               for line in lines), lines
    md = (run / "report.md").read_text()
    assert "![metrics](report.png)" in md and "`somewhere/ckpt`" in md
    png = (run / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


def drawn(fig):
    """{panel title: (labels of its lines, x-label)} of a figure plot.py made."""
    return {a.get_title(): ([line.get_label() for line in a.get_lines()], a.get_xlabel()) for a in fig.axes}


def test_each_kind_of_run_draws_its_own_panels(tmp_path):
    """Issue 23 item 5: a PPO run's picture has the critic's panels, a train-rm run's its rm/* panels (it drew six
    empty GRPO ones), steps are whole numbers, and a resumed run's second compile is marked and noted."""
    from mindrl.trainer.plot import Run, figure
    ppo = figure([Run("ppo/1", fake_rows(12, 1, ppo=True))])
    panels = drawn(ppo)
    assert panels["critic/vf_loss"][0] == ["critic/vf_loss"]
    assert panels["critic/vf_explained_var"][0] == ["critic/vf_explained_var"]
    assert all(a.xaxis.get_major_locator()._integer for a in ppo.axes)
    rm_rows = [{"step": 0, "rm/accuracy": 0.0, "rm/margin_mean": 0.0, "rm/num_pairs": 8}]
    rm_rows += [{"step": s, "rm/loss": 0.7 - s / 100, "rm/accuracy": 0.5 + s / 50, "rm/margin_mean": s / 10,
                 "rm/chosen_mean": s / 5, "rm/rejected_mean": s / 10, "rm/grad_norm": 1.0, "rm/lr": 1e-3}
                for s in range(1, 11)]
    rm_rows.append({"step": 10, "rm/accuracy": 0.7, "rm/margin_mean": 1.0, "rm/num_pairs": 8})
    panels = drawn(figure([Run("rm/1", rm_rows)]))
    assert list(panels) == ["rm/loss (Bradley-Terry)", "rm/accuracy", "rm/margin_mean: r(chosen) - r(rejected)",
                            "rewards of chosen and rejected", "rm/grad_norm (before clipping)", "rm/lr"]
    assert panels["rm/accuracy"][0] == ["training batches", "held-out pairs"]
    assert all(lines for lines, _ in panels.values())

    run = tmp_path / "resumed"
    write_metrics(run, fake_rows(12, 2))
    (run / "run.json").write_text(json.dumps({"resumed": [{"at": "x", "from": "ckpt/iter_0000006", "step": 6}]}))
    rows = fake_rows(12, 2)
    rows[7]["timing/all"] = rows[1]["timing/all"] = 40.0  # step 1 and the first step after the resume compiled
    fig = figure([Run("demo/resumed", rows, str(run))])
    time = fig.axes[-1]
    assert time.get_ylim()[1] < 10  # the two compiles are cut off, the steady steps keep the scale
    assert time.get_xlabel().splitlines() == ["step", "cut off: step 1: 40.0 s (compiling), step 7: 40.0 s (compiling)",
                                              "resumed after step 6: step 7 compiles again"]
    assert "(resumed after step 6: red dotted line)" in fig._suptitle.get_text()
    assert all(any(line.get_xdata()[0] == 6.5 for line in a.get_lines()) for a in fig.axes)


def test_several_runs_are_named_by_what_differs_in_their_configs(tmp_path):
    """Issue 23 item 5: twelve runs compared were labelled by their start times, with colours repeating and legends
    over half of each panel. Now: one legend under the panels, each run named by the keys its config changes (a
    key left at its default in one config.yaml counts with that default), ten colours, then another line style."""
    import yaml
    from mindrl.trainer.plot import Run, config_labels, figure
    dirs = []
    for i in range(12):
        d = tmp_path / "runs" / "sweep" / f"2026112{i // 10}-0000{i % 10:02d}"
        cfg = {"rl_config": {"train_iters": 6}, "actor_config": {"lr": [1e-5, 3e-5, 5e-5, 1e-4][i // 3]},
               "logging": {"name": "sweep", "run_id": d.name}}
        if i % 3:
            cfg["rl_config"]["kl_coef"] = [0.0, 0.01, 0.05][i % 3]  # the default 0.0 left out of the first
        write_metrics(d, fake_rows(6, i))
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
        dirs.append(str(d))
    labels = config_labels(dirs, [f"sweep/{os.path.basename(d)}" for d in dirs])
    assert labels[:4] == ["kl_coef=0, lr=1e-05", "kl_coef=0.01, lr=1e-05", "kl_coef=0.05, lr=1e-05",
                          "kl_coef=0, lr=3e-05"]
    assert len(set(labels)) == 12
    same = config_labels(dirs[:1] * 2, ["sweep/a", "sweep/b"])  # nothing differs: the run ids say which is which
    assert same == ["sweep/a", "sweep/b"]
    fig = figure([Run(label, fake_rows(6, i)) for i, label in enumerate(labels)])
    styles = [(line.get_color(), line.get_linestyle()) for line in fig.axes[0].get_lines()]
    assert len(set(styles)) == 12 and styles[10][1] == "--"  # the eleventh run: first colour, dashed
    assert [t.get_text() for t in fig.legends[0].get_texts()] == labels
    assert all(a.get_legend() is None for a in fig.axes)  # no legend inside a panel
    assert fig._suptitle.get_text() == "12 runs"
    filled = [dict(yaml.safe_load(open(os.path.join(d, "config.yaml")))) for d in dirs]
    for d, cfg in zip(dirs, filled):  # a key decided by the others (as kl_coef decides the reference's path)
        cfg["ref"] = {"ref_model_load_path": "policy" if cfg["rl_config"].get("kl_coef") else None}
        (open(os.path.join(d, "config.yaml"), "w")).write(yaml.safe_dump(cfg))
    assert config_labels(dirs, labels) == labels  # says nothing more, and is left out
    titled = figure([Run(label, fake_rows(6, i), d) for i, (label, d) in enumerate(zip(labels, dirs))])
    assert titled._suptitle.get_text() == "12 runs of sweep"


def test_mindrl_plot_overlays_runs_and_refuses_a_non_run(tmp_path):
    import matplotlib.image as mpimg
    for i, ppo in ((1, False), (2, True)):
        write_metrics(tmp_path / f"r{i}", fake_rows(12, i, ppo))
    out = tmp_path / "both.png"
    env = dict(os.environ, GLOG_v="3")
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "plot", str(tmp_path / "r1"), str(tmp_path / "r2"),
                          "-o", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"wrote {out} (2 runs: {tmp_path.name}/r1, {tmp_path.name}/r2)"
    img = mpimg.imread(str(out))
    assert img.shape[0] > 400 and img.shape[1] > 800 and img[..., :3].std() > 0.05  # a drawn picture, not blank
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "plot", str(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "no metrics.jsonl (is it a run directory?)" in res.stderr


def test_mindrl_plot_of_a_names_runs_draws_each_once_and_writes_beside_them(tmp_path, monkeypatch):
    """`mindrl plot runs/demo/*` matches `latest` as well as the run it links to: each run is drawn once, labelled
    <name>/<run id>; without -o the picture goes to the runs' common parent (runs/demo/compared.png), never the
    current directory, and the same command run again (its glob now matching compared.png) still works."""
    import glob
    from mindrl.trainer import report
    for i in (1, 2):
        write_metrics(tmp_path / "runs" / "demo" / f"2026112{i}-000000", fake_rows(6, i))
    os.symlink("20261122-000000", tmp_path / "runs" / "demo" / "latest")
    write_metrics(tmp_path / "runs" / "other" / "20261123-000000", fake_rows(6, 3))
    monkeypatch.chdir(tmp_path)
    read = []
    monkeypatch.setattr(report, "read_rows", lambda d: read.append(d) or fake_rows(6, 1))
    report.plot_runs(sorted(glob.glob("runs/demo/*")), str(tmp_path / "runs" / "x.png"))
    assert read == ["runs/demo/20261121-000000", "runs/demo/20261122-000000"]  # latest is the second: not read again
    assert report.run_label("runs/demo/latest") == "demo/20261122-000000"
    assert report.unique_runs(["runs/demo/latest", "runs/demo/20261122-000000"]) == ["runs/demo/latest"]
    monkeypatch.undo()
    env = dict(os.environ, GLOG_v="3")

    def plot(*runs):
        return subprocess.run([sys.executable, "-m", "mindrl.cli", "plot", *runs], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    for _ in range(2):  # the second time the glob also matches the compared.png the first one wrote
        res = plot(*sorted(glob.glob(str(tmp_path / "runs" / "demo" / "*"))))
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "wrote runs/demo/compared.png (2 runs: demo/20261121-000000, demo/20261122-000000)"
        assert (tmp_path / "runs" / "demo" / "compared.png").read_bytes()[:4] == b"\x89PNG"
    res = plot("runs/demo/latest", "runs/other/20261123-000000")
    assert res.returncode == 0 and res.stdout.startswith("wrote runs/compared.png (2 runs: "), res.stderr
    res = plot("runs/demo/latest", "runs/demo/20261122-000000")  # one run twice: its own report.png
    assert res.returncode == 0 and res.stdout.strip() == "wrote runs/demo/latest/report.png", res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing in the current directory
    res = plot("runs/demo/compared.png")  # a picture alone is no run
    assert res.returncode == 2 and "runs/demo/compared.png: no metrics.jsonl" in res.stderr


# -- held-out evaluation: jsonl sets, predictions, the best checkpoint ---------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("runs"))


def eval_settings(d, log_dir, **over):
    from conftest import tiny_run_settings
    return tiny_run_settings(d, log_dir, **{"eval.path": str(d / "heldout.jsonl"),
                                            "eval.dataset_config": os.path.join(ROOT, "configs", "datasets",
                                                                                "tiny_math.yaml"), **over})


def test_a_jsonl_eval_set_is_tokenized_like_its_mindrecord(workdir):
    """eval.path: heldout.jsonl with the preprocess yaml gives the prompts and labels `mindrl preprocess` wrote."""
    from mindrl.trainer.evaluation import load_eval_set
    tok = os.path.join(ROOT, "examples", "tiny", "tokenizer")
    want = load_eval_set(str(workdir / "heldout.mindrecord"), "prompt_ids", "labels")
    got = load_eval_set(str(workdir / "heldout.jsonl"), "prompt_ids", "labels", None, tok,
                        os.path.join(ROOT, "configs", "datasets", "tiny_math.yaml"))
    assert [list(map(int, p)) for p in want[0]] == got[0] and list(map(str, want[1])) == got[1]
    assert len(got[0]) == 16


def test_evaluate_dumps_every_prediction_with_its_scores(workdir, tmp_path):
    """eval.num_samples=8 of the 16 held-out rows: every other one, spread over the file (the first 200 rows of the
    demo's sorted file scored 0.815 against 0.553 on all), said in the line that announces the evaluation; --dump
    names each prediction's row in the file, and an existing --dump file is refused without --overwrite."""
    from conftest import as_overrides
    dump = tmp_path / "pred" / "predictions.jsonl"
    command = [sys.executable, "-m", "mindrl.cli", "evaluate", "--config", CONFIG] + as_overrides(
        eval_settings(workdir, tmp_path / "logs", **{"eval.num_samples": 8})) + ["--dump", str(dump)]
    res = subprocess.run(command, cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "(8 of its 16 prompts, spread evenly over the file (eval.num_samples; the same rows every time))" \
        in res.stderr
    result = json.loads(res.stdout)
    rows = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(rows) == result["eval/num_samples"] == 8
    prompts = [json.loads(line) for line in (workdir / "heldout.jsonl").read_text().splitlines()]
    from mindrl.rewards.verifiers import last_number_reward
    assert [row["index"] for row in rows] == list(range(0, 16, 2))
    for row in rows:
        src = prompts[row["index"]]
        assert row["prompt"] == src["prompt"] and row["label"] == src["labels"]
        assert row["verifiers"]["last_number"] == last_number_reward(row["response"], row["label"])
        assert row["score"] == pytest.approx(row["verifiers"]["last_number"] + row["verifiers"]["ones"])
    assert result["eval/last_number/mean"] == pytest.approx(np.mean([r["verifiers"]["last_number"] for r in rows]))
    assert f"wrote 8 predictions to {dump}" in res.stderr
    assert not (tmp_path / "logs").exists()  # evaluate writes no run directory
    before = dump.read_text()
    again = subprocess.run(command, cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"mindrl evaluate: {dump} already exists; pass --overwrite to replace it"]
    assert dump.read_text() == before


def test_eval_num_samples_spreads_over_the_file(workdir):
    from mindrl.trainer.evaluation import load_eval_set, spread
    assert spread(1000, 200) == list(range(0, 1000, 5)) and spread(10, None) == spread(10, 50) == list(range(10))
    every, _ = load_eval_set(str(workdir / "heldout.mindrecord"), "prompt_ids", "labels")
    some, _ = load_eval_set(str(workdir / "heldout.mindrecord"), "prompt_ids", "labels", 5)
    assert [list(p) for p in some] == [list(every[i]) for i in (0, 3, 6, 9, 12)]


def test_a_bad_jsonl_eval_row_is_refused_before_anything_runs(workdir, tmp_path):
    from conftest import as_overrides
    bad = tmp_path / "heldout.jsonl"
    bad.write_text('{"prompt": "12+34-05=", "labels": "41"}\n{"prompt": "12+34-05=", "labels": \n')
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG]
                         + as_overrides(eval_settings(workdir, tmp_path / "logs", **{"eval.path": str(bad)})),
                         cwd=ROOT, env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert res.returncode == 2
    assert f"eval.path: {bad}:2: " in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "logs").exists()


def test_save_best_keeps_the_checkpoint_of_the_best_held_out_step(workdir, tmp_path):
    """actor_config.save_best: <save>/best holds the weights of the step whose eval metric was highest (compared
    against the metrics.jsonl the run wrote), beside the keep_last newest checkpoints."""
    from conftest import as_overrides
    from mindrl.config import load_train_config
    from mindrl.models.weights import TensorSource
    from mindrl.trainer import RLTrainer
    save = tmp_path / "ckpt"
    cfg = load_train_config(CONFIG, as_overrides(eval_settings(workdir, tmp_path / "logs", **{
        "rl_config.train_iters": 6, "eval.interval": 1, "actor_config.save": str(save),
        "actor_config.save_interval": 1, "actor_config.keep_last": 1, "actor_config.save_best": "eval/last_number/mean",
        "actor_config.model": POLICY, "actor_config.load": POLICY, "actor_config.lr": 2e-4,
        "rl_config.global_batch_size": 16, "rl_config.mini_batch_size": 16, "rl_config.micro_batch_size": 64})))
    t = RLTrainer(cfg)
    weights = {}
    save_step = t.save

    def remember():
        path = save_step()
        weights[t.step] = t.policy.state_dict()
        return path
    t.save = remember
    t.fit()
    rows = [json.loads(line) for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval/last_number/mean"] for r in rows if r["step"] > 0 and "eval/last_number/mean" in r}
    best_step = max(evals, key=lambda s: (evals[s], -s))  # the first step that reached the highest value
    info = json.loads((save / "best" / "best.json").read_text())
    assert (info["step"], info["metric"]) == (best_step, "eval/last_number/mean")
    assert info["value"] == pytest.approx(evals[best_step])
    assert len(set(evals.values())) > 1, "the metric never moved: the test cannot tell the steps apart"
    kept = TensorSource(str(save / "best" / "policy"))
    for name, value in weights[best_step].items():
        np.testing.assert_array_equal(kept.get(name), value)
    assert sorted(n for n in os.listdir(save) if n.startswith("iter_")) == ["iter_0000006"]  # keep_last 1


# -- a run's own config.yaml reruns (issue 23 item 3) -------------------------------------------------------------

@pytest.mark.parametrize("example", ["examples/grpo/tiny_math.yaml", "examples/ppo/tiny_math.yaml",
                                     "examples/ppo/tiny_math_rm.yaml", "examples/mindspeed_rl/grpo_tiny_math.yaml"])
def test_a_runs_config_yaml_is_the_config_it_started_from(tmp_path, example):
    """The file a run writes loads back (as mindrl's canonical sections, for a MindSpeed-RL file too) to the config
    the run started from, with <run_id> and <run_dir> as written, so it starts a run of its own; a resume writes it
    again but keeps the weights the run started from. It said `logging.run_id ... has no effect` before."""
    from mindrl.config import load_train_config
    from mindrl.trainer.run_config import write_run_config
    cfg = load_train_config(os.path.join(ROOT, example), check_paths=False)
    original = load_train_config(os.path.join(ROOT, example), check_paths=False)
    run = tmp_path / "runs" / cfg.logging.name / "20261126-101010"
    run.mkdir(parents=True)
    cfg.meta.templates = {**cfg.meta.templates, "actor_config.save": cfg.actor_config.save}  # as context.py records them
    cfg.logging.log_dir, cfg.logging.run_id = str(run), run.name
    cfg.actor_config.save = str(run / "ckpt")
    path = write_run_config(cfg, "train", resumed=False, checkpoints=cfg.actor_config.save)
    text = open(path).read()
    assert f"# A new run with it:  mindrl train --config {path}" in text
    resume = text.split("# Resume this run:    ", 1)[1].splitlines()[0]
    assert resume.startswith(f"mindrl train --config {path} actor_config.finetune=false "
                             f"actor_config.load={run / 'ckpt'}")
    # the resume line loads as written: a critic started from other weights resumes from the checkpoint's critic/
    assert resume.endswith("critic_config.load=null") == (cfg.critic_config is not None and
                                                         cfg.critic_config.load is not None)
    assert not load_train_config(path, shlex.split(resume)[4:], check_paths=False).actor_config.finetune
    assert "megatron_training" not in text and "20261126-101010" not in text.split("\n", 3)[3]
    again = load_train_config(path, check_paths=False)
    assert again == original
    assert again.logging.name == original.logging.name  # runs/<name>/, not runs/config/

    resumed = load_train_config(path, shlex.split(resume)[4:] + ["rl_config.train_iters=8"], check_paths=False)
    resumed.meta.templates = dict(cfg.meta.templates)
    resumed.logging.log_dir, resumed.logging.run_id = str(run), run.name
    write_run_config(resumed, "train", resumed=True, checkpoints=str(run / "ckpt"))
    kept = load_train_config(path, check_paths=False)
    assert kept.actor_config.finetune and kept.actor_config.load == original.actor_config.load
    assert kept.rl_config.train_iters == 8  # what the resume changed belongs to the run from then on


@pytest.mark.slow
def test_mindrl_evaluate_reads_a_runs_config_yaml(workdir, tmp_path):
    """`mindrl evaluate --config runs/x/<id>/config.yaml` works (it said `logging.run_id ... has no effect`); a new
    run from such a file is tests/test_interrupt.py's reference run."""
    from conftest import as_overrides, tiny_run_settings
    from mindrl.config import load_train_config
    from mindrl.trainer.run_config import write_run_config
    settings = tiny_run_settings(workdir, tmp_path / "runs" / "<run_id>", **{"actor_config.save": "<run_dir>/ckpt"})
    cfg = load_train_config(CONFIG, as_overrides(settings))
    run = tmp_path / "runs" / "20261126-101010"
    run.mkdir(parents=True)
    cfg.meta.templates = {**cfg.meta.templates, "actor_config.save": cfg.actor_config.save}  # as context.py records them
    cfg.logging.log_dir, cfg.logging.run_id, cfg.actor_config.save = str(run), run.name, str(run / "ckpt")
    path = write_run_config(cfg, "train", resumed=False, checkpoints=cfg.actor_config.save)
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "evaluate", "--config", path,
                          f"eval.path={workdir / 'heldout.mindrecord'}"], cwd=ROOT, env=dict(os.environ, GLOG_v="3"),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["eval/num_samples"] == 16
