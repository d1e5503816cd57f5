"""Process-wide MindSpore setup, done once and only when a model is about to be built."""
from __future__ import annotations

import os
import tempfile

_STATE = {"mode": None, "threads": None, "reports": None, "trim": False, "frozen": False}

# MindSpore writes a graph that failed to compile (analyze_fail.ir) under $MS_OM_PATH/rank_<id>/om/, by default
# under the working directory. A user's MS_OM_PATH is kept; otherwise mindrl places it (place_compile_reports).
_OM_VAR = "MS_OM_PATH"


def place_compile_reports(path: str) -> None:
    """MindSpore's reports of failed compiles go under ``path`` (read when one is written), unless the user chose
    a place with MS_OM_PATH."""
    if os.environ.get(_OM_VAR) and os.environ[_OM_VAR] != _STATE["reports"]:
        return  # the user's
    _STATE["reports"] = os.environ[_OM_VAR] = os.path.abspath(path)


def setup_context(mode: str = "graph", threads=None) -> None:
    """Select GRAPH/PYNATIVE mode on the available device and set CPU op threads (default: all cores)."""
    import mindspore as ms
    if mode not in ("graph", "pynative"):
        raise ValueError(f"runtime.mode: {mode!r} is not one of graph, pynative")
    want = ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE
    if ms.get_context("mode") != want:  # read the live context: other code may have changed it
        ms.set_context(mode=want)
    _STATE["mode"] = mode
    if _STATE["reports"] is None:  # out of the working directory; a run puts them into its directory
        place_compile_reports(os.path.join(tempfile.gettempdir(), f"mindrl-{getattr(os, 'getuid', lambda: 0)()}",
                                           f"mindspore-{os.getpid()}"))
    _trim_after_compiles()
    _freeze_what_exists()
    if ms.get_context("device_target") == "CPU" and _STATE["threads"] is None:
        threads = int(threads or os.environ.get("MINDRL_THREADS", 0) or os.cpu_count() or 1)
        try:
            ms.device_context.cpu.op_tuning.threads_num(threads)
        except RuntimeError:
            pass  # already set by the user (it may only be set once per process)
        _STATE["threads"] = threads


def _freeze_what_exists() -> None:
    """Move every object alive now (modules, classes: what the imports made) out of the garbage collector's reach.

    MindSpore runs a full collection before every graph compile; its cost grows with the objects alive, and the
    imports (MindSpore's, and torch's where loaded) made about half of them: a tiny GRPO process's 13 collections
    took 3.1 s of its 30 s, 1.5 s with them frozen. Frozen objects are still freed when their reference count
    drops; only cycles among them wait for ``gc.unfreeze``. Once per process."""
    if _STATE["frozen"]:
        return
    import gc
    gc.collect()
    gc.freeze()
    _STATE["frozen"] = True


def _trim_after_compiles() -> None:
    """After each new graph compile, give the C heap's free pages back to the system (:func:`_release_free_heap`).

    Compiling frees much of what it allocated, but glibc keeps those pages, and the graph's own buffers are then
    allocated elsewhere: trimming lowered GRPO's peak on SmolLM2-135M from 6.41 to 6.11 GiB
    (bench/memory_phases.py, docs/performance.md#real-model)."""
    if _STATE["trim"]:
        return
    _STATE["trim"] = True
    try:
        from mindspore.graph.api import _CellGraphExecutor
    except ImportError:
        return
    compile_graph = _CellGraphExecutor.compile

    def compile_and_trim(executor, obj, *args, **kwargs):
        out = compile_graph(executor, obj, *args, **kwargs)
        if compiled_anew(out):
            _release_free_heap()
        return out

    _CellGraphExecutor.compile = compile_and_trim


def compiled_anew(out) -> bool:
    """Did MindSpore's ``_CellGraphExecutor.compile``, which returned ``out``, compile a new graph (rather than
    answer with one its executor had)?"""
    return out[1] if isinstance(out, tuple) and len(out) > 1 else True


def _release_free_heap() -> None:
    """glibc's malloc_trim; nothing where the C library has none. No garbage collection before it: it cost 0.21 s
    a compile (2.8 of a tiny GRPO process's 30 s) and lowered no peak (bench/memory_phases.py: 5.16 GiB either
    way, 7 Dec)."""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def use_compile_cache(path: str) -> None:
    """MindSpore stores compiled graphs in ``path`` and reuses those it finds there (its environment switches,
    read when a graph compiles)."""
    os.makedirs(path, exist_ok=True)
    os.environ["MS_COMPILER_CACHE_ENABLE"] = "1"
    os.environ["MS_COMPILER_CACHE_PATH"] = path
