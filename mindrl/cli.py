"""`mindrl` command line entry point.

Each subcommand lives next to the code it drives and is imported only when used, so
``mindrl --help`` stays fast and msrun's scheduler process never imports mindspore early.
"""
import importlib
import os
import sys

# subcommand -> ("module:function", one-line help). Each function takes argv (list[str]) and
# returns an exit code.
COMMANDS = {
    "preprocess": ("mindrl.data.preprocess:cli_main", "tokenize json/jsonl/parquet data into MindRecord"),
    "train": ("mindrl.trainer.cli:train_main", "run RL training (GRPO, PPO, ...) from a yaml config"),
    "train-rm": ("mindrl.trainer.reward_training:cli_main", "train an outcome reward model on preference pairs"),
    "sft": ("mindrl.trainer.sft_training:cli_main", "supervised fine-tuning of a causal LM on prompt/response rows"),
    "dpo": ("mindrl.trainer.dpo_training:cli_main", "DPO of a causal LM on preference pairs against a frozen reference"),
    "export-strategy": ("mindrl.trainer.cli:export_strategy_main", "compile, write per-rank strategy files, exit"),
    "convert": ("mindrl.models.convert:cli_main", "convert checkpoints between HF safetensors and MindSpore"),
    "generate": ("mindrl.rollout.cli:generate_main", "generate text from a checkpoint (KV-cache rollout)"),
    "plan": ("mindrl.trainer.cli:plan_main", "check a training config and print what one step does, in numbers"),
    "evaluate": ("mindrl.trainer.cli:evaluate_main", "held-out accuracy of a checkpoint (greedy, or pass@k of samples)"),
    "plot": ("mindrl.trainer.report:cli_main", "draw one or more runs' metrics into a PNG"),
    "reseal": ("mindrl.trainer.checkpoint:reseal_main", "re-seal a checkpoint whose manifest is of an older format"),
}


def _usage() -> str:
    lines = ["usage: mindrl <command> [options]", "", "commands:"]
    for name, (_, help_text) in COMMANDS.items():
        lines.append(f"  {name:<16} {help_text}")
    lines.append("")
    lines.append("Run `mindrl <command> --help` for the options of one command.")
    return "\n".join(lines)


# commands that take SIGINT and SIGTERM on one thread (mindrl/trainer/interrupt.py): a run finishes its step, saves
# and says how to resume; a signal during start-up or evaluation stops at once with one line
_STARTING = "it was starting up: no step was trained or saved"
STOPPABLE = {"train": _STARTING, "train-rm": _STARTING, "sft": _STARTING, "dpo": _STARTING,
             "evaluate": "nothing was evaluated"}


def main(argv=None) -> int:
    """Run one subcommand. Exit status: 0 done, 2 a usage or config error (nothing was run), 1 a failure while
    running, 3 a training run that diverged (`mindrl train`), 130 and 143 after SIGINT and SIGTERM, 141 when the
    reader of the output went away."""
    if argv is None and len(sys.argv) > 1 and sys.argv[1] in STOPPABLE:
        # the command line itself (not a caller in its own process): before the subcommand's module imports
        # MindSpore, whose threads must inherit the blocked signals
        from mindrl.trainer.interrupt import install
        install(f"mindrl {sys.argv[1]}", STOPPABLE[sys.argv[1]])
    try:
        return _main(argv)
    except BrokenPipeError:
        # `mindrl ... | head`: the reader closed the pipe. Quiet, like other command-line tools; stdout is pointed
        # at /dev/null so that the interpreter's final flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _main(argv) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from mindrl import __version__
        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; the commands are {', '.join(COMMANDS)}"
        print(f"mindrl: unknown command {name!r}{hint} (mindrl --help says what each does)", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
