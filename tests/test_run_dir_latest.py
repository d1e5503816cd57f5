"""`runs/<name>/latest` is staged like every other file mindrl writes, so a leftover of a killed start-up is found
and removed by the next one."""
import os
import subprocess
import sys
from types import SimpleNamespace

from mindrl.io import stale_staging, staging_path


def logging_section(log_dir):
    return SimpleNamespace(log_dir=str(log_dir), run_id=None, name="demo")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_latest_is_staged_under_the_shared_scheme(tmp_path, monkeypatch):
    from mindrl.trainer.run_dir import set_up_run_dir
    staged, real = [], os.symlink

    def symlink(src, dst, *a, **kw):
        staged.append(str(dst))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "symlink", symlink)
    made = set_up_run_dir(logging_section(tmp_path / "runs" / "demo" / "<run_id>"), True)
    link = tmp_path / "runs" / "demo" / "latest"
    assert staged == [staging_path(str(link))]
    assert os.readlink(link) == os.path.basename(made)
    assert sorted(os.listdir(link.parent)) == sorted([os.path.basename(made), "latest"])  # nothing staged is left


def test_a_killed_start_up_leaves_a_link_the_next_one_removes(tmp_path):
    """A process killed between staging the link and renaming it leaves `.latest.tmp-<pid>`: a link, here a dangling
    one (its run directory was never kept). The next start-up in that parent removes it and points `latest` anew."""
    from mindrl.trainer.run_dir import set_up_run_dir
    parent = tmp_path / "runs" / "demo"
    parent.mkdir(parents=True)
    leftover = staging_path(str(parent / "latest"), owner=str(dead_pid()))
    os.symlink("20000101-000000", leftover)
    assert stale_staging(str(parent)) == [leftover]  # the shared scheme's cleanup recognises it
    made = set_up_run_dir(logging_section(parent / "<run_id>"), True)
    assert not os.path.lexists(leftover)
    assert os.path.realpath(parent / "latest") == os.path.realpath(made)
    assert sorted(os.listdir(parent)) == sorted([os.path.basename(made), "latest"])


def test_a_live_writers_staged_link_is_left_alone(tmp_path):
    from mindrl.trainer.run_dir import set_up_run_dir
    parent = tmp_path / "runs" / "demo"
    parent.mkdir(parents=True)
    busy = staging_path(str(parent / "other"), owner=str(os.getppid()))  # a running process's
    os.symlink("x", busy)
    set_up_run_dir(logging_section(parent / "<run_id>"), True)
    assert os.path.islink(busy)
