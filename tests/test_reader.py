"""PromptDataset: sharding, epoch shuffling and resume, on a MindRecord written directly with
MindSpore's FileWriter (independent of mindrl's preprocessing)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from mindrl.data.reader import PromptDataset, pad_batch

N = 103   # prime: uneven for every dp size and batch size used below


def row_tokens(i):
    return list(range(i, i + 1 + i % 7))    # row i's ids, derivable from i alone


@pytest.fixture(scope="module")
def mindrecord(tmp_path_factory):
    from mindspore.mindrecord import FileWriter
    path = str(tmp_path_factory.mktemp("reader") / "rows.mindrecord")
    writer = FileWriter(path, shard_num=1)
    writer.add_schema({"prompt_ids": {"type": "int32", "shape": [-1]}, "prompt_length": {"type": "int32"},
                       "labels": {"type": "string"}}, "test")
    writer.write_raw_data([{"prompt_ids": np.asarray(row_tokens(i), np.int32), "prompt_length": len(row_tokens(i)),
                            "labels": f"label-{i}"} for i in range(N)])
    writer.commit()
    return path


def epoch_batches(ds):
    return list(iter(ds))


def check_rows(batch):
    """Every row in the batch is the row the index says it is."""
    for k, i in enumerate(batch["index"].tolist()):
        assert batch["labels"][k] == f"label-{i}"
        assert batch["prompt_ids"][k].tolist() == row_tokens(i)
        assert batch["prompt_length"][k] == len(row_tokens(i))


@pytest.mark.parametrize("dp_size,batch_size,drop_last", [(1, 8, True), (2, 5, True), (3, 4, False),
                                                          (4, 3, True), (4, 3, False)])
def test_shards_partition_each_epoch(mindrecord, dp_size, batch_size, drop_last):
    per_rank = []
    for rank in range(dp_size):
        ds = PromptDataset(mindrecord, batch_size, dp_rank=rank, dp_size=dp_size, seed=7, drop_last=drop_last)
        batches = epoch_batches(ds)
        assert len(batches) == len(ds)
        for b in batches:
            check_rows(b)
        per_rank.append([i for b in batches for i in b["index"].tolist()])
    counts = {len(rows) for rows in per_rank}
    assert len(counts) == 1, "every rank must see the same number of rows"
    seen = [i for rows in per_rank for i in rows]
    assert len(seen) == len(set(seen)), "no row may be repeated within an epoch"
    expected = N // (batch_size * dp_size) * batch_size * dp_size if drop_last else N // dp_size * dp_size
    assert len(seen) == expected
    assert set(seen) <= set(range(N))


def test_union_over_shards_is_all_rows_when_even(mindrecord):
    # 103 rows, dp 1, batch 1, no drop: exactly every row once
    ds = PromptDataset(mindrecord, 1, seed=0, drop_last=False)
    assert sorted(i for b in epoch_batches(ds) for i in b["index"].tolist()) == list(range(N))


def test_shuffle_is_deterministic_per_seed_and_epoch(mindrecord):
    def order(seed, epochs=2):
        ds = PromptDataset(mindrecord, 4, seed=seed)
        return [[i for b in epoch_batches(ds) for i in b["index"].tolist()] for _ in range(epochs)]

    a, b = order(1), order(1)
    assert a == b
    assert a[0] != a[1], "each epoch gets its own order"
    assert order(2)[0] != a[0]
    assert a[0] != sorted(a[0])
    ds = PromptDataset(mindrecord, 4, seed=1)
    np.testing.assert_array_equal(ds.epoch_order(1), np.random.default_rng([1, 1]).permutation(N))


def test_dropped_remainder_changes_between_epochs(mindrecord):
    ds = PromptDataset(mindrecord, 10, seed=3)       # 100 of 103 rows per epoch
    dropped = []
    for _ in range(3):
        seen = {i for b in epoch_batches(ds) for i in b["index"].tolist()}
        assert len(seen) == 100
        dropped.append(set(range(N)) - seen)
    assert len({frozenset(d) for d in dropped}) > 1


def test_no_shuffle_is_file_order(mindrecord):
    ds = PromptDataset(mindrecord, 10, dp_rank=1, dp_size=2, shuffle=False)
    batches = epoch_batches(ds)
    assert batches[0]["index"].tolist() == list(range(10, 20))
    assert batches[1]["index"].tolist() == list(range(30, 40))
    for b in batches:
        check_rows(b)


@pytest.mark.parametrize("consume", [0, 3, 5, 11])
def test_resume_continues_with_unseen_rows(mindrecord, consume):
    # 103 rows, 2 ranks x 4 = 8 per global batch -> 12 batches per epoch; 11 crosses into epoch 1
    def fresh(rank):
        return PromptDataset(mindrecord, 4, dp_rank=rank, dp_size=2, seed=11)

    for rank in range(2):
        reference = fresh(rank)
        stream = [b["index"].tolist() for b in epoch_batches(reference)]
        stream += [b["index"].tolist() for b in epoch_batches(reference)]
        ds = fresh(rank)
        it = iter(ds)
        got = []
        while len(got) < consume:
            try:
                got.append(next(it)["index"].tolist())
            except StopIteration:
                it = iter(ds)
        state = ds.state_dict()
        assert state["consumed_samples"] == consume * 8
        restarted = fresh(rank)
        restarted.load_state_dict(state)
        assert restarted.epoch == consume // 12
        rest = [b["index"].tolist() for b in epoch_batches(restarted)]
        if restarted.consumed_samples % restarted.samples_per_epoch == 0:
            rest += [b["index"].tolist() for b in epoch_batches(restarted)]
        expected = stream[consume:consume + len(rest)]
        assert rest == expected, "a restart must yield exactly the rest of the stream"
        assert rest, "nothing left after resume"


def test_state_checks(mindrecord):
    ds = PromptDataset(mindrecord, 4, seed=1)
    with pytest.raises(ValueError, match="seed"):
        ds.load_state_dict({"consumed_samples": 8, "seed": 2})
    with pytest.raises(ValueError, match="rows"):
        ds.load_state_dict({"consumed_samples": 8, "seed": 1, "num_samples": 50})


def test_parallel_workers_keep_order(mindrecord):
    a = PromptDataset(mindrecord, 8, seed=5)
    b = PromptDataset(mindrecord, 8, seed=5, num_parallel_workers=2)
    for x, y in zip(epoch_batches(a), epoch_batches(b)):
        assert x["index"].tolist() == y["index"].tolist()
        check_rows(y)


def test_too_few_rows(mindrecord):
    with pytest.raises(ValueError, match="cannot fill one global batch"):
        PromptDataset(mindrecord, 60, dp_size=2)
    with pytest.raises(ValueError, match="dp_rank"):
        PromptDataset(mindrecord, 4, dp_rank=2, dp_size=2)


def test_pad_batch():
    ids, mask = pad_batch([np.array([5, 6]), np.array([7])], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]
    ids, mask = pad_batch([[5, 6], [7]], pad_id=9, side="right", length=3)
    assert ids.tolist() == [[5, 6, 9], [7, 9, 9]] and mask.tolist() == [[1, 1, 0], [1, 0, 0]]
    with pytest.raises(ValueError):
        pad_batch([[1, 2, 3]], 0, length=2)


def test_importing_data_modules_does_not_import_mindspore():
    code = ("import sys, mindrl.data, mindrl.data.reader, mindrl.data.tokenizer, mindrl.data.templates;"
            "mindrl.data.PromptDataset; assert 'mindspore' not in sys.modules, 'mindspore imported'")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
