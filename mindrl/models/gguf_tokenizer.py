"""The Hugging Face tokenizer files of a GGUF model, rebuilt from its ``tokenizer.*`` metadata.

llama.cpp stores a byte-level BPE (``tokenizer.ggml.model == "gpt2"``) as its token list, token types and
merges, and names the way text is split before BPE in ``tokenizer.ggml.pre``. The split is not in the file, only
its name, so each supported name maps to the pre-tokenizer the model's original ``tokenizer.json`` has. A name
not in that table is refused rather than guessed: a wrong split gives other token ids without any error.
"""
from __future__ import annotations

import json
from typing import Dict

from mindrl.data.tokenizer import QWEN2_PRETOKENIZE_REGEX
from mindrl.models.gguf_import import GGUFError, GGUFModel

_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (split regex before byte-level, or None for GPT-2's own; single digits; NFC; ignore_merges).
# ignore_merges: LLaMA 3 takes a word that is a whole vocabulary entry as is (its tokenizer.json, and llama.cpp)
_PRE = {
    "gpt-2": (None, False, False, False),
    "smollm": (None, True, False, False),       # SmolLM/SmolLM2: single digits, then GPT-2's byte-level split
    "llama-bpe": (_LLAMA3_REGEX, False, False, True),
    "qwen2": (QWEN2_PRETOKENIZE_REGEX, False, True, False),
}
_ALIASES = {"gpt2": "gpt-2", "llama3": "llama-bpe", "llama-v3": "llama-bpe", "smaug-bpe": "llama-bpe",
            "deepseek-r1-qwen": "qwen2"}
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types


def _refuse(model: GGUFModel, what: str) -> GGUFError:
    return GGUFError(f"{model.path}: {what}; pass --tokenizer DIR with the model's Hugging Face tokenizer files")


def _backend(model: GGUFModel, tokens, merges, pre: str):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    split, digits, nfc, ignore_merges = _PRE[pre]
    vocab = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    pairs = [tuple(m.split(" ")) for m in merges]
    tok = Tokenizer(BPE(vocab=vocab, merges=pairs, dropout=None, unk_token=None, continuing_subword_prefix="",
                        end_of_word_suffix="", fuse_unk=False, byte_fallback=False, ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    if split:
        steps += [pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    else:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    # control tokens (<|im_start|>) are special, user-defined ones (<think>) plain added tokens: both stay whole
    types = model.meta.get("tokenizer.ggml.token_type") or []
    marked = [(t, k) for i, (t, k) in enumerate(zip(tokens, types)) if k in (_CONTROL, _USER_DEFINED) and vocab[t] == i]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in marked if k == _CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in marked if k == _USER_DEFINED])
    # what encode(add_special_tokens=True) adds, as the original tokenizer.json's post-processor does
    first, last = ([tokens[model.meta[f"tokenizer.ggml.{role}_token_id"]]]
                   if model.meta.get(f"tokenizer.ggml.add_{role}_token") and
                   f"tokenizer.ggml.{role}_token_id" in model.meta else [] for role in ("bos", "eos"))
    if first or last:
        tok.post_processor = processors.TemplateProcessing(
            single=" ".join(first + ["$A"] + last),
            pair=" ".join(first + ["$A"] + last + [f"{t}:1" for t in first + ["$B"] + last]),
            special_tokens=[(t, vocab[t]) for t in first + last])
    return tok


def tokenizer_files(model: GGUFModel) -> Dict[str, str]:
    """File name -> text of ``tokenizer.json``, ``tokenizer_config.json`` and ``generation_config.json``.

    Raises GGUFError (suggesting ``--tokenizer``) when the file's tokenizer is not one this can rebuild."""
    meta = model.meta
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        what = "no tokenizer metadata" if kind is None else f"tokenizer.ggml.model {kind!r}"
        raise _refuse(model, f"{what}: mindrl rebuilds byte-level BPE tokenizers ('gpt2') only")
    pre = meta.get("tokenizer.ggml.pre")
    pre = _ALIASES.get(pre, pre)
    if pre not in _PRE:
        raise _refuse(model, f"tokenizer.ggml.pre {meta.get('tokenizer.ggml.pre')!r} is not one mindrl knows "
                             f"({', '.join(sorted(set(_PRE) | set(_ALIASES)))})")
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    if not tokens or not merges:
        raise _refuse(model, "tokenizer.ggml.tokens or tokenizer.ggml.merges is missing")
    tok = _backend(model, list(tokens), list(merges), pre)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              "model_max_length": model.config.max_position_embeddings,
              "added_tokens_decoder": {str(i): {"content": t.content, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": t.special}
                                       for i, t in sorted(tok.get_added_tokens_decoder().items())}}
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and 0 <= token_id < len(tokens):
            config[f"{role}_token"] = tokens[token_id]
    for flag in ("add_bos_token", "add_eos_token"):
        if f"tokenizer.ggml.{flag}" in meta:
            config[flag] = bool(meta[f"tokenizer.ggml.{flag}"])
    if meta.get("tokenizer.chat_template"):
        config["chat_template"] = meta["tokenizer.chat_template"]
    c = model.config
    generation = {k: getattr(c, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                  if getattr(c, k) is not None}
    return {"tokenizer.json": tok.to_str(pretty=True) + "\n",
            "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n",
            "generation_config.json": json.dumps(generation, indent=2) + "\n"}
