"""Training-side reader: batches of prompts from a MindRecord, sharded by data-parallel rank,
shuffled per epoch, and resumable.

Order and sharding are computed here, not by MindDataset's ``num_shards``/``shard_id``, because
that pads uneven shards by repeating rows. The rule instead:

* Epoch ``e`` visits the rows in ``permutation(N)`` drawn from ``numpy.random.default_rng([seed, e])``
  (or in file order with ``shuffle=False``); the same seed and epoch always give the same order.
* The permuted list is cut into global batches of ``batch_size * dp_size`` rows; rank ``r`` takes
  the ``r``-th contiguous slice of ``batch_size`` rows of every global batch.
* The remainder is dropped per epoch so every rank sees the same number of rows and no row is
  repeated: with ``drop_last=True`` the rows after the last full global batch, otherwise only
  the ``N % dp_size`` last rows (the final global batch is then smaller on every rank). With
  shuffling a different remainder is dropped each epoch, so nothing is permanently skipped.

The state is one number, ``consumed_samples``: rows handed out so far summed over all ranks,
counted when a batch is yielded. Restoring it continues with the next unseen global batch.
Rows are read with ``mindspore.dataset.MindDataset`` through a ``SubsetSampler`` that lists
exactly this rank's remaining rows, so resuming reads nothing twice.

This module does not import mindspore until a batch is read.
"""
from __future__ import annotations

import numpy as np

# Inside functions: MindSpore's MindRecord reader, loaded when a file is read (not by config checks)

# the columns of SFT rows (`mindrl preprocess` with handler_name sft): PPO-ptx reads them, preflight checks them
PTX_COLUMNS = ("pretrain_ids", "loss_mask")

__all__ = ["PromptDataset", "pad_batch", "mindrecord_size", "mindrecord_columns", "prompt_stats"]


def mindrecord_size(path: str) -> int:
    import mindspore.dataset as ds
    return ds.MindDataset(path, shuffle=False).get_dataset_size()


def mindrecord_columns(path: str) -> list:
    """The column names of a MindRecord file (read from its header, no rows)."""
    from mindspore.mindrecord import FileReader
    reader = FileReader(path)
    try:
        return list(reader.schema())
    finally:
        reader.close()


class PromptDataset:
    """Iterate one epoch of batches per ``iter()``; see the module docstring for order and sharding.

    Each batch is a dict: variable-length int fields (``prompt_ids``...) as a list of int32
    arrays, scalar fields (``prompt_length``) as a 1-D array, string fields (``labels``...) as a
    list of str, plus ``index``: the row numbers in the file (int64 array).
    """

    def __init__(self, path: str, batch_size: int, dp_rank: int = 0, dp_size: int = 1, seed: int = 1234,
                 shuffle: bool = True, drop_last: bool = True, columns: list[str] | None = None,
                 num_parallel_workers: int = 1, num_samples: int | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if dp_size < 1 or not 0 <= dp_rank < dp_size:
            raise ValueError(f"need 0 <= dp_rank < dp_size, got dp_rank={dp_rank}, dp_size={dp_size}")
        self.path = str(path)
        self.batch_size, self.dp_rank, self.dp_size = batch_size, dp_rank, dp_size
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.columns = list(columns) if columns else None
        self.num_parallel_workers = num_parallel_workers
        self.num_samples = mindrecord_size(self.path) if num_samples is None else int(num_samples)
        self.global_batch_size = batch_size * dp_size
        if drop_last:
            usable = self.num_samples // self.global_batch_size * self.global_batch_size
        else:
            usable = self.num_samples // dp_size * dp_size
        if usable == 0:
            need = self.global_batch_size if drop_last else dp_size
            raise ValueError(f"{self.path}: {self.num_samples} rows cannot fill one global batch "
                             f"({need} rows for batch_size={batch_size} x dp_size={dp_size})")
        self.samples_per_epoch = usable   # global, over all ranks
        self.consumed_samples = 0

    # -- state --------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.consumed_samples // self.samples_per_epoch

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples, "seed": self.seed,
                "global_batch_size": self.global_batch_size, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict):
        if state.get("num_samples", self.num_samples) != self.num_samples:
            raise ValueError(f"{self.path}: the checkpoint was taken on a dataset of {state['num_samples']} "
                             f"rows, this one has {self.num_samples}; resuming would not continue the same order")
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"checkpoint seed {state['seed']} differs from this dataset's seed {self.seed}")
        self.consumed_samples = int(state["consumed_samples"])

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return -(-self.samples_per_epoch // self.global_batch_size)

    # -- order ----------------------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> np.ndarray:
        """All row indices of an epoch in global order (before the remainder is dropped)."""
        if not self.shuffle:
            return np.arange(self.num_samples, dtype=np.int64)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_samples).astype(np.int64)

    def _plan(self):
        """This rank's rows for the rest of the current epoch: a list of (global_rows, my_indices)."""
        epoch, offset = divmod(self.consumed_samples, self.samples_per_epoch)
        rest = self.epoch_order(epoch)[offset:self.samples_per_epoch]
        # A checkpoint from another batch or dp size may leave a tail that does not split evenly.
        rest = rest[:len(rest) - len(rest) % self.dp_size]
        plan = []
        for start in range(0, len(rest), self.global_batch_size):
            block = rest[start:start + self.global_batch_size]
            share = len(block) // self.dp_size
            if self.drop_last and share < self.batch_size:
                break
            plan.append((len(block), block[self.dp_rank * share:(self.dp_rank + 1) * share]))
        return plan

    # -- reading --------------------------------------------------------------------------------
    def _open(self, indices: np.ndarray):
        import mindspore.dataset as ds
        return ds.MindDataset(self.path, columns_list=self.columns, sampler=ds.SubsetSampler(indices.tolist()),
                              num_parallel_workers=self.num_parallel_workers)

    def forever(self):
        """Batches across epochs without end (each ``iter()`` is the rest of the current epoch). Create it after
        ``load_state_dict``: it starts at the position the dataset holds then."""
        while True:
            yield from self

    def __iter__(self):
        plan = self._plan()
        if not plan:      # the epoch was finished exactly: start the next one
            return
        indices = np.concatenate([mine for _, mine in plan])
        rows = self._open(indices).create_dict_iterator(output_numpy=True, num_epochs=1)
        try:
            for global_rows, mine in plan:
                batch = _collate([next(rows) for _ in range(len(mine))])
                batch["index"] = mine.copy()
                self.consumed_samples += global_rows
                yield batch
        finally:
            stop = getattr(rows, "stop", None)   # release the pipeline's threads early
            if stop is not None:
                stop()


