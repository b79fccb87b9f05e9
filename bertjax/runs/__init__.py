"""The run directory of `bertjax pretrain` as a schema: what a run holds and its configuration.

    layout.py   every path inside a run directory, what a directory holds before a run starts in
                it (`RunDir`, `Survey`), read-only
    config.py   a run's configuration (`RunConfig`: model, data, optim and train sections), as
                run_config.json and every checkpoint keep it
    recipes.py  a family's pre-training recipe (ModernBERT's): the options a run of it takes where
                it leaves them out

The loaders (`bertjax.io.runs`) and the jobs (`bertjax.jobs.pretrain`) both import it; it imports
neither, nor any framework: only `bertjax.data`, the model core's config, the training library's
framework-free settings (`bertjax.train.schedule`, `bertjax.train.choices`) and `bertjax.common`.
Which checkpoint steps a run has is a question for `bertjax.train.saved` (Orbax's format).
"""
