"""Every ```bash block of README.md and docs/*.md runs as written, in the order a new user reads them (issue 23
item 4): the README first, in a clean copy of the repository (its tracked files, nothing else), then each page of the
README's table in its order, in the same copy, as a user who follows them one after the other (rollout.md uses the
files models.md made; a page must also cope with what earlier pages left, such as outputs that exist already).

What the harness may do, all of it visible in the docs:

- a command whose line ends with ``(not run by the docs test: <why>)`` in its comment is not run (the test suite
  itself, downloads, commands that need a real model, a second machine or a GUI); the reason must say why;
- ``(docs test adds: key=value ...)`` in a command's comment appends those arguments (a shorter run:
  ``rl_config.train_iters=2``);
- ``(docs test: checked with mindrl plan)`` on a ``mindrl train`` command runs ``mindrl plan`` with the same
  arguments instead: the config is read, checked and planned as ``train`` would, nothing is trained (variants of a
  run the page trains already, shown for their keys);
- a command a page repeats from an earlier one (the same command before its docs-test additions) is not run again:
  its files are there.

Each command runs in its own ``bash -euo pipefail`` from the copy's root, with the copy's ``.venv`` active (a stand-in
for the one ``scripts/setup.sh`` makes: the test's own interpreter, this checkout's mindrl replaced by the copy's).
After each page, nothing may have been written outside the directories the docs name (runs/, dataset/, scratch/,
log_dir/, strategy/, qwen2_one_log/).
"""
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the README's table of documents, in its order (pages without a ```bash block have nothing to run)
PAGES = ["docs/data.md", "docs/models.md", "docs/rollout.md", "docs/grpo.md", "docs/runs.md", "docs/recipes.md",
         "docs/ppo.md", "docs/reward_model.md", "docs/sft.md", "docs/dpo.md", "docs/lora.md", "docs/configuration.md", "docs/parallel.md"]
WRITABLE = {"runs", "dataset", "scratch", "log_dir", "strategy", "qwen2_one_log"}
SKIP = re.compile(r"\(not run by the docs test: ([^)]+)\)")
ADDS = re.compile(r"\(docs test adds: ([^)]+)\)")
PLAN = "(docs test: checked with mindrl plan)"
TIMEOUT = 1800


@dataclass
class Command:
    page: str
    line: int
    text: str                  # as a user pastes it, comments and all
    adds: List[str] = field(default_factory=list)
    skip: Optional[str] = None

    @property
    def base(self) -> str:
        """The command as written, without its last comment."""
        lines = self.text.rstrip().splitlines()
        return "\n".join(lines[:-1] + [_strip_comment(lines[-1])]).strip()

    @property
    def run(self) -> str:
        """What the shell is given: the command with the docs test's additions (or `mindrl plan` for `train`)."""
        text = " ".join([self.base] + self.adds)
        if PLAN in self.text:
            assert text.startswith("mindrl train "), f"{self.page}:{self.line}: only `mindrl train` can be planned"
            text = "mindrl plan " + text[len("mindrl train "):]
        return text


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# ...`` that is outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _complete(text: str) -> bool:
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:  # an open quote: a python -c "..." spanning lines
        return False
    return True


def commands(page: str) -> List[Command]:
    """The shell commands of ``page``'s ```bash blocks, one per logical line (continuations and quotes joined)."""
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines()
    out, inside, pending, start = [], False, [], 0
    for no, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            inside = line.strip() == "```bash" and not inside
            continue
        if not inside:
            continue
        if not pending and (not line.strip() or line.strip().startswith("#")):
            continue
        if not pending:
            start = no
        pending.append(line)
        text = "\n".join(pending)
        if _complete(text):
            skip, adds = SKIP.search(text), ADDS.search(text)
            out.append(Command(page, start, text, adds.group(1).split() if adds else [],
                               skip.group(1) if skip else None))
            pending = []
    assert not pending, f"{page}:{start}: a command that never ends"
    return out


# -- the clean copy -------------------------------------------------------------------------------------------------