def _collate(rows: list[dict]) -> dict:
    out = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        first = values[0]
        if first.dtype.kind in "US":          # strings come back as 0-d numpy str arrays
            out[key] = [str(v) for v in values]
        elif first.ndim == 0:
            out[key] = np.stack(values)
        else:
            out[key] = [np.asarray(v) for v in values]
    return out


def pad_batch(sequences, pad_id: int, side: str = "left", length: int | None = None):
    """Stack ragged int sequences into ``(ids [B, L], mask [B, L])``. Left padding suits generation."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    longest = max((len(s) for s in sequences), default=0)
    length = longest if length is None else length
    if longest > length:
        raise ValueError(f"a sequence of {longest} tokens does not fit length={length}")
    ids = np.full((len(sequences), length), pad_id, dtype=np.int32)
    mask = np.zeros((len(sequences), length), dtype=np.int32)
    for i, seq in enumerate(sequences):
        n = len(seq)
        if n:
            sl = slice(length - n, length) if side == "left" else slice(0, n)
            ids[i, sl] = seq
            mask[i, sl] = 1
    return ids, mask


def prompt_stats(path: str, prompt_key: str = "prompt_ids") -> dict:
    """One pass over a MindRecord's prompts: ``rows``, the longest prompt (``longest``, ``longest_row``) and the
    largest token id (``max_id``, ``max_id_row``), rows counted from 0 in file order. A ``prompt_length`` column,
    when present, says where each (padded) prompt ends.

    Read with MindSpore's FileReader, one consumer (file order): 0.41 s for 20,000 rows, against 3.6 s through a
    MindDataset pipeline (7 Dec)."""
    from mindspore.mindrecord import FileReader
    lengths = "prompt_length" in mindrecord_columns(path)
    reader = FileReader(path, num_consumer=1, columns=[prompt_key] + (["prompt_length"] if lengths else []))
    out = {"rows": 0, "longest": 0, "longest_row": None, "max_id": -1, "max_id_row": None}
    try:
        for i, row in enumerate(reader.get_next()):
            ids = row[prompt_key][:int(row["prompt_length"])] if lengths else row[prompt_key]
            if len(ids) > out["longest"]:
                out["longest"], out["longest_row"] = len(ids), i
            top = int(ids.max()) if len(ids) else -1
            if top > out["max_id"]:
                out["max_id"], out["max_id_row"] = top, i
            out["rows"] = i + 1
    finally:
        reader.close()
    return out
