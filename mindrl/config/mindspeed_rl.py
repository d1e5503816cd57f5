"""MindSpeed-RL's training yamls, read with MindSpeed-RL's meaning.

A file is MindSpeed-RL's when it has a ``megatron_training`` section or a Hydra ``defaults`` list. Such a file is
translated key by key into mindrl's sections before validation, the way MindSpeed-RL itself assembles it:

* ``defaults: - model: [qwen25_7b]`` names model files, ``configs/model/<name>.yaml`` next to the config (MindSpeed-RL's
  layout), else among the ones mindrl ships in its own ``configs/model/``; ``actor_config.model`` (else
  ``megatron_training.model``) picks one;
* the actor is ``{**megatron_training, **actor_config}`` and the critic ``{**megatron_training, **critic_config}``
  (MindSpeed-RL's ``MegatronConfig``), so a key in the role's section wins;
* a key the file leaves out has MindSpeed-RL's default, not mindrl's (the author wrote the file against those);
* ``stage`` (``ray_grpo``, ``ray_dapo``, ``ray_ppo``) decides where the KL goes and how the loss is averaged, as
  MindSpeed-RL's trainers and loss functions do.

MindSpeed-RL's keys in a mindrl file (``rl_config.init_kl_coef``, ``generate_config.sampling_config``, ...) keep their
meaning too, without MindSpeed-RL's defaults. Every key is in one of the tables below; docs/configuration.md lists
them (a test keeps the two equal). Research notes with the MindSpeed-RL source each rule follows are cited in the
docs' table, not here.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mindrl.config.yaml_io import parse_yaml
from mindrl.config.peer import NO_DEFAULT, PeerValueError, Rule, judge, number, same_value, show
from mindrl.models.config import _MEGATRON_KEYS

# what mindrl writes into this run's canonical config, for the rest of the pipeline
MICRO_TOKEN_MEAN = "token-mean-per-micro-batch"  # MindSpeed-RL's losses: a token mean per micro-batch, averaged

_RAY = "a Ray placement setting; every msrun worker runs every role in one process"
_VLLM = "a vLLM engine setting; mindrl rolls out with its own KV-cache generator"
_PERF = "a Megatron/MindSpeed kernel or memory switch; mindrl computes the same math its own way"
_NO_PP = "mindrl has tensor and data parallelism, no pipeline stages"
_OFFLOAD = "mindrl keeps the train-side state in place between rollout and update (same results, more memory)"


def _not_true(why: str):
    def convert(value):
        if value is True:
            raise PeerValueError(why)
        return value
    return convert


def _shuffle(value):
    if value is True:
        raise PeerValueError("MindSpeed-RL shuffles the order of whole mini-batches; mindrl's "
                             "rl_config.shuffle_minibatch: true shuffles rows across them instead. Use that key, or "
                             "false (rollout order, the same in both)")
    return bool(value)


def _no_shuffle(value):
    return not value


def _dtype(value):
    return "bfloat16" if value else "float32"


def _fp16(value):
    return "float16" if value else None


def _lr_decay(value):
    if value not in ("constant", "cosine", "linear"):
        raise PeerValueError("mindrl's schedules are constant, cosine and linear")
    return value


def _labels(value):
    keys = [value] if isinstance(value, str) else list(value or [])
    if keys not in ([], ["labels"]):
        raise PeerValueError("mindrl reads one extra column, the reference answers ('labels'), for the rule rewards")
    return "labels"


def _top_k(value):
    return 0 if value == -1 else value


def _max_batches(value):
    value = int(value)
    return 0 if value <= 0 else value   # MindSpeed-RL and verl: a non-positive limit means no limit


def _filter_metric(value):
    """MindSpeed-RL takes a verifier name and reads its ``<name>_rewards/mean``; older files give the metric key."""
    name = str(value)
    if name.startswith("grpo/"):
        name = name[len("grpo/"):]
    if name.endswith("_rewards/mean"):
        name = name[:-len("_rewards/mean")]
    return name


# -- MegatronConfig keys: megatron_training, actor_config, critic_config ---------------------------------------------
# "{role}" is actor_config or critic_config; keys without it are the run's and are read from the actor's view
MEGATRON: dict = {
    "global_batch_size": Rule(to="rl_config.global_batch_size", why="prompts per step"),
    "micro_batch_size": Rule(to="{role}.micro_batch_size", why="responses per forward/backward, per rank"),
    "tensor_model_parallel_size": Rule(to="{role}.tensor_model_parallel_size", default=1),
    "pipeline_model_parallel_size": Rule(ok=(1,), why=_NO_PP),
    "context_parallel_size": Rule(ok=(1,), why="mindrl has no context parallelism"),
    "expert_model_parallel_size": Rule(ok=(1,), why="mindrl's models have no experts"),
    "lr": Rule(to="{role}.lr", convert=number),
    "min_lr": Rule(to="{role}.min_lr", convert=number, default=0.0),
    "lr_decay_style": Rule(to="{role}.lr_decay_style", convert=_lr_decay, default="linear"),
    "lr_warmup_fraction": Rule(to="{role}.lr_warmup_fraction", convert=number),
    "lr_warmup_iters": Rule(to="{role}.lr_warmup_iters", default=0),
    "weight_decay": Rule(to="{role}.weight_decay", convert=number, default=0.01),
    "clip_grad": Rule(to="{role}.clip_grad", convert=number, default=1.0),
    "adam_beta1": Rule(to="{role}.adam_beta1", convert=number, default=0.9),
    "adam_beta2": Rule(to="{role}.adam_beta2", convert=number, default=0.999),
    "adam_eps": Rule(to="{role}.adam_eps", convert=number, default=1e-8),
    "finetune": Rule(to="{role}.finetune", default=False, why="false with weights rather than a mindrl checkpoint "
                                                              "in load: Megatron's release load, step 0"),
    "load": Rule(to="{role}.load"),
    "save": Rule(to="{role}.save"),
    "no_load_optim": Rule(to="{role}.no_load_optim", convert=bool),
    "no_load_rng": Rule(to="{role}.no_load_rng", convert=bool),
    "no_save_optim": Rule(ok=(False, None), why="mindrl checkpoints always hold the optimizer state, so that a resume "
                                                "is exact"),
    "no_save_rng": Rule(ok=(False, None), why="mindrl checkpoints always hold the RNG state, so that a resume is "
                                              "exact"),
    "bf16": Rule(to="{role}.compute_dtype", convert=_dtype, default=True,
                 why="true: bfloat16, false: float32; on CPU mindrl computes bfloat16 in float32, with a warning"),
    "fp16": Rule(to="{role}.compute_dtype", convert=_fp16, why="true: float16"),
    "train_iters": Rule(to="rl_config.train_iters"),
    "lora_r": Rule(to="{role}.lora_rank", why="MindSpeed-LLM's default 16 when lora_target_modules is given"),
    "lora_alpha": Rule(to="{role}.lora_alpha", convert=number, why="MindSpeed-LLM's default 32 with LoRA on"),
    "lora_target_modules": Rule(to="{role}.lora_target_modules", why="turns LoRA on, as in MindSpeed-LLM; "
                                "linear_proj and linear_fc2 are o_proj and down_proj, PEFT's names are accepted too, "
                                "the fused linear_qkv and linear_fc1 are refused (see docs/lora.md)"),
    "lora_fusion": Rule(any=True, why=_PERF),
    "save_interval": Rule(to="actor_config.save_interval"),
    "tokenizer_name_or_path": Rule(to="actor_config.tokenizer_name_or_path"),
    "tokenizer_type": Rule(ok=("PretrainedFromHF", "HuggingFaceTokenizer"),
                           why="mindrl reads Hugging Face tokenizer directories"),
    "tokenizer_not_use_fast": Rule(any=True, why="the fast and slow Hugging Face tokenizers give the same ids"),
    "data_path": Rule(to="data.path", why="the output_prefix `mindrl preprocess` wrote, or its .mindrecord"),
    "split": Rule(ok=("100,0,0", "100, 0, 0"), why="mindrl trains on the whole file; held-out data is eval.path"),
    "no_shuffle": Rule(to="data.shuffle", convert=_no_shuffle, default=False, why="its negation"),
    "full_shuffle_instruction_dataset": Rule(any=True, why="with shuffling on, mindrl draws a new permutation of the "
                                                           "whole file every epoch"),
    "seed": Rule(to="runtime.seed", default=1234),
    "seq_length": Rule(any=True, why="checked: MindSpeed-RL cuts prompts to it; mindrl refuses longer prompts, so "
                                     "generate_config.max_prompt_length must fit in it"),
    "dataset_additional_keys": Rule(to="data.label_key", convert=_labels, why="['labels'] only: the reference "
                                                                            "answers the rule rewards read"),
    "initial_loss_scale": Rule(any=True, why="bf16 and fp32 training need no loss scaling; mindrl scales none"),
    "attention_dropout": Rule(ok=(0, 0.0), why="mindrl trains without dropout", default=0.1),
    "hidden_dropout": Rule(ok=(0, 0.0), why="mindrl trains without dropout", default=0.1),
    "init_method_std": Rule(any=True, why="only random initialisation reads it: mindrl starts every network from "
                                          "weights, and a missing value head starts at zero"),
    "num_workers": Rule(any=True, why="data-loader worker processes; mindrl reads MindRecord in-process"),
    "distributed_backend": Rule(any=True, why="mindrl uses MindSpore's collectives of the device"),
    "no_shared_storage": Rule(any=True, why="every mindrl rank reads the files it needs itself"),
    "variable_seq_lengths": Rule(any=True, why="mindrl pads each batch to a length bucket; the loss masks padding"),
    "use_distributed_optimizer": Rule(any=True, why=_PERF),
    "sequence_parallel": Rule(any=True, why=_PERF),
    "use_mcore_models": Rule(any=True, why=_PERF),
    **{k: Rule(any=True, why=_PERF) for k in (
        "use_fused_rmsnorm", "use_fused_swiglu", "use_fused_rotary_pos_emb", "use_flash_attn", "use_mc2",
        "no_masked_softmax_fusion", "no_gradient_accumulation_fusion", "attention_softmax_in_fp32",
        "use_ascend_coc", "coc_fused_kernel", "coc_parallel_num", "reuse_fp32_param", "overlap_grad_reduce",
        "overlap_param_gather", "use_rotary_position_embeddings", "swap_attention")},
    "recompute_granularity": Rule(to="{role}.recompute_granularity",
                                  why="full: whole decoder layers, recomputed in the backward; selective is refused"),
    "recompute_method": Rule(to="{role}.recompute_method", why="block: the first recompute_num_layers layers; "
                             "uniform: every layer, mindrl keeping each layer's input where Megatron keeps one per "
                             "chunk of recompute_num_layers"),
    "recompute_num_layers": Rule(to="{role}.recompute_num_layers", why="from 1 to the model's num_layers"),
}
# keys of the model files (and of megatron_training/actor_config when they restate one): mindrl.models.config reads
# them; here they must agree with the model file, because mindrl reads an architecture from one file
MODEL_KEYS = frozenset(k for k in _MEGATRON_KEYS if k not in ("seq_length", "init_method_std"))
_STAGES = ("ray_grpo", "ray_dapo", "ray_ppo")

# -- rl_config -------------------------------------------------------------------------------------------------------
RL: dict = {
    "n_samples_per_prompt": Rule(to="rl_config.n_samples_per_prompt", default=1),
    "mini_batch_size": Rule(to="rl_config.mini_batch_size", why="prompts per update", default=1),
    "epochs": Rule(to="rl_config.ppo_epochs", default=1),
    "shuffle_mini_batch": Rule(to="rl_config.shuffle_minibatch", convert=_shuffle, default=False,
                               why="false only: MindSpeed-RL's true shuffles whole mini-batches, mindrl's rows"),
    "clip_ratio": Rule(to="rl_config.clip_ratio", convert=number, default=0.2),
    "cliprange_value": Rule(to="rl_config.cliprange_value", convert=number),
    "entropy_coeff": Rule(to="rl_config.entropy_coeff", convert=number, default=0.0),
    "gamma": Rule(to="rl_config.gamma", convert=number),
    "lam": Rule(to="rl_config.lam", convert=number),
    "advantage_whiten": Rule(ok=(True,), why="MindSpeed-RL always whitens GAE advantages and never reads this key"),
    "kl_penalty": Rule(to="rl_config.kl_penalty", default="low_var_kl"),
    "kl_ctrl_type": Rule(to="rl_config.kl_ctrl_type"),
    "init_kl_coef": Rule(to="rl_config.kl_coef", convert=number, default=0.01,
                         why="in the loss with stage ray_grpo; in the reward with ray_ppo and use_kl_in_reward; "
                             "refused with ray_dapo, which has no KL"),
    "kl_horizon": Rule(to="rl_config.kl_horizon"),
    "kl_target": Rule(to="rl_config.kl_target", convert=number),
    "use_kl_in_reward": Rule(to="rl_config.use_kl_in_reward", why="stage ray_ppo only"),
    "adv_estimator": Rule(to="rl_config.adv_estimator", default="group_norm"),
    "verifier_function": Rule(to="rl_config.verifier_function", default=["base_acc"]),
    "verifier_weight": Rule(to="rl_config.verifier_weight", default=[1.0]),
    "verifier_timeout": Rule(to="rl_config.verifier_timeout", convert=number, default=30.0),
    "verifier_parallel": Rule(any=True, why="verifiers run in mindrl's own worker pool, sized by the machine"),
    "rule_reward": Rule(to="rl_config.rule_reward", default=True),
    "max_prompt_length": Rule(to="generate_config.max_prompt_length", default=512),
    "integrated_mode_config": Rule(to="ref.ref_model_load_path", why="its ref_model_load_path"),
    "use_tensorboard": Rule(to="logging.tensorboard", default=False),
    "log_max_throughput": Rule(to="logging.log_max_throughput", default=True),
    "actor_forward_micro_batch_size": Rule(to="rl_config.actor_forward_micro_batch_size"),
    "ref_forward_micro_batch_size": Rule(to="rl_config.ref_forward_micro_batch_size"),
    "actor_resource": Rule(to="runtime.world_size", why="its num_npus: the number of msrun workers"),
    "critic_resource": Rule(to="runtime.world_size", why="its num_npus: mindrl runs the critic on the actor's "
                                                          "workers"),
    "reference_resource": Rule(ok=(None,), why="the reference shares the actor's workers (MindSpeed-RL's integrated "
                                               "worker)"),
    "reward_resource": Rule(ok=(None,), why="the rewards are computed on the actor's workers"),
    "vit_resource": Rule(ok=(None,), why="mindrl's models are text-only"),
    "use_integrated_worker": Rule(ok=(True,), why="mindrl always runs actor, reference and rollout in one process"),
    "colocate_actor_ref": Rule(ok=(True,), why="mindrl always holds the actor and the reference in one process"),
    "blocking": Rule(any=True, why="mindrl runs the stages of a step in order; the results are those of blocking: "
                                   "true"),
    "guarantee_order": Rule(any=True, why=_RAY), "num_cpus_for_local_task": Rule(any=True, why=_RAY),
    "num_cpus_for_placement_group": Rule(any=True, why=_RAY), "runtime_env_path": Rule(any=True, why=_RAY),
    "zmq_communication": Rule(any=True, why="a transport of MindSpeed-RL's data dock"),
    "num_samples_per_step": Rule(any=True, why="MindSpeed-RL does not read it either"),
    "beta": Rule(ok=(0.1,), why="only MindSpeed-RL's DPO reads it (mindrl's PPO/GRPO losses have no beta)"),
    "use_wandb": Rule(ok=(False,), why="mindrl logs to TensorBoard and metrics.jsonl"),
    "use_swanlab": Rule(ok=(False,), why="mindrl logs to TensorBoard and metrics.jsonl"),
    "tp_split_expert": Rule(ok=(False,), why="mindrl's models have no experts"),
    "async_engine": Rule(ok=(False,), why="mindrl's rollout is synchronous"),
    "use_dp_batch_balance": Rule(ok=(False,), why="mindrl splits a batch over data-parallel ranks in order"),
    "is_multimodal": Rule(ok=(False,), why="mindrl's models are text-only"),
    "reuse_image_embeds": Rule(ok=(False,), why="mindrl's models are text-only"),
    "colocate_actor_and_vit": Rule(ok=(False,), why="mindrl's models are text-only"),
    "use_remove_padding": Rule(any=True, why=_PERF),
    "use_dynamic_bsz": Rule(ok=(False,), why="mindrl's micro-batches hold a fixed number of responses"),
    "partial_rollout_max_split": Rule(to="rl_config.partial_rollout_max_split", default=1),
    "require_max_age_all_finished": Rule(ok=(True,), default=True,
                                         why="mindrl ends every response by its partial_rollout_max_split-th round"),
    "multi_turn_enable": Rule(ok=(False,), why="mindrl's rollout is single-turn"),
    "share_backbone": Rule(ok=(False,), why="mindrl's critic has its own backbone"),
    # DAPO (stage ray_dapo; in a mindrl file these are refused with the mindrl key to use, STAGE_KEYS)
    "token_level_loss": Rule(to="rl_config.loss_agg_mode", why=f"true: {MICRO_TOKEN_MEAN}, false: "
                                                                "seq-mean-token-mean", default=True),
    "clip_higher_enable": Rule(to="rl_config.clip_ratio_low/high", why="true applies clip_ratio_low/high; false "
                                                                        "clips at clip_ratio both ways", default=False),
    "clip_ratio_low": Rule(to="rl_config.clip_ratio_low", convert=number, default=0.1),
    "clip_ratio_high": Rule(to="rl_config.clip_ratio_high", convert=number, default=0.1),
    "overlong_buffer_enable": Rule(to="rl_config.overlong_buffer_len", why="true applies overlong_buffer",
                                   default=False),
    "overlong_buffer": Rule(to="rl_config.overlong_buffer_len", default=0),
    "overlong_buffer_penalty_factor": Rule(to="rl_config.overlong_penalty_factor", convert=number, default=1.0),
    "rollout_max_tokens": Rule(ok=(), why="checked: it must equal sampling_config.max_tokens, the length the overlong "
                                          "penalty counts from", default=2048),
    "filter_groups_enable": Rule(to="rl_config.dynamic_sampling", default=False),
    "filter_groups_metric": Rule(to="rl_config.dynamic_sampling_metric", convert=_filter_metric, default="acc",
                                 why="a verifier name; grpo/<name>_rewards/mean is read as <name>"),
    "filter_groups_max_batches": Rule(to="rl_config.max_num_gen_batches", convert=_max_batches, default=1,
                                      why="-1 (no limit) is 0"),
    "filter_groups_train_batch_size": Rule(to="rl_config.global_batch_size", why="the training batch; "
                                           "global_batch_size becomes the generation batch", default=1),
    **{k: Rule(any=True, why="TransferDock read sizes of MindSpeed-RL's workers") for k in (
        "actor_rollout_dispatch_size", "actor_logprob_dispatch_size", "ref_dispatch_size", "reward_dispatch_size",
        "dynamic_sampling_dispatch_size", "adv_dispatch_size", "critic_value_dispatch_size", "kl_dispatch_size",
        "actor_image_embeds_dispatch_size")},
    "actor_update_dispatch_size": Rule(ok=(None,), why="MindSpeed-RL updates on each rank's whole share of the step, "
                                                        "as mindrl does, unless this is set"),
    "critic_update_dispatch_size": Rule(ok=(None,), why="MindSpeed-RL updates on each rank's whole share of the step, "
                                                         "as mindrl does, unless this is set"),
    **{k: Rule(any=True, why="only MindSpeed-RL's use_dynamic_bsz reads it") for k in (
        "max_packing_token_size", "ref_max_packing_token_size", "actor_max_packing_token_size",
        "update_max_packing_token_size", "dynamic_max_batch_size", "ref_dynamic_max_batch_size",
        "actor_dynamic_max_batch_size", "update_dynamic_max_batch_size")},
}

# -- generate_config and its sampling_config -----------------------------------------------------------------------
GENERATE: dict = {
    "infer_tensor_parallel_size": Rule(to="generate_config.infer_tensor_parallel_size", default=8),
    "infer_pipeline_parallel_size": Rule(ok=(1,), why=_NO_PP),
    "infer_expert_parallel_size": Rule(ok=(1,), why="mindrl's models have no experts"),
    "enable_expert_parallel": Rule(ok=(False,), why="mindrl's models have no experts"),
    "data_parallel_size": Rule(to="generate_config.infer_data_parallel_size"),
    "micro_batch_size": Rule(to="generate_config.micro_batch_size"),
    "max_num_seqs": Rule(to="generate_config.max_num_seqs"),
    "max_model_len": Rule(any=True, why="checked: the prompt and response lengths must fit in it", default=2048),
    "tokenizer_name_or_path": Rule(any=True, why="checked: the rollout uses actor_config's tokenizer"),
    "trust_remote_code": Rule(any=True, why="checked: mindrl builds its own models and runs no code from a model "
                                            "directory; one that needs its own code is refused"),
    "dtype": Rule(any=True, why="checked: the rollout computes in the actor's compute dtype"),
    "max_num_batched_tokens": Rule(any=True, why=_VLLM), "gpu_memory_utilization": Rule(any=True, why=_VLLM),
    "enforce_eager": Rule(any=True, why=_VLLM), "enable_prefix_caching": Rule(any=True, why=_VLLM),
    "num_scheduler_steps": Rule(any=True, why=_VLLM), "torchair_graph": Rule(any=True, why=_VLLM),
    "limit_mm_image_per_prompt": Rule(any=True, why="mindrl's models are text-only"),
    "limit_mm_video_per_prompt": Rule(any=True, why="mindrl's models are text-only"),
    "offload_train_optimizer": Rule(any=True, why=_OFFLOAD), "offload_train_grad": Rule(any=True, why=_OFFLOAD),
    "offload_train_param": Rule(any=True, why=_OFFLOAD),
}
# vLLM's SamplingParams defaults: a sampling_config that leaves a key out gets these (MindSpeed-RL passes the
# mapping to vLLM as it is); without any sampling_config MindSpeed-RL's own default mapping applies
_VLLM_SAMPLING = {"max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_tokens": 0,
                  "repetition_penalty": 1.0}
_MSRL_SAMPLING = {"logprobs": 1, "max_tokens": 128, "top_p": 1.0, "top_k": 50, "min_p": 0.0, "temperature": 0.2,
                  "detokenize": False}
SAMPLING: dict = {
    "max_tokens": Rule(to="generate_config.max_tokens"),
    "min_tokens": Rule(to="generate_config.min_tokens"),
    "temperature": Rule(to="generate_config.temperature", convert=number),
    "top_p": Rule(to="generate_config.top_p", convert=number),
    "top_k": Rule(to="generate_config.top_k", convert=_top_k, why="-1 is 0, off"),
    "repetition_penalty": Rule(to="generate_config.repetition_penalty", convert=number),
    "seed": Rule(to="generate_config.seed"),
    "logprobs": Rule(any=True, why="mindrl computes the sampled token's log-prob, which is what MindSpeed-RL reads"),
    "detokenize": Rule(any=True, why="MindSpeed-RL reads token ids; mindrl decodes the text once, for the rewards"),
    "min_p": Rule(ok=(0, 0.0), why="mindrl samples with top_k and top_p, no min-p"),
    "presence_penalty": Rule(ok=(0, 0.0), why="mindrl has repetition_penalty only"),
    "frequency_penalty": Rule(ok=(0, 0.0), why="mindrl has repetition_penalty only"),
    "n": Rule(ok=(None, 1), why="the samples per prompt are rl_config.n_samples_per_prompt"),
    "ignore_eos": Rule(ok=(False,), why="mindrl always stops a response at its end token"),
}


# MindSpeed-RL keys whose meaning depends on the file's stage: read in MindSpeed-RL files; a mindrl file uses the
# mindrl key named here
STAGE_KEYS = {
    "token_level_loss": "rl_config.loss_agg_mode", "clip_higher_enable": "rl_config.clip_ratio_low/high",
    "clip_ratio_low": "rl_config.clip_ratio_low", "clip_ratio_high": "rl_config.clip_ratio_high",
    "overlong_buffer_enable": "rl_config.overlong_buffer_len", "overlong_buffer": "rl_config.overlong_buffer_len",
    "overlong_buffer_penalty_factor": "rl_config.overlong_penalty_factor",
    "rollout_max_tokens": "generate_config.max_tokens", "filter_groups_enable": "rl_config.dynamic_sampling",
    "filter_groups_metric": "rl_config.dynamic_sampling_metric",
    "filter_groups_max_batches": "rl_config.max_num_gen_batches",
    "filter_groups_train_batch_size": "rl_config.global_batch_size (and rl_config.gen_batch_size)",
}


def is_mindspeed_file(raw: dict) -> bool:
    return isinstance(raw, dict) and ("megatron_training" in raw or "defaults" in raw)


def is_peer_key(dotted: str) -> bool:
    """A key of MindSpeed-RL's vocabulary (for routing a command-line override to the file's own sections)."""
    parts = dotted.split(".")
    if parts[0] in ("megatron_training", "defaults"):
        return True
    if len(parts) == 2 and parts[0] in ("actor_config", "critic_config"):
        return parts[1] in MEGATRON or parts[1] in MODEL_KEYS or parts[1] == "model"
    if len(parts) >= 2 and parts[0] == "rl_config":
        return parts[1] in RL or parts[1] in ("init_kl_coef", "use_kl_in_reward")
    if len(parts) == 2 and parts[0] == "generate_config":
        return parts[1] in GENERATE
    return len(parts) == 3 and parts[:2] == ["generate_config", "sampling_config"]


def canonical_of(dotted: str) -> str | None:
    """The mindrl key a MindSpeed-RL key sets (None when it sets none): an override of the peer spelling replaces
    a value the file gave under mindrl's name."""
    parts = dotted.split(".")
    table = {"rl_config": RL, "generate_config": GENERATE}.get(parts[0])
    if len(parts) == 3 and parts[:2] == ["generate_config", "sampling_config"]:
        rule = SAMPLING.get(parts[2])
    elif len(parts) == 2 and parts[0] in ("actor_config", "critic_config"):
        rule = MEGATRON.get(parts[1])
        return _target(rule.to, parts[0]) if rule is not None and rule.to else None
    else:
        rule = table.get(parts[1]) if table is not None and len(parts) == 2 else None
    return rule.to if rule is not None and rule.to and "/" not in rule.to else None


