"""Hypothesis profiles, chosen with HYPOTHESIS_PROFILE (default: `default`).

`ci-repeat` is for the runs that repeat the suite on another build of the
same code (the ASan + UBSan pass, ThreadSanitizer, the wheel
round trip): far fewer examples, no deadline (sanitized builds are slow).
Tests that set max_examples themselves scale it with tests/examples.py's
examples(n), which reads the same variable.
"""
from hypothesis import settings

from examples import PROFILE

settings.register_profile("ci-repeat", max_examples=10, deadline=None)
settings.load_profile(PROFILE)


def pytest_report_header(config):
    return f"hypothesis profile: {PROFILE}"


# Where a run's time goes, by test file (set-up, call and tear-down of its
# tests together): printed after pytest's own slowest tests, so that a CI
# run that grows shows which file grew, and module-scoped fixtures (a
# server, a cluster) count with their file.
_FILE_SECONDS = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    top = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]
    terminalreporter.write_sep("=", f"slowest {len(top)} test files (of {len(_FILE_SECONDS)})")
    for path, seconds in top:
        terminalreporter.write_line(f"{seconds:8.2f}s {path}")
