"""Compressed corpus files (.gz, .bz2, .zst), decompressed as they are read.

gzip and bzip2 come from the standard library, zstd from the `zstandard` package (an optional
dependency, imported when a .zst file is met). Memory stays bounded: the decompressed bytes are
read in small pieces, never whole. A corrupt or truncated file is a ValueError naming the file and
the command that checks it (`gzip -t`), found by `decompressed_errors` around any read.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from bertjax.data.formats import optional_import
from bertjax.errors import InputError

# suffix -> (name, the command that decompresses it to standard output)
COMPRESSIONS = {".gz": ("gzip", "gzip -dc"), ".bz2": ("bzip2", "bzip2 -dc"),
                ".zst": ("zstd", "zstd -dc")}
_CHUNK = 1 << 14  # compressed bytes decompressed at a time (.zst): its output is bounded by it


def compression(path: Path) -> str | None:
    """The compression suffix of `path` (".gz", ".bz2", ".zst"), or None for a plain file."""
    return path.suffix if path.suffix in COMPRESSIONS else None


def open_binary(path: Path) -> IO[bytes]:
    """The bytes of a corpus file, decompressed as its last suffix says, as a stream."""
    kind = compression(path)
    if kind is None:
        return open(path, "rb")
    if kind == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]  # a GzipFile reads bytes
    if kind == ".bz2":
        return bz2.open(path, "rb")
    zstandard = optional_import("zstandard", f"corpus file {path} (zstd-compressed)")
    return io.BufferedReader(_ZstdReader(open(path, "rb"), zstandard))


@contextlib.contextmanager
def decompression_errors(path: Path) -> Iterator[None]:
    """A corrupt or truncated compressed file, inside the block, becomes one ValueError naming
    it and how to check it."""
    kind = compression(path)
    zstd = sys.modules.get("zstandard")
    errors: tuple[type[BaseException], ...] = (EOFError, zlib.error, OSError) + (
        (zstd.ZstdError,) if zstd is not None else ())
    try:
        yield
    except errors as err:
        # an OSError with an errno is the disk or the path, not the data
        if kind is None or (isinstance(err, OSError) and err.errno is not None):
            raise
        name, _ = COMPRESSIONS[kind]
        raise InputError(
            f"corpus file {path} is not valid {name} data ({err}); check it with "
            f"`{name} -t {path.name}`, or, if it is not compressed, drop the {kind} suffix "
            "from its name"
        ) from None


def reencode_hint(path: Path, kind: str) -> str:
    """The shell command that re-encodes a compressed Latin-1 file as UTF-8."""
    name, cat = COMPRESSIONS[kind]
    return (f"`{cat} {path.name} | iconv -f latin1 -t utf-8 | {name} > fixed{''.join(path.suffixes)}`")


class _ZstdReader(io.RawIOBase):
    """The decompressed bytes of a .zst file (every frame), `_CHUNK` compressed bytes at a time.

    zstandard's own `stream_reader` returns a truncated file's bytes without an error; this
    reader raises EOFError when the file ends inside a frame."""

    def __init__(self, raw: IO[bytes], zstandard: Any) -> None:
        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._frame = self._new()
        self._in_frame = False  # part of a frame read, its end not yet
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._out:
            data = self._raw.read(_CHUNK)
            if not data:
                if self._in_frame:
                    raise EOFError("compressed file ended before the end of its last zstd frame")
                return 0
            self._out = memoryview(self._decompress(data))
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            out.append(self._frame.decompress(data))
            self._in_frame = not self._frame.eof
            data = b""
            if self._frame.eof:  # the next frame starts in what this one did not use
                data = self._frame.unused_data
                self._frame = self._new()
        return b"".join(out)

    def close(self) -> None:
        self._raw.close()
        super().close()
