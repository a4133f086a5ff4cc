"""A file that changes under a reader never kills it (issue 47, item 3).

Sublist.open maps an image file; a file cut shorter under a mapping used to
kill the reading process with SIGBUS.  csrc/base/fs_fault.c puts zeros over
a guarded mapping when a read faults, and the Cython layer checks the
mapping's last bytes after every call: the call raises ImageChangedError in
the calling thread, and so does every later one.

The children here match from several threads -- match, a cached match,
match_many on native threads, match_many(also=) both ways -- while the
parent truncates the file, or copies another image over it in place
(shutil.copyfile, cp).  Each child must exit normally, every answer it got
must be the old one, and every thread must have seen the error.  Without
the guard the child dies of SIGBUS; without the after-call check the cached
path goes on answering from a file that is gone.  A last child checks that
every other SIGBUS still reaches the handler that was there before
(faulthandler's) and kills the process.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import topicmatch
from topicmatch import ImageChangedError, Sublist, TopicmatchError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a mapped file cannot be truncated on Windows")

N_FILTERS = 40_000
SUBJECTS = [f"a.{i}.b" for i in range(0, N_FILTERS, 97)] + [f"x.q.{i}" for i in range(0, N_FILTERS, 89)] + ["x.q.none"]


def _image(path, offset=0, n=N_FILTERS):
    """An image of 2n filters (literal and wildcard), ids shifted by offset:
    another offset, another image of about the same size."""
    sl = Sublist("nats")
    sl.insert_many([f"a.{i}.b" for i in range(n)], [i + offset for i in range(n)])
    sl.insert_many([f"x.*.{i}" for i in range(n)], [10 ** 6 + i + offset for i in range(n)])
    sl.save(path)
    return path


def _also_image(path):
    sl = Sublist("nats")                      # no subscription in common with _image's
    sl.insert_many([f"a.{i}.b" for i in range(0, N_FILTERS, 50)], [-1 - i for i in range(0, N_FILTERS, 50)])
    sl.save(path)
    return path


CHILD = textwrap.dedent(r"""
    import json, sys, threading, time
    import topicmatch
    from topicmatch import ImageChangedError, Sublist
    path, also_path, subjects = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    img = Sublist.open(path, verify=False)
    cached = Sublist.open(path, verify=False, cache_size=4096)
    other = Sublist.open(also_path, verify=False)
    ops = {
        "match": lambda: [img.match(s).subs for s in subjects],
        "cached match": lambda: [cached.match(s).subs for s in subjects],
        "match_many threads": lambda: img.match_many(subjects, threads=3).sub_ids.tolist(),
        "match_many also=": lambda: img.match_many(subjects, threads=2, also=other).sub_ids.tolist(),
        "also=changed": lambda: other.match_many(subjects, also=img).sub_ids.tolist(),
    }
    if len(sys.argv) > 4 and sys.argv[4] == "writes":
        # The paths besides matching, on images of their own (a change
        # through one would change the answers the others expect): insert
        # and remove copy a node out of the mapping into the live part
        # (copy_subs), to_bytes of a changed image walks the whole mapping
        # (fs_image_thaw), reverse_match reads every table entry.
        writable = Sublist.open(path, verify=False)
        changed = Sublist.open(path, verify=False)
        changed.insert("a.1.b", -1)
        n_filters = int(sys.argv[5])
        turn = iter(range(10 ** 9))

        def insert_remove():
            out = []
            for _ in range(16):
                i = next(turn) * 7919 % n_filters          # a filter not copied out yet, most times
                for f, sub in ((f"a.{i}.b", i), (f"x.*.{i}", 10 ** 6 + i)):
                    out.append(writable.insert(f, -7))          # the node copied to the live part
                    for gone in (-7, sub):
                        try:
                            writable.remove(f, gone)
                        except KeyError:                        # an answer from changed bytes
                            out.append(("missing", gone))
                    out.append(writable.insert(f, sub))
            return out

        ops.update({
            "insert remove": insert_remove,
            "to_bytes": lambda: [len(changed.to_bytes()), len(changed.to_bytes(version=2)), len(img.to_bytes())],
            "stats len": lambda: [len(img), {k: v for k, v in img.stats().items() if k in
                                            ("subscriptions", "nodes", "mapped_bytes", "live_subscriptions")},
                                  img.has_interest("a.5.b")],        # a call that checks the file
            "reverse_match": lambda: [img.reverse_match("a.*.b")[::997], img.reverse_match("x.q.5"),
                                      img.reverse_match(">")[::1999]],
        })
    expected = {name: op() for name, op in ops.items()}
    for _ in range(3):                         # the cache warm: the cached path answers from it
        ops["cached match"]()
    report = {name: {"old": 0, "error": None, "wrong": None, "other": None} for name in ops}
    start = threading.Barrier(len(ops) + 1)

    def run(name):
        r = report[name]
        start.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                got = ops[name]()
            except ImageChangedError as e:
                r["error"] = str(e)
                try:                           # and every later call
                    ops[name]()
                    r["other"] = "a call after the error answered"
                except ImageChangedError:
                    pass
                return
            except BaseException as e:
                r["other"] = f"{type(e).__name__}: {e}"
                return
            if got != expected[name]:
                r["wrong"] = f"{got[:5]!r}... != {expected[name][:5]!r}..."
                return
            r["old"] += 1

    threads = [threading.Thread(target=run, args=(name,)) for name in ops]
    for t in threads:
        t.start()
    start.wait()
    # ready once every op has answered at least once (a loaded machine
    # may take a while for the heavier ones): each meets the change in its loop
    until = time.monotonic() + 20
    while time.monotonic() < until and not all(r["old"] or r["error"] or r["other"] or r["wrong"]
                                               for r in report.values()):
        time.sleep(0.01)
    print("ready", flush=True)
    for t in threads:
        t.join()
    try:
        img.to_bytes()
        after = "to_bytes answered"
    except ImageChangedError:
        after = "raised"
    print(json.dumps({"report": report, "faults": topicmatch._core._mapping_faults(), "to_bytes": after}), flush=True)
