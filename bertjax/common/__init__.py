"""Framework-free building blocks every layer may use (the bottom layer beside `bertjax.errors`):

    files.py     files written aside and renamed (atomic), reading text with clear errors, and
                 the one rule for what a command may write where
    console.py   progress lines on standard error
    lazy.py      flat public names that import their module on first use (PEP 562)
    fields.py    how a setting is declared (`option_field`, the named ranges): imports nothing
    options.py   settings dataclasses as options: one field, one option, one flag style
    input_overlap.py  whether an output path is, or lies inside, one of a command's inputs
    caches.py    where bertjax's caches live ($BERTJAX_COMPILE_CACHE, $BERTJAX_DATA_CACHE)

It imports nothing of bertjax but `bertjax.errors`, and no framework (no JAX, no PyTorch).
"""
