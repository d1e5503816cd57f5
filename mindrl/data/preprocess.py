"""`mindrl preprocess`: tokenize json / jsonl / parquet rows into one MindRecord file.

    mindrl preprocess --config configs/datasets/deepscaler.yaml [--strict] [--overwrite] [key=value ...]

The yaml keys follow MindSpeed-RL's data configs (see docs/data.md). Output goes to
``<output_prefix>.mindrecord`` (+ ``.db`` index). It is written in a temporary directory next to
the target and moved into place only after a successful commit, so an interrupted run never
leaves a half-written file under the final name.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

import yaml

from mindrl.config.peer import Rule, judge

from .handlers import BadRow, Filtered, HandlerContext, get_handler
from .templates import check_prompt_type, get_template
from .tokenizer import load_tokenizer

__all__ = ["PreprocessError", "PreprocessConfigError", "PreprocessSummary", "load_dataset_config", "preprocess",
           "cli_main", "DEFAULTS"]

logger = logging.getLogger("mindrl.data.preprocess")

# Every key we understand, with its default. None = required (input, tokenizer_name_or_path,
# output_prefix) or "not set".
DEFAULTS = {
    "input": None,
    "tokenizer_type": None,            # None: auto-detect; MindSpeed's "HuggingFaceTokenizer" / "SentencePiece"
    "tokenizer_name_or_path": None,
    "vocab_file": None,                # vocab.json, when the tokenizer is vocab + merges in other places
    "merge_file": None,
    "output_prefix": None,
    "handler_name": "R1AlpacaStyleInstructionHandler",
    "prompt_type": "empty",
    "prompt_type_path": None,          # another templates.json
    "enable_thinking": None,           # Qwen3 / hf: passed to a template that has the switch, refused by others
    "map_keys": None,
    "dataset_additional_keys": [],
    "max_prompt_length": None,
    "seq_length": None,
    "append_eod": False,
    "pad_to_max_length": False,
    "pad_token_id": None,              # padding id for pad_to_max_length; None: the tokenizer's pad
    "workers": 1,
    "log_interval": 100,
    "seed": 1234,                      # accepted for MindSpeed-RL configs; preprocessing never shuffles
}
# MindSpeed-RL's data-config keys that mindrl does not act on (config/peer.py's rules): accepted where no value
# changes the rows mindrl writes (logged once), accepted only with the value that says what mindrl does, else
# refused with the reason
_MEGATRON_FORMAT = "a setting of Megatron's indexed-dataset output; mindrl writes one MindRecord file"
PEER_KEYS = {
    "streaming": Rule(any=True, why="mindrl reads the input file row by row either way"),
    "overwrite_cache": Rule(any=True, why="mindrl keeps no dataset cache (use --overwrite for the output)"),
    "cache_dir": Rule(any=True, why="mindrl keeps no dataset cache"),
    "n_subs": Rule(any=True, why="parallel subsets; mindrl's workers split the rows and write the same ones"),
    "tokenizer_not_use_fast": Rule(any=True, why="the fast and slow Hugging Face tokenizers give the same ids"),
    "make_vocab_size_divisible_by": Rule(any=True, why="a training-side vocabulary padding; token ids do not change"),
    "pad_vocab_size_to": Rule(any=True, why="a training-side vocabulary padding; token ids do not change"),
    "dataset_impl": Rule(any=True, why=_MEGATRON_FORMAT),
    "json_keys": Rule(any=True, why=_MEGATRON_FORMAT),
    "pack": Rule(ok=(False, None), why="mindrl does not pack prompt datasets (each row is one prompt)"),
    "neat_pack": Rule(ok=(False, None), why="mindrl does not pack prompt datasets (each row is one prompt)"),
    "split_sentences": Rule(ok=(False, None), why="a pretraining-corpus option; mindrl tokenizes each row whole"),
    "keep_newlines": Rule(ok=(False, None), why="a pretraining-corpus option; mindrl tokenizes each row whole"),
    "interleave_probs": Rule(ok=(None,), why="mindrl preprocesses one input at a time (run it once per file)"),
    "merge_group_keys": Rule(ok=(None,), why="mindrl preprocesses one input at a time"),
    "script_data_dir": Rule(ok=(None,), why="mindrl reads json, jsonl and parquet files, not dataset scripts"),
    "mm_dataset_additional_keys": Rule(ok=(None, []), why="mindrl's models are text-only"),
    "placeholder_token": Rule(ok=("ки",), why="only MindSpeed-RL's process-reward handler reads it"),
    "reward_tokens": Rule(ok=(None, []), why="only MindSpeed-RL's process-reward handler reads it"),
}
INPUT_SUFFIXES = (".jsonl", ".json", ".parquet")
CHUNK_ROWS = 256          # rows per task sent to a worker process
WRITE_ROWS = 1000         # rows per FileWriter.write_raw_data call
MAX_LOGGED_BAD_ROWS = 100


class PreprocessError(RuntimeError):
    """A data or runtime error (unreadable input, a bad row under --strict, no rows written), reported in one
    line by the CLI, which exits 1."""


class PreprocessConfigError(PreprocessError):
    """A usage or configuration error found before any row is read (unknown key, bad value, missing input file,
    an output that exists without --overwrite, a tokenizer that does not load): the CLI exits 2."""


@dataclass
class PreprocessSummary:
    output: str
    read: int = 0
    written: int = 0
    skipped: dict = field(default_factory=collections.Counter)   # reason -> rows
    seconds: float = 0.0
    worker_pids: set = field(default_factory=set)                 # processes that tokenized

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


# ---------------------------------------------------------------------------------------- config
def _parse_override(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise PreprocessConfigError(f"override {text!r} must look like key=value")
    key, value = text.split("=", 1)
    try:
        return key.strip(), yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or "invalid value"
        raise PreprocessConfigError(f"override {text!r}: {problem}; quote the value if it is text") from None


def load_dataset_config(path: str | None, overrides: list[str] = (), extra: dict | None = None) -> dict:
    """yaml file + ``key=value`` overrides (``map_keys.prompt=question`` sets a nested key)."""
    raw = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                raw = yaml.safe_load(f) or {}
        except FileNotFoundError:
            raise PreprocessConfigError(f"{path}: config file not found") from None
        except yaml.YAMLError as e:
            raise PreprocessConfigError(f"{path}: invalid yaml ({e})") from None
        if not isinstance(raw, dict):
            raise PreprocessConfigError(f"{path}: expected a mapping of keys to values")
    raw.update(extra or {})
    for text in overrides:
        key, value = _parse_override(text)
        if "." in key:
            head, sub = key.split(".", 1)
            raw.setdefault(head, {})
            if not isinstance(raw[head], dict):
                raise PreprocessConfigError(f"override {text!r}: {head} is not a mapping")
            raw[head] = dict(raw[head], **{sub: value})
        else:
            raw[key] = value
    where = f" in {path}" if path else ""
    unknown = sorted(set(raw) - set(DEFAULTS) - set(PEER_KEYS))
    if unknown:
        raise PreprocessConfigError(f"unknown config key{'s' if len(unknown) > 1 else ''} "
                                    f"{', '.join(map(repr, unknown))}{where}; known keys: {', '.join(DEFAULTS)}")
    notes, refused = [], []
    for key in sorted(set(raw) & set(PEER_KEYS)):
        _, note, error = judge(PEER_KEYS[key], key, raw[key])
        (refused.append(f"{key}: {error}") if error else notes.append(note))
    if refused:
        raise PreprocessConfigError("; ".join(refused) + where)
    if notes:
        logger.info("accepted, no effect in mindrl: %s", "; ".join(notes))
    if isinstance(raw.get("map_keys"), str):  # MindSpeed-RL's r1_zero yamls quote the mapping as JSON text
        try:
            raw["map_keys"] = json.loads(raw["map_keys"])
        except ValueError as e:
            raise PreprocessConfigError(f"map_keys: {raw['map_keys']!r} is neither a mapping nor JSON text ({e})"
                                        f"{where}") from None
    config = {**DEFAULTS, **{k: v for k, v in raw.items() if k in DEFAULTS}}
    _validate(config, where)
    return config


def _validate(cfg: dict, where: str):
    for key in ("input", "output_prefix"):
        if not cfg[key]:
            raise PreprocessConfigError(f"{key} is required{where}")
    if not cfg["tokenizer_name_or_path"] and not cfg["vocab_file"]:
        raise PreprocessConfigError(f"tokenizer_name_or_path is required{where}")

    def check_int(key, minimum):
        value = cfg[key]
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PreprocessConfigError(f"{key} must be an integer >= {minimum}, got {value!r}{where}")

    check_int("workers", 1)
    check_int("log_interval", 1)
    check_int("max_prompt_length", 1)
    check_int("seq_length", 1)
    check_int("seed", 0)
    check_int("pad_token_id", 0)
    if cfg["map_keys"] is not None and not isinstance(cfg["map_keys"], dict):
        raise PreprocessConfigError(f"map_keys must be a mapping like {{prompt: problem, response: answer}}{where}")
    for role, key in (cfg["map_keys"] or {}).items():
        if key is not None and not isinstance(key, str):
            raise PreprocessConfigError(f"map_keys.{role} must be a string key, got {key!r}{where}")
    keys = cfg["dataset_additional_keys"]
    if isinstance(keys, str):
        cfg["dataset_additional_keys"] = keys = [keys]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise PreprocessConfigError(f"dataset_additional_keys must be a list of key names{where}")
    for key in ("append_eod", "pad_to_max_length"):
        if not isinstance(cfg[key], bool):
            raise PreprocessConfigError(f"{key} must be true or false{where}")
    if cfg["pad_to_max_length"] and not (cfg["max_prompt_length"] and cfg["seq_length"]):
        raise PreprocessConfigError(f"pad_to_max_length needs max_prompt_length and seq_length{where}")
    if cfg["enable_thinking"] is not None and not isinstance(cfg["enable_thinking"], bool):
        raise PreprocessConfigError(f"enable_thinking must be true, false or null{where}")
    try:
        get_handler(cfg["handler_name"])
        check_prompt_type(cfg["prompt_type"], cfg["prompt_type_path"], cfg["enable_thinking"])
    except ValueError as e:
        raise PreprocessConfigError(f"{e}{where}") from None


def output_path(cfg: dict) -> str:
    prefix = str(cfg["output_prefix"])
    return prefix if prefix.endswith(".mindrecord") else prefix + ".mindrecord"


# ------------------------------------------------------------------------------ worker-side code
_CTX = None      # (handler, strict) in each worker process


def _build_handler(cfg: dict):
    if cfg["vocab_file"]:
        tokenizer = load_tokenizer(cfg["vocab_file"], "bpe", merges_file=cfg["merge_file"])
    else:
        tokenizer = load_tokenizer(cfg["tokenizer_name_or_path"], cfg["tokenizer_type"])
    ctx = HandlerContext(
        tokenizer=tokenizer, template=get_template(cfg["prompt_type"], cfg["prompt_type_path"], tokenizer,
                                                   cfg["enable_thinking"]),
        map_keys=cfg["map_keys"] or {}, additional_keys=list(cfg["dataset_additional_keys"]),
        max_prompt_length=cfg["max_prompt_length"], seq_length=cfg["seq_length"],
        append_eod=cfg["append_eod"], pad_to_max_length=cfg["pad_to_max_length"],
        pad_token_id=cfg["pad_token_id"], enable_thinking=cfg["enable_thinking"])
    if cfg["append_eod"] and tokenizer.eos_token_id is None:
        raise PreprocessError(f"append_eod is set but {tokenizer.path} has no eos token")
    if cfg["pad_to_max_length"] and cfg["pad_token_id"] is None and tokenizer.pad_token_id is None:
        raise PreprocessError(f"pad_to_max_length is set but {tokenizer.path} has no pad token; set pad_token_id")
    return get_handler(cfg["handler_name"])(ctx)


def _init_worker(cfg: dict, barrier=None):
    """Build the handler in this process; ``barrier`` is given in pool workers only."""
    global _CTX
    if barrier is not None:
        # Tokenizers' own thread pool would fight the worker processes for the same cores.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _CTX = _build_handler(cfg)
    if barrier is not None:
        # Start together: otherwise the first worker up can drain a small input alone.
        barrier.wait(timeout=300)


def _decode_line(raw: bytes, line: int) -> str:
    try:
        # a byte-order mark is allowed at the start of the file only
        return raw.decode("utf-8-sig" if line == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise BadRow("not_utf8", f"byte {e.start + 1} of the line is {raw[e.start:e.start + 1]!r}, "
                                 f"not valid UTF-8") from None


# MindRecord's page size here: a row whose fields need more cannot be written, and the writer would fail the file
PAGE_BYTES = 1 << 22


def _fitting(fields: dict) -> dict:
    """``fields`` when a MindRecord page holds them (strings as UTF-8, arrays' bytes, with room to spare)."""
    size = sum(len(v.encode()) if isinstance(v, str) else getattr(v, "nbytes", 8) for v in fields.values())
    if size > PAGE_BYTES // 2:
        raise BadRow("too_large", f"its fields take {size} bytes, more than the {PAGE_BYTES // 2} a row may")
    return fields


def _process_chunk(items: list) -> tuple[int, list]:
    """items: (source, line, raw) where raw is a json line (bytes) or an already parsed row.
    Returns (pid, results) with results in order: ("ok", fields) or
    ("bad"/"filtered", source, line, reason, detail)."""
    handler = _CTX
    out = []
    for source, line, raw in items:
        try:
            if isinstance(raw, bytes):
                raw = _decode_line(raw, line)
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise BadRow("malformed_json", str(e)) from None
            if not isinstance(raw, dict):
                raise BadRow("not_an_object", f"row is {type(raw).__name__}, expected a JSON object")
            out.append(("ok", _fitting(handler(raw))))
        except Filtered as e:
            out.append(("filtered", source, line, e.reason, e.detail))
        except BadRow as e:
            out.append(("bad", source, line, e.reason, e.detail))
        except RecursionError:  # JSON nested deeper than Python recurses (json.loads): this row only
            out.append(("bad", source, line, "too_deeply_nested", f"nested deeper than Python's recursion limit "
                                                                   f"({sys.getrecursionlimit()})"))
        except MemoryError:
            out.append(("bad", source, line, "too_large", "decoding or tokenizing it ran out of memory"))
    return os.getpid(), out


# ------------------------------------------------------------------------------------ reading
def input_files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(INPUT_SUFFIXES))
        if not files:
            raise PreprocessConfigError(f"{path}: no {', '.join(INPUT_SUFFIXES)} files in this directory")
        return files
    if not os.path.isfile(path):
        raise PreprocessConfigError(f"{path}: input file or directory not found")
    if not path.endswith(INPUT_SUFFIXES):
        raise PreprocessConfigError(f"{path}: unsupported input type; use {', '.join(INPUT_SUFFIXES)}")
    return [path]


