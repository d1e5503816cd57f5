"""The experience batch's exchange format: what one rank packs, every rank unpacks, bit for bit."""
import numpy as np

from mindrl.trainer.experience import Experience

def rank_rows(rng, n, prompt_width=6, response_width=5, pad_id=0):
    prompts = [rng.integers(1, 50_000, rng.integers(1, prompt_width + 1)).tolist() for _ in range(n)]
    responses = [rng.integers(1, 50_000, rng.integers(0, response_width + 1)).tolist() for _ in range(n)]
    log_probs = [rng.normal(size=len(r)).astype(np.float32) for r in responses]
    per = {"format": rng.random(n).astype(np.float32), "acc": rng.random(n).astype(np.float32)}
    return Experience.from_rollout(prompts, responses, log_probs, rng.random(n) > 0.5, np.arange(n) // 2,
                                   rng.random(n).astype(np.float32), rng.normal(size=n), per, prompt_width,
                                   response_width, pad_id)


def test_pack_unpack_round_trip_is_bit_exact():
    rng = np.random.default_rng(0)
    ranks = [rank_rows(rng, 4), rank_rows(rng, 4)]
    ranks[1].rule_reward[:3] = [np.nan, np.inf, -0.0]  # the loop skips a step on a non-finite reward: it must arrive
    mat = np.concatenate([r.pack() for r in ranks])  # what Exchange.from_each hands every rank
    assert mat.dtype == np.float32
    got = Experience.unpack(np.ascontiguousarray(mat, np.float32), 6, 5, ["format", "acc"], 0, 2).validate()
    want = Experience.concat(ranks)
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rollout_log_probs", "finished",
                 "rule_reward"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert np.signbit(got.rule_reward[6])  # -0.0 stays negative
    assert list(got.verifier_scores) == ["format", "acc"]
    for name, v in want.verifier_scores.items():
        np.testing.assert_array_equal(got.verifier_scores[name], v, err_msg=name)
    np.testing.assert_array_equal(got.group, np.arange(8) // 2)


def test_every_rank_computes_the_packing_ranks_score_bit_for_bit():
    """The float64 score does not travel: each rank computes it from the float32 rule reward and the lengths, and
    gets every bit the rank that sampled the rows got (with DAPO's overlong penalty, a reward model and a clip)."""
    from mindrl.algorithms.sequence_reward import sequence_score
    from mindrl.config.plan import RewardPlan
    plan = RewardPlan(verifiers=(("acc", 1.0),), custom_reward_file=None, timeout=5.0, fallback=None,
                      overlong_buffer_len=3, overlong_penalty_factor=0.7, max_tokens=5, rm_weight=1 / 3,
                      rm_normalize=False, clip_range=(-2.0, 2.0), kl=None)
    rng = np.random.default_rng(1)
    exp = rank_rows(rng, 6)
    rm = rng.normal(size=6).astype(np.float32)
    local = sequence_score(exp.rule_reward, exp.response_lengths, plan, rm)
    got = Experience.unpack(exp.pack(), 6, 5, ["format", "acc"], 0, 3)
    remote = sequence_score(got.rule_reward, got.response_lengths, plan, rm)
    assert remote.dtype == np.float64
    np.testing.assert_array_equal(remote.view(np.uint64), local.view(np.uint64))
