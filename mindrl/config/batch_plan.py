"""The step's batch arithmetic: prompts, responses, mini- and micro-batches per layout, updates per step.

Batch units are MindSpeed-RL's (and verl's): ``global_batch_size`` and ``mini_batch_size`` count prompts, each
bringing ``n_samples_per_prompt`` responses; micro-batches count responses, per data-parallel rank. Every
divisibility rule that needs the world size lives here, once. Standard library only (msrun's scheduler plans
before ``init()``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mindrl.config.errors import ConfigError


@dataclass(frozen=True)
class StageLayout:
    """One network's split over the world: ``tp`` ranks share each replica, ``dp`` replicas share the batch."""
    tp: int
    dp: int

    def text(self) -> str:
        return f"dp {self.dp} x tp {self.tp}"


@dataclass(frozen=True)
class BatchPlan:
    world: int
    samples_per_prompt: int
    prompts: int                   # prompts trained on per step
    gen_prompts: int               # prompts per generation batch (more than one batch only with dynamic sampling)
    max_gen_batches: int           # generation batches a step may draw; 0 = no limit
    prompts_per_update: int        # mini_batch_size, at most `prompts`
    epochs: int
    train: StageLayout
    infer: StageLayout
    micro_batch: int               # responses per forward/backward, per rank
    logprob_micro_batch: int       # responses per old-log-prob forward, per rank
    rollout_batch: int             # responses decoded at once per rollout replica
    shuffle: bool = True           # rows shuffled into mini-batches before each pass (rl_config.shuffle_minibatch)
    critic: Optional[StageLayout] = None
    reward: Optional[StageLayout] = None  # the reward model's layout
    critic_micro_batch: Optional[int] = None
    ref_micro_batch: Optional[int] = None
    reward_micro_batch: Optional[int] = None
    ptx_rows_per_update: Optional[int] = None   # PPO-ptx supervised rows per update (None: no PPO-ptx)
    off_policy: bool = False       # partial rollout or TIS: the rollout's log-probs may be another policy's
    shared_prompt: bool = False    # the actor's update computes each group's prompt once (rl_config.share_prompt)
    unshared_why: str = ""         # why it does not, when it could not

    def shared_group(self, micro_batch: Optional[int]) -> int:
        """Responses per packed group of a pass in micro-batches of ``micro_batch`` (0: one row per response): a
        prompt's samples, when the update shares prompts and the micro-batch holds whole groups."""
        n = self.samples_per_prompt
        return n if self.shared_prompt and micro_batch and micro_batch % n == 0 else 0

    @property
    def responses(self) -> int:
        return self.prompts * self.samples_per_prompt

    @property
    def gen_responses_per_replica(self) -> int:
        """Responses one rollout replica samples per generation batch."""
        return self.gen_prompts * self.samples_per_prompt // self.infer.dp

    @property
    def responses_per_update(self) -> int:
        return self.prompts_per_update * self.samples_per_prompt

    @property
    def minibatches(self) -> int:
        """Mini-batches one pass over a step's responses is split into."""
        return self.prompts // self.prompts_per_update

    @property
    def updates(self) -> int:
        """Optimizer updates per step, for the actor and (PPO) for the critic alike."""
        return self.epochs * self.minibatches

    @property
    def micro_batches_per_update(self) -> int:
        """Forward/backward passes per rank in one actor update."""
        return self.responses_per_update // self.train.dp // self.micro_batch

    @property
    def critic_micro_batches_per_update(self) -> Optional[int]:
        if self.critic is None:
            return None
        return self.responses_per_update // self.critic.dp // self.critic_micro_batch

    @property
    def critic_values_in_update(self) -> bool:
        """The critic's values come from its update's forward, not a pass of their own: with a single update per
        step its forward reads the weights that pass would (trainer/critic_graphs.py CriticValuesLossCell)."""
        return self.critic is not None and self.updates == 1

    @property
    def recompute_old_log_probs(self) -> bool:
        """The rollout's own log-probs are the old policy only while a step makes a single update (MindSpeed-RL
        skips the old-log-prob pass on the same condition) and were all sampled by this step's policy (no partial
        rollout; TIS reads both)."""
        return self.updates > 1 or self.off_policy


