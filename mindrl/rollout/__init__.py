"""Rollout: KV-cache generation (prefill + decode graphs) and sampling.

``generate`` is the simple public call; the trainer keeps a :class:`Generator` alive across steps.
"""
from mindrl.rollout.sampling import SamplingParams  # noqa: F401  (numpy only)


def generate(model, prompts, max_new_tokens, do_sample=False, temperature=1.0, top_k=0, top_p=1.0,
             eos_token_id=None, seed=0, n=1, min_tokens=0, repetition_penalty=1.0, max_batch=None):
    """Generate continuations for a list of token-id lists.

    Returns, per prompt (and per sample when n > 1, prompt-major), the list of new token ids, ending at
    an eos id inclusive when one is produced. ``eos_token_id``: an int, a list, or None for the model
    config's eos ids.
    """
    from mindrl.rollout.generator import Generator
    prompts = [list(map(int, p)) for p in prompts]
    if not prompts:
        return []
    if eos_token_id is None:
        stops = model.eos_token_ids
    else:
        stops = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    params = SamplingParams(n=n, max_tokens=int(max_new_tokens), min_tokens=min_tokens, do_sample=do_sample,
                            temperature=temperature, top_k=top_k, top_p=top_p,
                            repetition_penalty=repetition_penalty, stop_token_ids=stops).validate()
    longest = max(len(p) for p in prompts)
    if max_batch is None:  # a power-of-two bucket, so other prompt counts reuse the compiled graphs
        max_batch = 1
        while max_batch < min(64, len(prompts) * n):
            max_batch *= 2
    batch = max(max_batch, n)
    gen = _cached_generator(model, batch, longest, int(max_new_tokens))
    out = gen.generate(prompts, params, seed=seed)
    return out.tokens


def _cached_generator(model, batch, longest, max_new_tokens):
    from mindrl.rollout.generator import Generator, _default_buckets
    cache = model.__dict__.setdefault("_generators", {})
    prompt_cap = _default_buckets(max(longest, 16))[-1]
    for (b, cap, m), gen in cache.items():
        if b == batch and cap >= longest and m >= max_new_tokens:
            if m == max_new_tokens:
                return gen
    key = (batch, max(prompt_cap, longest), max_new_tokens)
    if key not in cache:
        cache.clear()  # one live cache per model: the buffers can be large
        cache[key] = Generator(model.net, batch, key[1], max_new_tokens, pad_id=0)
    return cache[key]
