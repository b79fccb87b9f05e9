"""pytest plugin for a run that may be killed (a lent GPU's time limit): each test's start, and
each failure's traceback as soon as it happens, not in the summary at the end.

    PYTHONPATH=scripts/dev pytest -p pytest_live_report ...
"""

from __future__ import annotations

import time

import pytest

START = time.monotonic()
CONFIG: list[pytest.Config] = []  # the session's, set by pytest_configure


def pytest_configure(config: pytest.Config) -> None:
    """Keep the configuration: the hooks below write through its terminal reporter."""
    CONFIG.append(config)


def _say(line: str) -> None:
    reporter = CONFIG[0].pluginmanager.get_plugin("terminalreporter") if CONFIG else None
    if reporter is not None:
        reporter.write_line(line, flush=True)


def _clock() -> str:
    return f"[{time.monotonic() - START:7.1f} s]"


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    """A test starts: its name and the time since the session began."""
    _say(f"{_clock()} start {nodeid}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A test's outcome (and any failing phase's traceback) as soon as it is known."""
    if report.failed or report.when == "call":
        _say(f"{_clock()} {report.outcome} {report.nodeid} ({report.when}, {report.duration:.1f} s)")
    if report.failed:
        _say(report.longreprtext[-6000:])
