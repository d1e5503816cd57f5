"""Fault injection: damaged checkpoints, killed processes, full and read-only disks, and inputs that do not fit
the model. Each ends with the newest complete, finite checkpoint loadable and either a resumed run that repeats
the uninterrupted one exactly, or a clear error naming the file or key (docs/reliability.md lists them)."""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
CONFIG = os.path.join(ROOT, "examples", "grpo", "tiny_math.yaml")
TOKENIZER = os.path.join(ROOT, "examples", "tiny", "tokenizer")
# what a resumed run must repeat exactly (timings and throughput differ from run to run)
TRAJECTORY = ("grpo/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/pg_clipfrac",
              "response_length/mean", "grpo/rewards/ones/mean")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from conftest import make_grpo_workdir
    return make_grpo_workdir(tmp_path_factory.mktemp("reliability"))


def settings(d, run, **over):
    from conftest import tiny_run_settings
    s = tiny_run_settings(d, d / run / "logs", **{
        "rl_config.train_iters": 6, "actor_config.save": str(d / run / "ckpt"), "actor_config.save_interval": 1,
        "actor_config.keep_last": 0, "logging.tensorboard": "false"})
    s.update(over)
    return s


def load(s):
    from conftest import as_overrides
    from mindrl.config import load_train_config
    return load_train_config(CONFIG, as_overrides(s))


def train_cmd(s):
    from conftest import as_overrides
    return [sys.executable, "-m", "mindrl.cli", "train", "--config", CONFIG] + as_overrides(s)


def cli(s, timeout=600, prefix=()):
    return subprocess.run(list(prefix) + train_cmd(s), cwd=ROOT, env=dict(os.environ, GLOG_v="3"),
                          capture_output=True, text=True, timeout=timeout)


