"""The run's context: what every role and stage reads, built once, before any network.

It holds the run plan (config/plan.py: every number and name the config decided) and what exists once the run
starts (ranks, layouts, the exchange, the tokenizer), so that the roles, the stages and the loop never read the
config or environment variables.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

import numpy as np

from mindrl.config import ConfigError, TrainConfig
from mindrl.config.plan import RunPlan, plan_run, plan_schedule
from mindrl.data.chat_template import turn_end_ids
from mindrl.data.templates import TemplateError
from mindrl.data.tokenizer import load_tokenizer
from mindrl.parallel.exchange import Exchange
from mindrl.parallel.topology import Topology, build_topology, launch_topology
from mindrl.rollout.sampling import SamplingParams
from mindrl.runtime import place_compile_reports, setup_context
from mindrl.trainer.compile_cache import enable_compile_cache
from mindrl.trainer.run_dir import claim_run
from mindrl.trainer.updater import GradientBuffers


def seed_from(*parts) -> int:
    """A 32-bit seed from integers (run seed, step, draw, replica, ...): independent streams per purpose."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


class WidthsRun:
    """The (prompt, response) widths a run's training and scoring graphs have been compiled for. A batch runs at the
    narrowest of them that holds it; only a batch that none holds adds widths, and those hold it and every earlier
    batch too. So the widths grow with the longest batch met and never shrink: a run compiles its graphs again only
    when a batch is longer than every one before it, however its lengths vary below that (each compiled set keeps
    its memory in MindSpore's process; docs/performance.md#real-model), at the cost of the padding a shorter batch
    carries, never more than padding to the configured maxima would (the static shapes of the compile cache)."""

    def __init__(self):
        self.compiled = []

    def fit(self, prompt: int, response: int) -> tuple:
        """Widths for a batch whose padded widths would be (``prompt``, ``response``)."""
        held = [w for w in self.compiled if w[0] >= prompt and w[1] >= response]
        if held:
            return min(held, key=lambda w: (w[0] + w[1], w))
        widest = self.compiled[-1] if self.compiled else (0, 0)  # each added pair holds every earlier one
        grown = (max(prompt, widest[0]), max(response, widest[1]))
        self.compiled.append(grown)
        return grown


def _set_up_run_dir(cfg: TrainConfig, is_main: bool, exchange) -> None:
    """This run's directory (trainer/run_dir.py), the checkpoint paths that live inside it, and MindSpore's reports
    of failed compiles (there, not in the working directory)."""
    actor = cfg.actor_config
    run_dir = claim_run(cfg, ("actor_config.save", "critic_config.save"), is_main, exchange, load=actor.load,
                        resuming=not actor.finetune)
    place_compile_reports(os.path.join(run_dir, "mindspore"))


def _turn_end_ids(tokenizer) -> list:
    """The token that closes an assistant turn in the tokenizer's own chat template (<|im_end|>, <|eot_id|>): a base
    model's eos is often another token (<|endoftext|>), and a chat-formatted response must stop at the turn's end."""
    try:
        return turn_end_ids(tokenizer)
    except TemplateError as err:  # the rollout still stops at eos; say why the turn end is not a stop id
        logging.getLogger("mindrl.train").warning("the tokenizer's chat template gives no stop token: %s", err)
        return []


@dataclass
class RunContext:
    """The run's facts. ``plan`` is everything the config decided; the rest is what exists once the run starts:
    the ranks and their layouts, the exchange between them, the tokenizer. ``seed`` is the run's random seed (a
    resume may restore the one the run started with)."""
    topo: Topology
    exchange: Exchange
    tokenizer: object
    model_config: object    # the policy's, with its compute dtype
    pad_id: int
    static_shapes: bool     # fixed graph shapes and compile order (compile cache, strategy export)
    plan: RunPlan
    seed: int
    widths_run: WidthsRun = dataclasses.field(default_factory=WidthsRun)
    # the trained networks' gradient-accumulation buffers, shared where shapes agree (trainer/updater.py)
    grad_buffers: GradientBuffers = dataclasses.field(default_factory=GradientBuffers)

    @classmethod
    def create(cls, cfg: TrainConfig, run_dir: bool = True) -> "RunContext":
        """``run_dir``: claim this run's directory (logging.log_dir) and put it into the checkpoint paths; off for
        work that writes no run (``mindrl evaluate``, ``export-strategy``)."""
        rt = cfg.runtime
        if rt.enable_compile_cache:
            enable_compile_cache(cfg)
        setup_context(rt.mode, rt.threads)
        plan = plan_run(cfg, launch_topology().world)  # every layout split is checked before communication starts
        try:
            topo = build_topology(_stages(plan))
        except ValueError as err:  # a tp size that does not divide the world: the config's
            raise ConfigError(str(err)) from None
        exchange = Exchange(topo.world)
        if run_dir:
            _set_up_run_dir(cfg, topo.is_main, exchange)
            plan = dataclasses.replace(plan, schedule=plan_schedule(cfg))  # its checkpoint path is in the run dir
        tokenizer = load_tokenizer(plan.rollout.tokenizer)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return cls(topo, exchange, tokenizer, plan.roles["policy"].model.load(), pad_id, plan.rollout.static_shapes,
                   plan, plan.schedule.seed)

    @property
    def sampling_seed(self) -> int:
        """The rollout's sampling stream: generate_config.seed (MindSpeed-RL's sampling_config.seed), else the
        run's seed."""
        seed = self.plan.rollout.seed
        return self.seed if seed is None else seed

    @property
    def tokenizer_dir(self) -> str:
        path = self.plan.rollout.tokenizer
        return path if os.path.isdir(path) else os.path.dirname(path)

    def sampling_params(self):
        ro = self.plan.rollout
        stops = list(ro.stop_token_ids)
        if self.tokenizer.eos_token_id is not None:
            stops.append(self.tokenizer.eos_token_id)
        stops += self.model_config.eos_token_ids
        stops += _turn_end_ids(self.tokenizer)
        return SamplingParams(n=self.plan.batch.samples_per_prompt, max_tokens=ro.max_tokens,
                              min_tokens=ro.min_tokens, do_sample=ro.do_sample, temperature=ro.temperature,
                              top_k=ro.top_k, top_p=ro.top_p, repetition_penalty=ro.repetition_penalty,
                              stop_token_ids=sorted(set(stops))).validate()

    def static_widths(self) -> tuple:
        """(prompt width, response width) of the widest batch: the buckets of the configured maxima."""
        ro = self.plan.rollout
        return ro.widths(ro.max_prompt_length, ro.max_tokens)

    def train_widths(self, exp) -> tuple:
        """(prompt width, response width) the training graphs run at for ``exp``: fixed buckets of the configured
        maxima with static shapes, else the narrowest widths compiled so far that hold the batch, or new ones
        (WidthsRun)."""
        if self.static_shapes:
            return self.static_widths()
        return self.widths_run.fit(*self.plan.rollout.widths(*exp.widths_needed()))


def _stages(plan: RunPlan) -> dict:
    """The topology's layouts, from the plan's: name -> (tp, dp or None, the key that sets tp)."""
    b = plan.batch
    stages = {"train": (b.train.tp, None, "actor_config.tensor_model_parallel_size"),
              "infer": (b.infer.tp, b.infer.dp, "generate_config.infer_tensor_parallel_size")}
    if b.critic is not None:
        stages["critic"] = (b.critic.tp, None, "critic_config.tensor_model_parallel_size")
    if b.reward is not None:
        stages["reward"] = (b.reward.tp, None, "reward_config.tensor_model_parallel_size")
    return stages