class Translation:
    """A file's sections in mindrl's vocabulary, with where each value came from."""

    def __init__(self, source: str, out: dict | None = None, overridden: dict | None = None):
        self.source = source
        self.out: dict = out if out is not None else {}
        self.origins: dict = {}      # mindrl key -> where its value came from
        self.defaulted: set = set()  # mindrl keys holding MindSpeed-RL's defaults, not a value the file gave
        self.notes: list = []        # accepted keys mindrl does nothing with, and why
        self.errors: list = []       # (peer key, message)
        self.checks: list = []       # (peer key, check(cfg) -> message or None): run once paths are resolved
        self.overridden = dict(overridden or {})  # peer key -> the command-line override that set it

    def where(self, peer_key: str) -> str:
        text = self.overridden.get(peer_key)
        return f"command line {text!r}" if text else f"{self.source}: {peer_key}"

    def set(self, key: str, value: Any, origin: str, default: bool = False) -> None:
        section, name = key.split(".")
        target = self.out.setdefault(section, {})
        if name in target:
            if default:
                return
            if key not in self.defaulted and not same_value(target[name], value):
                self.errors.append((key, f"{show(value)} from {origin} conflicts with {show(target[name])} from "
                                         f"{self.origins.get(key, 'the file')}; give one"))
                return
        target[name] = value
        self.origins[key] = origin
        (self.defaulted.add if default else self.defaulted.discard)(key)

    def refuse(self, key: str, message: str) -> None:
        self.errors.append((key, message))

    def rule(self, rule: Rule, peer_key: str, value: Any, role: str | None = None) -> None:
        converted, note, error = judge(rule, peer_key, value)
        if error:
            self.refuse(peer_key, error)
        elif note:
            self.notes.append(note)
        else:
            self.set(_target(rule.to, role), converted, self.where(peer_key))

    def defaults(self, rules: dict, given, role: str | None = None) -> None:
        """MindSpeed-RL's defaults for the keys of ``rules`` that ``given`` leaves out."""
        for key, rule in rules.items():
            if key in given or rule.default is NO_DEFAULT or not rule.to:
                continue
            value = rule.convert(rule.default) if rule.convert else rule.default
            self.set(_target(rule.to, role), value, f"MindSpeed-RL's default {key}: {show(rule.default)}",
                     default=True)


