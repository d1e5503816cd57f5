"""`mindrl generate`: load a checkpoint and print continuations (KV-cache rollout, see docs/rollout.md)."""
from __future__ import annotations

import argparse
import sys

# Inside main(): MindSpore and the model, after the arguments are checked (`--help` and usage errors load
# nothing)

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mindrl generate",
                                description="Generate continuations with mindrl's KV-cache rollout and print them.")
    p.add_argument("--model", required=True, help="HF directory, MindSpore .ckpt/.safetensors (with --model-config "
                                                  "or a config.json beside it), or a model yaml (random weights)")
    p.add_argument("--model-config", help="model yaml or config.json for a checkpoint file")
    p.add_argument("--tokenizer", help="tokenizer directory (default: the model directory when it has one)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", help="prompt text (repeat for several prompts)")
    src.add_argument("--prompt-ids", action="append", help='prompt token ids, e.g. "1 2 3" (repeatable)')
    p.add_argument("--template", help="chat template for --prompt text (e.g. qwen2_5, chatml, empty, or hf: the "
                                      "tokenizer's own)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0: off")
    p.add_argument("--top-p", type=float, default=1.0, help="1.0: off")
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--min-tokens", type=int, default=0, help="stop ids are banned before this many new tokens")
    p.add_argument("--n", type=int, default=1, help="samples per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eos-id", type=int, action="append",
                   help="stop token id (repeatable; default: the model's and tokenizer's eos ids)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    p.add_argument("--print-ids", action="store_true", help="print token ids even when a tokenizer is available")
    p.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    return p


class _UserError(Exception):
    pass


def _parse_ids(text: str):
    try:
        ids = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise _UserError(f"--prompt-ids {text!r}: expected integers separated by spaces or commas") from None
    if not ids:
        raise _UserError("--prompt-ids: empty prompt")
    return ids


def _find_tokenizer(args):
    if args.tokenizer:
        return args.tokenizer
    from mindrl.data.tokenizer import has_tokenizer
    if has_tokenizer(args.model):
        return args.model
    return None


def generate_main(argv=None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from mindrl.models.config import ModelConfigError
    from mindrl.models.safetensors_io import CheckpointError
    errors = (_UserError, CheckpointError, ModelConfigError, ValueError)
    try:
        return _run(args)
    except errors as err:  # TokenizerError / TemplateError are ValueErrors too
        print(f"mindrl generate: error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.template and not args.prompt:
        raise _UserError("--template applies to --prompt text, not --prompt-ids")
    if args.model.endswith(".gguf"):
        from mindrl.models.config import gguf_hint
        raise _UserError(f"{args.model}: {gguf_hint(args.model)}")
    tok_path = _find_tokenizer(args)
    if args.prompt and tok_path is None:
        raise _UserError(f"{args.model}: --prompt text needs a tokenizer (pass --tokenizer DIR), or use --prompt-ids")
    tokenizer = None
    if tok_path is not None:
        from mindrl.data.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(tok_path)
    stop_words = ()
    if args.prompt:
        texts = list(args.prompt)
        if args.template:
            from mindrl.data.templates import get_template
            template = get_template(args.template, tokenizer=tokenizer)
            texts = [template.render(t) for t in texts]
            stop_words = template.stop_words
        prompts = [tokenizer.encode(t) for t in texts]
        if any(not p for p in prompts):
            raise _UserError("a --prompt encodes to no tokens")
    else:
        prompts = [_parse_ids(t) for t in args.prompt_ids]

    from mindrl.models import from_pretrained
    from mindrl.models.lm import resolve_checkpoint
    config, weights = resolve_checkpoint(args.model, args.model_config)
    if weights is None:
        print(f"mindrl generate: note: {args.model} is a model config: the weights are random", file=sys.stderr)
    for i, p in enumerate(prompts):
        bad = [t for t in p if not 0 <= t < config.vocab_size]
        if bad:
            raise _UserError(f"prompt {i}: token id {bad[0]} is outside the model's vocabulary "
                             f"[0, {config.vocab_size})")
        if len(p) + args.max_new_tokens > config.max_position_embeddings:
            raise _UserError(f"prompt {i}: {len(p)} tokens + --max-new-tokens {args.max_new_tokens} exceed the model's "
                             f"seq_length {config.max_position_embeddings}")
    if args.ignore_eos:
        stops = []
    elif args.eos_id:
        stops = list(args.eos_id)
    else:
        stops = list(config.eos_token_ids)
        if tokenizer is not None and tokenizer.eos_token_id is not None:
            stops.append(int(tokenizer.eos_token_id))
        for word in stop_words:
            tid = tokenizer.token_to_id(word)
            if tid is not None:
                stops.append(int(tid))
        stops = sorted(set(stops))

    from mindrl.rollout import generate
    model = from_pretrained(args.model, mode=args.mode, model_config=args.model_config)
    outs = generate(model, prompts, max_new_tokens=args.max_new_tokens, do_sample=args.do_sample,
                    temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, eos_token_id=stops,
                    seed=args.seed, n=args.n, min_tokens=args.min_tokens,
                    repetition_penalty=args.repetition_penalty)
    text_mode = tokenizer is not None and not args.print_ids
    many = len(outs) > 1
    for k, ids in enumerate(outs):
        if not text_mode:
            print(" ".join(str(t) for t in ids))
            continue
        if many:
            print(f"--- prompt {k // args.n} sample {k % args.n} ---")
        print(tokenizer.decode(ids, skip_special_tokens=True))
    return 0
