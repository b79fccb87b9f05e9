"""MkDocs hook: the command-line reference is the commands' own `--help`, rendered at build time
(`<!-- cli-help: fill-mask -->` becomes that command's help in a code block), so the page cannot
drift from the parser."""

from __future__ import annotations

import contextlib
import io
import re

MARKER = re.compile(r"<!-- cli-help: (?P<command>[a-z -]+) -->")


def command_help(command: str) -> str:
    """The `--help` text of `bertjax COMMAND` (sub-commands too: "bench train")."""
    from bertjax.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*command.split(), "--help"])
    return out.getvalue().rstrip()


def on_page_markdown(markdown: str, **_: object) -> str:
    return MARKER.sub(lambda m: f"```text\n{command_help(m['command'])}\n```", markdown)
