"""Run test code in a fresh interpreter, so that a crash (a signal) fails
the test instead of killing pytest."""
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def run_isolated(code, timeout=600, env=None):
    """Run code (dedented; tests/ on the path; env: the environment, if
    not this one's); a signal or a non-zero exit fails the test.  Returns
    stdout.  Its output goes to temporary files, not pipes: a process a
    sanitizer stops may leave an llvm-symbolizer behind holding its stdout
    and stderr, and a pipe would then never reach its end."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        rc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r})\n" + textwrap.dedent(code)],
                            stdout=out, stderr=err, text=True, timeout=timeout, env=env).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert rc == 0, (f"subprocess exited with {rc}"
                     f"{' (signal %d)' % -rc if rc < 0 else ''}\n"
                     f"--- stdout (tail)\n{stdout[-3000:]}\n--- stderr (tail)\n{stderr[-8000:]}")
    return stdout
