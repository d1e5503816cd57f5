"""Making a step's experience: prompts -> rollout -> rule rewards [-> DAPO dynamic sampling] -> the exchange
between ranks -> the model passes the run needs (old and reference log-probs, values, reward-model scores) -> the
sequence score (algorithms/sequence_reward.py).

Each rollout replica samples its share of the global batch; rule rewards need the text and labels, so they are
scored where the text was made. Everything that runs a model afterwards works on the global batch, each
data-parallel replica on its rows, and shares the result (roles/base.py: ``score_in_shares``).
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from mindrl.algorithms.dapo import dynamic_sampling_keep_mask
from mindrl.algorithms.sequence_reward import sequence_score
from mindrl.algorithms.tis import tis_weights
from mindrl.data.reader import PromptDataset, mindrecord_columns
from mindrl.trainer.context import RunContext, seed_from
from mindrl.trainer.experience import Experience
from mindrl.trainer.partial_rollout import PartialRollout, flatten


class ExperienceMaker:
    def __init__(self, run: RunContext, policy, rewards, reference=None, critic=None, reward_model=None):
        self.run, self.policy, self.rewards, self.reference = run, policy, rewards, reference
        self.critic, self.reward_model = critic, reward_model
        ro, infer = run.plan.rollout, run.topo.infer
        # labels are read only for the rule rewards: a reward-model-only run needs none (MindRLHF data has none)
        columns = [ro.prompt_key] + ([ro.label_key] if ro.label_key else [])
        # MindRLHF's data pads prompt_ids to a fixed width; prompt_length says where each prompt ends
        self.lengths = "prompt_length" in mindrecord_columns(ro.data_path)
        columns += ["prompt_length"] if self.lengths else []
        # each rollout replica reads its own share of every global batch
        self.dataset = PromptDataset(ro.data_path, batch_size=run.plan.batch.gen_prompts // infer.dp,
                                     dp_rank=infer.dp_rank, dp_size=infer.dp, seed=ro.data_seed, shuffle=ro.shuffle,
                                     columns=columns)
        self.sampling = run.sampling_params()
        self.draws = 0  # rollout batches drawn so far: the sampling seed of each is (run seed, draw, replica)
        self._it = None
        # partial rollout: paused groups, and prompts read from the data but not started yet
        self.partial = PartialRollout(ro.max_tokens, ro.round_tokens, run.plan.batch.samples_per_prompt) \
            if ro.max_split > 1 else None
        self._unstarted = []

    def make(self, timers) -> tuple:
        """(the global batch's Experience, rollout metrics)."""
        plan = self.run.plan
        local, counts = self._sample(timers) if self.partial is None else self._sample_partial(timers)
        exp = self._exchange(local, counts)
        exp = exp.resized(*self.run.train_widths(exp), pad_id=self.run.pad_id)
        exp.loss_mask = exp.response_mask.copy()
        if plan.rollout.mask_truncated:
            exp.loss_mask[~exp.finished] = 0.0
        exp.old_log_probs = exp.rollout_log_probs
        if plan.batch.recompute_old_log_probs:
            # the rollout's log-probs are the old policy only for a single update per rollout
            with timers("old_log_p"):
                exp.old_log_probs = self.policy.log_probs(exp)
        tis = {}
        if plan.rollout.tis_cap is not None:
            exp.tis_weight, tis = tis_weights(exp.old_log_probs, exp.rollout_log_probs, exp.loss_mask,
                                              plan.rollout.tis_cap)
        if self.reference is not None:
            with timers("reference_model"):
                exp.ref_log_probs = self.reference.log_probs(exp)
        if self.critic is not None and not self.critic.values_in_update:  # else its update gives them
            with timers("critic_model"):
                exp.values = self.critic.values(exp)
        if self.reward_model is not None:
            with timers("reward_model"):
                exp.rm_score = self.reward_model.score(exp)
        exp.score = sequence_score(exp.rule_reward, exp.response_lengths, plan.reward, exp.rm_score)
        # the rule rewards' failure counts always; the dapo/* ones only with dynamic sampling
        return exp, {**{k: v for k, v in counts.items() if plan.rollout.dynamic_sampling or not k.startswith("dapo/")},
                     **tis}

    # -- sampling ------------------------------------------------------------------------------------
    def _next_prompts(self):
        ro = self.run.plan.rollout
        if self._it is None:  # created on first use: after a resume has set the data position
            self._it = self.dataset.forever()
        batch = next(self._it)
        prompts = [list(map(int, p)) for p in batch[ro.prompt_key]]
        if self.lengths:
            prompts = [p[:int(n)] for p, n in zip(prompts, batch["prompt_length"])]
        too_long = [i for i, p in enumerate(prompts) if len(p) > ro.max_prompt_length]
        if too_long:
            i = too_long[0]
            raise ValueError(f"{ro.data_path}: row {int(batch['index'][i])} has a {len(prompts[i])}-token prompt, "
                             f"longer than generate_config.max_prompt_length={ro.max_prompt_length}")
        labels = [str(x) for x in batch[ro.label_key]] if ro.label_key else [""] * len(prompts)
        return prompts, labels

    def _draw(self, timers) -> tuple:
        """One batch of prompts, sampled and scored by the rule rewards, and the rewards' failure counts."""
        run = self.run
        prompts, labels = self._next_prompts()
        with timers("rollout"):
            # replicas draw different samples; the tp ranks of one replica draw the same
            out = self.policy.generate(prompts, self.sampling,
                                       seed_from(run.sampling_seed, self.draws, run.topo.infer.dp_rank))
        self.draws += 1
        exp, counts = self._scored([prompts[i] for i in out.prompt_index], out.tokens, out.log_probs, out.finished,
                                   out.prompt_index, [labels[i] for i in out.prompt_index], timers)
        return exp, {**counts, **_work_metrics(out.stats)}

    def _scored(self, prompts, tokens, log_probs, finished, group, labels, timers) -> tuple:
        """Responses (one prompt and label per response) scored by the rule rewards, as an Experience, and the
        rewards' failure counts."""
        run, ro = self.run, self.run.plan.rollout
        texts = [run.tokenizer.decode(t, skip_special_tokens=True) for t in tokens]
        with timers("rule_reward"):
            rew = self.rewards(texts, labels)
        score = sequence_score(rew.scores, np.array([len(t) for t in tokens], np.int64), run.plan.reward)
        return Experience.from_rollout(prompts, tokens, log_probs, finished, group, rew.scores, score,
                                       rew.per_verifier, ro.max_prompt_length, ro.max_tokens, run.pad_id), \
            rew.counts()

    def _sample(self, timers):
        """This replica's share of the global batch, with DAPO dynamic sampling when enabled: groups whose samples
        all scored the same carry no signal, so more prompts are drawn (at most max_num_gen_batches draws; 0 = no
        limit). Where MindSpeed-RL and verl stop with an error after the last allowed draw, a short batch is filled
        with zero-variance groups (zero advantage), counted in dapo/filled_groups."""
        plan = self.run.plan
        ro, n = plan.rollout, plan.batch.samples_per_prompt
        want = plan.batch.prompts // self.run.topo.infer.dp
        kept, spare, draws, counts = [], [], 0, {}
        while True:
            exp, drawn = self._draw(timers)
            counts = {k: counts.get(k, 0) + v for k, v in drawn.items()}  # grpo/rewards/failures, ... of the step
            draws += 1
            if not ro.dynamic_sampling:
                kept = [exp.select(slice(g * n, (g + 1) * n)) for g in range(len(exp) // n)]
                break
            metric = exp.score if ro.dynamic_sampling_metric is None else \
                exp.verifier_scores[ro.dynamic_sampling_metric]
            keep = dynamic_sampling_keep_mask(metric, n)
            for g in range(len(exp) // n):
                (kept if keep[g * n] else spare).append(exp.select(slice(g * n, (g + 1) * n)))
            if len(kept) >= want or draws == plan.batch.max_gen_batches:
                break
        filled = max(0, want - len(kept))
        groups = (kept + spare[:filled])[:want]  # zero-variance groups only fill a short batch: advantage 0
        local = Experience.concat(groups)
        local.group = np.arange(len(local)) // n
        counts.update({"dapo/gen_batches": draws, "dapo/kept_groups": len(groups) - filled,
                       "dapo/filled_groups": filled})
        return local, counts

    def _sample_partial(self, timers):
        """This replica's share of the global batch by partial rollout (partial_rollout.py): rounds until the
        share's groups all ended, paused groups first, fresh prompts filling the rest."""
        run, plan = self.run, self.run.plan
        pr = self.partial

        work = {}

        def generate(requests):  # one round: its own sampling stream
            seed = seed_from(run.sampling_seed, self.draws, run.topo.infer.dp_rank)
            self.draws += 1
            with timers("rollout"):
                out = self.policy.continue_requests(requests, self.sampling, seed)
            for k, v in out.stats.items():
                work[k] = work.get(k, 0) + v
            return out

        self.policy.generator.drop_parked()  # rows parked last step hold the cache of the weights before the update
        done, rounds = pr.batch(plan.batch.prompts // run.topo.infer.dp, self._take_prompts, generate)
        prompts, tokens, log_probs, stopped, index, stale = flatten(done)
        local, counts = self._scored(prompts, tokens, log_probs, stopped, index, [done[i].label for i in index],
                                     timers)
        counts.update(_work_metrics(work))
        counts.update({"rollout/stale_fraction": stale / max(1, sum(len(t) for t in tokens)),
                       "rollout/rounds": rounds, "rollout/paused_responses": pr.paused_responses(),
                       "rollout/ready_groups": len(pr.ready)})
        return local, counts

    def _take_prompts(self, k: int) -> list:
        """k (prompt, label) pairs, in data order."""
        while len(self._unstarted) < k:
            prompts, labels = self._next_prompts()
            self._unstarted += list(zip(prompts, labels))
        taken, self._unstarted = self._unstarted[:k], self._unstarted[k:]
        return taken

    def _exchange(self, local: Experience, dapo: Dict[str, float]) -> Experience:
        """Every rank gets the global batch, in rollout-replica order."""
        run = self.run
        if run.topo.world == 1:
            return local
        ro, infer = run.plan.rollout, run.topo.infer
        mat = run.exchange.from_each(local.pack(), infer)
        sums = run.exchange.all_sum(np.array(list(dapo.values()), np.float32)) / infer.tp
        dapo.update({k: float(v) for k, v in zip(list(dapo), sums)})
        return Experience.unpack(mat, ro.max_prompt_length, ro.max_tokens, list(local.verifier_scores),
                                 run.pad_id, run.plan.batch.samples_per_prompt)

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {"draws": self.draws, "data": self.dataset.state_dict()}
        if self.partial is not None:
            state["partial_rollout"] = {**self.partial.state_dict(),
                                        "unstarted": [[list(map(int, p)), str(lab)] for p, lab in self._unstarted]}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.draws = int(state.get("draws", 0))
        self.dataset.load_state_dict(state["data"])
        if self.partial is not None:
            saved = state.get("partial_rollout", {})
            self.partial.load_state_dict(saved)
            self._unstarted = [([int(t) for t in p], str(lab)) for p, lab in saved.get("unstarted", [])]


def _work_metrics(stats: dict) -> dict:
    """The generator's work (rollout/generator.py stats): prompt tokens prefilled, decode graph calls, and rows
    those calls computed (finished rows still in a decode bucket count)."""
    return {"rollout/prefill_tokens": stats.get("prefill_tokens", 0), "rollout/decode_steps": stats.get("decode_steps", 0),
            "rollout/decoded_rows": stats.get("decoded_rows", 0)}