def _layout(world: int, tp: int, dp: Optional[int], key: str, errors: list) -> StageLayout:
    if world % tp:
        errors.append(f"{key}: tensor parallel size {tp} does not divide the world size {world} (the number of "
                      f"msrun workers)")
        return StageLayout(tp, 1)
    if dp is not None and dp * tp != world:
        errors.append(f"generate_config.infer_data_parallel_size: {dp} x infer tensor parallel {tp} != world size "
                      f"{world}")
    return StageLayout(tp, world // tp)


def update_split_errors(rl, critic, train_dp: int = 1, critic_dp: int = 1) -> list:
    """(key, reason) for every trained network whose micro-batches do not divide an update's responses on its
    data-parallel replicas, and for PPO-ptx's supervised rows. The one place this is checked: the loader calls it with
    one replica (no world size yet), :func:`plan_batches` with the world's."""
    n, mini = rl.n_samples_per_prompt, min(rl.mini_batch_size, rl.global_batch_size)
    per_update, out = mini * n, []

    def split(dp: int, micro: int, key: str, what: str) -> None:
        if per_update % (dp * micro) == 0:
            return
        out.append((key, f"{micro} does not divide an update's {mini} prompts x {n} samples = {per_update} responses"
                    if dp == 1 else f"an update's {mini} prompts x {n} samples = {per_update} responses do not split "
                                    f"into {what} data-parallel size {dp} x micro-batches of {micro}"))

    split(train_dp, rl.micro_batch_size, "rl_config.micro_batch_size", "the actor's")
    if critic is not None and critic.micro_batch_size:
        split(critic_dp, critic.micro_batch_size, "critic_config.micro_batch_size", "the critic's")
    if rl.pretrain_coef > 0 and rl.global_batch_size % mini == 0:  # a step's SFT rows split like its prompts
        rows = mini // train_dp if mini % train_dp == 0 else None
        if rows is None or rows % min(rl.micro_batch_size, rows):
            out.append(("rl_config.pretrain_coef", f"PPO-ptx's {mini} supervised rows per update do not split into "
                                                   f"the actor's data-parallel size {train_dp} x micro-batches of "
                                                   f"rl_config.micro_batch_size {rl.micro_batch_size}"))
    return out


def unshared_reason(rl, train_dp: int) -> str:
    """Why the actor's update cannot pack each prompt's samples into one row that computes the prompt once
    (rl_config.share_prompt), or "" when it can: its micro-batches and data-parallel shares must hold whole groups."""
    n, mini = rl.n_samples_per_prompt, min(rl.mini_batch_size, rl.global_batch_size)
    if n == 1:
        return "one sample per prompt (rl_config.n_samples_per_prompt 1)"
    if rl.micro_batch_size % n:
        return f"rl_config.micro_batch_size {rl.micro_batch_size} is not a multiple of n_samples_per_prompt {n}"
    if mini % train_dp:
        return f"an update's {mini} prompts do not split into whole groups over the actor's {train_dp} data-parallel " \
               f"replicas"
    return ""


def plan_batches(cfg, world: int) -> BatchPlan:
    """The step's batch arithmetic on ``world`` ranks; a ConfigError names every key whose value does not divide."""
    rl, gen, actor, critic, rm = (cfg.rl_config, cfg.generate_config, cfg.actor_config, cfg.critic_config,
                                  cfg.reward_config)
    errors: list = []
    if cfg.runtime.world_size is not None and cfg.runtime.world_size != world:
        origin = cfg.meta.origins.get("runtime.world_size", "runtime.world_size")
        errors.append(f"runtime.world_size: the config is written for {cfg.runtime.world_size} processes ({origin}), "
                      f"and {world} {'were' if world > 1 else 'was'} started; start that many msrun workers "
                      f"(scripts/run_grpo.sh: NPUS_PER_NODE), or set the key to {world}")
    train = _layout(world, actor.tensor_model_parallel_size, None, "actor_config.tensor_model_parallel_size", errors)
    infer = _layout(world, gen.infer_tensor_parallel_size, gen.infer_data_parallel_size,
                    "generate_config.infer_tensor_parallel_size", errors)
    critic_layout = None if critic is None else _layout(world, critic.tensor_model_parallel_size, None,
                                                        "critic_config.tensor_model_parallel_size", errors)
    reward_layout = None if rm is None else _layout(world, rm.tensor_model_parallel_size, None,
                                                    "reward_config.tensor_model_parallel_size", errors)
    if errors:
        raise ConfigError("\n".join(errors), errors)
    n = rl.n_samples_per_prompt
    mini = min(rl.mini_batch_size, rl.global_batch_size)  # the loader allows a larger one only for peer files
    gen_prompts = rl.gen_batch_size or rl.global_batch_size
    if gen_prompts % infer.dp:
        errors.append(f"rl_config.{'gen_batch_size' if rl.gen_batch_size else 'global_batch_size'}: {gen_prompts} "
                      f"prompts per generation batch do not split over the rollout's {infer.dp} data-parallel "
                      f"replicas (world {world} / infer tp {infer.tp})")
    if rl.gen_batch_size and rl.global_batch_size % infer.dp:  # unset, gen_prompts is this number: checked above
        errors.append(f"rl_config.global_batch_size: {rl.global_batch_size} prompts do not split over the rollout's "
                      f"{infer.dp} data-parallel replicas (world {world} / infer tp {infer.tp})")
    errors += [f"{key}: {why}" for key, why in
               update_split_errors(rl, critic, train.dp, critic_layout.dp if critic_layout else 1)]
    if rl.partial_rollout_max_split > 1 and infer.dp > 1:
        errors.append(f"rl_config.partial_rollout_max_split: {rl.partial_rollout_max_split} needs a single rollout "
                      f"replica (the paused responses are kept by one replica and saved with its state), and this "
                      f"run has {infer.dp} (world {world} / infer tp {infer.tp}); set "
                      f"generate_config.infer_tensor_parallel_size to {world}, or 1 to turn partial rollout off")
    ptx_rows = mini if rl.pretrain_coef > 0 else None  # a step's SFT rows, split like its prompts
    unshared = unshared_reason(rl, train.dp)
    if rl.share_prompt and unshared:
        errors.append(f"rl_config.share_prompt: true needs micro-batches of whole groups, and here {unshared}; set it "
                      f"to null (share when possible) or false")
    if errors:
        raise ConfigError("\n".join(errors), errors)
    per_replica = gen_prompts * n // infer.dp
    return BatchPlan(
        world=world, samples_per_prompt=n, prompts=rl.global_batch_size, gen_prompts=gen_prompts,
        max_gen_batches=rl.max_num_gen_batches if rl.dynamic_sampling else 1, prompts_per_update=mini,
        epochs=rl.ppo_epochs, train=train, infer=infer, micro_batch=rl.micro_batch_size, shuffle=rl.shuffle_minibatch,
        logprob_micro_batch=rl.actor_forward_micro_batch_size or rl.micro_batch_size,
        rollout_batch=min(gen.max_num_seqs or per_replica, per_replica), critic=critic_layout, reward=reward_layout,
        critic_micro_batch=None if critic is None else critic.micro_batch_size,
        ref_micro_batch=(rl.ref_forward_micro_batch_size or rl.micro_batch_size) if rl.kl_coef > 0 else None,
        reward_micro_batch=None if rm is None else rm.micro_batch_size, ptx_rows_per_update=ptx_rows,
        off_policy=rl.partial_rollout_max_split > 1 or rl.tis_cap is not None,
        shared_prompt=rl.share_prompt is not False and not unshared, unshared_why=unshared)
