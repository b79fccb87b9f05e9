"""A Hugging Face Hub cache made by hand, for the tests of Hub ids (tests/io/test_hub.py) and the
documentation's (tests/docs/test_docs.py) (no tests here)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def _blob_name(name: str, data: bytes) -> str:
    """What the Hub names a blob: the LFS sha256 of a weight file, else its git blob sha1."""
    if name.endswith((".safetensors", ".bin", ".msgpack")):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_to_cache(cache: Path, repo_id: str, files: dict[str, Path], commit: str = COMMIT) -> Path:
    """`files` (name -> source) as huggingface_hub caches a download of `repo_id` at `commit`
    (its documented layout); returns the snapshot directory."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for name, source in files.items():
        data = source.read_bytes()
        blob = repo / "blobs" / _blob_name(name, data)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
