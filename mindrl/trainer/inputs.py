"""The tensors the training and scoring graphs take, by name.

A cell's inputs are the parameters of its ``construct`` (a loss cell's last one, ``denom``, is the updater's). Every
name is in :data:`INPUTS` with its dtype and width, so the updater, the compile dummies and the scoring passes build
the same tensors from one table, matched by name: an array the cell does not take, or one it lacks, is an error
that names both lists (never a silent truncation of a positional zip).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Dict, Mapping, Tuple

import numpy as np
from mindspore import Tensor


@dataclass(frozen=True)
class InputSpec:
    dtype: str      # numpy dtype of the tensor
    width: str      # its second axis: "sequence" (prompt + response), "response", "loss" (the positions a loss
                    # scores, trainer/sft.py loss_positions: at most the sequence) or "row" (none: one per row)


INPUTS: Dict[str, InputSpec] = {
    # an experience's rows (trainer/experience.py)
    "input_ids": InputSpec("int32", "sequence"),
    "attention_mask": InputSpec("int32", "sequence"),
    "response_mask": InputSpec("float32", "response"),
    "loss_mask": InputSpec("float32", "response"),
    "old_log_probs": InputSpec("float32", "response"),
    "ref_log_probs": InputSpec("float32", "response"),
    "advantages": InputSpec("float32", "response"),
    "old_values": InputSpec("float32", "response"),
    "returns": InputSpec("float32", "response"),
    "token_rewards": InputSpec("float32", "response"),
    # supervised rows (PPO-ptx, SFT): token ids and the positions of the tokens the loss scores
    "sft_ids": InputSpec("int32", "sequence"),
    "sft_positions": InputSpec("int32", "loss"),
    "sft_segments": InputSpec("int32", "sequence"),  # packed rows (`mindrl sft`, data.packing): each token's row
    # preference pairs (train-rm)
    "chosen_ids": InputSpec("int32", "sequence"),
    "chosen_mask": InputSpec("int32", "sequence"),
    "rejected_ids": InputSpec("int32", "sequence"),
    "rejected_mask": InputSpec("int32", "sequence"),
    "margin": InputSpec("float32", "row"),
    # the response tokens' positions of each side (DPO)
    "chosen_positions": InputSpec("int32", "loss"),
    "rejected_positions": InputSpec("int32", "loss"),
    # the reference's summed response log-probs of each pair (DPO)
    "ref_chosen_logps": InputSpec("float32", "row"),
    "ref_rejected_logps": InputSpec("float32", "row"),
}

_UPDATER_ARGS = ("denom",)  # what the updater passes after the named inputs


def input_names(cell, trailing: Tuple[str, ...] = ()) -> Tuple[str, ...]:
    """The named inputs of ``cell`` (its construct's parameters, without ``trailing`` ones such as ``denom``).
    Raises TypeError for a parameter :data:`INPUTS` does not know, or a missing trailing one."""
    params = tuple(inspect.signature(getattr(cell, "construct", cell)).parameters)  # a Cell, or a plain function
    if trailing and params[-len(trailing):] != trailing:
        raise TypeError(f"{type(cell).__name__}.construct{params}: expected to end with {trailing}")
    names = params[:len(params) - len(trailing)]
    unknown = [n for n in names if n not in INPUTS]
    if unknown:
        raise TypeError(f"{type(cell).__name__}.construct takes {', '.join(unknown)}, not in trainer/inputs.py's "
                        f"INPUTS: add it there with its dtype and width")
    return names


def loss_input_names(cell) -> Tuple[str, ...]:
    """A loss cell's named inputs: its construct's parameters before the updater's ``denom``."""
    return input_names(cell, _UPDATER_ARGS)


def ordered(names: Tuple[str, ...], arrays: Mapping[str, np.ndarray], what: str = "inputs") -> list:
    """``arrays`` in the order of ``names``, each in its table dtype; a missing or an extra name is an error."""
    missing, extra = [n for n in names if n not in arrays], [n for n in arrays if n not in names]
    if missing or extra:
        raise KeyError(f"{what}: the graph takes ({', '.join(names)}); "
                       + (f"missing {', '.join(missing)}" if missing else "")
                       + ("; " if missing and extra else "") + (f"not taken: {', '.join(extra)}" if extra else ""))
    return [np.asarray(arrays[n], INPUTS[n].dtype) for n in names]


def dummy_inputs(names: Tuple[str, ...], rows: int, sequence: int, response: int) -> Dict[str, np.ndarray]:
    """Zeros of the right dtypes and shapes: what a graph is compiled for before real data arrives."""
    widths = {"sequence": (rows, sequence), "response": (rows, response), "loss": (rows, sequence), "row": (rows,)}
    return {n: np.zeros(widths[INPUTS[n].width], INPUTS[n].dtype) for n in names}


def grouped_dummy_inputs(names: Tuple[str, ...], groups: int, group: int, prompt: int,
                         response: int) -> Dict[str, np.ndarray]:
    """:func:`dummy_inputs` of packed groups (trainer/actor_graphs.py ``pack_arrays``): ``groups`` rows of
    prompt + group x response tokens, the per-response inputs [groups, group, response]."""
    arrays = dummy_inputs(names, groups, prompt + group * response, group * response)
    return {n: a.reshape(groups, group, response) if INPUTS[n].width == "response" else a for n, a in arrays.items()}


def tensors(names: Tuple[str, ...], arrays: Mapping[str, np.ndarray], what: str = "inputs") -> list:
    """:func:`ordered` as MindSpore tensors."""
    return [Tensor(a) for a in ordered(names, arrays, what)]
