"""Pictures (matplotlib's Agg canvas; no pyplot, no global backend switch).

    curves.py      pre-training curves from a run's metrics log; confusion matrices
    attention.py   attention maps as PNG grids per layer and a self-contained HTML head view
    head_view.html the head view's page (package data), filled in by `attention.write_html`

It may import `bertjax.use` (attention maps), `bertjax.common` and matplotlib; the tasks and the
jobs draw with it.
"""
