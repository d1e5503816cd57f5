"""DAPO extras on rollout results (numpy): dynamic sampling and the soft overlong penalty."""
import numpy as np

from .advantages import group_ids


def dynamic_sampling_keep_mask(scores, groups):
    """bool [N]: True for samples whose group has non-zero reward variance.

    A group where every sample got the same reward has zero GRPO advantage everywhere, so it
    only dilutes the batch; DAPO drops such groups (and samples more prompts). ``groups`` is
    ``n_samples_per_prompt`` or an array of group ids, as in ``grpo_advantages``.
    """
    r = np.asarray(scores, np.float64).reshape(-1)
    gid = group_ids(groups, r.shape[0])
    if r.size == 0:
        return np.zeros(0, bool)
    num = int(gid.max()) + 1
    gmax = np.full(num, -np.inf)
    gmin = np.full(num, np.inf)
    np.maximum.at(gmax, gid, r)
    np.minimum.at(gmin, gid, r)
    return (gmax > gmin)[gid]


def overlong_penalty(response_lengths, max_tokens, overlong_buffer_len, penalty_factor):
    """DAPO soft overlong punishment, float32 [N], to be added to the score.

    0 while ``len <= max_tokens - overlong_buffer_len``; then falls linearly, reaching
    ``-penalty_factor`` at ``len == max_tokens`` (longer lengths are treated as ``max_tokens``).
    ``overlong_buffer_len <= 0`` disables it (all zeros).
    """
    lengths = np.asarray(response_lengths, np.float64).reshape(-1)
    if overlong_buffer_len <= 0:
        return np.zeros(lengths.shape, np.float32)
    if overlong_buffer_len > max_tokens:
        raise ValueError(f"overlong_buffer_len={overlong_buffer_len} exceeds max tokens {max_tokens}")
    over = np.minimum(lengths, max_tokens) - (max_tokens - overlong_buffer_len)
    pen = -np.clip(over, 0.0, None) / overlong_buffer_len * penalty_factor
    return pen.astype(np.float32)
