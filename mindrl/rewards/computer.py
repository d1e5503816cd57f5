"""Weighted sum of verifiers over a batch (each call contained: containment.py)."""
import logging
import math
from dataclasses import dataclass, field

import numpy as np

from .containment import Failure, RewardPool, ThreadCaller, importable_path
from .custom import load_custom_reward_file, register_reward_funcs, registered_from
from .verifiers import get_verifier, is_builtin, verify_prepared
from .workers import WorkerStartError

log = logging.getLogger("mindrl.rewards")


class RewardError(RuntimeError):
    """A reward call failed (raised, overran ``verifier_timeout`` or returned something other than a finite
    number) and there is no ``reward_fallback`` to score it with."""


@dataclass
class RewardOutput:
    """``scores``: weighted sum per sample (float32 [N]); ``per_verifier``: each verifier's own,
    unweighted scores, keyed by the name used in ``verifier_function``; ``math_timeouts``: math checks
    cut by the timeout in this batch (the verifier scored them 0, its verdict, not a failure);
    ``failures``: calls that failed and were scored ``reward_fallback``, ``timeouts`` the part of them that
    overran the timeout; ``failed``: the first few failures (``containment.Failure``)."""

    scores: np.ndarray
    per_verifier: dict = field(default_factory=dict)
    math_timeouts: int = 0
    failures: int = 0
    timeouts: int = 0
    failed: list = field(default_factory=list)

    def counts(self, prefix="grpo/rewards"):
        """The batch's ``{prefix}/failures``, ``{prefix}/timeouts`` and ``{prefix}/math_timeouts``: counts that
        add up over batches (the trainer sums them over a step's draws and ranks)."""
        return {f"{prefix}/failures": self.failures, f"{prefix}/timeouts": self.timeouts,
                f"{prefix}/math_timeouts": self.math_timeouts}

    def metrics(self, prefix="grpo/rewards"):
        """``{prefix}/{name}/mean`` for every verifier, ``{prefix}/mean`` for the weighted sum, and ``counts``."""
        out = {f"{prefix}/mean": float(self.scores.mean()) if self.scores.size else 0.0}
        for name, s in self.per_verifier.items():
            out[f"{prefix}/{name}/mean"] = float(s.mean()) if s.size else 0.0
        out.update(self.counts(prefix))
        return out


