"""What every test of tests/messages checks (no tests here): the file system as it was, and one
error line."""

from __future__ import annotations

from pathlib import Path

from bertjax.cli.main import main


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under `root` (hidden ones too): a file's bytes, None for a directory."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def refused(argv: list[str], capsys) -> str:
    """`bertjax ARGV` in this process: exit status 2 and one line on stderr, no traceback (a
    refusal by the parser too); returns the line."""
    try:
        code = main(argv)
    except SystemExit as exited:  # argparse's
        code = exited.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, (code, err)
    (line,) = err.strip().splitlines()
    return line
