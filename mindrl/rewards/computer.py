"""Weighted sum of verifiers over a batch, plus loading user reward functions from a file."""
import importlib
import importlib.util
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from .verifiers import VERIFIERS, get_verifier, register_reward


@dataclass
class RewardOutput:
    """``scores``: weighted sum per sample (float32 [N]); ``per_verifier``: each verifier's own,
    unweighted scores, keyed by the name used in ``verifier_function``; ``math_timeouts``: samples
    cut by the math timeout in this batch (they scored 0)."""

    scores: np.ndarray
    per_verifier: dict = field(default_factory=dict)
    math_timeouts: int = 0

    def metrics(self, prefix="grpo/rewards"):
        """``{prefix}/{name}/mean`` for every verifier, ``{prefix}/mean`` for the weighted sum."""
        out = {f"{prefix}/mean": float(self.scores.mean()) if self.scores.size else 0.0}
        for name, s in self.per_verifier.items():
            out[f"{prefix}/{name}/mean"] = float(s.mean()) if s.size else 0.0
        out[f"{prefix}/math_timeouts"] = self.math_timeouts
        return out


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


def load_custom_reward_file(spec):
    """Load user reward functions. ``spec`` is one string or a list of them, each either

    - ``path/to/file.py``: the file registers its functions with ``@register_reward("name")``;
    - ``path/to/file.py:func`` or ``package.module:func``: ``func`` is registered as ``"func"``.

    Returns the names registered by this call.
    """
    specs = [spec] if isinstance(spec, str) else list(spec or [])
    added = []
    for s in specs:
        before = {k: id(v) for k, v in VERIFIERS.items()}
        target, _, func = s.rpartition(":") if ":" in s else (s, "", "")
        if target.endswith(".py") or os.path.sep in target:
            module = _import_file(target)
        else:
            module = importlib.import_module(target)
        if func:
            fn = getattr(module, func, None)
            if not callable(fn):
                raise ValueError(f"custom_reward_file {s!r}: {target} has no function {func!r}")
            register_reward(func)(fn)
        added += [k for k, v in VERIFIERS.items() if before.get(k) != id(v)]
    return added


class RewardComputer:
    """Scores a batch with ``sum_i verifier_weight[i] * verifier_function[i](response, label)`` (0 for every
    sample when no verifier is named: a run scored by a reward model alone).

    Names are validated here, at construction, so a typo fails before the first rollout. Math
    verification runs in a private ``MathVerifyPool`` (``math_workers`` processes, ``math_timeout``
    seconds per sample), started on first use or by ``start()``.
    """

    def __init__(self, verifier_function, verifier_weight, custom_reward_file=None, math_timeout=5.0, math_workers=1):
        if isinstance(verifier_function, str):
            verifier_function = [verifier_function]
        if isinstance(verifier_weight, (int, float)):
            verifier_weight = [verifier_weight]
        names, weights = list(verifier_function), [float(w) for w in verifier_weight]
        if len(names) != len(weights):
            raise ValueError(
                f"verifier_function has {len(names)} entries but verifier_weight has {len(weights)}; "
                "give one weight per verifier"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"verifier_function lists a name twice: {names}")
        if not all(math.isfinite(w) for w in weights):
            raise ValueError(f"verifier_weight must be finite numbers, got {weights}")
        if custom_reward_file:
            load_custom_reward_file(custom_reward_file)
        self.names = names
        self.weights = weights
        self.fns = [get_verifier(n) for n in names]  # ValueError listing the valid names
        self.math_timeout = float(math_timeout)
        self.math_workers = int(math_workers)
        self._pool = None

    @property
    def pool(self):
        if self._pool is None:
            from .math_pool import MathVerifyPool

            self._pool = MathVerifyPool(num_workers=self.math_workers, timeout=self.math_timeout)
        return self._pool

    def start(self):
        """Start the math workers now, if any verifier needs them."""
        if any(getattr(fn, "uses_math_pool", False) for fn in self.fns):
            self.pool.start()

    def close(self):
        if self._pool is not None:
            self._pool.close()

    def __call__(self, responses, labels):
        responses, labels = list(responses), [str(x) for x in labels]
        if len(responses) != len(labels):
            raise ValueError(f"{len(responses)} responses but {len(labels)} labels")
        timeouts_before = self._pool.timeouts if self._pool is not None else 0
        total = np.zeros(len(responses), np.float64)
        per = {}
        for name, w, fn in zip(self.names, self.weights, self.fns):
            if getattr(fn, "uses_math_pool", False):
                vals = fn.score_batch(responses, labels, pool=self.pool)
            elif hasattr(fn, "score_batch"):
                vals = fn.score_batch(responses, labels)
            else:
                vals = []
                for i, (r, lab) in enumerate(zip(responses, labels)):
                    try:
                        vals.append(fn(r, lab))
                    except Exception as e:
                        raise RuntimeError(f"reward function {name!r} failed on sample {i}: {e!r}") from e
            vals = np.asarray(vals, np.float64).reshape(-1)
            per[name] = vals.astype(np.float32)
            total += w * vals
        timeouts = (self._pool.timeouts if self._pool is not None else 0) - timeouts_before
        return RewardOutput(total.astype(np.float32), per, timeouts)

    compute = __call__


def build_reward_computer(rl, reward_funcs=None) -> RewardComputer:
    """The run's rule rewards from ``rl_config`` (verifier_function, verifier_weight, custom_reward_file,
    verifier_timeout). ``reward_funcs``: Python callables ``f(response, label) -> float`` registered under their
    ``__name__`` first, so ``verifier_function`` can name them (the Python API's way in)."""
    for fn in reward_funcs or ():
        register_reward(getattr(fn, "__name__", None) or repr(fn))(fn)
    return RewardComputer(rl.verifier_function, rl.verifier_weight, rl.custom_reward_file,
                          math_timeout=rl.verifier_timeout)
