"""One tokenizer interface over the three formats LLM checkpoints ship with.

* HF ``tokenizer.json`` (loaded by the ``tokenizers`` library),
* Qwen-style ``vocab.json`` + ``merges.txt`` (byte-level BPE with Qwen2's pre-tokenizer),
* sentencepiece ``tokenizer.model``.

``load_tokenizer(path)`` takes a directory or one of those files. Special token ids (eos, pad,
bos) come from ``tokenizer_config.json`` / ``generation_config.json`` / ``config.json`` next to
the tokenizer when they exist, so the ids match what the model was trained with.
"""
from __future__ import annotations

import json
import os
import re
from typing import Iterable

# Inside functions: sentencepiece and tokenizers, the one the tokenizer's files call for

__all__ = ["Tokenizer", "TokenizerError", "load_tokenizer", "QWEN2_PRETOKENIZE_REGEX", "TOKENIZER_FILES",
           "has_tokenizer", "copy_tokenizer_files"]

# Every file that belongs to a tokenizer. "vocabulary" files are the ones load_tokenizer reads a tokenizer from
# (vocab.json only together with merges.txt); "companion" files carry special tokens, templates and generation
# defaults, and travel with the vocabulary whenever a model directory is written.
TOKENIZER_FILES = {
    "tokenizer.json": "vocabulary", "vocab.json": "vocabulary", "tokenizer.model": "vocabulary",
    "merges.txt": "companion", "tokenizer_config.json": "companion", "special_tokens_map.json": "companion",
    "added_tokens.json": "companion", "generation_config.json": "companion", "chat_template.jinja": "companion",
    "chat_template.json": "companion",
}
VOCABULARY_FILES = tuple(f for f, kind in TOKENIZER_FILES.items() if kind == "vocabulary")


def has_tokenizer(directory: str) -> bool:
    """True when ``directory`` holds a file load_tokenizer can read a vocabulary from."""
    return os.path.isdir(directory) and any(os.path.isfile(os.path.join(directory, f)) for f in VOCABULARY_FILES)


def copy_tokenizer_files(src_dir: str | None, dst_dir: str) -> list[str]:
    """Copy every tokenizer file of ``src_dir`` into ``dst_dir`` (so a model directory is self-contained)."""
    import shutil
    if not src_dir or not os.path.isdir(src_dir):
        return []
    copied = []
    for fname in TOKENIZER_FILES:
        src = os.path.join(src_dir, fname)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(dst_dir, fname))
            copied.append(fname)
    return copied

# Qwen2/2.5/3 split text with this pattern before byte-level BPE: contractions, letter runs, single
# digits (so numbers are always split digit by digit), punctuation runs, newlines, spaces.
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# When vocab.json/merges.txt come without a tokenizer_config.json, Qwen2 appends these right after
# the BPE vocabulary, in this order.
QWEN2_DEFAULT_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_TYPE_ALIASES = {
    "huggingfacetokenizer": "hf", "pretrainedfromhf": "hf", "hf": "hf", "huggingface": "hf",
    "tokenizer.json": "hf", "bpe": "bpe", "qwen": "bpe", "vocab_merges": "bpe",
    "sentencepiece": "sp", "sentencepiecetokenizer": "sp", "sp": "sp", "spm": "sp",
}


class TokenizerError(ValueError):
    """A tokenizer could not be loaded; the message names the offending path."""


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{path}: not valid JSON ({e})") from None


def _token_text(value) -> str | None:
    # tokenizer_config.json stores special tokens either as plain strings or as AddedToken dicts.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _first_id(value) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _id_list(value) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


class _ModelConfigs:
    """The json files next to a tokenizer that decide its special tokens."""

    def __init__(self, directory: str):
        def load(name):
            path = os.path.join(directory, name)
            return _read_json(path) if os.path.isfile(path) else {}

        self.directory = directory
        self.tokenizer_config = load("tokenizer_config.json")
        self.generation_config = load("generation_config.json")
        self.model_config = load("config.json")

    def added_tokens(self) -> dict[int, tuple[str, bool]]:
        """id -> (text, is_special) from tokenizer_config.json's added_tokens_decoder."""
        out = {}
        for key, value in (self.tokenizer_config.get("added_tokens_decoder") or {}).items():
            text = _token_text(value)
            if text is not None and str(key).isdigit():
                special = value.get("special", True) if isinstance(value, dict) else True
                out[int(key)] = (text, bool(special))
        return out


