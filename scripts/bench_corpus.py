"""`bertjax data` on a generated Parquet corpus at several sizes: input MB/s and peak RSS
(`python scripts/bench_corpus.py --sizes-mb 50 200`; see bertjax/bench/corpus.py)."""

from __future__ import annotations

import sys

from bertjax.bench.corpus import main

if __name__ == "__main__":
    sys.exit(main())
