"""Partial rollout (MindSpeed-RL's ``rl_config.partial_rollout_max_split``): a step no longer waits for the long tail.

A rollout round gives every response at most ``round_tokens = ceil(max_tokens / max_split)`` new tokens. A response
that neither stopped nor reached ``max_tokens`` is paused; the next round resumes it (the generator re-prefills
prompt + its tokens so far with the weights of then); fresh prompts fill each round up to the step's batch of groups,
as MindSpeed-RL's synchronous engine does. A step runs rounds until it has its batch of groups whose every response
ended: groups still going wait for the next step, and so do groups that ended beyond the batch (``ready``); the
tokens they carry were sampled by an older policy. Those tokens keep the log-probs they were sampled with (the rollout's); the
old log-probs are recomputed by the current policy, and ``rl_config.tis_cap`` weights each token's loss by their
truncated ratio (algorithms/tis.py).

The buffer (paused groups, and prompts drawn but not yet started) is part of the trainer state, so a resumed run
continues the same responses.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import List, Tuple

import numpy as np

from mindrl.rollout.generator import Request

_UIDS = itertools.count()


@dataclass
class Sample:
    tokens: List[int] = field(default_factory=list)
    log_probs: List[float] = field(default_factory=list)   # under the policy that sampled each token
    stopped: bool = False                                   # ended on a stop id
    stale: int = 0                                          # leading tokens sampled in an earlier step
    uid: int = field(default_factory=lambda: next(_UIDS))   # names its parked cache row within a step


@dataclass
class Group:
    prompt: List[int]
    label: str
    samples: List[Sample]


class PartialRollout:
    """The paused groups between rounds and steps, and how a round's requests are made and taken back."""

    def __init__(self, max_tokens: int, round_tokens: int, n: int):
        self.max_tokens, self.round_tokens, self.n = max_tokens, round_tokens, n
        self.paused: List[Group] = []   # responses still going
        self.ready: List[Group] = []    # ended beyond a step's batch: the next step's first groups

    def ended(self, s: Sample) -> bool:
        return s.stopped or len(s.tokens) >= self.max_tokens

    def begin_step(self) -> None:
        """Every token paused so far was sampled by a policy the coming update is not."""
        for g in self.paused + self.ready:
            for s in g.samples:
                s.stale = len(s.tokens)

    def round(self, fresh: List[Tuple[List[int], str]], generate) -> List[Group]:
        """One round over the paused groups, then ``fresh`` (prompt, label) pairs; ``generate(requests)`` runs the
        generator (parking: a response paused in this step's previous round continues from its cache row, one
        carried from an earlier step is prefilled again with the current weights). Returns the groups that ended,
        in order; the others stay paused."""
        groups = self.paused + [Group(list(p), lab, [Sample() for _ in range(self.n)]) for p, lab in fresh]
        requests, targets = [], []
        for g in groups:
            if all(not s.tokens for s in g.samples):  # not started: its samples share one prefill
                requests.append(Request(g.prompt, self.n, min(self.round_tokens, self.max_tokens),
                                        keys=[s.uid for s in g.samples]))
                targets.append(g.samples)
                continue
            for s in g.samples:
                if not self.ended(s):
                    requests.append(Request(g.prompt + s.tokens, 1,
                                            min(self.round_tokens, self.max_tokens - len(s.tokens)), len(s.tokens),
                                            keys=[s.uid]))
                    targets.append([s])
        out = generate(requests)
        seq = 0
        for samples in targets:
            for s in samples:
                s.tokens += out.tokens[seq]
                s.log_probs += [float(x) for x in out.log_probs[seq]]
                s.stopped = bool(out.finished[seq])
                seq += 1
        done = [g for g in groups if all(self.ended(s) for s in g.samples)]
        self.paused = [g for g in groups if not all(self.ended(s) for s in g.samples)]
        return done

    def paused_responses(self) -> int:
        return sum(not self.ended(s) for g in self.paused for s in g.samples)

    def batch(self, want: int, fresh_prompts, generate) -> Tuple[List[Group], int]:
        """A step's ``want`` ended groups: the ready ones first, then rounds until there are enough, each round
        the paused groups and ``fresh_prompts(k)`` (k prompts) up to ``want`` in flight. Returns them and the
        number of rounds run."""
        self.begin_step()
        done, rounds = self.ready, 0
        while len(done) < want:
            done = done + self.round(fresh_prompts(max(0, want - len(self.paused))), generate)
            rounds += 1
        done, self.ready = done[:want], done[want:]
        return done, rounds


    # -- state (trainer_state.json) -------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"paused": [_group_state(g) for g in self.paused], "ready": [_group_state(g) for g in self.ready]}

    def load_state_dict(self, state: dict) -> None:
        self.paused = [_group_of(g) for g in state.get("paused", [])]
        self.ready = [_group_of(g) for g in state.get("ready", [])]


def _group_state(g: Group) -> dict:
    return {"prompt": g.prompt, "label": g.label,
            "samples": [{"tokens": s.tokens, "log_probs": s.log_probs, "stopped": s.stopped, "stale": s.stale}
                        for s in g.samples]}


def _group_of(state: dict) -> Group:
    return Group([int(t) for t in state["prompt"]], str(state["label"]),
                 [Sample([int(t) for t in s["tokens"]], [float(x) for x in s["log_probs"]], bool(s["stopped"]),
                         int(s["stale"])) for s in state["samples"]])


def flatten(groups: List[Group]):
    """(prompts, tokens, log-probs [float32], stopped, prompt index, stale tokens) per response, group-major."""
    prompts, tokens, lps, stopped, index, stale = [], [], [], [], [], 0
    for i, g in enumerate(groups):
        for s in g.samples:
            prompts.append(g.prompt)
            tokens.append(s.tokens)
            lps.append(np.asarray(s.log_probs, np.float32))
            stopped.append(s.stopped)
            index.append(i)
            stale += s.stale
    return prompts, tokens, lps, np.array(stopped, bool), np.array(index, np.int64), stale
