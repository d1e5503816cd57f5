"""Data layer: tokenizers, chat templates, preprocessing to MindRecord, and the sharded reader.

Names are imported on first use so ``import mindrl.data`` stays cheap and never pulls in
mindspore (msrun's scheduler process runs the entry script up to ``init()``).
"""
import importlib

_EXPORTS = {
    "load_tokenizer": "tokenizer", "Tokenizer": "tokenizer", "TokenizerError": "tokenizer",
    "render": "templates", "render_messages": "templates", "get_template": "templates",
    "list_templates": "templates", "Template": "templates", "TemplateError": "templates",
    "PromptDataset": "reader", "pad_batch": "reader",
    "preprocess": "preprocess", "load_dataset_config": "preprocess", "PreprocessError": "preprocess",
    "get_handler": "handlers", "list_handlers": "handlers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
