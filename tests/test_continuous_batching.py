"""The generator's slot pool (continuous batching) and resumable requests (partial rollout), against a reference
that generates without any cache: a full forward pass over each sequence at every step, sampled with the same
seeded Sampler in the same row order."""
import numpy as np
import pytest

pytest.importorskip("torch")

from mindrl.models import from_pretrained  # noqa: E402
from mindrl.rollout.generator import Generator, Request  # noqa: E402
from mindrl.rollout.sampling import Sampler, SamplingParams  # noqa: E402

from conftest import VOCAB, record_prefill_rows  # noqa: E402


def reference_generate(model, prompts, params, seed):
    """No cache, no batching tricks: every live sequence is recomputed from scratch at every step. Rows are
    sampled in sequence order (prompt-major), one uniform number each, as the generator does when its pool holds
    the whole batch."""
    sampler = Sampler(params, VOCAB, seed)
    seqs = [list(p) for p in prompts for _ in range(params.n)]
    out = [[] for _ in seqs]
    lps = [[] for _ in seqs]
    alive = list(range(len(seqs)))
    for step in range(params.max_tokens):
        logits = np.stack([model.logits(np.array([seqs[i] + out[i]], np.int32))[0, -1] for i in alive])
        tok, lp = sampler.sample(logits, [seqs[i] + out[i] for i in alive], step)
        for j, i in enumerate(alive):
            out[i].append(int(tok[j]))
            lps[i].append(float(lp[j]))
        alive = [i for j, i in enumerate(alive) if not sampler.is_stop(int(tok[j]), step)]
        if not alive:
            break
    return out, lps


def full_log_probs(model, prompt, tokens, temperature=1.0):
    seq = np.array([list(prompt) + list(tokens)], np.int32)
    logits = model.logits(seq)[0, len(prompt) - 1:-1].astype(np.float64) / temperature
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return logits[np.arange(len(tokens)), tokens] - logz


@pytest.fixture(scope="module")
def model(hf_models):
    return from_pretrained(hf_models["qwen2"][0])


def _prompts(rng, lengths):
    return [list(map(int, rng.integers(3, VOCAB, size=n))) for n in lengths]


def _stop_ids(model, prompts, n_new=6):
    """Two tokens the model is likely to emit early (its greedy picks), so responses end at varied lengths."""
    firsts = [int(model.logits(np.array([p], np.int32))[0, -1].argmax()) for p in prompts]
    return sorted(set(firsts))[:2]


def test_pool_holding_the_batch_samples_what_the_cacheless_reference_samples(model, rng):
    prompts = _prompts(rng, (5, 9, 7))
    params = SamplingParams(n=4, max_tokens=10, temperature=0.9, top_k=40, stop_token_ids=_stop_ids(model, prompts))
    gen = Generator(model.net, max_batch=12, max_prompt_len=16, max_new_tokens=10)
    out = gen.generate(prompts, params, seed=11)
    ref_tok, ref_lp = reference_generate(model, prompts, params, seed=11)
    assert out.tokens == ref_tok
    assert len({len(t) for t in out.tokens}) > 1  # the stop ids made lengths vary: rows left the pool early
    for a, b in zip(out.log_probs, ref_lp):
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_small_pool_refills_freed_slots_and_gives_the_same_greedy_responses(model, rng):
    """Eight prompts x 2 samples through a pool of 4 slots: slots freed by short responses take the next group
    (continuous batching) and every response is the greedy one the whole-batch pool gives."""
    prompts = _prompts(rng, (4, 12, 6, 9, 3, 15, 8, 10))
    stops = _stop_ids(model, prompts)
    params = SamplingParams(n=2, max_tokens=12, do_sample=False, stop_token_ids=stops)
    whole = Generator(model.net, max_batch=16, max_prompt_len=16, max_new_tokens=12).generate(prompts, params)
    small = Generator(model.net, max_batch=4, max_prompt_len=16, max_new_tokens=12)
    out = small.generate(prompts, params)
    assert out.tokens == whole.tokens
    for a, b in zip(out.log_probs, whole.log_probs):
        np.testing.assert_allclose(a, b, atol=2e-5)
    assert small.last_stats["admissions"] > 2  # groups entered the pool at several points, not in fixed chunks
    lengths = [len(t) for t in out.tokens]
    assert min(lengths) < max(lengths)