def _target(to: str, role: str | None) -> str:
    if role == "actor_config" and to == "{role}.micro_batch_size":
        return "rl_config.micro_batch_size"
    return to.replace("{role}", role or "actor_config")


def _mapping(value, name: str, tr: Translation) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        tr.refuse(name, f"expected a mapping, got {show(value)}")
        return {}
    return dict(value)


# ---------------------------------------------------------------------------------------------------------------
# MindSpeed-RL keys in a mindrl file: their meaning, none of MindSpeed-RL's defaults or stage rules

def translate_native(raw: dict, source: str, schema_keys: dict, overridden: dict | None = None) -> Translation:
    """``raw`` with the MindSpeed-RL keys of its sections replaced by mindrl's (``schema_keys``: section -> the
    names mindrl's schema has there; those stay as they are)."""
    tr = Translation(source, raw, overridden)
    for section, rules in (("actor_config", MEGATRON), ("critic_config", MEGATRON), ("rl_config", RL),
                           ("generate_config", GENERATE)):
        body = raw.get(section)
        if not isinstance(body, dict):
            continue
        role = section if section in ("actor_config", "critic_config") else None
        for key in [k for k in body if k not in schema_keys.get(section, ())]:
            peer = f"{section}.{key}"
            if section == "generate_config" and key == "sampling_config":
                _sampling(tr, body.pop(key), fill=False)
            elif section == "rl_config" and key in STAGE_KEYS:
                body.pop(key)
                tr.refuse(peer, f"MindSpeed-RL reads it in its own files (with megatron_training), with the file's "
                                f"stage; in a mindrl file use {STAGE_KEYS[key]}")
            elif section == "rl_config" and key in _SPECIAL_RL:
                _SPECIAL_RL[key](tr, body.pop(key))
            elif key in rules:
                tr.rule(rules[key], peer, body.pop(key), role)
    return tr


