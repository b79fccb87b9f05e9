"""Checkpoints in and out. Formats know names and arrays; a model class says what it is
(`base_model_prefix`, its head weights), so nothing here asks which class it was given.

    names.py       the name tables: Flax paths <-> PyTorch names <-> Hugging Face names (no framework)
    weights.py     a model's parameters as PyTorch-named numpy arrays and back, strictly
    hf.py          Hugging Face directories: config.json + safetensors / pytorch_model.bin
    pretrained.py  `from_pretrained`: a Hugging Face directory or a `bertjax pretrain` run
    files.py       atomic writes: a file or directory is written aside, then renamed (no framework)
"""