def _parquet_error(path: str, where: str, e: Exception) -> PreprocessError:
    reason = " ".join(str(e).split())           # pyarrow's messages span lines; the CLI prints one
    return PreprocessError(f"{path}: cannot read parquet{where} ({reason})")


def _open_parquet(path: str):
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(path)
    except (OSError, ValueError) as e:          # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise _parquet_error(path, "", e) from None


def _count_rows(path: str) -> int | None:
    return _open_parquet(path).metadata.num_rows if path.endswith(".parquet") else None


def _parquet_rows(path: str):
    batches = _open_parquet(path).iter_batches(batch_size=1024)
    n = 0
    while True:
        try:                                     # decoding errors surface batch by batch
            batch = next(batches, None)
            rows = [] if batch is None else batch.to_pylist()
        except (OSError, ValueError) as e:
            raise _parquet_error(path, f" after record {n}", e) from None
        if batch is None:
            return
        for row in rows:
            n += 1
            yield path, n, row


def _json_array(path: str, data: bytes) -> list:
    try:
        return json.loads(data)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise PreprocessError(f"{path}:{line}: not valid UTF-8 ({e.reason} at byte {e.start}); a JSON array "
                              f"cannot skip one row") from None
    except json.JSONDecodeError as e:
        raise PreprocessError(f"{path}:{e.lineno}: invalid JSON array ({e.msg})") from None


