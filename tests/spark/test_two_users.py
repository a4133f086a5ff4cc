"""The attacks of issue 43, item 3, each run as two real uids: an attacker and
a victim, forked children that setuid (so these tests need root, as CI runs
them; elsewhere they skip, naming why).  No JVM: each attack is on the
directories, files and locks images and the logging configuration live in.

Shared temporary directory: a fresh sticky, world-writable directory
stands in for /tmp, so the children can reach it (pytest's own tmp_path is
private to root)."""
import errno
import os
import pickle
import shutil
import signal
import stat
import tempfile

import pytest

import topicmatch

# Imported here, before any fork: a child running as another uid may not
# be able to read the interpreter's own files to import them.
from topicmatch.spark import image_store, images, session  # noqa: E402

pytestmark = pytest.mark.skipif(
    not hasattr(os, "setuid") or os.geteuid() != 0,
    reason="two-uid attack tests fork children that setuid: run the tests as root (CI does)")

VICTIM, ATTACKER, OTHER = 64501, 64502, 64503      # uids no account uses
GROUP = 64510                                       # the shared image_dir's group


def as_user(uid, fn, *args, groups=(), umask=0o022, timeout=30):
    """fn(*args) in a forked child running as uid (gid = uid, plus groups):
    -> ("ok", its value) or ("raised", the exception's class names, its
    class's first, message).  A
    child still running after `timeout` seconds is killed: ("hung",)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:    # pragma: no cover - the child
        try:
            os.close(r)
            signal.alarm(timeout)
            os.setgroups(list(groups))
            os.setgid(uid)
            os.setuid(uid)
            os.umask(umask)
            os.environ.pop("TOPICMATCH_IMAGE_DIR", None)
            try:
                out = ("ok", fn(*args))
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                out = ("raised", [c.__name__ for c in type(e).__mro__], str(e))
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        return ("hung",)
    return pickle.loads(data)


@pytest.fixture
def shared_tmp():
    """A sticky world-writable directory, as /tmp is; tempfile's default in
    the children."""
    d = tempfile.mkdtemp(prefix="topicmatch-two-users-", dir="/tmp")
    os.chmod(d, 0o1777)
    old = tempfile.tempdir
    tempfile.tempdir = d
    yield d
    tempfile.tempdir = old
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def group_dir(shared_tmp):
    """A shared image_dir: group GROUP may read and write it, others nothing
    (setgid, so what is made in it belongs to the group)."""
    d = os.path.join(shared_tmp, "shared-images")
    os.mkdir(d)
    os.chown(d, VICTIM, GROUP)
    os.chmod(d, 0o2770)
    return d


def _image_bytes(filters):
    sl = topicmatch.Sublist("nats")
    for i, f in enumerate(filters):
        sl.insert(f, i + 1)
    return sl.to_bytes()


def _write(path, data, mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


# --------------------------------------------------------------------------
# 1. an image planted under the victim's content name
# --------------------------------------------------------------------------

def _plant_default_dir(victim_uid):
    d = image_store.default_image_dir().replace(f"-{os.getuid()}", f"-{victim_uid}")
    os.mkdir(d, 0o777)
    os.chmod(d, 0o777)
    _write(os.path.join(d, "topicmatch-nats-v1-n1-planted.img"), _image_bytes([">"]))
    return d


def _victims_home():
    return image_store.image_home()


def test_a_directory_made_first_by_another_user_is_refused(shared_tmp):
    got = as_user(ATTACKER, _plant_default_dir, VICTIM)
    assert got[0] == "ok", got
    planted = got[1]
    got = as_user(VICTIM, _victims_home)
    assert got[0] == "raised" and "PermissionError" in got[1], got
    assert f"refusing the image directory {planted}" in got[2]
    assert f"belongs to uid {ATTACKER}, not to this user ({VICTIM})" in got[2]


def _plant_in(path):
    try:
        _write(os.path.join(path, "topicmatch-nats-v1-n1-planted.img"), _image_bytes([">"]))
    except OSError as e:
        return errno.errorcode[e.errno]
    return "planted"


def test_the_victims_own_directory_takes_nothing_from_another_user(shared_tmp):
    got = as_user(VICTIM, _victims_home)
    assert got[0] == "ok", got
    home = got[1]
    assert stat.S_IMODE(os.lstat(home).st_mode) == 0o700
    assert as_user(ATTACKER, _plant_in, home) == ("ok", "EACCES")
    # nor can the attacker open a lock file there to hold it (a 0644 lock
    # file once let any user block every rebuild)
    _write(os.path.join(home, "x.img.lock"), b"", 0o644)
    os.chown(os.path.join(home, "x.img.lock"), VICTIM, VICTIM)
    got = as_user(ATTACKER, os.open, os.path.join(home, "x.img.lock"), os.O_RDONLY)
    assert got[0] == "raised" and "PermissionError" in got[1], got


# --------------------------------------------------------------------------
# 2. symlinks at the logging configuration's names
# --------------------------------------------------------------------------

def _plant_log4j_links(victim_uid, target):
    d = os.path.join(tempfile.gettempdir(), f"topicmatch-{victim_uid}")
    os.mkdir(d, 0o777)
    os.chmod(d, 0o777)
    # the configuration's name, and the temporary names the old code wrote
    # (log4j2-error.properties.<pid>) for the pids the victim may get next
    os.symlink(target, os.path.join(d, "log4j2-error.properties"))
    nxt = os.getpid()
    for pid in range(nxt, nxt + 200):
        os.symlink(target, os.path.join(d, f"log4j2-error.properties.{pid}"))
    return d


def _victims_log4j():
    return session._log4j_file("ERROR")


def test_the_logging_configuration_is_never_written_through_a_planted_link(shared_tmp):
    target = os.path.join(shared_tmp, "victims-own-file")
    _write(target, b"the victim's own words\n", 0o644)
    os.chown(target, VICTIM, VICTIM)
    got = as_user(ATTACKER, _plant_log4j_links, VICTIM, target)
    assert got[0] == "ok", got
    got = as_user(VICTIM, _victims_log4j)
    assert got[0] == "raised" and "PermissionError" in got[1], got
    assert "refusing the logging configuration's directory" in got[2]
    assert f"belongs to uid {ATTACKER}" in got[2]
    with open(target, "rb") as f:
        assert f.read() == b"the victim's own words\n"


def test_the_logging_configuration_of_a_fresh_user_is_private(shared_tmp):
    got = as_user(VICTIM, _victims_log4j)
    assert got[0] == "ok", got
    d = os.path.dirname(got[1])
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700 and os.lstat(d).st_uid == VICTIM
    assert as_user(ATTACKER, _plant_in, d) == ("ok", "EACCES")


# --------------------------------------------------------------------------
# 3. a FIFO at an image's name, or at its lock's, in a shared image_dir
# --------------------------------------------------------------------------

def _mkfifo(path):
    os.mkfifo(path, 0o660)
    return path


def _probe(path):
    return images.probe_image(path, "nats")


def _lock_and_build(path):
    return images.save_locked(path, False, images.sublist_builder(lambda: _sublist([">"])), dialect="nats")


def _sublist(filters):
    sl = topicmatch.Sublist("nats")
    for i, f in enumerate(filters):
        sl.insert(f, i + 1)
    return sl


def test_a_fifo_at_an_images_name_is_damage_not_a_hang(group_dir):
    img = os.path.join(group_dir, "topicmatch-nats-v1-n1-fifo.img")
    assert as_user(ATTACKER, _mkfifo, img, groups=[GROUP])[0] == "ok"
    got = as_user(VICTIM, _probe, img, groups=[GROUP], timeout=20)
    assert got[0] == "ok" and got[1][0].startswith("damaged") and "regular file" in got[1][0], got


def test_a_fifo_at_a_locks_name_is_refused_not_waited_on(group_dir):
    img = os.path.join(group_dir, "topicmatch-nats-v1-n1-lockfifo.img")
    assert as_user(ATTACKER, _mkfifo, img + ".lock", groups=[GROUP])[0] == "ok"
    got = as_user(VICTIM, _lock_and_build, img, groups=[GROUP], timeout=20)
    assert got[0] == "raised" and "PermissionError" in got[1], got
    assert "is not a regular file" in got[2]


# --------------------------------------------------------------------------
# 4. an unverified image swapped in while a build waits for its lock
# --------------------------------------------------------------------------

def _plant_damaged(path):
    data = bytearray(_image_bytes(["planted.>", "x.*"]))
    data[-9] ^= 0xFF        # past the header and root: only the full check sees it
    _write(path, bytes(data), 0o660)
    return len(data)


def test_an_image_put_there_during_the_wait_is_checked_and_built_over(group_dir):
    img = os.path.join(group_dir, "topicmatch-nats-v1-n1-swapped.img")
    assert as_user(ATTACKER, _plant_damaged, img, groups=[GROUP])[0] == "ok"
    with pytest.raises(ValueError):
        topicmatch.Sublist.open(img, verify=True)       # it is damaged...
    topicmatch.Sublist.open(img, verify=False)          # ...where the quick open cannot tell
    got = as_user(VICTIM, _lock_and_build, img, groups=[GROUP], umask=0o007)
    assert got == ("ok", ("built", 1, 1)), got
    sl = topicmatch.Sublist.open(img, verify=True)
    assert sl.match("anything").subs == [1]


# --------------------------------------------------------------------------
# 5. a second user of a shared image_dir
# --------------------------------------------------------------------------

def _open_there(path, cache):
    return len(image_store.open_location(path, cache))


def test_a_second_user_of_a_shared_image_dir_uses_the_first_users_images(group_dir):
    img = os.path.join(group_dir, "topicmatch-nats-v1-n1-shared.img")
    got = as_user(VICTIM, _lock_and_build, img, groups=[GROUP], umask=0o007)
    assert got == ("ok", ("built", 1, 1)), got
    assert as_user(OTHER, _probe, img, groups=[GROUP]) == ("ok", ("ok", 1))
    assert as_user(OTHER, _open_there, img, group_dir, groups=[GROUP]) == ("ok", 1)
    # the second user takes the first user's lock file and finds the image
    assert as_user(OTHER, _lock_and_build, img, groups=[GROUP]) == ("ok", ("there", 0, 1))


def test_an_unreadable_image_is_a_permission_error_never_damage(group_dir):
    img = os.path.join(group_dir, "topicmatch-nats-v1-n1-private.img")
    got = as_user(VICTIM, _lock_and_build, img, groups=[GROUP], umask=0o077)
    assert got[0] == "ok", got
    got = as_user(OTHER, _probe, img, groups=[GROUP])
    assert got[0] == "raised" and "PermissionError" in got[1], got
    assert f"cannot read the image {img}" in got[2] and "damaged" not in got[2]


# --------------------------------------------------------------------------
# 6. an image changed in place after the driver checked it
# --------------------------------------------------------------------------

def _damage_in_place(path):
    with open(path, "r+b") as f:     # the file's group may write it: no new inode, same name
        f.seek(-9, os.SEEK_END)
        b = f.read(1)
        f.seek(-9, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    return "damaged"


def _worker_maps(path, cache):
    sl = image_store.open_location(path, cache)
    return sl.match("anything").subs


def test_a_worker_maps_only_checked_bytes_from_a_shared_image_dir(group_dir):
    img = os.path.join(group_dir, "topicmatch-nats-v1-n1-inplace.img")
    got = as_user(VICTIM, _lock_and_build, img, groups=[GROUP], umask=0o002)
    assert got == ("ok", ("built", 1, 1)), got
    assert as_user(VICTIM, _probe, img, groups=[GROUP]) == ("ok", ("ok", 1))   # the driver's probe
    assert as_user(OTHER, _worker_maps, img, group_dir, groups=[GROUP]) == ("ok", [1])
    # then another member of the group changes it where it lies
    assert as_user(ATTACKER, _damage_in_place, img, groups=[GROUP]) == ("ok", "damaged")
    topicmatch.Sublist.open(img, verify=False)      # the quick open would map it
    got = as_user(VICTIM, _worker_maps, img, group_dir, groups=[GROUP])
    assert got[0] == "raised" and "CorruptImageError" in got[1], got
    assert f"'{img}'" in got[2] and "/proc/self/fd" not in got[2]
