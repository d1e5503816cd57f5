"""The experience batch's exchange format: what one rank packs, every rank unpacks, bit for bit."""
import numpy as np

from mindrl.trainer.experience import Experience

# float64 scores that float32 cannot hold: thirds and tenths, values far outside float32's range, a negative
# zero, and sums of small rewards and penalties as DAPO's overlong penalty makes them
SCORES = [1 / 3, 0.1, -2.7182818284590455, 1e-300, 1e300, -0.0, 0.7 - 0.1 * 0.3, 16777217.0]


def rank_rows(rng, n, prompt_width=6, response_width=5, pad_id=0):
    prompts = [rng.integers(1, 50_000, rng.integers(1, prompt_width + 1)).tolist() for _ in range(n)]
    responses = [rng.integers(1, 50_000, rng.integers(0, response_width + 1)).tolist() for _ in range(n)]
    log_probs = [rng.normal(size=len(r)).astype(np.float32) for r in responses]
    per = {"format": rng.random(n).astype(np.float32), "acc": rng.random(n).astype(np.float32)}
    return Experience.from_rollout(prompts, responses, log_probs, rng.random(n) > 0.5, np.arange(n) // 2,
                                   rng.random(n).astype(np.float32), rng.normal(size=n), per, prompt_width,
                                   response_width, pad_id)


def test_pack_unpack_round_trip_keeps_float64_scores_bit_exact():
    rng = np.random.default_rng(0)
    ranks = [rank_rows(rng, 4), rank_rows(rng, 4)]
    ranks[0].scores = np.array(SCORES[:4])
    ranks[1].scores = np.array(SCORES[4:])
    mat = np.concatenate([r.pack() for r in ranks])  # what Exchange.from_each hands every rank
    assert mat.dtype == np.float32
    got = Experience.unpack(np.ascontiguousarray(mat, np.float32), 6, 5, ["format", "acc"], 0, 2).validate()
    want = Experience.concat(ranks)
    assert got.scores.dtype == np.float64
    np.testing.assert_array_equal(got.scores.view(np.uint64), want.scores.view(np.uint64))  # every bit
    assert np.signbit(got.scores[5])  # -0.0 stays negative
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rollout_log_probs", "finished",
                 "rewards"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert list(got.verifier_scores) == ["format", "acc"]
    for name, v in want.verifier_scores.items():
        np.testing.assert_array_equal(got.verifier_scores[name], v, err_msg=name)
    np.testing.assert_array_equal(got.group, np.arange(8) // 2)


def test_non_finite_scores_survive_the_exchange():
    """A NaN or infinite score must reach every rank as such: the loop skips the update on it."""
    exp = rank_rows(np.random.default_rng(1), 3)
    exp.scores = np.array([np.nan, np.inf, -np.inf])
    got = Experience.unpack(exp.pack(), 6, 5, ["format", "acc"], 0, 3)
    assert np.isnan(got.scores[0]) and got.scores[1] == np.inf and got.scores[2] == -np.inf