def _first_byte(path: str) -> bytes:
    """The first byte after any byte-order mark and whitespace (b"" for an empty file)."""
    with open(path, "rb") as f:
        chunk = f.read(4096).removeprefix(b"\xef\xbb\xbf")
        while chunk:
            chunk = chunk.lstrip(b" \t\r\n")
            if chunk:
                return chunk[:1]
            chunk = f.read(4096)
    return b""


def iter_rows(path: str):
    """Yield (path, line_or_record_number, raw) for one input file. For .jsonl the number is the
    line and raw the line's bytes (decoded by the worker, so that a line that is not UTF-8 is one
    bad row); for .json lists and .parquet it is the 1-based record index and raw the parsed row."""
    if path.endswith(".parquet"):
        yield from _parquet_rows(path)
        return
    if path.endswith(".json"):
        if _first_byte(path) == b"[":
            with open(path, "rb") as f:
                rows = _json_array(path, f.read())
            for i, row in enumerate(rows, 1):
                yield path, i, row
            return
        # otherwise a .json file holding JSON lines (common for DeepScaleR mirrors)
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield path, lineno, line


def _chunks(files: list[str], size: int):
    chunk = []
    for path in files:
        for item in iter_rows(path):
            chunk.append(item)
            if len(chunk) >= size:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _results(cfg: dict, files: list[str]):
    """Processed chunks in input order; with workers > 1 tokenization runs in a process pool."""
    if cfg["workers"] == 1:
        _init_worker(cfg)
        for chunk in _chunks(files, CHUNK_ROWS):
            yield len(chunk), _process_chunk(chunk)
        return
    # spawn: the parent may already hold mindspore/tokenizers threads, which fork would copy badly.
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(cfg["workers"])
    with mp.Pool(cfg["workers"], initializer=_init_worker, initargs=(cfg, barrier)) as pool:
        pending = collections.deque()
        window = cfg["workers"] * 4       # bounded, so a huge input is never queued all at once
        for chunk in _chunks(files, CHUNK_ROWS):
            pending.append((len(chunk), pool.apply_async(_process_chunk, (chunk,))))
            if len(pending) >= window:
                n, result = pending.popleft()
                yield n, result.get()
        while pending:
            n, result = pending.popleft()
            yield n, result.get()


