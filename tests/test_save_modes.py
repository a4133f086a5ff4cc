"""The mode of saved images (issue 48 item 1).

save() wrote its temporary file with mkstemp, mode 0600, and renamed it
over the path: a worker running as another user (a pre-fork server that
drops privileges) could not open the image.  Now a saved file has the mode
a plain open() gives a new file, 0o666 less the umask, or exactly the
mode= passed.  The umasks are set in a child process (the umask is the
process's, and other tests run threads), except briefly in the test of the
other user: a forked child that drops to uid/gid 65534 (nobody), which
needs root, as CI runs.
"""
import os
import subprocess
import sys
import tempfile

import pytest

import topicmatch

NOBODY = 65534
UMASKS = (0o022, 0o077, 0o002)


def _shared_folder():
    """A folder every user can reach (pytest's tmp_path is 0700 under root)."""
    folder = tempfile.mkdtemp(prefix="topicmatch-modes-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.chmod(folder, 0o755)
    return folder


def _index():
    sl = topicmatch.Sublist("mqtt")
    sl.insert("a/+", 1)
    sl.insert("a/b", 2)
    return sl


# -- the mode under each umask, in a child ----------------------------------------
CHILD = r"""
import os, stat, sys, json
import topicmatch
umask, folder = int(sys.argv[1], 8), sys.argv[2]
os.umask(umask)
out = {}
with open(os.path.join(folder, "plain"), "w"):
    pass
out["plain"] = stat.S_IMODE(os.stat(os.path.join(folder, "plain")).st_mode)
sl = topicmatch.Sublist("mqtt")
sl.insert("a/+", 1)
sl.save(os.path.join(folder, "default.img"))
sl.save(os.path.join(folder, "given.img"), mode=0o640)
sl.save(os.path.join(folder, "given.img"), mode=0o644)           # replaced: the new file's mode
sl.save(os.path.join(folder, "default.img"))                     # replaced again, by default
for name in ("default.img", "given.img"):
    out[name] = stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
try:
    import topicmatch.amqtt as am
except ImportError:
    pass
else:
    am.save_routing_image(os.path.join(folder, "routes.img"), {"c1": [("a/#", 1)]})
    out["routes.img"] = stat.S_IMODE(os.stat(os.path.join(folder, "routes.img")).st_mode)
out["left"] = sorted(os.listdir(folder))
print(json.dumps(out))
"""


@pytest.mark.parametrize("umask", UMASKS)
def test_saved_files_have_the_mode_open_gives(tmp_path, umask):
    import json
    r = subprocess.run([sys.executable, "-c", CHILD, oct(umask), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    want = 0o666 & ~umask
    assert got["plain"] == want                       # what open() gives, as the kernel says
    assert got["default.img"] == want, oct(got["default.img"])
    assert got["given.img"] == 0o644                  # mode= exactly, whatever the umask
    if "routes.img" in got:
        assert got["routes.img"] == want
    # No temporary left beside them.
    assert [n for n in got["left"] if n.endswith(".tmp")] == []


# -- mode= checked ----------------------------------------------------------------
def test_mode_argument_is_checked(tmp_path):
    sl = _index()
    path = tmp_path / "x.img"
    for bad in ("644", 6.0, True):
        with pytest.raises(TypeError, match="mode must be int or None"):
            sl.save(path, mode=bad)
    for bad in (-1, 0o1000, 0o4755):
        with pytest.raises(ValueError, match="mode must be permission bits"):
            sl.save(path, mode=bad)
    assert os.listdir(tmp_path) == []                 # nothing made before the check
    sl.save(path, mode=0o600)
    assert os.stat(path).st_mode & 0o777 == 0o600


# -- errors name the user's path ----------------------------------------------------
def test_saving_into_a_missing_folder_names_the_path(tmp_path):
    path = str(tmp_path / "no-such-folder" / "x.img")
    with pytest.raises(FileNotFoundError) as e:
        _index().save(path)
    assert e.value.filename == path
    assert ".tmp" not in str(e.value) and path in str(e.value)


def test_saving_over_a_folder_names_the_path_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a-folder"
    path.mkdir()
    with pytest.raises(OSError) as e:
        _index().save(path)
    assert e.value.filename == str(path)
    assert ".tmp" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["a-folder"]


# -- another user opens it ------------------------------------------------------------
def _open_as_nobody(path):
    """Fork; the child drops to uid/gid 65534 and opens and matches the
    image.  'ok', or the child's error's class name."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # the child: never returns
        code = 1
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                got = topicmatch.Sublist.open(path).match("a/b").subs
                msg = "ok" if got == [1, 2] else f"wrong answer {got}"
            except Exception as e:                    # noqa: BLE001 - reported to the parent
                msg = type(e).__name__
            os.write(wfd, msg.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        msg = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return msg


@pytest.mark.skipif(not hasattr(os, "setuid") or os.geteuid() != 0,
                    reason="opening as another user needs root (CI runs as root)")
def test_another_user_opens_a_saved_image():
    folder = _shared_folder()
    old = os.umask(0o022)
    try:
        default = os.path.join(folder, "default.img")
        _index().save(default)
        assert _open_as_nobody(default) == "ok"
        # The check can fail: a file only its owner reads is refused to
        # the other user (what every save() gave before).
        os.umask(0o077)
        private = os.path.join(folder, "private.img")
        _index().save(private)
        assert os.stat(private).st_mode & 0o777 == 0o600
        assert _open_as_nobody(private) == "PermissionError"
        # ...unless mode= says otherwise.
        shared = os.path.join(folder, "shared.img")
        _index().save(shared, mode=0o644)
        assert _open_as_nobody(shared) == "ok"
    finally:
        os.umask(old)
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


# -- durable=False: the same file, without the flush to disk ----------------------

def test_a_save_that_is_not_durable_writes_the_same_image(tmp_path):
    """durable=False (a host's cache of images, rebuilt when damaged) skips
    the fsync of the file and of its rename, nothing else: the same bytes,
    the same mode, the same atomic rename, an image that opens checked."""
    sl = _index()
    for i in range(2000):
        sl.insert(f"t/{i}/+", 10 + i)
    sl.save(tmp_path / "durable.img")
    sl.save(tmp_path / "cache.img", durable=False)
    sl.save(tmp_path / "cache.img", mode=0o640, durable=False)       # over the first: replaced
    with open(tmp_path / "durable.img", "rb") as a, open(tmp_path / "cache.img", "rb") as b:
        assert a.read() == b.read()
    assert os.stat(tmp_path / "cache.img").st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["cache.img", "durable.img"]     # no temporary left
    got = topicmatch.Sublist.open(tmp_path / "cache.img", verify=True)
    assert got.match("t/7/x").subs == [17]


# -- durable=True: on disk when save returns -------------------------------------

class _CacheStat:
    """Linux's cachestat(2) (6.5+): how many of a file's pages in the page
    cache are dirty or being written back.  None where it is missing."""
    SYSCALL = 451                   # the same number on every architecture (new syscall table)

    def __init__(self):
        import ctypes
        import ctypes.util
        self.ctypes = ctypes
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)

    def __call__(self, path):
        ct = self.ctypes
        rng = (ct.c_uint64 * 2)(0, 0)           # offset 0, length 0: to the end of the file
        out = (ct.c_uint64 * 5)()               # nr_cache, nr_dirty, nr_writeback, evicted, recently
        fd = os.open(path, os.O_RDONLY)
        try:
            rc = self.libc.syscall(ct.c_long(self.SYSCALL), ct.c_int(fd), rng, out, ct.c_uint(0))
        finally:
            os.close(fd)
        return None if rc != 0 else (out[0], out[1], out[2])


def _unwritten_pages():
    """A function: path -> that file's pages not yet on disk (dirty or being
    written), or a skip where that cannot be told: no cachestat (not Linux,
    a kernel before 6.5), or a file system that keeps its pages dirty
    (tmpfs), which an fsync'd file of its own shows."""
    if not sys.platform.startswith("linux"):
        pytest.skip("cachestat(2) is Linux's")
    stat = _CacheStat()
    folder = tempfile.mkdtemp(prefix="topicmatch-durable-", dir=os.environ.get("TMPDIR"))
    probe = os.path.join(folder, "probe")
    try:
        with open(probe, "wb") as f:
            f.write(b"x" * 65536)
            f.flush()
            os.fsync(f.fileno())
        got = stat(probe)
    finally:
        os.unlink(probe)
        os.rmdir(folder)
    if got is None:
        pytest.skip("no cachestat(2) here")
    if got[1] or got[2]:
        pytest.skip("this file system keeps an fsync'd file's pages dirty")
    return lambda path: (lambda s: s[1] + s[2])(stat(path))


def test_a_durable_save_leaves_no_page_unwritten():
    """save() and build_image() durable: every page of the file is on disk
    when they return (fs_filebuf_close: fsync, with no msync before it on
    Linux, whose page cache tracks the pages written through the file's
    mapping).  The header's page is written last and never handed to the
    disk early, so a close without its flush leaves it dirty."""
    unwritten = _unwritten_pages()
    folder = tempfile.mkdtemp(prefix="topicmatch-durable-", dir=os.environ.get("TMPDIR"))
    try:
        sl = _index()
        for i in range(20000):
            sl.insert(f"t/{i}/+", 10 + i)
        path = os.path.join(folder, "saved.img")
        sl.save(path)
        assert unwritten(path) == 0
        built = os.path.join(folder, "built.img")
        topicmatch.build_image(built, [f"t/{i}/+" for i in range(20000)], list(range(20000)),
                               dialect="mqtt").close()
        assert unwritten(built) == 0
        with open(path, "rb") as f:
            assert topicmatch.Sublist.from_bytes(f.read()).match("t/7/x").subs == [17]
    finally:
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
