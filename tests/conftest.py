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