# ------------------------------------------------------------------------------------ writing
def _check_output(out: str, overwrite: bool):
    existing = [p for p in (out, out + ".db") if os.path.exists(p)]
    if existing and not overwrite:
        raise PreprocessConfigError(f"{existing[0]} already exists; pass --overwrite to replace it")


def _make_output_dir(out: str):
    directory = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise PreprocessConfigError(f"output_prefix: cannot create {directory} ({e.strerror})") from None


class _AtomicMindRecord:
    """A FileWriter whose output appears under its final name only after :meth:`commit`.

    MindRecord stores its own file name, so the file cannot be renamed once written. It is written
    under the final base name inside a private directory next to the target, then moved.
    """

    def __init__(self, out: str, schema: dict):
        from mindspore.mindrecord import FileWriter   # heavy import, only when we really write

        from mindrl.io import staging_path
        self.out = out
        self.base = os.path.basename(os.path.abspath(out))
        self.tmp_dir = staging_path(out)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        os.makedirs(self.tmp_dir)
        try:
            self.writer = FileWriter(os.path.join(self.tmp_dir, self.base), shard_num=1, overwrite=True)
            # The defaults (16 MB header + 32 MB pages) make even a 10-row file 50 MB.
            self.writer.set_header_size(1 << 22)
            self.writer.set_page_size(PAGE_BYTES)
            self.writer.add_schema(schema, "mindrl")
        except BaseException:
            self.discard()
            raise

    def write(self, rows: list):
        n = len(rows)
        self.writer.write_raw_data(rows)
        # FileWriter drops rows that fail its schema check with only a warning; refuse that.
        if len(rows) != n:
            raise PreprocessError(f"MindRecord writer rejected {n - len(rows)} rows (schema mismatch)")

    def commit(self):
        self.writer.commit()
        # A .mindrecord under the final name means a finished job, so it goes last; the old one
        # goes first, so an old file never sits next to a new index.
        if os.path.exists(self.out):
            os.remove(self.out)
        os.replace(os.path.join(self.tmp_dir, self.base + ".db"), self.out + ".db")
        os.replace(os.path.join(self.tmp_dir, self.base), self.out)

    def discard(self):
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


