"""mindrl.data.tokenizer against independent references: transformers' tokenizers and sentencepiece."""
import json
import os
import pickle
import subprocess
import sys

import pytest

from mindrl.data.tokenizer import QWEN2_PRETOKENIZE_REGEX, TokenizerError, load_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "examples", "tiny", "tokenizer")

CORPUS = [
    "Hello world! It's 2024 and we're testing numbers like 12345, 3.14 and -7.",
    "日本語のテキストも少し。中文也有一点。",
    "def f(x):\n    return x * 2  # comment\n\n\n",
    "naïve café résumé, Ünïcödé — “quotes” and emoji 🙂",
    "  leading spaces, trailing spaces   \t tabs\r\nCRLF",
    "What is $\\frac{1}{2} + \\sqrt{4}$? Put the answer in \\boxed{}.",
]
PROBES = CORPUS + [
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n1+1=?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "text<|endoftext|>more text<|im_end|>",
    "unseen words: xylophone quizzical zephyr 98765432109876543210",
    "e\u0301 (decomposed é) and precomposed é",   # NFC normalisation matters here
    "",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _train_bpe(directory, vocab_size=420):
    """A small byte-level BPE with Qwen2's pre-tokenizer, saved as vocab.json + merges.txt."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    os.makedirs(directory, exist_ok=True)
    tok.model.save(str(directory))
    return tok


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    """vocab.json + merges.txt + a Qwen-style tokenizer_config.json (specials after the vocab)."""
    d = tmp_path_factory.mktemp("qwen_bpe")
    tok = _train_bpe(d)
    n = tok.get_vocab_size()
    added = {str(n + i): {"content": t, "special": True} for i, t in enumerate(SPECIALS)}
    added[str(n + 3)] = {"content": "<think>", "special": False}
    _write_json(d / "tokenizer_config.json", {
        "tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": added,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None})
    _write_json(d / "config.json", {"model_type": "qwen2"})
    return d


@pytest.fixture(scope="module")
def hf_json_dir(tmp_path_factory):
    """A tokenizer.json with special tokens, plus a generation_config.json."""
    from tokenizers import AddedToken

    d = tmp_path_factory.mktemp("hf_json")
    tok = _train_bpe(d / "src", vocab_size=380)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<s>", "</s>", "<pad>"]])
    tok.save(str(d / "tokenizer.json"))
    _write_json(d / "generation_config.json", {"eos_token_id": [tok.token_to_id("</s>"), tok.token_to_id("<s>")],
                                              "bos_token_id": tok.token_to_id("<s>")})
    _write_json(d / "config.json", {"pad_token_id": tok.token_to_id("<pad>")})
    return d


# ---------------------------------------------------------------------------- vocab.json + merges
def test_vocab_merges_matches_transformers_qwen2(qwen_dir):
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoTokenizer.from_pretrained(str(qwen_dir))
    ours = load_tokenizer(qwen_dir)
    assert ours.kind == "vocab+merges"
    for text in PROBES:
        expected = ref.encode(text, add_special_tokens=False)
        assert ours.encode(text) == expected, text
        assert ours.decode(expected) == ref.decode(expected, skip_special_tokens=False)
        assert ours.decode(expected, skip_special_tokens=True) == ref.decode(expected, skip_special_tokens=True)
    assert ours.eos_token_id == ref.eos_token_id == ref.convert_tokens_to_ids("<|im_end|>")
    assert ours.pad_token_id == ref.pad_token_id
    assert ours.bos_token_id is None
    assert ours.vocab_size == len(ref)


def test_special_tokens_encode_to_single_ids(qwen_dir):
    ours = load_tokenizer(qwen_dir)
    for token in SPECIALS + ["<think>"]:
        token_id = ours.convert_tokens_to_ids(token)
        assert ours.special_tokens[token] == token_id
        assert ours.encode(token) == [token_id]
        assert ours.encode(f"a{token}b")[1] == token_id
    ids = ours.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == ours.special_tokens["<|im_start|>"] and ids[-1] == ours.special_tokens["<|im_end|>"]
    # <think> is an added but not special token: skip_special_tokens keeps it
    assert ours.decode(ours.encode("<think>x<|im_end|>"), skip_special_tokens=True) == "<think>x"


def test_vocab_merges_without_config_gets_qwen_specials(tmp_path):
    tok = _train_bpe(tmp_path)
    ours = load_tokenizer(tmp_path / "vocab.json")      # a file path works too
    n = tok.get_vocab_size()
    # Qwen2 numbering: the three specials follow the BPE vocabulary in this order
    assert [ours.convert_tokens_to_ids(t) for t in SPECIALS] == [n, n + 1, n + 2]
    assert ours.eos_token_id == n and ours.pad_token_id == n
    assert ours.encode("x<|im_start|>y")[1] == n + 1


def test_merges_file_elsewhere(tmp_path):
    _train_bpe(tmp_path / "a")
    expected = load_tokenizer(tmp_path / "a").encode(CORPUS[0])
    os.makedirs(tmp_path / "b")
    os.replace(tmp_path / "a" / "merges.txt", tmp_path / "b" / "m.txt")
    with pytest.raises(TokenizerError, match="merges.txt"):
        load_tokenizer(tmp_path / "a" / "vocab.json")
    ours = load_tokenizer(tmp_path / "a" / "vocab.json", merges_file=str(tmp_path / "b" / "m.txt"))
    assert ours.encode(CORPUS[0]) == expected


# -------------------------------------------------------------------------------- tokenizer.json
def test_tokenizer_json_matches_transformers(hf_json_dir):
    transformers = pytest.importorskip("transformers")
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=str(hf_json_dir / "tokenizer.json"))
    ours = load_tokenizer(hf_json_dir, "HuggingFaceTokenizer")
    assert ours.kind == "tokenizer.json"
    for text in PROBES + ["<s>hello</s><pad>"]:
        expected = ref.encode(text, add_special_tokens=False)
        assert ours.encode(text) == expected, text
        assert ours.decode(expected, skip_special_tokens=True) == ref.decode(expected, skip_special_tokens=True)
    assert ours.vocab_size == len(ref)


def test_ids_from_generation_and_model_config(hf_json_dir):
    from tokenizers import Tokenizer
    raw = Tokenizer.from_file(str(hf_json_dir / "tokenizer.json"))
    ours = load_tokenizer(hf_json_dir / "tokenizer.json")
    # no tokenizer_config.json: eos/bos from generation_config.json, pad from config.json
    assert ours.eos_token_id == raw.token_to_id("</s>")
    assert ours.eos_token_ids == [raw.token_to_id("</s>"), raw.token_to_id("<s>")]
    assert ours.bos_token_id == raw.token_to_id("<s>")
    assert ours.pad_token_id == raw.token_to_id("<pad>")


def test_tokenizer_config_wins_over_generation_config(hf_json_dir, tmp_path):
    import shutil
    for name in os.listdir(hf_json_dir):
        if os.path.isfile(hf_json_dir / name):
            shutil.copy(hf_json_dir / name, tmp_path / name)
    _write_json(tmp_path / "tokenizer_config.json", {"eos_token": {"content": "<pad>", "__type": "AddedToken"}})
    ours = load_tokenizer(tmp_path)
    assert ours.eos_token == "<pad>"


# -------------------------------------------------------------------------------- sentencepiece
def test_tiny_sentencepiece_matches_sentencepiece():
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(TINY, "tokenizer.model"))
    ours = load_tokenizer(TINY)
    assert ours.kind == "sentencepiece"
    texts = ["53+93-01=145", "07+02-55=-46", "You are a helpful assistant.",
             "<|im_start|>user\n12+34-05=<|im_end|>\n<|im_start|>assistant\n<think>41</think><answer>41</answer>"]
    for text in texts:
        assert ours.encode(text) == sp.encode(text), text
        assert ours.decode(sp.encode(text)) == sp.decode(sp.encode(text)) == text
    assert ours.vocab_size == sp.get_piece_size()


def test_ids_beyond_the_tokenizer_decode_to_nothing(qwen_dir):
    """A model's embedding is often wider than its tokenizer (Qwen2.5: 151936 rows, 151665 tokens); an id sampled
    in the padding has no text, in both backends, as in transformers' fast tokenizers."""
    for path in (TINY, qwen_dir):
        tok = load_tokenizer(path)
        ids = tok.encode("12+34-05=41")
        mixed = ids[:3] + [tok.vocab_size, tok.vocab_size + 500] + ids[3:]
        assert tok.decode(mixed) == tok.decode(ids) == "12+34-05=41", path


def test_tiny_tokenizer_demo_properties():
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(TINY, "tokenizer.model"))
    for ch in "0123456789+-=":
        ids = sp.encode(ch)
        assert len(ids) == 1 and sp.id_to_piece(ids[0]) == ch
    assert [sp.id_to_piece(i) for i in sp.encode("53+93-01=-46")] == list("53+93-01=-46")
    ours = load_tokenizer(TINY)
    assert ours.eos_token == "<|endoftext|>" and ours.pad_token == "<pad>"
    assert ours.eos_token_id != ours.pad_token_id
    for token in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<answer>", "</answer>"]:
        assert ours.encode(token) == [sp.piece_to_id(token)]
    ids = ours.encode("<think>7</think><|im_end|>")
    assert ours.decode(ids, skip_special_tokens=True) == "<think>7</think>"
    assert 100 <= ours.vocab_size <= 300


