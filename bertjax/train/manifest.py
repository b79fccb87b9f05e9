"""A checksum of every file of a saved checkpoint step, kept beside them, so that damage (a byte
flipped, a file cut short or gone) is found before any reader opens the step.

Orbax (TensorStore underneath) reads a damaged array as whatever its bytes now say, NaN
included, or fails in its own threads while other reads are still in flight; checking the files
first means a damaged step is skipped or refused without handing it to Orbax at all. The writer
(`bertjax.train.checkpoint.Checkpointer`) adds the manifest once Orbax has finished the step; a
step without one (saved before manifests existed, or by a writer killed in between) is read as
before and checked by its state digest.

No framework import.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bertjax.common.files import write_json_atomic
from bertjax.errors import InputError

MANIFEST = "bertjax_files.json"
_CHUNK = 1 << 22  # bytes hashed at a time: memory stays flat for any file size


class StepDamagedError(InputError):
    """A checkpoint step whose files do not match its manifest."""


def file_digest(path: Path) -> str:
    """blake2b-128 of a file's bytes, read in chunks."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _step_files(step_dir: Path) -> list[Path]:
    return sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(step_dir: str | Path) -> Path:
    """Record the size and digest of every file under `step_dir` in `step_dir/MANIFEST`."""
    step_dir = Path(step_dir)
    files = {str(p.relative_to(step_dir)): {"size": p.stat().st_size, "blake2b": file_digest(p)}
             for p in _step_files(step_dir)}
    path = step_dir / MANIFEST
    write_json_atomic(path, {"version": 1, "files": files})
    return path


def has_manifest(step_dir: str | Path) -> bool:
    return (Path(step_dir) / MANIFEST).is_file()


def verify_manifest(step_dir: str | Path) -> None:
    """Raise StepDamagedError naming the first file that is missing, of another size or other bytes
    than `step_dir/MANIFEST` recorded (or a manifest that cannot be read)."""
    step_dir = Path(step_dir)
    try:
        files = json.loads((step_dir / MANIFEST).read_bytes())["files"]
        entries = [(name, int(e["size"]), str(e["blake2b"])) for name, e in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise StepDamagedError(f"its file list {MANIFEST} cannot be read ({type(err).__name__})") from err
    for name, size, digest in entries:
        path = step_dir / name
        if not path.is_file():
            raise StepDamagedError(f"{name} is missing")
        if path.stat().st_size != size:
            raise StepDamagedError(f"{name} has {path.stat().st_size} bytes, {size} were written")
        if file_digest(path) != digest:
            raise StepDamagedError(f"{name} does not match its digest (its bytes changed)")