def _script(path: str, body: str) -> None:
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_copy(dest: str) -> set:
    """The repository's tracked files in ``dest`` (returned, relative), and its ``.venv``."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = {rel for rel in tracked.decode().split("\0") if rel and os.path.isfile(os.path.join(ROOT, rel))}
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(dest, rel))
    make_venv(dest)
    return files


def make_venv(dest: str) -> None:
    """A ``.venv`` in ``dest`` that scripts/setup.sh finds ready: this test's interpreter, with ``dest``'s mindrl."""
    shutil.rmtree(os.path.join(dest, ".venv"), ignore_errors=True)
    venv_bin = os.path.join(dest, ".venv", "bin")
    os.makedirs(venv_bin)
    real_bin = os.path.dirname(sys.executable)
    _script(os.path.join(venv_bin, "python"), f'exec "{sys.executable}" "$@"')
    _script(os.path.join(venv_bin, "mindrl"), f'exec "{sys.executable}" -m mindrl.cli "$@"')
    _script(os.path.join(venv_bin, "msrun"), f'exec "{os.path.join(real_bin, "msrun")}" "$@"')
    with open(os.path.join(venv_bin, "activate"), "w") as fh:
        fh.write(f'export VIRTUAL_ENV="{dest}/.venv"\nexport PATH="{venv_bin}:$PATH"\nexport PYTHONPATH="{dest}"\n')
    stamp = subprocess.run("sha256sum setup.cfg pyproject.toml | sha256sum | cut -c1-16", shell=True, cwd=dest,
                           capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(dest, ".venv", ".mindrl-installed"), "w") as fh:  # setup.sh: nothing to install
        fh.write(stamp + "\n")


def environment(copy: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTEST_CURRENT_TEST")}
    env.update(PATH=f"{copy}/.venv/bin:{env.get('PATH', '')}", PYTHONPATH=copy, VIRTUAL_ENV=f"{copy}/.venv",
               GLOG_v="3")
    return env


def unexpected_files(copy: str, tracked: set) -> List[str]:
    """Files written outside the directories the docs name (and outside Python's caches)."""
    out = []
    for top in os.listdir(copy):
        if top in WRITABLE or top == ".venv":
            continue
        path = os.path.join(copy, top)
        walk = os.walk(path) if os.path.isdir(path) else [(copy, [], [top])]
        for dirpath, dirs, files in walk:
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), copy)
                if rel not in tracked:
                    out.append(rel)
    return sorted(out)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_page(page: str, copy: str, done: set, log: list) -> None:
    env = environment(copy)
    for cmd in commands(page):
        where = f"{cmd.page}:{cmd.line}"
        if cmd.skip:
            log.append(f"{where}: not run ({cmd.skip})")
            continue
        if cmd.base in done:
            log.append(f"{where}: ran already (above, or on an earlier page)")
            continue
        started, cpu = time.perf_counter(), _children_cpu()
        # msrun's scheduler port: one the kernel hands out as free, not the launcher's default 8118, which another
        # test file's msrun job (another xdist worker) can take between the launcher's check and msrun's bind
        env["MASTER_PORT"] = str(_free_port())
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd.run], cwd=copy, env=env, capture_output=True,
                             text=True, timeout=TIMEOUT)
        log.append(f"{where}: {time.perf_counter() - started:.0f} s ({_children_cpu() - cpu:.0f} s of CPU) "
                   f"{cmd.run.splitlines()[0][:90]}")
        assert res.returncode == 0, (f"{where}: exit {res.returncode} from\n{cmd.run}\n--- stdout (end) ---\n"
                                     f"{res.stdout[-3000:]}\n--- stderr (end) ---\n{res.stderr[-3000:]}")
        done.add(cmd.base)


def _children_cpu() -> float:
    import resource
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


# -- the tests ------------------------------------------------------------------------------------------------------

def test_every_command_is_found_and_every_skip_says_why():
    """The parser: continuations and multi-line quotes are one command; a skip names its reason."""
    for page in ["README.md"] + PAGES:
        for cmd in commands(page):
            assert cmd.run, (page, cmd.line)
            if cmd.skip is not None:
                assert len(cmd.skip.split()) >= 3, f"{page}:{cmd.line}: say why it is not run"
    got = commands("docs/data.md")
    assert any(c.run.startswith("python -c \"\nfrom mindrl.data import") for c in got)
    assert _strip_comment("a b  # c 'd'") == "a b" and _strip_comment("echo '#x' # y") == "echo '#x'"


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """The clean copy every page runs in, one after the other: (its path, the commands run so far, the repository's
    tracked files)."""
    path = str(tmp_path_factory.mktemp("docs") / "mindrl")
    return path, set(), make_copy(path)


@pytest.mark.slow
@pytest.mark.parametrize("page", ["README.md"] + PAGES)
def test_page_runs_as_written_after_the_ones_before(copy, page):
    path, done, tracked = copy
    log = []
    try:
        run_page(page, path, done, log)
    finally:
        print("\n".join([f"{page}:"] + log))
    assert unexpected_files(path, tracked) == []