def test_tiny_tokenizer_script_is_deterministic(tmp_path):
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_tiny_tokenizer.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    for name in ("tokenizer.model", "tokenizer_config.json"):
        with open(tmp_path / name, "rb") as a, open(os.path.join(TINY, name), "rb") as b:
            assert a.read() == b.read(), f"{name} differs from the shipped file"


def _train_sp_with_controls(directory):
    import sentencepiece as spm
    model = str(directory / "m")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 10), model_prefix=model, vocab_size=120, model_type="bpe",
        bos_id=1, eos_id=2, unk_id=0, pad_id=3, character_coverage=1.0, num_threads=1, minloglevel=2)
    return model + ".model"


def test_sentencepiece_control_tokens(tmp_path):
    import sentencepiece as spm
    model = _train_sp_with_controls(tmp_path)
    sp = spm.SentencePieceProcessor(model_file=model)
    ours = load_tokenizer(model)
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (1, 2, 3)
    # sentencepiece itself would cut "</s>" into pieces; we keep control tokens atomic like HF does
    ids = ours.encode("Hello</s>")
    assert ids == sp.encode("Hello") + [2]
    assert ours.decode(ids) == "Hello</s>"
    assert ours.decode(ids, skip_special_tokens=True) == "Hello"
    assert ours.encode("Hello", add_special_tokens=True) == [1] + sp.encode("Hello")


