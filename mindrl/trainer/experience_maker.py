"""Making a step's experience: prompts -> rollout -> rule rewards [-> DAPO dynamic sampling] -> the exchange
between ranks -> the model passes the run needs (old and reference log-probs, values, reward-model scores).

Each rollout replica samples its share of the global batch; rule rewards need the text and labels, so they are
scored where the text was made. Everything that runs a model afterwards works on the global batch, each
data-parallel replica on its rows, and shares the result (roles/base.py: ``score_in_shares``).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from mindrl.data.reader import mindrecord_columns
from mindrl.trainer.context import RunContext, seed_from
from mindrl.trainer.experience import Experience


class ExperienceMaker:
    def __init__(self, run: RunContext, policy, rewards, reference=None, critic=None, reward_model=None):
        from mindrl.data.reader import PromptDataset
        self.run, self.policy, self.rewards, self.reference = run, policy, rewards, reference
        self.critic, self.reward_model = critic, reward_model
        d, infer = run.cfg.data, run.topo.infer
        # labels are read only for the rule rewards: a reward-model-only run needs none (MindRLHF data has none)
        self.labels = bool(run.cfg.rl_config.verifier_function)
        columns = [d.prompt_key] + ([d.label_key] if self.labels else [])
        # MindRLHF's data pads prompt_ids to a fixed width; prompt_length says where each prompt ends
        self.lengths = "prompt_length" in mindrecord_columns(d.path)
        columns += ["prompt_length"] if self.lengths else []
        # each rollout replica reads its own share of every global batch
        self.dataset = PromptDataset(d.path, batch_size=run.cfg.rl_config.global_batch_size // infer.dp,
                                     dp_rank=infer.dp_rank, dp_size=infer.dp, seed=d.seed, shuffle=d.shuffle,
                                     columns=columns)
        self.sampling = run.sampling_params()
        self.draws = 0  # rollout batches drawn so far: the sampling seed of each is (run seed, draw, replica)
        self._it = None

    def make(self, timers) -> tuple:
        """(the global batch's Experience, rollout metrics)."""
        rl = self.run.cfg.rl_config
        local, counts = self._sample(timers)
        exp = self._exchange(local, counts)
        exp = exp.resized(*self.run.train_widths(exp), pad_id=self.run.pad_id)
        exp.loss_mask = exp.response_mask.copy()
        if rl.mask_truncated_completions:
            exp.loss_mask[~exp.finished] = 0.0
        exp.old_log_probs = exp.rollout_log_probs
        if rl.ppo_epochs * (len(exp) // rl.mini_batch_size) > 1:
            # the rollout's log-probs are the old policy only for a single update per rollout
            with timers("old_log_p"):
                exp.old_log_probs = self.policy.log_probs(exp)
        if self.reference is not None:
            with timers("reference_model"):
                exp.ref_log_probs = self.reference.log_probs(exp)
        if self.critic is not None:
            with timers("critic_model"):
                exp.values = self.critic.values(exp)
        if self.reward_model is not None:
            with timers("reward_model"):
                exp.rm_scores = self.reward_model.score(exp)
            exp.scores = exp.scores + self.reward_model.weight * exp.rm_scores.astype(np.float64)
        if rl.reward_clip_range is not None:
            exp.scores = np.clip(exp.scores, *rl.reward_clip_range)
        # the rule rewards' failure counts always; the dapo/* ones only with dynamic sampling
        return exp, {k: v for k, v in counts.items() if rl.dynamic_sampling or not k.startswith("dapo/")}

    # -- sampling ------------------------------------------------------------------------------------
    def _next_prompts(self):
        d, gen = self.run.cfg.data, self.run.cfg.generate_config
        if self._it is None:  # created on first use: after a resume has set the data position
            self._it = self.dataset.forever()
        batch = next(self._it)
        prompts = [list(map(int, p)) for p in batch[d.prompt_key]]
        if self.lengths:
            prompts = [p[:int(n)] for p, n in zip(prompts, batch["prompt_length"])]
        too_long = [i for i, p in enumerate(prompts) if len(p) > gen.max_prompt_length]
        if too_long:
            i = too_long[0]
            raise ValueError(f"{d.path}: row {int(batch['index'][i])} has a {len(prompts[i])}-token prompt, longer "
                             f"than generate_config.max_prompt_length={gen.max_prompt_length}")
        labels = [str(x) for x in batch[d.label_key]] if self.labels else [""] * len(prompts)
        return prompts, labels

    def _draw(self, timers) -> tuple:
        """One batch of prompts, sampled and scored by the rule rewards, and the rewards' failure counts."""
        from mindrl.algorithms.dapo import overlong_penalty
        run, rl, gen = self.run, self.run.cfg.rl_config, self.run.cfg.generate_config
        prompts, labels = self._next_prompts()
        with timers("rollout"):
            # replicas draw different samples; the tp ranks of one replica draw the same
            out = self.policy.generate(prompts, self.sampling, seed_from(run.seed, self.draws, run.topo.infer.dp_rank))
        self.draws += 1
        texts = [run.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
        with timers("rule_reward"):
            rew = self.rewards(texts, [labels[i] for i in out.prompt_index])
        scores = rew.scores.astype(np.float64)
        if rl.overlong_buffer_len > 0:
            scores = scores + overlong_penalty(out.lengths, self.sampling.max_tokens, rl.overlong_buffer_len,
                                               rl.overlong_penalty_factor)
        return Experience.from_rollout([prompts[i] for i in out.prompt_index], out.tokens, out.log_probs,
                                       out.finished, out.prompt_index, rew.scores, scores, rew.per_verifier,
                                       gen.max_prompt_length, gen.max_tokens, run.pad_id), rew.counts()

    def _sample(self, timers):
        """This replica's share of the global batch, with DAPO dynamic sampling when enabled: groups whose samples
        all scored the same carry no signal, so more prompts are drawn (at most max_num_gen_batches draws)."""
        from mindrl.algorithms.dapo import dynamic_sampling_keep_mask
        rl, n = self.run.cfg.rl_config, self.run.cfg.rl_config.n_samples_per_prompt
        want = rl.global_batch_size // self.run.topo.infer.dp
        kept, spare, draws, counts = [], [], 0, {}
        while True:
            exp, drawn = self._draw(timers)
            counts = {k: counts.get(k, 0) + v for k, v in drawn.items()}  # grpo/rewards/failures, ... of the step
            draws += 1
            if not rl.dynamic_sampling:
                kept = [exp.select(slice(g * n, (g + 1) * n)) for g in range(len(exp) // n)]
                break
            keep = dynamic_sampling_keep_mask(exp.scores, n)
            for g in range(len(exp) // n):
                (kept if keep[g * n] else spare).append(exp.select(slice(g * n, (g + 1) * n)))
            if len(kept) >= want or draws >= rl.max_num_gen_batches:
                break
        filled = max(0, want - len(kept))
        groups = (kept + spare[:filled])[:want]  # zero-variance groups only fill a short batch: advantage 0
        local = Experience.concat(groups)
        local.group = np.arange(len(local)) // n
        counts.update({"dapo/gen_batches": draws, "dapo/kept_groups": len(groups) - filled,
                       "dapo/filled_groups": filled})
        return local, counts

    def _exchange(self, local: Experience, dapo: Dict[str, float]) -> Experience:
        """Every rank gets the global batch, in rollout-replica order."""
        run = self.run
        if run.topo.world == 1:
            return local
        gen, infer = run.cfg.generate_config, run.topo.infer
        mat = run.exchange.from_each(local.pack(), infer)
        sums = run.exchange.all_sum(np.array(list(dapo.values()), np.float32)) / infer.tp
        dapo.update({k: float(v) for k, v in zip(list(dapo), sums)})
        return Experience.unpack(mat, gen.max_prompt_length, gen.max_tokens, list(local.verifier_scores),
                                 run.pad_id, run.cfg.rl_config.n_samples_per_prompt)

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"draws": self.draws, "data": self.dataset.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.draws = int(state.get("draws", 0))
        self.dataset.load_state_dict(state["data"])
