"""User reward functions: ``custom_reward_file`` entries (a file that registers functions, ``file.py:func`` or
``module:func``) loaded into the verifier registry, remembering which entry registered which name so that a reward
worker process can load the same function."""
import importlib
import importlib.util
import os
import sys

from .verifiers import VERIFIERS, register_reward, unknown_verifier_message


def _import_file(path):
    """Execute a Python file as a fresh module (its ``register_reward`` calls take effect)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"custom_reward_file: no such file {path}")
    name = "mindrl_custom_reward_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # lets dataclasses/pickle inside the file find their module
    spec.loader.exec_module(module)
    return module


def split_spec(s):
    """``(target, func)`` of a ``custom_reward_file`` entry (``func`` empty for a plain file). The config check and
    the loader both read entries with this, so they agree on what an entry names."""
    return s.rpartition(":")[::2] if ":" in s else (s, "")


def is_file_target(target):
    """A target that names a file (``.py``, or a path) rather than an importable module."""
    return target.endswith(".py") or os.path.sep in target


# (absolute path, size, mtime) of each plain file executed -> the names it registered: the config check and the
# trainer both need them, and the user's file runs once per process (its side effects, if any, happen once)
_FILES_RUN = {}


# name -> (the custom_reward_file entry that registered it, with an absolute path; the function): what a
# reward worker loads to get the same function
_SOURCES = {}


def registered_from(name, fn):
    """The ``custom_reward_file`` entry (absolute path) that registered ``fn`` as ``name``, or None."""
    source = _SOURCES.get(name)
    return source[0] if source is not None and source[1] is fn else None


def reward_func_name(fn) -> str:
    """The one name a Python reward function is registered and reported under (``verifier_function``,
    ``grpo/rewards/<name>/mean``): its ``__name__``. A lambda has none worth naming, so it is refused."""
    name = getattr(fn, "__name__", None)
    if not name or name == "<lambda>":
        raise ValueError(f"reward_funcs: {fn!r} has no name; give it one (def my_reward(response, label): ...) "
                         f"so verifier_function and the metrics (grpo/rewards/<name>/mean) can name it")
    return name


def register_reward_funcs(funcs) -> list:
    """Register Python reward functions under :func:`reward_func_name`; returns their names in order."""
    names = []
    for fn in funcs or ():
        name = reward_func_name(fn)
        if VERIFIERS.get(name) is not fn:
            register_reward(name)(fn)
        names.append(name)
    return names


def load_custom_reward_file(spec):
    """Load user reward functions. ``spec`` is one string or a list of them, each either

    - ``path/to/file.py``: the file registers its functions with ``@register_reward("name")``;
    - ``path/to/file.py:func`` or ``package.module:func``: ``func`` is registered as ``"func"``.

    Returns the names registered by this call.
    """
    specs = [spec] if isinstance(spec, str) else list(spec or [])
    added = []
    for s in specs:
        before = dict(VERIFIERS)
        target, func = split_spec(s)
        if is_file_target(target) and not func:
            path = os.path.abspath(os.path.expanduser(target))
            st = os.stat(path) if os.path.isfile(path) else None
            key = st and (path, st.st_size, st.st_mtime_ns)
            names = _FILES_RUN.get(key)
            if names is not None and all(_SOURCES.get(n, (None, None)) == (path, VERIFIERS.get(n)) for n in names):
                added += names  # run already in this process, and its functions are still the registered ones
                continue
            _import_file(target)
            new = [k for k, v in VERIFIERS.items() if before.get(k) is not v]
            _SOURCES.update({k: (path, VERIFIERS[k]) for k in new})
            if key:
                _FILES_RUN[key] = new
            added += new
            continue
        if is_file_target(target):
            module = _import_file(target)
            source = os.path.abspath(os.path.expanduser(target)) + (f":{func}" if func else "")
        else:
            module = importlib.import_module(target)
            source = s
        if func:
            fn = getattr(module, func, None)
            if not callable(fn):
                raise ValueError(f"custom_reward_file {s!r}: {target} has no function {func!r}")
            register_reward(func)(fn)
        new = [k for k, v in VERIFIERS.items() if before.get(k) is not v]
        _SOURCES.update({k: (source, VERIFIERS[k]) for k in new})
        added += new
    return added


def check_verifier_names(names, custom_reward_file=None):
    """``[(name, why)]`` for each entry of ``names`` that is not a verifier, before anything is built.

    Known: the registry (built-ins, their aliases, anything registered in this process), the ``func`` of
    each ``file.py:func`` / ``module:func`` entry of ``custom_reward_file`` (without importing it), and the
    names a plain ``file.py`` entry registers (the file is executed for that, as the trainer will).
    Raises what loading a plain file raises.
    """
    specs = [custom_reward_file] if isinstance(custom_reward_file, str) else list(custom_reward_file or [])
    known = set(VERIFIERS)
    for s in specs:
        func = split_spec(s)[1]
        known |= {func} if func else set(load_custom_reward_file(s))
    return [(n, unknown_verifier_message(n, known)) for n in names if n not in known]
