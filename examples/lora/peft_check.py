#!/usr/bin/env python
"""Load a mindrl LoRA checkpoint's adapter with PEFT on its Hugging Face base, and its merged model with
transformers, and compare their logits on a few token sequences.

    python examples/lora/peft_check.py runs/tiny_math_lora/latest/ckpt

CHECKPOINT is a save directory (its newest checkpoint is read), an iter_* directory, or a policy/ directory. Needs
torch, transformers and peft (the test extras: `bash scripts/setup.sh --test`). Writes nothing.
"""
import json
import os
import sys

import numpy as np


def policy_dir(path: str) -> str:
    tracker = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.isfile(tracker):
        path = os.path.join(path, f"iter_{int(open(tracker).read()):07d}")
    return os.path.join(path, "policy") if os.path.isdir(os.path.join(path, "policy")) else path


def main():
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    part = policy_dir(sys.argv[1])
    adapter = os.path.join(part, "adapter")
    config = json.load(open(os.path.join(adapter, "adapter_config.json")))
    base_dir = config["base_model_name_or_path"]
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter).eval()
    merged = AutoModelForCausalLM.from_pretrained(part).eval()
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    ids = torch.tensor(np.random.default_rng(0).integers(3, merged.config.vocab_size, size=(4, 16)))
    with torch.no_grad():
        a, b, c = (m(input_ids=ids).logits for m in (peft_model, merged, base))
    print(f"adapter: r={config['r']}, lora_alpha={config['lora_alpha']}, on {', '.join(config['target_modules'])}; "
          f"base {base_dir}")
    print(f"max |logit difference|, PEFT (base + adapter) against the merged model: {(a - b).abs().max():.2e}")
    print(f"max |logit difference|, the merged model against the base: {(b - c).abs().max():.2e} (what training moved)")


if __name__ == "__main__":
    main()