class Tokenizer:
    """Common interface; use :func:`load_tokenizer` to build one."""

    kind = "base"

    def __init__(self, path: str, configs: _ModelConfigs):
        self.path = path
        self._configs = configs
        self.special_tokens: dict[str, int] = {}   # text -> id of every atomic special/added token
        self._skip_ids: set[int] = set()            # ids dropped by decode(skip_special_tokens=True)

    # -- subclass hooks ---------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        raise NotImplementedError

    def id_to_token(self, token_id: int) -> str | None:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def _fallback_special(self, role: str) -> int | None:
        return None

    # -- shared behaviour -----------------------------------------------------------------------
    def convert_tokens_to_ids(self, tokens):
        """A token (str) -> id, or a list of tokens -> list of ids; unknown tokens give ``None``."""
        if isinstance(tokens, str):
            return self.token_to_id(tokens)
        return [self.token_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.id_to_token(ids)
        return [self.id_to_token(int(i)) for i in ids]

    def batch_encode(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [self.encode(t, add_special_tokens) for t in texts]

    def _resolve_specials(self):
        """Set eos/pad/bos ids. Priority: tokenizer_config.json (token text), then
        generation_config.json, then config.json (ids), then the tokenizer's own defaults."""
        tc, gc, mc = (self._configs.tokenizer_config, self._configs.generation_config,
                      self._configs.model_config)

        def from_text(key):
            text = _token_text(tc.get(key))
            if text is None:
                return None
            token_id = self.token_to_id(text)
            if token_id is None:
                raise TokenizerError(
                    f"{self.path}: tokenizer_config.json sets {key}={text!r}, which is not in the vocabulary")
            return token_id

        def pick(role):
            for value in (from_text(f"{role}_token"), _first_id(gc.get(f"{role}_token_id")),
                          _first_id(mc.get(f"{role}_token_id"))):
                if value is not None:
                    return value
            return self._fallback_special(role)

        self.eos_token_id = pick("eos")
        self.bos_token_id = pick("bos")
        pad = pick("pad")
        # Many causal LMs ship no pad token; padding with eos is the usual convention (and
        # harmless, since padded positions are masked out).
        self.pad_token_id = pad if pad is not None else self.eos_token_id
        # generation_config may list several stop ids (e.g. Qwen instruct: <|im_end|> and <|endoftext|>).
        eos_ids = [] if self.eos_token_id is None else [self.eos_token_id]
        for value in _id_list(gc.get("eos_token_id")):
            if value not in eos_ids:
                eos_ids.append(value)
        self.eos_token_ids = eos_ids
        for token_id in (self.eos_token_id, self.bos_token_id, self.pad_token_id):
            token = None if token_id is None else self.id_to_token(token_id)
            if token is not None:
                self.special_tokens.setdefault(token, token_id)

    @property
    def directory(self) -> str:
        """The directory whose json files (and chat template) go with this tokenizer."""
        return self._configs.directory

    @property
    def tokenizer_config(self) -> dict:
        return self._configs.tokenizer_config

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_token_id is None else self.id_to_token(self.eos_token_id)

    @property
    def pad_token(self) -> str | None:
        return None if self.pad_token_id is None else self.id_to_token(self.pad_token_id)

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_token_id is None else self.id_to_token(self.bos_token_id)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(path={self.path!r}, vocab_size={self.vocab_size}, "
                f"eos={self.eos_token!r}, pad={self.pad_token!r})")


class HFTokenizer(Tokenizer):
    """Backed by a ``tokenizers.Tokenizer`` (from tokenizer.json, or built from vocab.json + merges.txt)."""

    def __init__(self, backend, path: str, configs: _ModelConfigs, kind: str):
        super().__init__(path, configs)
        self._tok = backend
        self.kind = kind
        self._register_added_tokens()
        self._resolve_specials()

    def _register_added_tokens(self):
        from tokenizers import AddedToken

        known = self._tok.get_added_tokens_decoder()  # id -> AddedToken
        # tokenizer_config.json may declare added tokens that tokenizer.json lacks (or, for
        # vocab/merges, all of them). They must land on exactly the declared ids.
        for token_id, (text, special) in sorted(self._configs.added_tokens().items()):
            existing = self._tok.token_to_id(text)
            if existing is None:
                self._tok.add_tokens([AddedToken(text, special=special, normalized=False)])
                existing = self._tok.token_to_id(text)
            elif existing not in known:
                # In the BPE vocab already: make it atomic so text containing it encodes to one id.
                self._tok.add_tokens([AddedToken(text, special=special, normalized=False)])
            if existing != token_id:
                raise TokenizerError(
                    f"{self.path}: tokenizer_config.json maps {text!r} to id {token_id} but the "
                    f"vocabulary gives {existing}; the files do not belong together")
        for token_id, added in self._tok.get_added_tokens_decoder().items():
            self.special_tokens[added.content] = token_id
            if added.special:
                self._skip_ids.add(token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def batch_encode(self, texts, add_special_tokens=False):
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token):
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id):
        return self._tok.id_to_token(int(token_id))

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def _fallback_special(self, role):
        names = {"eos": ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"), "bos": (), "pad": ()}
        for name in names[role]:
            token_id = self._tok.token_to_id(name)
            if token_id is not None:
                return token_id
        return None

    def __getstate__(self):
        # tokenizers.Tokenizer pickles fine, but as JSON is smaller and version-proof.
        state = dict(self.__dict__)
        state["_tok"] = self._tok.to_str()
        return state

    def __setstate__(self, state):
        from tokenizers import Tokenizer as _Backend
        state["_tok"] = _Backend.from_str(state["_tok"])
        self.__dict__.update(state)


class SentencePieceTokenizer(Tokenizer):
    """Backed by ``sentencepiece``. Its user-defined symbols are atomic natively; control symbols
    (``<s>``, ``</s>``) and tokenizer_config added tokens are split out of the text by us."""

    kind = "sentencepiece"

    def __init__(self, model_file: str, path: str, configs: _ModelConfigs):
        import sentencepiece as spm

        super().__init__(path, configs)
        try:
            self._sp = spm.SentencePieceProcessor(model_file=model_file)
        except Exception as e:  # sentencepiece raises OSError/RuntimeError with terse text
            raise TokenizerError(f"{model_file}: not a valid sentencepiece model ({e})") from None
        self._model_file = model_file
        self._extra: dict[int, str] = {}  # added tokens beyond the sentencepiece vocabulary
        self._index_pieces()
        self._resolve_specials()
        # Text that sentencepiece would not keep atomic must be split out before encoding.
        outside = [t for t, i in self.special_tokens.items() if i not in self._user_defined]
        outside.sort(key=len, reverse=True)
        self._split_re = re.compile("(" + "|".join(map(re.escape, outside)) + ")") if outside else None

    def _index_pieces(self):
        sp = self._sp
        self._user_defined = self._user_defined_ids()
        declared = self._configs.added_tokens()
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            # Control symbols and tag-like user-defined symbols (<|im_end|>, <think>) are special;
            # other user-defined symbols ("\n", "+") are ordinary text that happens to be atomic.
            tag_like = i in self._user_defined and len(piece) > 2 and piece[0] == "<" and piece[-1] == ">"
            if sp.is_control(i) or tag_like:
                self.special_tokens[piece] = i
                if declared.get(i, (piece, True))[1]:  # tokenizer_config.json may say otherwise
                    self._skip_ids.add(i)
        for token_id, (text, special) in declared.items():
            if token_id < sp.get_piece_size():
                if sp.id_to_piece(token_id) != text:
                    raise TokenizerError(
                        f"{self.path}: tokenizer_config.json maps {text!r} to id {token_id} but the "
                        f"sentencepiece model has {sp.id_to_piece(token_id)!r} there")
            else:
                self._extra[token_id] = text
            self.special_tokens[text] = token_id
            if special:
                self._skip_ids.add(token_id)
        self._extra_by_text = {t: i for i, t in self._extra.items()}

    def _user_defined_ids(self) -> set[int]:
        try:
            from sentencepiece import sentencepiece_model_pb2 as pb
        except Exception:  # protobuf missing or incompatible: treat no piece as user-defined
            return set()
        proto = pb.ModelProto()
        proto.ParseFromString(self._sp.serialized_model_proto())
        user = pb.ModelProto.SentencePiece.USER_DEFINED
        return {i for i, p in enumerate(proto.pieces) if p.type == user}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        if add_special_tokens and self.bos_token_id is not None:
            ids.append(self.bos_token_id)
        parts = self._split_re.split(text) if self._split_re else [text]
        for i, part in enumerate(parts):
            if i % 2:                # odd parts are the special tokens matched by the split
                ids.append(self.special_tokens[part])
            elif part:
                ids.extend(self._sp.encode(part))
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Ids beyond the tokenizer (a model's embedding is often padded past it, and a sampled id can land there)
        have no text, as HF tokenizers decode them."""
        out, run = [], []
        size = self._sp.get_piece_size()
        for token_id in (int(i) for i in ids):
            if (token_id >= size or token_id < 0) and token_id not in self._extra:
                continue
            skip = skip_special_tokens and token_id in self._skip_ids
            # sentencepiece renders control symbols as "" itself, so we emit their text.
            own_text = token_id in self._extra or (
                token_id < self._sp.get_piece_size() and self._sp.is_control(token_id))
            if skip or own_text:
                if run:
                    out.append(self._sp.decode(run))
                    run = []
                if not skip:
                    out.append(self.id_to_token(token_id))
            else:
                run.append(token_id)
        if run:
            out.append(self._sp.decode(run))
        return "".join(out)

    def token_to_id(self, token):
        if token in self._extra_by_text:
            return self._extra_by_text[token]
        token_id = self._sp.piece_to_id(token)
        # piece_to_id returns unk for unknown pieces; only the real unk piece maps to it
        if token_id == self._sp.unk_id() and token != self._sp.id_to_piece(token_id):
            return None
        return token_id

    def id_to_token(self, token_id):
        token_id = int(token_id)
        if token_id in self._extra:
            return self._extra[token_id]
        if 0 <= token_id < self._sp.get_piece_size():
            return self._sp.id_to_piece(token_id)
        return None

    @property
    def vocab_size(self) -> int:
        return max([self._sp.get_piece_size()] + [i + 1 for i in self._extra])

    def _fallback_special(self, role):
        value = {"eos": self._sp.eos_id(), "bos": self._sp.bos_id(), "pad": self._sp.pad_id()}[role]
        return value if value >= 0 else None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_sp"] = self._sp.serialized_model_proto()
        return state

    def __setstate__(self, state):
        import sentencepiece as spm
        state["_sp"] = spm.SentencePieceProcessor(model_proto=state["_sp"])
        self.__dict__.update(state)


def _build_bpe(vocab_file: str, merges_file: str, configs: _ModelConfigs):
    """A byte-level BPE that tokenizes like Qwen2's tokenizer."""
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as _Backend
    from tokenizers.models import BPE

    vocab = _read_json(vocab_file)
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise TokenizerError(f"{vocab_file}: expected a JSON object mapping tokens to integer ids")
    merges = []
    with open(merges_file, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line or (lineno == 1 and line.startswith("#version")):
                continue
            pair = line.split(" ")
            if len(pair) != 2:
                raise TokenizerError(f"{merges_file}:{lineno}: expected two space-separated tokens, got {line!r}")
            merges.append((pair[0], pair[1]))
    try:
        model = BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None, continuing_subword_prefix="",
                    end_of_word_suffix="", fuse_unk=False, byte_fallback=False)
    except Exception as e:
        raise TokenizerError(f"{merges_file}: does not match {vocab_file} ({e})") from None
    tok = _Backend(model)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    if not configs.added_tokens():
        # No tokenizer_config.json: add Qwen2's specials after the vocabulary, like Qwen2 does.
        missing = [t for t in QWEN2_DEFAULT_SPECIALS if tok.token_to_id(t) is None]
        tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
        # Make any that the vocab already had atomic too.
        tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN2_DEFAULT_SPECIALS
                        if t not in missing])
    return tok


def _detect(path: str, tokenizer_type: str | None, merges_file: str | None = None) -> tuple[str, str, dict]:
    """-> (kind, directory, files) for a directory or file path."""
    kind = None
    if tokenizer_type:
        kind = _TYPE_ALIASES.get(str(tokenizer_type).lower())
        if kind is None:
            raise TokenizerError(f"unknown tokenizer_type {tokenizer_type!r}; use HuggingFaceTokenizer, "
                                 f"SentencePiece or one of {sorted(set(_TYPE_ALIASES))}")
    if os.path.isdir(path):
        directory = path
        files = {name: os.path.join(path, name) for name in VOCABULARY_FILES + ("merges.txt",)
                 if os.path.isfile(os.path.join(path, name))}
    elif os.path.isfile(path):
        directory = os.path.dirname(os.path.abspath(path))
        base = os.path.basename(path)
        if base.endswith(".model"):
            files = {"tokenizer.model": path}
        elif base == "merges.txt" or base.endswith(".txt"):
            files = {"merges.txt": path, "vocab.json": os.path.join(directory, "vocab.json")}
        elif base == "vocab.json" or (merges_file and base.endswith(".json")):
            files = {"vocab.json": path, "merges.txt": merges_file or os.path.join(directory, "merges.txt")}
        elif base.endswith(".json"):
            files = {"tokenizer.json": path}
        else:
            raise TokenizerError(f"{path}: not a tokenizer file (expected tokenizer.json, vocab.json, "
                                 f"merges.txt or a sentencepiece .model)")
    else:
        raise TokenizerError(f"{path}: no such tokenizer file or directory")

    # "HuggingFaceTokenizer" covers both HF formats; prefer tokenizer.json when both exist.
    wanted = {"hf": ("hf", "bpe"), "bpe": ("bpe",), "sp": ("sp",), None: ("hf", "bpe", "sp")}[kind]
    for candidate in wanted:
        if candidate == "hf" and "tokenizer.json" in files:
            return "hf", directory, files
        if candidate == "bpe" and "vocab.json" in files:
            if not os.path.isfile(files.get("merges.txt", "")):
                raise TokenizerError(f"{files['vocab.json']}: found vocab.json but no merges.txt next to it")
            return "bpe", directory, files
        if candidate == "sp" and "tokenizer.model" in files:
            return "sp", directory, files
    expected = {"hf": "tokenizer.json or vocab.json + merges.txt", "bpe": "vocab.json + merges.txt",
                "sp": "tokenizer.model", None: "tokenizer.json, vocab.json + merges.txt, or tokenizer.model"}[kind]
    raise TokenizerError(f"{path}: no tokenizer found (looked for {expected})")


def load_tokenizer(path: str, tokenizer_type: str | None = None, merges_file: str | None = None) -> Tokenizer:
    """Load a tokenizer from a directory or file.

    ``tokenizer_type`` may be ``None`` (auto-detect: tokenizer.json, then vocab.json + merges.txt,
    then tokenizer.model), ``"HuggingFaceTokenizer"`` (tokenizer.json or vocab/merges) or
    ``"SentencePiece"``. ``merges_file`` is for a vocab.json whose merges.txt lives elsewhere.
    The json configs that set eos/pad are read from the directory of ``path``.
    """
    path = os.fspath(path)
    if merges_file is not None and not os.path.isfile(merges_file):
        raise TokenizerError(f"{merges_file}: merges file not found")
    kind, directory, files = _detect(path, tokenizer_type, merges_file)
    configs = _ModelConfigs(directory)
    if kind == "hf":
        from tokenizers import Tokenizer as _Backend
        try:
            backend = _Backend.from_file(files["tokenizer.json"])
        except Exception as e:
            raise TokenizerError(f"{files['tokenizer.json']}: not a valid tokenizer.json ({e})") from None
        return HFTokenizer(backend, path, configs, kind="tokenizer.json")
    if kind == "bpe":
        backend = _build_bpe(files["vocab.json"], files["merges.txt"], configs)
        return HFTokenizer(backend, path, configs, kind="vocab+merges")
    return SentencePieceTokenizer(files["tokenizer.model"], path, configs)