# ---------------------------------------------------------------------------------------------------------------
# a MindSpeed-RL file

_MINDRL_NATIVE = ("data", "logging", "runtime", "eval", "ref")  # mindrl's own sections a MindSpeed-RL file may add


def translate(raw: dict, source: str, overridden: dict | None = None) -> Translation:
    """A MindSpeed-RL file (``is_mindspeed_file``) as mindrl's sections, with MindSpeed-RL's defaults and meaning."""
    tr = Translation(source, {}, overridden)
    raw = dict(raw)
    names = _default_models(raw.pop("defaults", None), tr)
    megatron = _mapping(raw.pop("megatron_training", None), "megatron_training", tr)
    actor = _mapping(raw.pop("actor_config", None), "actor_config", tr)
    critic = raw.pop("critic_config", None)
    critic = None if critic is None else _mapping(critic, "critic_config", tr)
    rl = _mapping(raw.pop("rl_config", None), "rl_config", tr)
    gen = _mapping(raw.pop("generate_config", None), "generate_config", tr)
    for section in ("ref_config", "reward_config"):
        if raw.pop(section, None) is not None:
            tr.refuse(section, "MindSpeed-RL refuses this section with use_integrated_worker: true (the reference and "
                               "the rewards run on the actor's workers), and so does mindrl")
    for section in _MINDRL_NATIVE:
        if isinstance(raw.get(section), dict):
            for key, value in raw.pop(section).items():
                tr.set(f"{section}.{key}", value, tr.where(f"{section}.{key}"))
    tr.out.update(raw)  # anything else: the schema walker reports it

    stage = _stage(megatron, actor, rl, tr)
    models = _model_files(names, source, tr)
    actor_view = {**megatron, **actor}
    _role(tr, "actor_config", megatron, actor, models, actor_view)
    if critic is not None:
        _role(tr, "critic_config", megatron, critic, models, actor_view)
    elif stage == "ray_ppo":
        tr.refuse("critic_config", "stage ray_ppo trains a critic: add the critic_config section")
    _rl(tr, rl, stage, actor_view)
    _generate(tr, gen)
    _data_path(tr)
    return tr


