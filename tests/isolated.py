"""Run test code in a fresh interpreter, so that a crash (a signal) fails
the test instead of killing pytest."""
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def run_isolated(code, timeout=600, env=None):
    """Run code (dedented; tests/ on the path; env: the environment, if
    not this one's); a signal or a non-zero exit fails the test.  Returns
    stdout."""
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r})\n" + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, (f"subprocess exited with {r.returncode}"
                               f"{' (signal %d)' % -r.returncode if r.returncode < 0 else ''}\n"
                               f"--- stdout (tail)\n{r.stdout[-3000:]}\n--- stderr (tail)\n{r.stderr[-8000:]}")
    return r.stdout
