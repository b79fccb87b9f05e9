"""Checkpoints in and out. Formats know names and arrays; a model class says what it is
(`base_model_prefix`, `head_modules`) and comes in as an argument, so nothing here imports
`bertjax.model` or asks which class it was given. The public loading API with its default class
and `bertjax pretrain` run directories is `bertjax.pretrained`, one layer up.

    names.py       the name tables: Flax paths <-> PyTorch names <-> Hugging Face names (no framework)
    weights.py     a model's parameters as PyTorch-named numpy arrays and back, strictly;
                   `build_model`: checkpoint arrays into any class, heads as it declares them
    hf.py          Hugging Face directories: config.json + safetensors / pytorch_model.bin
                   as a config and named arrays (no JAX, no model class)
    models.py      whole models of any class in and out of Hugging Face directories
"""