def test_fixed_prefill_rows_fill_the_pool_before_decoding_and_sample_what_the_reference_samples(model, rng):
    """A generator whose prefill takes 2 prompts per call (the trainer fixes it at the rollout's, so that an
    evaluation of 1 sample per prompt reuses the rollout's prefill graph) fills its 8 free slots with 4 prefill
    calls before the first decode: the sampled tokens and log-probs are the cache-less reference's, and a request
    of 4 samples per prompt goes through the same 2-row prefill."""
    prompts = _prompts(rng, (5, 9, 7, 12, 4, 8, 6, 10))
    params = SamplingParams(n=1, max_tokens=8, temperature=0.9, stop_token_ids=_stop_ids(model, prompts))
    gen = Generator(model.net, max_batch=8, max_prompt_len=16, max_new_tokens=8, prefill_rows=2)
    calls = record_prefill_rows(gen)
    out = gen.generate(prompts, params, seed=5)
    ref_tok, ref_lp = reference_generate(model, prompts, params, seed=5)
    assert calls == [2, 2, 2, 2]
    assert out.tokens == ref_tok
    for a, b in zip(out.log_probs, ref_lp):
        np.testing.assert_allclose(a, b, atol=2e-5)
    calls.clear()
    params4 = SamplingParams(n=4, max_tokens=8, temperature=0.9, stop_token_ids=params.stop_token_ids)
    out4 = gen.generate(prompts[:2], params4, seed=7)
    ref4, _ = reference_generate(model, prompts[:2], params4, seed=7)
    assert calls == [2] and out4.tokens == ref4  # both prompts' 8 samples fill the pool from one prefill


def test_prefill_calls_wait_for_enough_free_slots_and_do_less_work_than_eager_ones(model, rng, monkeypatch):
    """Twenty prompts, greedy, through a pool of 8 whose prefill graph computes 8 rows per call (the real PPO
    example's evaluation: 200 prompts, a pool of 32). Prefilling as soon as one slot frees (the eager schedule, as
    the generator did before) spends a call of 8 rows on one prompt; the generator now waits until the slots left
    empty since its last call outweigh the rows the call would leave unused. Both give the whole-batch pool's
    responses; waiting makes fewer calls and less work: prefilled positions plus decoded slots."""
    prompts = _prompts(rng, [int(n) for n in rng.integers(3, 16, size=20)])
    params = SamplingParams(n=1, max_tokens=12, do_sample=False, stop_token_ids=_stop_ids(model, prompts))
    whole = Generator(model.net, max_batch=20, max_prompt_len=16, max_new_tokens=12).generate(prompts, params)

    gen = Generator(model.net, max_batch=8, max_prompt_len=16, max_new_tokens=12, prefill_rows=8)
    taken, admit = [], gen._admit

    def recorded(reqs, *args):
        taken.append(len(reqs))
        return admit(reqs, *args)
    monkeypatch.setattr(gen, "_admit", recorded)

    def run(eager):
        taken.clear()
        with monkeypatch.context() as m:
            if eager:
                m.setattr(gen, "_worth_a_prefill", lambda *args: True)
            out = gen.generate(prompts, params)
        work = 8 * 16 * len(taken) + gen.last_stats["decoded_rows"]  # every call: 8 rows of the 16-wide bucket
        return out, list(taken), work

    (eager, eager_calls, eager_work), (waited, calls, work) = run(True), run(False)
    for out in (eager, waited):
        assert out.tokens == whole.tokens
        for a, b in zip(out.log_probs, whole.log_probs):
            np.testing.assert_allclose(a, b, atol=2e-5)
    assert sum(eager_calls) == sum(calls) == 20
    assert len({len(t) for t in whole.tokens}) > 2  # responses end at varied steps: slots free one by one
    assert eager_calls[0] == calls[0] == 8 and min(eager_calls) < 3  # eager: calls for one or two prompts
    assert len(calls) < len(eager_calls) and work < eager_work
    print(f"prompts per prefill call: eager {eager_calls} (work {eager_work}), waiting {calls} (work {work})")