""")


def _run_child(tmp_path, change, writes=False):
    """Start the child on a fresh image, let it match (and with writes,
    insert, remove, dump and reverse-match too), change the file with
    change(path) and return (returncode, report, stderr)."""
    path = _image(str(tmp_path / "live.img"))
    also = _also_image(str(tmp_path / "also.img"))
    extra = ["writes", str(N_FILTERS)] if writes else []
    child = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", CHILD, path, also, json.dumps(SUBJECTS)] + extra,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line == "ready\n", (line, child.stderr.read())
        time.sleep(0.3)                        # every thread in its loop
        change(path)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, f"the child died ({child.returncode}; -{signal.SIGBUS} is SIGBUS):\n{err}"
    return json.loads(out.splitlines()[-1]), err


# The child's ops besides matching (writes=True): any answer is allowed,
# and ImageChangedError; only a crash, or another error, is not.
WRITE_OPS = ("insert remove", "to_bytes", "stats len", "reverse_match")


def _check(result):
    report = result["report"]
    for name, r in report.items():
        if name in WRITE_OPS:
            assert r["other"] is None, (name, r)
            assert r["old"] > 0 or r["error"] is not None, (name, r)
            continue
        assert r["wrong"] is None, (name, r)
        assert r["other"] is None, (name, r)
        assert r["old"] > 0, (name, r)         # it was matching when the file changed
        assert r["error"] is not None, (name, r)
        assert "live.img' was truncated or rewritten in place after it was opened" in r["error"], r["error"]
        assert "never rewrite one in place" in r["error"], r["error"]
    assert result["to_bytes"] == "raised"
    return report


@pytest.mark.parametrize("size", [0, 4096, "half"])
def test_truncated_under_readers(tmp_path, size):
    def truncate(path):
        os.truncate(path, os.path.getsize(path) // 2 if size == "half" else size)

    result, _ = _run_child(tmp_path, truncate)
    report = _check(result)
    assert result["faults"] > 0                # the guard turned a fault into zeros
    # at least the thread whose read faulted says so
    assert any("turned into zeros" in r["error"] for r in report.values()), report


# "larger": the new image's offsets reach past the old mapping.  When the
# copy lands with no read faulting in the window it opened (truncate, then
# write), a walk meets the new bytes: every offset and count of a mapped
# image is read once, checked against the mapping and used only as checked
# (fs_once8 in csrc/index/fs_layout.h), so the call answers wrongly or
# finds damage, never reads outside, and the after-call check raises.
@pytest.mark.parametrize("how", ["copyfile", "cp"])
@pytest.mark.parametrize("other", ["same size", "smaller", "larger"])
def test_other_image_copied_over_in_place(tmp_path, how, other):
    n = {"same size": N_FILTERS, "smaller": N_FILTERS // 4, "larger": N_FILTERS * 2}[other]
    new = _image(str(tmp_path / "new.img"), offset=7, n=n)

    def copy_over(path):
        if how == "copyfile":
            shutil.copyfile(new, path)         # opens path with O_TRUNC: the same inode, rewritten
        else:
            subprocess.run(["cp", new, path], check=True)
        assert os.path.getsize(path) == os.path.getsize(new)

    # the larger image's offsets reach past the old mapping's end: the
    # walks that copy, dump and iterate run too (a crash is the failure)
    result, _ = _run_child(tmp_path, copy_over, writes=other == "larger")
    report = _check(result)
    if other == "larger":
        assert set(WRITE_OPS) <= set(report), report
    # Either a read met the file while it was short (zeros) or the calls
    # saw the new bytes: both raise (_check).


def test_rewritten_without_a_fault_raises(tmp_path):
    """The file's bytes changed in place without a read faulting (the same
    size, written over): the next call raises, in this process."""
    path = _image(str(tmp_path / "live.img"), n=2000)
    img = Sublist.open(path, verify=False)
    assert img.match("a.5.b").subs == [5]
    with open(_image(str(tmp_path / "new.img"), offset=7, n=2000), "rb") as f:
        new = f.read()
    assert len(new) == os.path.getsize(path)
    fd = os.open(path, os.O_WRONLY)           # no O_TRUNC: never shorter, never a fault
    try:
        os.pwrite(fd, new, 0)
    finally:
        os.close(fd)
    for call in (lambda: img.match("a.5.b"), lambda: img.match_many(["a.5.b"]), lambda: img.has_interest("a.5.b"),
                 lambda: img.num_interest("a.5.b"), lambda: img.reverse_match("a.*.b"), img.to_bytes,
                 lambda: img.insert("c.d", 1)):
        with pytest.raises(ImageChangedError, match=r"rewritten in place after it was opened \(its bytes are no") as e:
            call()
        assert e.value.path == path
    assert issubclass(ImageChangedError, TopicmatchError) and issubclass(ImageChangedError, OSError)
    assert topicmatch.ImageChangedError is ImageChangedError


def test_replaced_by_rename_keeps_answering(tmp_path):
    """The way to deploy: a new file renamed over the path.  The opened
    index goes on answering from the old file, with no error."""
    path = _image(str(tmp_path / "live.img"), n=2000)
    img = Sublist.open(path, verify=False)
    _image(str(tmp_path / "live.img"), offset=7, n=2000)     # save(): a temporary file renamed over
    assert img.match("a.5.b").subs == [5]
    assert Sublist.open(path).match("a.5.b").subs == [12]


OTHER_FAULT = textwrap.dedent(r"""
    import mmap, os, signal, sys
    from topicmatch import Sublist
    image, victim, how = sys.argv[1:4]
    img = Sublist.open(image, verify=False)     # the guard's handler is installed now
    assert img.match("a.5.b").subs == [5]
    if how == "kill":
        os.kill(os.getpid(), signal.SIGBUS)     # sent, not a fault
    else:                                        # a mapping of our own, not an image: cut, then read
        with open(victim, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        os.truncate(victim, 0)
        print(mm[len(mm) - 1], flush=True)
    print("survived", flush=True)
""")


@pytest.mark.parametrize("how", ["fault", "kill"])
def test_other_sigbus_still_kills_through_faulthandler(tmp_path, how):
    """Every SIGBUS that is not a read of a guarded image goes on to the
    handler that was there before (here faulthandler's, which prints the
    traceback) and kills the process, as without the guard."""
    image = _image(str(tmp_path / "live.img"), n=200)
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"x" * 3 * 4096)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", OTHER_FAULT, image, str(victim), how],
                          capture_output=True, text=True, timeout=60)
    assert "survived" not in proc.stdout
    assert "Fatal Python error: Bus error" in proc.stderr, proc.stderr
    if "asan" in os.environ.get("LD_PRELOAD", ""):      # libasan.so, libclang_rt.asan-*.so
        # under ASan (make test-sanitize) the handler before faulthandler's
        # is ASan's: it reports the signal and exits 1
        assert proc.returncode != 0, (proc.returncode, proc.stdout, proc.stderr)
    else:
        assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stdout, proc.stderr)