class _Progress:
    """tqdm bar, periodic log lines with rows/s, and the log of skipped rows."""

    def __init__(self, summary: PreprocessSummary, log_interval: int, total: int | None):
        from tqdm import tqdm

        self.summary, self.log_interval = summary, log_interval
        self.start = time.time()
        self.logged_bad = 0
        self.bar = tqdm(total=total, unit="rows", desc="preprocess", disable=None, file=sys.stderr)

    def skipped(self, source, line, reason, detail):
        self.summary.skipped[reason] += 1
        if self.logged_bad < MAX_LOGGED_BAD_ROWS:
            logger.warning("skipped %s:%s: %s%s", source, line, reason, f" ({detail})" if detail else "")
            self.logged_bad += 1
            if self.logged_bad == MAX_LOGGED_BAD_ROWS:
                logger.warning("further skipped rows are only counted, not logged one by one")

    def read(self, n: int, pending: int):
        s = self.summary
        before, s.read = s.read, s.read + n
        self.bar.update(n)
        if s.read // self.log_interval != before // self.log_interval:
            logger.info("read %d rows, written %d, skipped %d, %.0f rows/s", s.read, s.written + pending,
                        s.skipped_total, s.read / max(time.time() - self.start, 1e-9))

    def close(self):
        self.bar.close()
        self.summary.seconds = time.time() - self.start