def test_small_pool_sampled_log_probs_are_the_models(model, rng):
    """Sampled through a small pool, rows decode at different positions in one graph call: every log-prob still
    equals a full forward pass over its own sequence (float64)."""
    prompts = _prompts(rng, (4, 12, 6, 9, 3, 15))
    params = SamplingParams(n=3, max_tokens=9, temperature=0.8, stop_token_ids=_stop_ids(model, prompts))
    gen = Generator(model.net, max_batch=6, max_prompt_len=16, max_new_tokens=9)
    out = gen.generate(prompts, params, seed=3)
    assert list(out.prompt_index) == [i for i in range(len(prompts)) for _ in range(3)]
    for i, (toks, lp) in enumerate(zip(out.tokens, out.log_probs)):
        np.testing.assert_allclose(lp, full_log_probs(model, prompts[i // 3], toks, 0.8), atol=3e-5)


def test_a_paused_request_resumed_from_its_prefix_continues_as_if_never_paused(model, rng):
    """Partial rollout: 4 tokens now, the rest later by re-prefilling prompt + the first 4; greedy, so the joined
    response must be the one-go response, token for token, and its min_tokens counts from the response start."""
    prompts = _prompts(rng, (6, 11))
    params = SamplingParams(n=1, max_tokens=10, do_sample=False)
    gen = Generator(model.net, max_batch=4, max_prompt_len=32, max_new_tokens=10)
    whole = gen.generate(prompts, params)
    first = gen.run([Request(p, n=1, max_new=4) for p in prompts], params, seed=0)
    assert all(len(t) == 4 for t in first.tokens) and not first.finished.any()
    rest = gen.run([Request(p + t, n=1, max_new=6, done_before=4) for p, t in zip(prompts, first.tokens)],
                   params, seed=0)
    for w, a, b, wl, al, bl in zip(whole.tokens, first.tokens, rest.tokens, whole.log_probs, first.log_probs,
                                   rest.log_probs):
        assert a + b == w
        np.testing.assert_allclose(np.concatenate([al, bl]), wl, atol=2e-5)


def test_min_tokens_counts_tokens_generated_before_a_pause(model, rng):
    prompts = _prompts(rng, (6,))
    stop = [int(model.logits(np.array([prompts[0]], np.int32))[0, -1].argmax())]
    params = SamplingParams(n=1, max_tokens=8, min_tokens=3, do_sample=False, stop_token_ids=stop)
    gen = Generator(model.net, max_batch=2, max_prompt_len=16, max_new_tokens=8)
    out = gen.run([Request(prompts[0], n=1, max_new=8, done_before=3)], params, seed=0)
    assert out.tokens[0] == stop  # 3 tokens before the pause: the stop id is allowed at once
    out = gen.run([Request(prompts[0], n=1, max_new=8, done_before=1)], params, seed=0)
    assert stop[0] not in out.tokens[0][:2]


def test_a_parked_row_continues_from_its_cache_and_an_evicted_one_from_its_prefix(model, rng):
    """Partial rollout's rounds within one step: a sample that used its round's tokens keeps its cache row
    (park=True) and the next call continues it without a prefill; greedy, the joined response is the one-go
    response. A parked row whose slot a queued prompt needs is evicted, and then continues by prefilling."""
    prompts = _prompts(rng, (6, 11, 9))
    params = SamplingParams(n=1, max_tokens=9, do_sample=False)
    gen = Generator(model.net, max_batch=4, max_prompt_len=32, max_new_tokens=9)
    whole = gen.generate(prompts, params)
    first = gen.run([Request(p, 1, 4, keys=[k]) for k, p in enumerate(prompts)], params, park=True)
    assert sorted(gen._pool.parked) == [0, 1, 2]
    rest = gen.run([Request(prompts[0] + first.tokens[0], 1, 5, 4, keys=[0]),
                    Request(prompts[2] + first.tokens[2], 1, 5, 4, keys=[2])], params, park=True)
    assert gen.last_stats["resumed_from_cache"] == 2 and gen.last_stats["admissions"] == 0
    assert sorted(gen._pool.parked) == [0, 2]  # parked again at their max_new; key 1, not continued, released
    for i, j in ((0, 0), (2, 1)):
        assert first.tokens[i] + rest.tokens[j] == whole.tokens[i]
        np.testing.assert_allclose(np.concatenate([first.log_probs[i], rest.log_probs[j]]), whole.log_probs[i],
                                   atol=2e-5)

    # two samples park while a 4-sample prompt waits for the whole pool: both are evicted for it
    fresh = _prompts(rng, (5,))
    a = gen.run([Request(prompts[0], 1, 4, keys=["a"]), Request(prompts[1], 1, 4, keys=["b"]),
                 Request(fresh[0], 4, 3, keys=[1, 2, 3, 4])], params, park=True)
    assert sorted(gen._pool.parked) == [1, 2, 3, 4] and gen.last_stats["admissions"] == 2  # a and b: evicted
    b = gen.run([Request(prompts[0] + a.tokens[0], 1, 5, 4, keys=["a"])], params, park=True)
    assert gen.last_stats["resumed_from_cache"] == 0 and a.tokens[0] + b.tokens[0] == whole.tokens[0]
    gen.drop_parked()
    assert gen._pool.free_count() == 4


def test_a_parked_row_without_room_to_continue_is_prefilled_again(model, rng):
    """A row prefilled at a wide bucket can park too close to the cache's end for its next round: it is then
    continued by prefilling its prefix (at a width that fits), never written past the cache."""
    prompt = _prompts(rng, (17,))[0]
    params = SamplingParams(n=1, max_tokens=8, do_sample=False)
    whole = Generator(model.net, max_batch=2, max_prompt_len=32, max_new_tokens=8).generate([prompt], params)
    gen = Generator(model.net, max_batch=2, max_prompt_len=16, max_new_tokens=8, resume_prefix_len=24,
                    resume_new_tokens=4)
    assert gen.length == 28
    first = gen.run([Request(prompt, 1, 4, keys=["x"])], params, park=True)   # prefilled at 24: parks at slot 27
    rest = gen.run([Request(prompt + first.tokens[0], 1, 2, 4, keys=["x"])], params, park=True)
    assert gen.last_stats["resumed_from_cache"] == 0 and gen.last_stats["admissions"] == 1
    assert first.tokens[0] + rest.tokens[0] == whole.tokens[0][:6]