def _default_models(defaults, tr: Translation) -> list:
    """The model names of Hydra's ``defaults: - model: [a, b]`` (or ``- model: a``)."""
    if defaults is None:
        return []
    names = []
    for item in defaults if isinstance(defaults, list) else [defaults]:
        if not isinstance(item, dict) or set(item) != {"model"}:
            tr.refuse("defaults", f"{show(item)}: mindrl reads MindSpeed-RL's `- model: [<name>, ...]` entries (the "
                                  f"model files in configs/model/), nothing else")
            continue
        value = item["model"]
        names += value if isinstance(value, list) else [value]
    return [str(n) for n in names]


def _stage(megatron: dict, actor: dict, rl: dict, tr: Translation) -> str:
    stage = actor.get("stage", megatron.get("stage"))
    estimator = rl.get("adv_estimator", "group_norm")
    if stage is None:
        return "ray_ppo" if estimator == "gae" else "ray_grpo"
    if stage not in _STAGES:
        tr.refuse("megatron_training.stage", f"{show(stage)}: mindrl train runs {', '.join(_STAGES)}; reward-model "
                                             f"training is `mindrl train-rm`")
        return "ray_grpo"
    if (stage == "ray_ppo") != (estimator == "gae"):
        tr.refuse("rl_config.adv_estimator", f"{show(estimator)} does not fit stage {stage}: MindSpeed-RL's PPO "
                                             f"uses gae, its GRPO and DAPO group_norm")
    return stage