def rows(log_dir):
    with open(os.path.join(log_dir, "metrics.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def policy_tensors(checkpoint):
    from mindrl.models.weights import TensorSource
    src = TensorSource(str(checkpoint))
    return {n: src.get(n) for n in src.names()}


@pytest.fixture(scope="module")
def saved(workdir):
    """An uninterrupted 2-step run with a checkpoint after each step."""
    from mindrl.trainer import RLTrainer
    RLTrainer(load(settings(workdir, "saved", **{"rl_config.train_iters": 2}))).fit()
    return workdir / "saved" / "ckpt"


def flip_byte(path):
    """Change one byte in the middle of ``path``; its size stays the same."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def refusal(workdir, load_path, finetune="false", **over):
    """The one line preflight refuses the tiny run loading ``load_path`` with (as `mindrl train` would, exit 2)."""
    from mindrl.config import ConfigError
    from mindrl.trainer.preflight import preflight
    with pytest.raises(ConfigError) as err:
        preflight(load(settings(workdir, "x", **{"actor_config.finetune": finetune,
                                                  "actor_config.load": str(load_path), **over})))
    assert len(err.value.errors) == 1, err.value.errors
    return err.value.errors[0]


def test_a_byte_flip_in_any_checkpoint_file_is_named_and_the_older_one_offered(workdir, saved, tmp_path):
    from mindrl.config import ConfigError
    from mindrl.trainer.preflight import preflight
    newest = saved / "iter_0000002"
    files = sorted(json.loads((newest / "manifest.json").read_text())["files"]) + ["manifest.json"]
    assert "policy/model.safetensors" in files and "policy/optimizer.safetensors" in files
    weights = {"policy/model.safetensors", "policy/config.json"}
    for i, rel in enumerate(files):
        root = tmp_path / f"case{i}"
        shutil.copytree(saved, root)
        flip_byte(root / "iter_0000002" / rel)
        # resuming reads every file: each flip is found before anything is built
        with pytest.raises(ConfigError) as err:
            preflight(load(settings(workdir, "x", **{"actor_config.finetune": "false",
                                                      "actor_config.load": str(root)})))
        assert len(err.value.errors) == 1, err.value.errors
        line = err.value.errors[0]
        assert "actor_config.load" in line and str(root / "iter_0000002") in line, (rel, line)
        if rel != "manifest.json":
            assert rel in line and ("checksum differs" in line or "not a valid" in line), (rel, line)
        assert f"load that one (e.g. actor_config.load={root / 'iter_0000001'})" in line, line
        if rel in weights:  # starting from the weights alone (finetune) reads and checks them too
            with pytest.raises(ConfigError, match="checksum differs"):
                preflight(load(settings(workdir, "x", **{"actor_config.load": str(root)})))


def test_the_offered_checkpoint_resumes(workdir, saved, tmp_path):
    """The older checkpoint named by the error loads and continues."""
    from mindrl.trainer import RLTrainer
    root = tmp_path / "run"
    shutil.copytree(saved, root)
    flip_byte(root / "iter_0000002" / "policy" / "model.safetensors")
    t = RLTrainer(load(settings(workdir, "offered", **{"actor_config.finetune": "false",
                                                       "actor_config.load": str(root / "iter_0000001"),
                                                       "actor_config.save": "null", "actor_config.save_interval": 0,
                                                       "rl_config.train_iters": 2})))
    assert t.step == 1
    assert np.isfinite(t.train_step()["actor/pg_loss"])


def test_a_damaged_reference_model_is_named_before_anything_runs(workdir, saved, tmp_path):
    """The reference model's weights (ref.ref_model_load_path, read when kl_coef > 0) are checked against their
    checkpoint's manifest like the policy's: a flipped byte is named before anything is built; the intact copy
    passes the same check."""
    from mindrl.config import ConfigError
    from mindrl.trainer.preflight import preflight
    ref = tmp_path / "ref"
    shutil.copytree(saved / "iter_0000001", ref)
    over = {"rl_config.kl_coef": 0.01, "ref.ref_model_load_path": str(ref)}
    preflight(load(settings(workdir, "x", **over)))
    flip_byte(ref / "policy" / "model.safetensors")
    with pytest.raises(ConfigError) as err:
        preflight(load(settings(workdir, "x", **over)))
    assert len(err.value.errors) == 1, err.value.errors
    line = err.value.errors[0]
    assert line.startswith(f"<config>: ref.ref_model_load_path: {ref}") and "policy/model.safetensors" in line and \
        "checksum differs" in line, line


def test_an_unreadable_trainer_state_is_named(workdir, saved, tmp_path):
    from mindrl.manifest import write_manifest
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.trainer import checkpoint as ck
    it = tmp_path / "iter_0000002"
    shutil.copytree(saved / "iter_0000002", it)
    (it / "trainer_state.json").write_text('{"step": ')
    os.remove(it / "manifest.json")
    write_manifest(str(it), {"step": 2})  # sealed as it is: the checksum passes, the JSON does not
    with pytest.raises(CheckpointError, match=r"trainer_state\.json: not a valid trainer state \(JSONDecodeError"):
        ck.load_trainer_state(str(it))


def test_leftovers_of_a_crashed_save_are_removed_at_start(workdir, saved, tmp_path, caplog):
    from mindrl.trainer import RLTrainer
    root = tmp_path / "ckpt"
    shutil.copytree(saved, root)
    (root / ".iter_0000003.tmp-ranks" / "policy").mkdir(parents=True)   # a killed save's staging directory
    (root / ".iter_0000003.tmp-ranks" / "policy" / "model.safetensors").write_bytes(b"partial")
    (root / ".latest_checkpointed_iteration.txt.tmp-999999999").write_text("3")  # a dead writer's file
    caplog.set_level("INFO", logger="mindrl.train")
    RLTrainer(load(settings(workdir, "leftovers", **{"actor_config.save": str(root), "rl_config.train_iters": 3,
                                                      "actor_config.load": str(root), "actor_config.finetune": "false"})))
    assert sorted(os.listdir(root)) == ["iter_0000001", "iter_0000002", "latest_checkpointed_iteration.txt"]
    removed = [r.getMessage() for r in caplog.records if "a save that did not finish" in r.getMessage()]
    assert len(removed) == 2 and any(".iter_0000003.tmp-ranks" in m for m in removed), removed


def test_a_trainer_state_with_a_step_no_run_can_be_at_is_refused(workdir, saved, tmp_path):
    """A sealed trainer_state.json whose step is negative, not a whole number, or beyond rl_config.train_iters is
    refused before anything is built, naming the file and the step (a run resumed at step -5 trained on)."""
    from mindrl.manifest import write_manifest
    for i, step in enumerate([-5, 2.5, "2", True, 99]):
        it = tmp_path / f"case{i}" / "iter_0000002"
        shutil.copytree(saved / "iter_0000002", it)
        state = json.loads((it / "trainer_state.json").read_text())
        state["step"] = step
        (it / "trainer_state.json").write_text(json.dumps(state))
        os.remove(it / "manifest.json")
        write_manifest(str(it), {"step": 2})  # sealed as it is: only the step is wrong
        line = refusal(workdir, it)
        assert line.startswith(f"<config>: actor_config.load: {it / 'trainer_state.json'}: step {step!r}"), line
        if step == 99:
            assert "beyond rl_config.train_iters=6" in line, line


def test_a_missing_tracker_lists_the_intact_checkpoints_to_resume_from(workdir, saved, tmp_path):
    """Without latest_checkpointed_iteration.txt the save directory is not mistaken for weights (the advice was
    finetune: true): the error lists the intact iter_* directories and the key that resumes from the newest."""
    root = tmp_path / "ckpt"
    shutil.copytree(saved, root)
    os.remove(root / "latest_checkpointed_iteration.txt")
    flip_byte(root / "iter_0000001" / "policy" / "model.safetensors")  # damaged: not offered
    for finetune in ("false", "true"):
        line = refusal(workdir, root, finetune)
        assert line.startswith(f"<config>: actor_config.load: {root}: no latest_checkpointed_iteration.txt"), line
        assert "finetune: true" not in line and "intact checkpoints: iter_0000002;" in line, line
        assert f"actor_config.load={root / 'iter_0000002'}" in line, line


# -- what a checkpoint may hold ------------------------------------------------------------------------------------
def sealed_copy(saved, tmp_path):
    root = tmp_path / "ckpt"
    shutil.copytree(saved, root)
    return root, root / "iter_0000002" / "policy", root / "iter_0000001" / "policy" / "model.safetensors"


def write_index(part, weight_map):
    (part / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def tensor_names(path):
    from mindrl.models.safetensors_io import SafetensorsFile
    return SafetensorsFile(str(path)).keys()


@pytest.mark.parametrize("case", ["unlisted index", "index reaching outside, resealed", "symlink out"])
def test_only_files_the_manifest_lists_are_read(workdir, saved, tmp_path, case):
    """A file the manifest does not list never replaces sealed weights: an added model.safetensors.index.json (it
    was preferred over the listed model.safetensors, so a resume trained on another checkpoint's weights), an index
    whose paths leave the checkpoint (even when the manifest is rewritten to list it), and a listed file that is a
    symbolic link out of the checkpoint directory are each refused before anything is built, naming the file."""
    from mindrl.manifest import write_manifest
    root, part, other = sealed_copy(saved, tmp_path)
    if case == "unlisted index":
        shutil.copy(other, part / "model-00001-of-00001.safetensors")
        write_index(part, {n: "model-00001-of-00001.safetensors" for n in tensor_names(other)})
        fragment = "model.safetensors.index.json: not listed in"
    elif case == "index reaching outside, resealed":
        write_index(part, {n: "../../iter_0000001/policy/model.safetensors" for n in tensor_names(other)})
        os.remove(part.parent / "manifest.json")
        write_manifest(str(part.parent), {"step": 2})
        fragment = "'../../iter_0000001/policy/model.safetensors'"
    else:
        outside = tmp_path / "elsewhere.safetensors"
        shutil.copy(part / "model.safetensors", outside)  # the same bytes: its checksum matches
        os.remove(part / "model.safetensors")
        os.symlink(outside, part / "model.safetensors")
        fragment = "model.safetensors: outside the checkpoint directory"
    for finetune in ("false", "true"):
        line = refusal(workdir, root, finetune)
        assert line.startswith("<config>: actor_config.load: ") and fragment in line, (case, line)


def test_an_index_naming_files_outside_an_hf_directory_is_refused(saved, tmp_path):
    """An HF directory's index may only name files inside it: no '..', no absolute path."""
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.models.weights import TensorSource
    other = saved / "iter_0000001" / "policy" / "model.safetensors"
    for i, target in enumerate([str(other), "../x/model.safetensors"]):
        hf = tmp_path / f"hf{i}"
        shutil.copytree(saved / "iter_0000002" / "policy", hf)
        os.remove(hf / "model.safetensors")
        write_index(hf, {n: target for n in tensor_names(other)})
        with pytest.raises(CheckpointError, match=r"model\.safetensors\.index\.json: .* names " + re.escape(repr(target))):
            TensorSource(str(hf))


def test_any_one_byte_change_to_the_manifest_is_refused(workdir, saved, tmp_path):
    """The manifest is checked as a whole: every one-byte change is refused. It was not: renaming a record's key
    xxh3_64 made it read as an older size-only record, so a same-size flip in the weights was then loaded."""
    from mindrl.models.safetensors_io import CheckpointError
    from mindrl.trainer import checkpoint as ck
    root, part, _ = sealed_copy(saved, tmp_path)
    manifest = root / "iter_0000002" / "manifest.json"
    original = manifest.read_bytes()
    passed = []
    for i in range(len(original)):
        for mask in (0x01, 0x07, 0x20):
            data = bytearray(original)
            data[i] ^= mask
            manifest.write_bytes(bytes(data))
            try:
                ck.verify(str(root / "iter_0000002"))
                passed.append((i, mask, bytes(data[max(0, i - 12):i + 12])))
            except CheckpointError:
                pass
    manifest.write_bytes(original)
    ck.verify(str(root / "iter_0000002"))
    assert not passed, f"{len(passed)} one-byte changes passed, e.g. {passed[:5]}"
    # the reported case: the weights record's key renamed, then a same-size flip in the weights
    text = original.decode()
    at = text.index('"policy/model.safetensors"')
    at = text.index('"xxh3_64"', at)
    manifest.write_text(text[:at] + '"xxh3_65"' + text[at + 9:])
    flip_byte(part / "model.safetensors")
    assert str(manifest) in refusal(workdir, root)


def test_a_manifest_of_another_format_is_refused_and_reseal_upgrades_an_older_one(workdir, saved, tmp_path):
    """Manifests before format 2 carry no checksum of their own: they are refused (naming the command that
    re-seals one after checking its files against it), and so is a newer format; after `mindrl reseal` the
    checkpoint resumes."""
    from mindrl.io import write_json
    from mindrl.trainer.preflight import preflight
    root, _, _ = sealed_copy(saved, tmp_path)
    it = root / "iter_0000002"
    current = json.loads((it / "manifest.json").read_text())
    files = {rel: {"size": rec["size"], "xxh3_64": rec["xxh3_64"]} for rel, rec in current["files"].items()}
    for header, fragment in [({"step": 2, "version": 3}, "format 3"), ({"step": 2}, f"`mindrl reseal {it}`")]:
        os.remove(it / "manifest.json")
        write_json(str(it / "manifest.json"), {**header, "files": files})
        line = refusal(workdir, root)
        assert str(it / "manifest.json") in line and fragment in line, line
    res = subprocess.run([sys.executable, "-m", "mindrl.cli", "reseal", str(it)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith(f"resealed {it}: {len(files)} files checked against its "
                                                         f"format-1 manifest ({len(files)} by checksum, 0 by size"), res
    preflight(load(settings(workdir, "x", **{"actor_config.finetune": "false", "actor_config.load": str(root)})))


def test_two_runs_on_one_save_directory_keep_each_others_staging(tmp_path):
    """A save in progress is never removed by another run that starts or saves on the same directory: a staging
    directory carries its saving process's pid, and only those whose process is gone are cleaned up."""
    from mindrl.io import remove_stale_staging
    from mindrl.trainer import checkpoint as ck
    root = str(tmp_path / "ckpt")
    code = ("import os, time\nfrom mindrl.trainer import checkpoint as ck\n"
            f"p = ck.begin({root!r}, 3)\nopen(os.path.join(p, 'part'), 'w').write('x')\nprint(p, flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        theirs = proc.stdout.readline().strip()
        assert theirs, "the other run did not start its save"
        ours = ck.begin(root, 3)  # this run saves the same step (and cleans leftovers first)
        assert remove_stale_staging(root) == [] and os.path.exists(os.path.join(theirs, "part")) and ours != theirs
    finally:
        proc.kill()
        proc.wait()
    assert remove_stale_staging(root) == [theirs] and os.path.isdir(ours)  # its process is gone; ours is alive


# -- killed processes ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def uninterrupted(workdir):
    """The reference: the same 6-step run as the killed ones, never interrupted (through the CLI, as they are)."""
    s = settings(workdir, "uninterrupted")
    res = cli(s)
    assert res.returncode == 0, res.stderr[-3000:]
    return s


def newest_checkpoint(root):
    from mindrl.trainer import checkpoint as ck
    step = ck.latest_step(str(root)) if os.path.isdir(root) else None
    return None if step is None else ck.iter_dir(str(root), step)


def resume_settings(workdir, run):
    s = settings(workdir, run)
    if newest_checkpoint(s["actor_config.save"]):
        s.update({"actor_config.load": s["actor_config.save"], "actor_config.finetune": "false"})
    return s


def assert_same_trajectory(workdir, run, reference):
    from mindrl.trainer import checkpoint as ck
    got, want = rows(workdir / run / "logs"), rows(reference["logging.log_dir"])
    steps = [r["step"] for r in got if "timing/all" in r]
    assert steps == [1, 2, 3, 4, 5, 6], steps  # every step once, after however many restarts
    for a, b in zip([r for r in want if "timing/all" in r], [r for r in got if "timing/all" in r]):
        for key in TRAJECTORY:
            assert a[key] == b[key], (a["step"], key, a[key], b[key])
    mine, theirs = workdir / run / "ckpt" / "iter_0000006", os.path.join(reference["actor_config.save"], "iter_0000006")
    ck.verify(str(mine))
    a, b = policy_tensors(mine / "policy"), policy_tensors(os.path.join(theirs, "policy"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)  # bit for bit
    assert all(np.isfinite(v).all() for v in a.values())


def wait_for_rows(log_dir, n, proc, deadline):
    path = os.path.join(log_dir, "metrics.jsonl")
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(path):
            with open(path) as fh:
                if sum('"timing/all"' in line for line in fh) >= n:
                    return True
        time.sleep(0.002)
    return False


@pytest.mark.slow
def test_kill_9_at_random_points_of_training_resumes_the_same_trajectory(workdir, uninterrupted):
    """Three SIGKILLs, each a random time within the step after a random step's metrics appear (so they land in a
    rollout, an update or a save); after each, the run is restarted from its newest checkpoint."""
    run, chooser, kills = "killed", random.Random(11), 0
    log_dir = workdir / run / "logs"
    while kills < 3:
        s = resume_settings(workdir, run)
        done = len([r for r in rows(log_dir) if "timing/all" in r]) if (log_dir / "metrics.jsonl").exists() else 0
        proc = subprocess.Popen(train_cmd(s), cwd=ROOT, env=dict(os.environ, GLOG_v="3"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            target = min(5, done + chooser.randint(1, 2))
            if wait_for_rows(log_dir, target, proc, time.monotonic() + 300):
                time.sleep(chooser.uniform(0.0, 0.05))  # a step (rollout, update, save) takes about 40 ms here
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        finally:
            proc.wait()
        newest = newest_checkpoint(s["actor_config.save"])
        if newest:  # whatever was killed, the newest sealed checkpoint is complete and finite
            from mindrl.trainer import checkpoint as ck
            ck.verify(newest)
    res = cli(resume_settings(workdir, run))
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_trajectory(workdir, run, uninterrupted)


KILL_IN_SAVE = """
import os, signal, sys
import mindrl.trainer.roles.base as base
real, calls = base.export_hf, []
def export_then_die(full, *args, **kw):
    real(full, *args, **kw)           # the weights of checkpoint 3 are on disk, its optimizer and manifest are not
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
base.export_hf = export_then_die
from mindrl.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_kill_9_in_the_middle_of_a_save_leaves_the_previous_checkpoint_newest(workdir, uninterrupted):
    run = "killed_in_save"
    s = settings(workdir, run)
    proc = subprocess.run([sys.executable, "-c", KILL_IN_SAVE] + train_cmd(s)[3:], cwd=ROOT,
                          env=dict(os.environ, GLOG_v="3"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    root = workdir / run / "ckpt"
    assert newest_checkpoint(root).endswith("iter_0000002")
    staged = [n for n in os.listdir(root) if re.fullmatch(r"\.iter_0000003\.tmp-ranks\d+", n)]
    assert not (root / "iter_0000003").exists() and len(staged) == 1, os.listdir(root)  # named after the dead pid
    res = cli(resume_settings(workdir, run))
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{staged[0]}: a save that did not finish" in res.stderr
    assert not (root / staged[0]).exists()
    assert_same_trajectory(workdir, run, uninterrupted)


# -- disks that cannot take a checkpoint ------------------------------------------------------------------------
def _namespaces_work():
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


NAMESPACES = _namespaces_work()
needs_mounts = pytest.mark.skipif(not NAMESPACES,
                                  reason="needs `unshare -rm` (a private mount namespace) to mount a small tmpfs")


def in_tmpfs(mount, options, then=""):
    """A command prefix that runs the rest inside a private mount namespace with a tmpfs at ``mount``, then runs
    the shell code ``then`` in the same namespace (the tmpfs vanishes with it) and exits with the command's status."""
    mount.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o {options} tmpfs "{mount}" || exit 99; "$@"; rc=$?; {then or ":"}; exit $rc'
    return ["unshare", "-rm", "sh", "-c", script, "sh"]


def checkpoint_bytes_on_tmpfs(checkpoint):
    """What a checkpoint directory takes on a tmpfs: every file rounded up to 4 KiB pages."""
    return sum(-(-os.path.getsize(os.path.join(d, f)) // 4096) * 4096
               for d, _, names in os.walk(checkpoint) for f in names)


def writes_through_mode_bits(directory):
    """True when this process can create a file in ``directory`` despite its mode (root, CAP_DAC_OVERRIDE)."""
    import tempfile
    try:
        with tempfile.NamedTemporaryFile(dir=directory):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("case", [
    "read-only", "too small",
    # where namespaces are not allowed: a directory without write permission, the read-only case's stand-in
    pytest.param("no write permission", marks=pytest.mark.skipif(NAMESPACES, reason="the tmpfs cases run"))])
def test_an_unusable_save_directory_is_refused_before_anything_runs(workdir, tmp_path, case):
    mount = tmp_path / "disk"
    s = settings(workdir, "unusable", **{"actor_config.save": str(mount / "ckpt")})
    if case == "no write permission":
        mount.mkdir()
        mount.chmod(0o555)
        try:
            if writes_through_mode_bits(mount):
                pytest.skip("this user writes through mode bits (root): neither a tmpfs nor a mode can stop it")
            res = cli(s, timeout=120)
        finally:
            mount.chmod(0o755)
    elif NAMESPACES:
        res = cli(s, timeout=120, prefix=in_tmpfs(mount, "size=4m,ro" if case == "read-only" else "size=16k"))
    else:
        pytest.skip("needs `unshare -rm` (a private mount namespace) to mount a small tmpfs")
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert lines[0] == "mindrl: config error:" and len(lines) == 2, res.stderr
    assert lines[1].startswith(f"{CONFIG}: actor_config.save: {mount / 'ckpt'}")
    if case == "too small":
        assert "MiB free on its filesystem, but one checkpoint of this run takes" in lines[1]
    else:
        reason = "Read-only file system" if case == "read-only" else "Permission denied"
        assert f"not writable ({mount}: {reason})" in lines[1], lines[1]


@needs_mounts
@pytest.mark.slow
def test_a_disk_that_fills_up_mid_run_keeps_the_last_checkpoint(workdir, saved, tmp_path):
    """Room for one checkpoint and a half: the first save fits, the second runs out of space. The run stops with
    exit status 1 naming the file and the newest checkpoint; nothing half-written is left; that checkpoint loads."""
    mount = tmp_path / "disk"
    size = checkpoint_bytes_on_tmpfs(saved / "iter_0000001") * 3 // 2 + 8192
    s = settings(workdir, "full", **{"actor_config.save": str(mount / "ckpt"), "rl_config.train_iters": 3})
    listing = tmp_path / "listing"
    then = (f'ls -a "{mount}/ckpt" > "{listing}"; "{sys.executable}" -c "from mindrl.trainer import checkpoint as c; '
            f'c.verify(\'{mount}/ckpt/iter_0000001\')" && echo verified >> "{listing}"')
    prefix = in_tmpfs(mount, f"size={size}", then)
    res = cli(s, timeout=600, prefix=prefix)
    assert res.returncode == 1, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("mindrl train: error: writing checkpoint 2 failed: No space left on device (") and \
        str(mount / "ckpt") in last and f"newest complete checkpoint is still {mount / 'ckpt' / 'iter_0000001'}" in last
    seen = listing.read_text().split()
    assert sorted(x for x in seen if x not in (".", "..")) == \
        ["iter_0000001", "latest_checkpointed_iteration.txt", "verified"], seen


# -- a log directory that fills up ---------------------------------------------------------------------------------
@needs_mounts
def test_a_full_log_directory_stops_the_run_with_one_line(workdir, tmp_path):
    """logging.log_dir on a 2 MiB tmpfs that a filler fills once the first row is in metrics.jsonl (TensorBoard on,
    checkpoints elsewhere, after every step): exit 1 and one line naming metrics.jsonl and what to do, no traceback;
    the checkpoint it names is the newest, complete, and no later one was begun."""
    mount = tmp_path / "disk"
    s = settings(workdir, "full_log", **{"logging.log_dir": str(mount / "logs"), "logging.tensorboard": "true",
                                         "rl_config.train_iters": 30})
    fill = (f'"$@" & pid=$!; while [ ! -s "{mount}/logs/metrics.jsonl" ] && kill -0 $pid 2>/dev/null; do sleep 0.1; '
            f'done; dd if=/dev/zero of="{mount}/filler" bs=4k 2>/dev/null; wait $pid')
    res = cli(s, timeout=600, prefix=in_tmpfs(mount, "size=2m") + ["sh", "-c", fill, "sh"])
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "Exception" not in res.stderr, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if "error" in line.lower()]
    ckpt = workdir / "full_log" / "ckpt"
    from mindrl.trainer import checkpoint as ck
    newest = ck.latest_step(str(ckpt))
    assert errors == [f"mindrl train: error: cannot write {mount / 'logs' / 'metrics.jsonl'}: No space left on device; "
                      f"the run stopped at step {newest + 1}. Free space there or set logging.log_dir to a directory "
                      f"with room, then resume from the newest checkpoint, {ck.iter_dir(str(ckpt), newest)} "
                      f"(actor_config.load={ckpt} actor_config.finetune=false)"], res.stderr[-3000:]
    ck.verify(ck.iter_dir(str(ckpt), newest))
    assert sorted(os.listdir(ckpt)) == sorted([f"iter_{i:07d}" for i in range(1, newest + 1)] +
                                              ["latest_checkpointed_iteration.txt"])


def test_a_tensorboard_that_cannot_write_is_one_warning_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    """TensorBoard beside metrics.jsonl is a view of the same numbers: when its events cannot be written, one warning
    names the directory, and every step still reaches metrics.jsonl."""
    import errno
    from mindrl.trainer import tensorboard
    from mindrl.trainer.metrics import MetricsLogger
    logger = MetricsLogger(str(tmp_path), jsonl=True, tensorboard=True)
    logger.log(1, {"x": 1.0})

    def full(self, step, metrics):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tensorboard.ScalarWriter, "write", full)
    for step in (2, 3):
        logger.log(step, {"x": float(step)})
    logger.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot write {tmp_path / 'tensorboard'}: No space left on device; TensorBoard is off for the rest of the "
        "run (metrics.jsonl has every number)"]
    assert [row["step"] for row in rows(tmp_path)] == [1, 2, 3]
    assert tensorboard_scalars(tmp_path / "tensorboard") == [(1, "x", 1.0)]  # what was written before stays readable


def tensorboard_scalars(directory):
    """(step, tag, value) of every scalar in the event files under ``directory`` (TFRecords of Event protos)."""
    import struct
    from tensorboardX.proto.event_pb2 import Event
    out = []
    for name in sorted(os.listdir(directory)):
        data = (directory / name).read_bytes()
        while data:
            (n,) = struct.unpack("Q", data[:8])
            event = Event.FromString(data[12:12 + n])
            data = data[12 + n + 4:]
            out += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
    return out


@pytest.mark.parametrize("jsonl", [True, False], ids=["metrics.jsonl", "tensorboard alone"])
def test_a_record_that_cannot_be_written_is_log_write_failed(tmp_path, monkeypatch, jsonl):
    """metrics.jsonl, or TensorBoard when it is the only record: LogWriteFailed naming the file, and nothing written
    later (no flush at close or at exit)."""
    import errno
    from mindrl.trainer import tensorboard
    from mindrl.trainer.metrics import LogWriteFailed, MetricsLogger
    logger = MetricsLogger(str(tmp_path), jsonl=jsonl, tensorboard=True)
    logger.log(1, {"x": 1.0})

    class Full:
        def write(self, *args):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        close = write  # what could not be written is flushed again at close

    if jsonl:
        logger._jsonl.close()
        monkeypatch.setattr(logger, "_jsonl", Full())
    else:
        monkeypatch.setattr(tensorboard.ScalarWriter, "write", Full.write)
    where = tmp_path / ("metrics.jsonl" if jsonl else "tensorboard")
    with pytest.raises(LogWriteFailed, match=f"^cannot write {where}: No space left on device$"):
        logger.log(2, {"x": 2.0})
    logger.close()  # nothing left to write


# -- inputs that do not fit the model ------------------------------------------------------------------------------
def small_vocab_policy(d):
    """The workdir's policy architecture with a vocabulary of 100 (the tiny tokenizer has 192 pieces)."""
    from mindrl.models.config import ModelConfig
    from mindrl.models.lm import PretrainedLM, build_network
    out = d / "policy_v100"
    if not out.exists():
        cfg = ModelConfig(model_type="qwen2", vocab_size=100, hidden_size=32, intermediate_size=64, num_layers=1,
                          num_heads=4, n_kv_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
                          qkv_bias=True, eos_token_id=2, pad_token_id=0).validate()
        PretrainedLM(build_network(cfg, seed=3), cfg).save_pretrained(str(out))
    return out


def foreign_ids_mindrecord(d):
    """Prompts tokenized by some other tokenizer: row 3 holds id 4000."""
    from mindspore.mindrecord import FileWriter
    path = d / "foreign.mindrecord"
    if not path.exists():
        w = FileWriter(str(path), 1, overwrite=True)
        w.add_schema({"prompt_ids": {"type": "int32", "shape": [-1]}, "labels": {"type": "string"}}, "prompts")
        rows_ = [{"prompt_ids": np.array([5, 6, 7 + i] + ([4000] if i == 3 else []), np.int32), "labels": "1"}
                 for i in range(64)]
        w.write_raw_data(rows_)
        w.commit()
    return path


@pytest.mark.parametrize("case", ["tokenizer", "data ids", "context", "long prompt"])
def test_inputs_that_do_not_fit_the_model_are_refused_naming_the_key(workdir, case):
    if case == "tokenizer":
        p = small_vocab_policy(workdir)
        over, key, fragment = {"actor_config.model": str(p), "actor_config.load": str(p)}, \
            "actor_config.tokenizer_name_or_path", "the tokenizer has 192 tokens but the model"
    elif case == "data ids":
        over, key, fragment = {"data.path": str(foreign_ids_mindrecord(workdir))}, "data.path", \
            "row 3 holds token id 4000, beyond the model's vocab_size 192"
    elif case == "context":
        over, key, fragment = {"generate_config.max_tokens": 60}, \
            "generate_config.max_prompt_length + generate_config.max_tokens", "= 76 tokens exceed the model's context"
    else:
        over, key, fragment = {"generate_config.max_prompt_length": 8}, "data.path", \
            "-token prompt, longer than generate_config.max_prompt_length=8"
    res = cli(settings(workdir, "mismatch", **{"actor_config.save": "null", "actor_config.save_interval": 0, **over}),
              timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert lines[0] == "mindrl: config error:" and len(lines) == 2, res.stderr
    assert lines[1].startswith(f"{CONFIG}: {key}: ") and fragment in lines[1], lines[1]


# -- a killed msrun worker --------------------------------------------------------------------------------------
LAUNCHER = os.path.join(ROOT, "scripts", "msrun_launch.sh")


def msrun_train(s, tag, log_dir):
    """The launcher running `mindrl train` on 2 local workers (a Popen); ``tag`` marks the job's processes."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, MASTER_PORT=str(port), LOG_DIR=str(log_dir), WORKERS_PER_NODE="2", NNODES="1",
               NODE_RANK="0", QUIET="1", GLOG_v="3", MINDRL_FAULT_TEST=tag)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return subprocess.Popen(["bash", LAUNCHER, "python"] + train_cmd(s)[1:], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def job_processes(tag, rank=None):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if f"MINDRL_FAULT_TEST={tag}".encode() in env and \
                (rank is None or f"RANK_ID={rank}".encode() in env and b"MS_ROLE=MS_WORKER" in env):
            found.append(int(pid))
    return found


def msrun_settings(workdir, run):
    # 2 ranks: rollout dp 2, train dp 2 (one micro-batch of 8 per rank per update)
    return settings(workdir, run, **{"rl_config.train_iters": 5})


@pytest.mark.msrun
@pytest.mark.slow
def test_kill_9_of_an_msrun_worker_resumes_the_same_trajectory(workdir):
    ref = msrun_settings(workdir, "msrun_ref")
    proc = msrun_train(ref, "ref", workdir / "msrun_ref" / "msrun")
    assert proc.wait(900) == 0, proc.stderr.read()[-3000:]

    run, chooser = "msrun_killed", random.Random(5)
    s = msrun_settings(workdir, run)
    proc = msrun_train(s, "killed", workdir / run / "msrun")
    try:
        assert wait_for_rows(workdir / run / "logs", chooser.randint(2, 3), proc, time.monotonic() + 600)
        time.sleep(chooser.uniform(0.0, 0.1))
        workers = job_processes("killed", rank=1)
        assert workers, "rank 1's worker was not found"
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        rc = proc.wait(60)  # the launcher sees the lost rank and stops the job
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc != 0 and not job_processes("killed"), rc
    newest = newest_checkpoint(s["actor_config.save"])
    assert newest is not None
    from mindrl.trainer import checkpoint as ck
    ck.verify(newest)
    s.update({"actor_config.load": s["actor_config.save"], "actor_config.finetune": "false"})
    proc = msrun_train(s, "resumed", workdir / run / "msrun2")
    assert proc.wait(900) == 0, proc.stderr.read()[-3000:]
    got = [r for r in rows(workdir / run / "logs") if "timing/all" in r]
    want = [r for r in rows(workdir / "msrun_ref" / "logs") if "timing/all" in r]
    assert [r["step"] for r in got] == [1, 2, 3, 4, 5]
    for a, b in zip(want, got):
        for key in TRAJECTORY:
            assert a[key] == b[key], (a["step"], key)
    a = policy_tensors(workdir / "msrun_ref" / "ckpt" / "iter_0000005" / "policy")
    b = policy_tensors(workdir / run / "ckpt" / "iter_0000005" / "policy")
    assert all(np.array_equal(a[k], b[k]) for k in a)


# -- memory over a long run ----------------------------------------------------------------------------------------
SOAK_STEPS, SOAK_EVERY, SOAK_SETTLED = 160, 20, 30  # steps; saves and evaluations every SOAK_EVERY; warm-up


@pytest.mark.slow
def test_resident_memory_stays_flat_over_160_steps(workdir):
    """160 steps with saves, pruning and evaluations (every 20 steps): after the warm-up, resident memory grows by
    less than 24 MiB (a leak of one batch's tensors per step would pass that within a few dozen steps). It was 300
    steps, saving and evaluating every 50, until CI's time ran over its budget."""
    s = settings(workdir, "soak", **{"rl_config.train_iters": SOAK_STEPS, "actor_config.save_interval": SOAK_EVERY,
                                     "actor_config.keep_last": 2, "eval.path": str(workdir / "heldout.mindrecord"),
                                     "eval.interval": SOAK_EVERY})
    res = cli(s, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    rss = {r["step"]: r["memory/rss_gb"] for r in rows(s["logging.log_dir"]) if "memory/rss_gb" in r}
    assert sorted(rss) == list(range(1, SOAK_STEPS + 1))
    settled = rss[SOAK_SETTLED]
    growth_mib = (max(rss[k] for k in range(SOAK_SETTLED, SOAK_STEPS + 1)) - settled) * 1024
    print(f"rss at step {SOAK_SETTLED}: {settled * 1024:.0f} MiB; largest growth after it: {growth_mib:.1f} MiB")
    assert growth_mib < 24, {k: round(v * 1024, 1) for k, v in rss.items() if k % SOAK_EVERY == 0}