class RewardComputer:
    """Scores a batch with ``sum_i verifier_weight[i] * verifier_function[i](response, label)`` (0 for every
    sample when no verifier is named: a run scored by a reward model alone).

    Names are validated here, at construction, so a typo fails before the first rollout.

    Containment (``containment.py`` says where each function runs, and why): every call, built-in or user's,
    has ``timeout`` seconds, and every value must be a finite real number. A call that raises, overruns or returns
    anything else scores ``fallback``; with ``fallback=None`` the batch stops with a ``RewardError`` naming the
    function, the sample and what went wrong. The calls run in a private ``RewardPool`` (``reward_workers``
    processes), math-verify's checks (``math_acc``, ``acc``, ``math_17k_acc``, ...) in a private ``MathVerifyPool``
    (``math_workers`` processes; a check cut by the timeout scores 0); both start on first use or by ``start()``
    (``spawn()``: without waiting).
    """

    def __init__(self, verifier_function, verifier_weight, custom_reward_file=None, timeout=5.0, fallback=None,
                 math_workers=1, reward_workers=1):
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
        if fallback is not None and not math.isfinite(float(fallback)):
            raise ValueError(f"reward_fallback must be a finite number or None, got {fallback}")
        if timeout <= 0:
            raise ValueError(f"verifier_timeout must be > 0, got {timeout}")
        if custom_reward_file:
            load_custom_reward_file(custom_reward_file)
        self.names = names
        self.weights = weights
        self.fns = [get_verifier(n) for n in names]  # ValueError listing the valid names
        self.timeout = float(timeout)
        self.fallback = None if fallback is None else float(fallback)
        self.math_workers = int(math_workers)
        self.placement = {n: self._place(n, fn) for n, fn in zip(names, self.fns)}
        targets = {n: p[1] for n, p in self.placement.items() if p[0] == "worker"}
        self._math = any(t.get("pairs") for t in targets.values())  # a verifier with math-verify checks
        self._pool = None
        self._rewards = RewardPool(targets, timeout=self.timeout, num_workers=reward_workers) if targets else None
        self._threads = ThreadCaller(self.timeout)

    @staticmethod
    def _place(name, fn):
        """``("worker", target)`` or ``("thread",)``: see containment.py."""
        if is_builtin(name):  # module-level functions of mindrl.rewards.verifiers: always importable
            prepare = getattr(fn, "prepare", None)
            attr = importable_path(prepare or fn)
            if attr:
                return ("worker", {"attr": attr, "pairs": True} if prepare else {"attr": attr})
        spec = registered_from(name, fn)
        if spec is not None:
            return ("worker", {"spec": spec})
        attr = importable_path(fn)
        return ("worker", {"attr": attr}) if attr else ("thread",)

    @property
    def pool(self):
        if self._pool is None:
            from .math_pool import MathVerifyPool

            self._pool = MathVerifyPool(num_workers=self.math_workers, timeout=self.timeout)
        return self._pool

    @property
    def reward_pool(self):
        """The ``RewardPool`` running the reward calls (None when every verifier runs in a thread)."""
        return self._rewards

    def start(self):
        """Start the worker processes now (reward workers; math workers if a verifier needs them)."""
        if self._rewards is not None:
            self._start_rewards()
        if self._math:
            self.pool.start()

    def spawn(self):
        """Start the reward workers without waiting: they load (about 0.2 s) while the trainer builds."""
        if self._rewards is not None:
            self._rewards.spawn()

    def _start_rewards(self):
        try:
            self._rewards.start()
        except WorkerStartError as e:
            raise RewardError(f"{e} (functions {', '.join(sorted(self._rewards.targets))}; a worker process "
                              f"loads them as the trainer did: they must load in a fresh interpreter)") from None

    def close(self):
        if self._pool is not None:
            self._pool.close()
        if self._rewards is not None:
            self._rewards.close()

    def _score(self, name, fn, responses, labels, stop):
        """``[float | Failure]`` of one verifier on the batch."""
        if self.placement[name][0] == "thread":
            return self._threads.score(name, fn, responses, labels, stop=stop)
        self._start_rewards()
        got = self._rewards.score(name, responses, labels, stop=stop)
        if self.placement[name][1].get("pairs") and not (stop and any(isinstance(x, Failure) for x in got)):
            got = verify_prepared(got, self.pool)  # the answers math-verify decides (its pool has the timeout)
        return got

    def __call__(self, responses, labels):
        responses, labels = list(responses), [str(x) for x in labels]
        if len(responses) != len(labels):
            raise ValueError(f"{len(responses)} responses but {len(labels)} labels")
        math_before = self._pool.timeouts if self._pool is not None else 0
        stop = self.fallback is None
        total = np.zeros(len(responses), np.float64)
        per, failed = {}, []
        for name, w, fn in zip(self.names, self.weights, self.fns):
            got = self._score(name, fn, responses, labels, stop)
            bad = [x for x in got if isinstance(x, Failure)]
            for f in bad[:8]:  # the ones a message shows
                f.response, f.label = responses[f.index], labels[f.index]
            if bad and stop:
                raise RewardError(f"{bad[0].message()}. Set rl_config.reward_fallback to a number to score failed "
                                  f"samples with it and go on")
            failed += bad
            vals = np.array([self.fallback if isinstance(x, Failure) else x for x in got], np.float64)
            per[name] = vals.astype(np.float32)
            total += w * vals
        if failed:
            _log_failures(failed, len(responses), self.fallback)
        math_timeouts = (self._pool.timeouts if self._pool is not None else 0) - math_before
        return RewardOutput(total.astype(np.float32), per, math_timeouts, failures=len(failed),
                            timeouts=sum(f.timeout for f in failed), failed=failed[:8])

    compute = __call__


def _log_failures(failed, n, fallback):
    by_name = {}
    for f in failed:
        by_name.setdefault(f.name, []).append(f)
    for name, fs in by_name.items():
        log.warning("reward function %r failed on %d of %d samples (%d timed out); they scored reward_fallback=%g. "
                    "First: %s", name, len(fs), n, sum(f.timeout for f in fs), fallback, fs[0].message())


def build_reward_computer(plan, reward_funcs=None) -> RewardComputer:
    """The run's rule rewards from its reward plan (config/plan.py: verifiers and weights, custom_reward_file,
    timeout, fallback). ``reward_funcs``: Python callables ``f(response, label) -> float`` registered first under
    their names (rewards/custom.py: reward_func_name), so ``verifier_function`` can name them (the
    Python API's way in; the config check needs them registered before it loads: mindrl.load_config does so)."""
    register_reward_funcs(reward_funcs)
    names, weights = [n for n, _ in plan.verifiers], [w for _, w in plan.verifiers]
    rc = RewardComputer(names, weights, plan.custom_reward_file, timeout=plan.timeout, fallback=plan.fallback)
    rc.spawn()  # the workers load while the models build, so the first step does not wait for them
    return rc
