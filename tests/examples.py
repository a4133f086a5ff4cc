"""How many examples a Hypothesis test draws: `examples(n)`, `steps(n)`.

The suite's first run (`make test`'s plain pass, `make test-engine`, a
developer's `pytest`) draws the full n.  The repeat runs -- the same tests
again under the sanitizers, ThreadSanitizer and in the wheel round trip,
which are there to check a different build, not to search new inputs -- set
HYPOTHESIS_PROFILE=ci-repeat (the Makefile and tools/wheels.py do; the
profile is registered in tests/conftest.py) and draw a tenth: never fewer
than 5 (or n, when n is smaller), so every property still runs on random
inputs, including the examples the first run saved in .hypothesis/.
"""
import os

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
REPEAT = PROFILE == "ci-repeat"


def examples(n):
    """max_examples for a test that draws n examples in the first run."""
    return max(min(n, 5), n // 10) if REPEAT else n


def steps(n):
    """stateful_step_count for a machine that takes n steps in the first run."""
    return max(min(n, 10), n // 2) if REPEAT else n