# -- models and the trained roles ------------------------------------------------------------------------------------

SHIPPED_MODELS = Path(__file__).resolve().parents[2] / "configs" / "model"


def _model_dir(source: str) -> Path:
    return (Path(os.path.dirname(os.path.abspath(source))) if not source.startswith("<") else Path.cwd()) / "model"


def _find_model(name: str, source: str) -> str | None:
    """configs/model/<name>.yaml beside the config (MindSpeed-RL's layout), else the one mindrl ships."""
    for candidate in (_model_dir(source) / f"{name}.yaml", SHIPPED_MODELS / f"{name}.yaml"):
        if candidate.is_file():
            return str(candidate)
    return None


def _model_files(names: list, source: str, tr: Translation) -> dict:
    """name -> model file of every model the defaults list names."""
    found = {}
    for name in names:
        found[name] = _find_model(name, source)
        if found[name] is None:
            tr.refuse("defaults", f"model {name!r}: no {_model_dir(source) / (name + '.yaml')} (MindSpeed-RL's "
                                  f"layout: configs/model/ beside the config), and mindrl ships none of that name in "
                                  f"{SHIPPED_MODELS}")
    return {k: v for k, v in found.items() if v is not None}


def _model_section(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        doc = parse_yaml(fh.read(), path)
    return next(iter(doc.values())) if isinstance(doc, dict) and len(doc) == 1 else {}


def _role(tr: Translation, role: str, megatron: dict, own: dict, models: dict, actor_view: dict) -> None:
    """One trained role's MegatronConfig in mindrl's keys: the model file's section, then megatron_training, then the
    role's own section, each over the one before (MindSpeed-RL's order). A model file may carry training keys too
    (configs/model/qwen25_32b.yaml has adam_beta2)."""
    name = {**megatron, **own}.get("model")
    path = None if name is None else models.get(str(name)) or _find_model(str(name), tr.source)
    declared = _model_section(path) if path is not None else {}
    training = {k: v for k, v in declared.items() if k not in MODEL_KEYS}
    view = {**training, **megatron, **own}
    section_of = {k: (role if k in own else "megatron_training" if k in megatron else f"{path}: {name}")
                  for k in view}
    if name is None:
        tr.refuse(f"{role}.model", "names no model (MindSpeed-RL picks configs/model/<name>.yaml with it)")
    elif path is None and os.path.exists(os.path.expanduser(str(name))):  # mindrl's own: a model yaml or HF dir
        tr.set(f"{role}.model", name, tr.where(section_of["model"] + ".model"))
    elif path is not None:
        tr.set(f"{role}.model", path, f"{tr.where(section_of['model'] + '.model')} -> {path}")
        for key in sorted(MODEL_KEYS & set(view)):
            if key in declared and not same_value(_num(declared[key]), _num(view[key])):
                tr.refuse(f"{section_of[key]}.{key}", f"{show(view[key])} differs from {show(declared[key])} in {path}: "
                                                      f"mindrl reads an architecture from its model file; change it "
                                                      f"there")
    else:
        tr.refuse(f"{section_of['model']}.model", f"{name!r}: no model file {_model_dir(tr.source) / (str(name) + '.yaml')} "
                                                  f"and none shipped with mindrl in {SHIPPED_MODELS} (nor a path)")
    for key, value in view.items():
        if key in MODEL_KEYS or key in ("model", "stage"):
            continue
        peer = f"{section_of[key]}.{key}"
        rule = MEGATRON.get(key)
        if rule is None:
            if section_of[key] == role:  # one of mindrl's own keys in the role's section
                tr.set(f"{role}.{key}", value, tr.where(peer))
            else:
                tr.refuse(peer, "not a MegatronConfig key mindrl knows (docs/configuration.md#mindspeed-rl-keys)")
        elif role == "actor_config" or "{role}" in (rule.to or "") or not rule.to:
            tr.rule(rule, peer, value, role)
        elif key in own and not same_value(value, actor_view.get(key)):
            tr.refuse(peer, f"{show(value)}: mindrl trains the critic on the actor's steps and batches "
                            f"({show(actor_view.get(key))}); remove it from {role}")
    tr.defaults({k: r for k, r in MEGATRON.items() if role == "actor_config" or "{role}" in (r.to or "")}, view, role)
    if "lora_target_modules" in view or "lora_r" in view:  # MindSpeed-LLM: target modules turn LoRA on
        for key, to, default in (("lora_r", "lora_rank", 16), ("lora_alpha", "lora_alpha", 32.0)):
            if key not in view:
                tr.set(f"{role}.{to}", default, f"MindSpeed-LLM's default {key}: {default:g} (LoRA is on)", default=True)
    for key, why in (("micro_batch_size", "responses per forward/backward, per rank"),
                     ("lr", "Megatron has no default learning rate")):
        if key not in view:
            tr.refuse(f"{role}.{key}", f"MindSpeed-RL needs it ({why}), and so does mindrl for a MindSpeed-RL file")
    _release_load(tr, role, view)
    if role == "actor_config" and "seq_length" in view:
        limit = int(view["seq_length"])
        tr.checks.append((f"{section_of['seq_length']}.seq_length", lambda cfg: None if (
            cfg.generate_config.max_prompt_length <= limit) else (
            f"{limit} is shorter than generate_config.max_prompt_length {cfg.generate_config.max_prompt_length}: "
            f"MindSpeed-RL would cut longer prompts to {limit} tokens, mindrl refuses them; lower max_prompt_length "
            f"(rl_config.max_prompt_length) or raise seq_length")))


def _num(value):
    try:
        return number(value)
    except PeerValueError:
        return value


def _release_load(tr: Translation, role: str, view: dict) -> None:
    """Megatron loads a checkpoint without an iteration (a converted model) as a release: weights only, step 0. So a
    ``finetune: false`` whose ``load`` holds weights rather than a mindrl run checkpoint starts at step 0."""
    load, finetune = view.get("load"), view.get("finetune", False)
    if finetune or load is None:
        return
    path = os.path.expanduser(str(load))
    if os.path.isdir(path) and not (os.path.exists(os.path.join(path, "latest_checkpointed_iteration.txt"))
                                    or os.path.exists(os.path.join(path, "trainer_state.json"))):
        tr.out[role]["finetune"] = True
        tr.origins[f"{role}.finetune"] = (f"{tr.where(role + '.finetune')}: false with load {load!r}, weights "
                                          f"without an iteration (Megatron's release checkpoint): step 0")
        for key in ("no_load_optim", "no_load_rng"):
            tr.out[role].pop(key, None)  # a release loads neither, whatever they say


# -- rl_config --------------------------------------------------------------------------------------------------------

def _integrated_mode(tr: Translation, value) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        tr.refuse("rl_config.integrated_mode_config", f"expected a mapping, got {show(value)}")
        return
    for key in set(value) - {"ref_model_load_path"}:
        tr.refuse(f"rl_config.integrated_mode_config.{key}", "unknown key; mindrl reads ref_model_load_path here "
                                                            "(did you mean 'ref_model_load_path'?)")
    if value.get("ref_model_load_path") is not None:
        tr.set("ref.ref_model_load_path", value["ref_model_load_path"],
               tr.where("rl_config.integrated_mode_config.ref_model_load_path"))


def _resource(key: str):
    def handle(tr: Translation, value) -> None:
        if not isinstance(value, dict) or set(value) != {"num_npus"} or not isinstance(value["num_npus"], int):
            tr.refuse(f"rl_config.{key}", f"expected {{num_npus: N}}, got {show(value)}")
        else:
            tr.set("runtime.world_size", value["num_npus"], tr.where(f"rl_config.{key}.num_npus"))
    return handle


_SPECIAL_RL = {"integrated_mode_config": _integrated_mode, "actor_resource": _resource("actor_resource"),
               "critic_resource": _resource("critic_resource")}


def _rl(tr: Translation, rl: dict, stage: str, actor_view: dict) -> None:
    rl = dict(rl)
    for key, handle in _SPECIAL_RL.items():
        if key in rl:
            handle(tr, rl.pop(key))
    stage_keys = {k: rl.pop(k) for k in list(rl) if k in STAGE_KEYS}
    _kl(tr, stage, {k: rl.pop(k) for k in ("init_kl_coef", "use_kl_in_reward") if k in rl})
    if not tr.out["rl_config"]["kl_coef"] and "ref_forward_micro_batch_size" in rl:
        tr.notes.append(f"rl_config.ref_forward_micro_batch_size: {show(rl.pop('ref_forward_micro_batch_size'))} "
                        f"(no reference model runs without a KL term, in MindSpeed-RL as in mindrl)")
    if stage == "ray_dapo":
        _dapo(tr, stage_keys, actor_view)
    else:
        for key, value in stage_keys.items():
            if value not in (False, None):
                tr.refuse(f"rl_config.{key}", f"only MindSpeed-RL's DAPO (stage ray_dapo) reads it; this file's stage "
                                              f"is {stage}")
    for key, value in rl.items():
        if key in RL:
            tr.rule(RL[key], f"rl_config.{key}", value)
        else:  # one of mindrl's own keys, or the schema walker's error
            tr.set(f"rl_config.{key}", value, tr.where(f"rl_config.{key}"))
    given = set(rl) | set(stage_keys) | set(STAGE_KEYS) | {"init_kl_coef", "use_kl_in_reward"}
    tr.defaults(RL, given)
    dapo_token_level = stage_keys.get("token_level_loss", True)
    mode = MICRO_TOKEN_MEAN if stage != "ray_dapo" or dapo_token_level else "seq-mean-token-mean"
    tr.set("rl_config.loss_agg_mode", mode, f"stage {stage}" + (
        f" with token_level_loss: {show(dapo_token_level)}" if stage == "ray_dapo" else "")
        + ": MindSpeed-RL's loss is a mean per micro-batch, averaged over micro-batches", default=True)
    if stage == "ray_ppo":
        tr.set("critic_config.loss_agg_mode", MICRO_TOKEN_MEAN, "stage ray_ppo: MindSpeed-RL's value loss is a token "
                                                                "mean per micro-batch", default=True)


def _kl(tr: Translation, stage: str, given: dict) -> None:
    """Where MindSpeed-RL puts the KL: GRPO in the loss, PPO in the reward with use_kl_in_reward, DAPO nowhere."""
    coef = number(given.get("init_kl_coef", 0.01))
    origin = tr.where("rl_config.init_kl_coef") if "init_kl_coef" in given else "MindSpeed-RL's default init_kl_coef"
    in_reward = bool(given.get("use_kl_in_reward", False))
    if stage == "ray_grpo":
        if in_reward:
            tr.refuse("rl_config.use_kl_in_reward", "MindSpeed-RL's GRPO puts the KL into the loss, never the reward")
        tr.set("rl_config.kl_coef", coef, origin, default="init_kl_coef" not in given)
    elif stage == "ray_dapo":
        for key, value in given.items():
            if value:
                tr.refuse(f"rl_config.{key}", "MindSpeed-RL's DAPO has no reference model and no KL term")
        tr.set("rl_config.kl_coef", 0.0, "stage ray_dapo: MindSpeed-RL's DAPO has no KL term", default=True)
    elif in_reward:
        tr.set("rl_config.use_kl_in_reward", True, tr.where("rl_config.use_kl_in_reward"))
        tr.set("rl_config.kl_coef", coef, origin, default="init_kl_coef" not in given)
    else:
        if "init_kl_coef" in given and coef > 0:
            tr.refuse("rl_config.init_kl_coef", f"{show(given['init_kl_coef'])}: MindSpeed-RL's PPO applies it only in "
                                                f"the reward, with use_kl_in_reward: true (its actor loss has no KL)")
        tr.set("rl_config.kl_coef", 0.0, origin if "init_kl_coef" in given else
               "stage ray_ppo without use_kl_in_reward: MindSpeed-RL's PPO has no KL term",
               default="init_kl_coef" not in given)


def _dapo(tr: Translation, keys: dict, actor_view: dict) -> None:
    """DAPO's switches and the values they turn on (MindSpeed-RL's dapo trainer, loss and rule reward)."""
    def switch(name: str, values: tuple) -> bool:
        on = bool(keys.get(name, False))
        if on:
            tr.notes.append(f"rl_config.{name}: true (turns on {', '.join(values)})")
        else:
            for key in values:
                if keys.get(key) is not None:
                    tr.refuse(f"rl_config.{key}", f"MindSpeed-RL reads it only with {name}: true")
        return on

    if "token_level_loss" in keys:
        tr.notes.append(f"rl_config.token_level_loss: {show(keys['token_level_loss'])} (sets rl_config.loss_agg_mode)")
    clip = ("clip_ratio_low", "clip_ratio_high")
    if switch("clip_higher_enable", clip):
        for key in clip:
            if keys.get(key) is not None:
                tr.rule(RL[key], f"rl_config.{key}", keys[key])
        tr.defaults({k: RL[k] for k in clip}, keys)
    overlong = ("overlong_buffer", "overlong_buffer_penalty_factor", "rollout_max_tokens")
    if switch("overlong_buffer_enable", overlong):
        for key in overlong[:2]:
            if keys.get(key) is not None:
                tr.rule(RL[key], f"rl_config.{key}", keys[key])
        tr.defaults({k: RL[k] for k in overlong[:2]}, keys)
        limit = int(keys.get("rollout_max_tokens", 2048))
        tr.checks.append(("rl_config.rollout_max_tokens", lambda cfg: None if cfg.generate_config.max_tokens == limit
                          else f"{limit} differs from sampling_config.max_tokens {cfg.generate_config.max_tokens}: "
                               f"MindSpeed-RL requires them equal (the overlong penalty counts from it)"))
    groups = ("filter_groups_metric", "filter_groups_max_batches", "filter_groups_train_batch_size")
    if switch("filter_groups_enable", groups):
        tr.set("rl_config.dynamic_sampling", True, tr.where("rl_config.filter_groups_enable"))
        gen = actor_view.get("global_batch_size")
        if gen is not None:  # the training batch is filter_groups_train_batch_size; the generation batch this
            tr.out.setdefault("rl_config", {}).pop("global_batch_size", None)
            tr.defaulted.discard("rl_config.global_batch_size")
            tr.set("rl_config.gen_batch_size", gen, tr.where("megatron_training.global_batch_size")
                   + " (the generation batch with filter_groups_enable)")
        for key in groups:
            if keys.get(key) is not None:
                tr.rule(RL[key], f"rl_config.{key}", keys[key])
        tr.defaults({k: RL[k] for k in groups}, keys)
    else:
        tr.set("rl_config.dynamic_sampling", False, "MindSpeed-RL's default filter_groups_enable: false", default=True)


# -- generate_config --------------------------------------------------------------------------------------------------

def _generate(tr: Translation, gen: dict) -> None:
    gen = dict(gen)
    sampling = gen.pop("sampling_config", None)
    for key, value in gen.items():
        if key in GENERATE:
            tr.rule(GENERATE[key], f"generate_config.{key}", value)
        else:
            tr.set(f"generate_config.{key}", value, tr.where(f"generate_config.{key}"))
    tr.defaults(GENERATE, gen)
    _sampling(tr, sampling, fill=True)
    _generate_checks(tr, gen)


def _sampling(tr: Translation, sampling, fill: bool) -> None:
    """sampling_config: its keys, and (a MindSpeed-RL file) the values vLLM or MindSpeed-RL fill in for absent ones."""
    if sampling is None:
        given, absent, why = {}, _MSRL_SAMPLING, "MindSpeed-RL's default sampling_config"
    elif not isinstance(sampling, dict):
        tr.refuse("generate_config.sampling_config", f"expected a mapping, got {show(sampling)}")
        return
    else:
        given, absent, why = sampling, _VLLM_SAMPLING, "vLLM's default (MindSpeed-RL hands sampling_config to vLLM)"
    for key, value in given.items():
        peer = f"generate_config.sampling_config.{key}"
        if key in SAMPLING:
            tr.rule(SAMPLING[key], peer, value)
        else:
            tr.refuse(peer, "not a vLLM sampling parameter mindrl knows")
    if fill:
        for key, value in absent.items():
            rule = SAMPLING.get(key)
            if key not in given and rule is not None and rule.to:
                tr.set(rule.to, rule.convert(value) if rule.convert else value, f"{why}: {key} {show(value)}",
                       default=True)


def _generate_checks(tr: Translation, gen: dict) -> None:
    """The vLLM keys mindrl checks against the run instead of using: they must describe what mindrl will do."""
    limit = int(gen.get("max_model_len", 2048))
    tr.checks.append(("generate_config.max_model_len", lambda cfg: None if (
        cfg.generate_config.max_prompt_length + cfg.generate_config.max_tokens <= limit) else (
        f"{limit} is shorter than max_prompt_length + max_tokens = {cfg.generate_config.max_prompt_length} + "
        f"{cfg.generate_config.max_tokens}: vLLM would refuse such requests; raise it or shorten the lengths")))
    if "tokenizer_name_or_path" in gen:
        given = os.path.expanduser(str(gen["tokenizer_name_or_path"]))
        tr.checks.append(("generate_config.tokenizer_name_or_path", lambda cfg: None if os.path.realpath(given) == (
            os.path.realpath(cfg.actor_config.tokenizer_name_or_path)) else (
            f"{given!r} is not actor_config.tokenizer_name_or_path: mindrl rolls out with the policy's tokenizer")))
    if "dtype" in gen:
        dtype = str(gen["dtype"])
        tr.checks.append(("generate_config.dtype", lambda cfg: None if dtype == (cfg.actor_config.compute_dtype or dtype)
                          else f"{dtype!r}: mindrl's rollout computes in the actor's compute dtype "
                               f"{cfg.actor_config.compute_dtype!r} (megatron_training.bf16)"))
    if gen.get("trust_remote_code"):
        tr.checks.append(("generate_config.trust_remote_code", _remote_code))


def _remote_code(cfg) -> str | None:
    """``trust_remote_code: true`` changes nothing unless the model directory ships its own code."""
    for path in (cfg.actor_config.load, cfg.actor_config.model):
        config = os.path.join(path or "", "config.json")
        if path and os.path.isfile(config):
            try:
                with open(config, encoding="utf-8") as fh:
                    auto = json.load(fh).get("auto_map")
            except (OSError, ValueError):
                return None
            if auto:
                return (f"true, and {config} names its own code (auto_map): mindrl runs no code from a model "
                        f"directory; only the architectures it builds itself (qwen2, llama, qwen3) train")
    return None


def _data_path(tr: Translation) -> None:
    """MindSpeed-RL's data_path is the output_prefix preprocessing wrote; `mindrl preprocess` writes
    <output_prefix>.mindrecord there."""
    data = tr.out.get("data", {})
    path = data.get("path")
    if isinstance(path, str) and not path.endswith(".mindrecord") and os.path.exists(
            os.path.expanduser(path) + ".mindrecord"):
        data["path"] = path + ".mindrecord"


# -- the key tables as docs/configuration.md shows them (a test keeps the two equal) ----------------------------------

def markdown_tables() -> str:
    """Every MindSpeed-RL key mindrl knows, by section, with what mindrl does with it."""
    out = []
    for title, table in (("`megatron_training`, `actor_config`, `critic_config` (MindSpeed-RL's MegatronConfig)", MEGATRON),
                         ("`rl_config`", RL), ("`generate_config`", GENERATE),
                         ("`generate_config.sampling_config`", SAMPLING)):
        out += [f"#### {title}", "", "| key | MindSpeed-RL's default | what mindrl does |", "|---|---|---|"]
        for key, rule in table.items():
            default = "" if rule.default is NO_DEFAULT else f"`{show(rule.default)}`"
            what = rule.describe().replace("{role}", "<role>").replace("|", "\\|")
            if key in STAGE_KEYS:
                what += f" (stage `ray_dapo` only; in a mindrl file use `{STAGE_KEYS[key]}`)"
            out.append(f"| `{key}` | {default} | {what} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
