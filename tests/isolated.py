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


def pandas_stand_in(folder):
    """A stand-in "pandas" package for a child process, whose path entry
    goes first on its sys.path: importing it appends the importer's stack
    (under its pid) to the marker file, then fails as an absent pandas
    does, which pyarrow allows -- so a test of "no pandas imported" holds
    whether or not pandas is installed.  Returns (the path entry, the
    marker file, not there until an import)."""
    fake = os.path.join(str(folder), "fake")
    os.makedirs(os.path.join(fake, "pandas"))
    marker = os.path.join(str(folder), "imported")
    with open(os.path.join(fake, "pandas", "__init__.py"), "w") as f:
        f.write("import os, traceback\n"
                f"open({marker!r}, 'a').write(f'--- pid {{os.getpid()}}\\n' + ''.join(traceback.format_stack()))\n"
                "raise ImportError('the test stand-in for pandas')\n")
    return fake, marker