def preprocess(cfg: dict, strict: bool = False, overwrite: bool = False) -> PreprocessSummary:
    """Run one preprocessing job described by a validated config (see :func:`load_dataset_config`).

    Raises :class:`PreprocessConfigError` for what is wrong before any row is read, and
    :class:`PreprocessError` (or the error itself) for what fails later; either way no output or
    staging directory is left behind.
    """
    files = input_files(str(cfg["input"]))
    out = output_path(cfg)
    _check_output(out, overwrite)
    try:
        schema = _build_handler(cfg).schema()     # fails fast on a bad tokenizer or template
    except (PreprocessError, ValueError, OSError) as e:
        raise PreprocessConfigError(str(e)) from None
    _make_output_dir(out)
    total = _count_rows(files[0]) if len(files) == 1 else None   # also: a parquet footer that does not read
    summary = PreprocessSummary(output=out)
    output = _AtomicMindRecord(out, schema)
    progress = _Progress(summary, cfg["log_interval"], total)
    results = _results(cfg, files)
    try:
        buffer = []
        for n_items, (pid, chunk) in results:
            summary.worker_pids.add(pid)
            for result in chunk:
                if result[0] == "ok":
                    buffer.append(result[1])
                    continue
                kind, source, line, reason, detail = result
                if kind == "bad" and strict:
                    raise PreprocessError(f"{source}:{line}: {reason}: {detail}")
                progress.skipped(source, line, reason, detail)
            if len(buffer) >= WRITE_ROWS:
                output.write(buffer)
                summary.written += len(buffer)
                buffer = []
            progress.read(n_items, len(buffer))
        if buffer:
            output.write(buffer)
            summary.written += len(buffer)
        if summary.written == 0:
            raise PreprocessError(f"no rows written from {cfg['input']} "
                                  f"(read {summary.read}, skipped {dict(summary.skipped)})")
        output.commit()
    finally:
        results.close()              # stops a worker pool at once on errors
        output.discard()
        progress.close()
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(summary.skipped.items())) or "none"
    logger.info("done: read %d rows from %d file(s), wrote %d to %s, skipped %d (%s) in %.1fs (%.0f rows/s)",
                summary.read, len(files), summary.written, out, summary.skipped_total, reasons,
                summary.seconds, summary.read / max(summary.seconds, 1e-9))
    return summary


# ---------------------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mindrl preprocess",
        description="Tokenize json/jsonl/parquet rows with a chat template into a MindRecord file.",
        epilog="Example: mindrl preprocess --config configs/datasets/deepscaler.yaml workers=2 "
               "map_keys.prompt=problem")
    p.add_argument("--config", required=True, help="yaml file (configs/datasets/<name>.yaml)")
    p.add_argument("--strict", action="store_true", help="stop at the first bad row (file:line) instead of skipping it")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="override yaml keys, e.g. workers=2 (before or after the flags)")
    return p


def cli_main(argv=None) -> int:
    """Exit status: 0 done, 2 usage or config error (nothing read), 1 failure while reading or writing."""
    args = _parser().parse_intermixed_args(argv)   # key=value may come before, between or after the flags
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        cfg = load_dataset_config(args.config, args.overrides)
        summary = preprocess(cfg, strict=args.strict, overwrite=args.overwrite)
    except PreprocessConfigError as e:
        print(f"mindrl preprocess: error: {e}", file=sys.stderr)
        return 2
    except (PreprocessError, ValueError, OSError) as e:
        print(f"mindrl preprocess: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {summary.written} rows to {summary.output} "
          f"(read {summary.read}, skipped {summary.skipped_total})")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
