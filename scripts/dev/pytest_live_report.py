"""pytest plugin for a run that may be killed (a lent GPU's time limit): each test's start, and
each failure's traceback as soon as it happens, not in the summary at the end.

    PYTHONPATH=scripts/dev pytest -p pytest_live_report ...
"""

from __future__ import annotations

import time

import pytest

START = time.monotonic()


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line, flush=True)


def _clock() -> str:
    return f"[{time.monotonic() - START:7.1f} s]"


@pytest.hookimpl
def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    _say(CONFIG[0], f"{_clock()} start {nodeid}")


@pytest.hookimpl
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed or report.when == "call":
        _say(CONFIG[0], f"{_clock()} {report.outcome} {report.nodeid} ({report.when}, "
                        f"{report.duration:.1f} s)")
    if report.failed:
        _say(CONFIG[0], report.longreprtext[-6000:])


CONFIG: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    CONFIG.append(config)