def test_pickle_roundtrip(qwen_dir):
    for tok in (load_tokenizer(qwen_dir), load_tokenizer(TINY)):
        clone = pickle.loads(pickle.dumps(tok))
        assert clone.encode(PROBES[6]) == tok.encode(PROBES[6])
        assert clone.eos_token_id == tok.eos_token_id


# ------------------------------------------------------------------------------------- errors
def test_missing_path_is_named(tmp_path):
    with pytest.raises(TokenizerError, match=str(tmp_path / "nope")):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(TokenizerError, match="no tokenizer found"):
        load_tokenizer(tmp_path)


def test_corrupt_files_are_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
    bad = tmp_path / "sp"
    bad.mkdir()
    (bad / "tokenizer.model").write_bytes(b"garbage")
    with pytest.raises(TokenizerError, match="tokenizer.model"):
        load_tokenizer(bad)
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    _write_json(lonely / "vocab.json", {"a": 0})
    with pytest.raises(TokenizerError, match="merges.txt"):
        load_tokenizer(lonely)


def test_bad_tokenizer_config(qwen_dir, tmp_path):
    import shutil
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(qwen_dir / name, tmp_path / name)
    (tmp_path / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(TokenizerError, match="tokenizer_config.json"):
        load_tokenizer(tmp_path)
    # an added token declared at an id that does not follow the vocabulary
    _write_json(tmp_path / "tokenizer_config.json",
                {"added_tokens_decoder": {"99999": {"content": "<|im_end|>", "special": True}}})
    with pytest.raises(TokenizerError, match="99999"):
        load_tokenizer(tmp_path)
    _write_json(tmp_path / "tokenizer_config.json", {"eos_token": "<|not_there|>"})
    with pytest.raises(TokenizerError, match="not_there"):
        load_tokenizer(tmp_path)


def test_unknown_type(qwen_dir):
    with pytest.raises(TokenizerError, match="unknown tokenizer_type"):
        load_tokenizer(qwen_dir, "WordPiece")
    with pytest.raises(TokenizerError, match="tokenizer.model"):
        load_tokenizer(qwen_dir, "SentencePiece")
