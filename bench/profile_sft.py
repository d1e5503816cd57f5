#!/usr/bin/env python
"""Where an SFT step's time goes: bench_sft.py's mindrl side under MindSpore's profiler.

Makes bench_sft.py's rows (SmolLM2-135M-Instruct's two-digit additions; `bash examples/real/run.sh --prepare`
first, or --model DIR), builds `mindrl sft`'s trainer with the same settings (--batch rows per step in
micro-batches of --micro-batch, --pad-to-multiple-of), runs --warmup steps unprofiled (the first compiles), then
profiles --steps steps and prints the step's wall time, kernel time by graph part (forward, backward, optimizer)
and by operator type.

    python bench/profile_sft.py                 # 2 warm-up and 2 profiled steps, about 2 minutes
    python bench/profile_sft.py --quick         # a tiny random LLaMA: a smoke run

The profiler's files and the rows go to a temporary directory, deleted at exit.
"""
import os
import sys
import time

import common
import offline_bench

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = offline_bench.parser(__doc__, "rows")
    ap.add_argument("--warmup", type=int, default=2, help="unprofiled steps first (the first one compiles)")
    ap.add_argument("--top", type=int, default=12, help="operator types to list")
    ap.set_defaults(steps=2)  # here: the profiled steps
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import bench_sft
    from profile_grpo import print_profile, read_profile
    d = common.scratch_dir("profile_sft_")
    if a.quick:
        from bench_real import make_quick_model
        a.batch, a.micro_batch, a.max_length = 4, 2, 256
        a.model = make_quick_model(d)
    profiled, a.steps = a.steps, a.warmup + a.steps
    bench_sft.make_rows(d, a.model, a)
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import mindspore as ms
    from mindrl.config.sft import load_sft_config
    from mindrl.trainer.sft_training import SFTTrainer
    trainer = SFTTrainer(load_sft_config(offline_bench.write_config(d, a, "sft_config", {"lr": bench_sft.LR},
                                                                    f"{d}/sft.mindrecord")))
    batches = trainer._batches()
    for _ in range(a.warmup):
        trainer.train_step(next(batches), trainer.step)
        trainer.step += 1
    profiler = ms.Profiler(output_path=os.path.join(d, "profile"))
    t0 = time.perf_counter()
    for _ in range(profiled):
        trainer.train_step(next(batches), trainer.step)
        trainer.step += 1
    wall = (time.perf_counter() - t0) / profiled
    profiler.analyse()
    profile = read_profile(os.path.join(d, "profile"), a.top)
    print(f"\nSFT step on {os.path.basename(a.model.rstrip('/'))}, {a.batch} rows in micro-batches of {a.micro_batch}, "
          f"rows padded to {offline_bench.pad_words(a)}, {a.threads} threads; {profiled} profiled steps")
    print(f"wall time {wall:.3f} s per step (profiled)")
    print_profile(profile, profiled, a.top)


if __name__ == "__main__":
    main()
