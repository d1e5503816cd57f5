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
    "export-strategy": ("mindrl.trainer.cli:export_strategy_main", "compile, write per-rank strategy files, exit"),
    "convert": ("mindrl.models.convert:cli_main", "convert checkpoints between HF safetensors and MindSpore"),
    "generate": ("mindrl.rollout.cli:generate_main", "generate text from a checkpoint (KV-cache rollout)"),
    "evaluate": ("mindrl.trainer.cli:evaluate_main", "greedy accuracy of a checkpoint on a MindRecord/jsonl set"),
    "plot": ("mindrl.trainer.report:cli_main", "draw one or more runs' metrics into a PNG"),
}


def _usage() -> str:
    lines = ["usage: mindrl <command> [options]", "", "commands:"]
    for name, (_, help_text) in COMMANDS.items():
        lines.append(f"  {name:<16} {help_text}")
    lines.append("")
    lines.append("Run `mindrl <command> --help` for the options of one command.")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run one subcommand. Exit status: 0 done, 2 a usage or config error (nothing was run), 1 a failure while
    running, 3 a training run that diverged (`mindrl train`), 141 when the reader of the output went away."""
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
        print(f"mindrl: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
