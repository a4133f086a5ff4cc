"""Where images live (topicmatch.spark.image_store), without Spark: image_dir
as a path or a storage URI, the private per-user directory and its locks
(what another local user could steer), and the fetch of a stored image into
a host's cache (whole and checked, or not at all).  A file:// URI stands in
for the object store here; the S3 server's runs are in test_everywhere.py."""
import os
import stat
import threading

import pytest

import topicmatch

from topicmatch.spark import image_store as st

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def _image(tmp_path, n=3):
    sl = topicmatch.Sublist()
    for i in range(n):
        sl.insert(f"a.{i}", i)
    path = str(tmp_path / "src.img")
    sl.save(path)
    return path, sl


def test_image_dir_kinds():
    assert st.check_image_dir(None) is None
    assert st.check_image_dir("/mnt/images/") == "/mnt/images/"
    assert st.check_image_dir("file:///mnt/images") == "/mnt/images"
    for bad in ("relative/dir", "ftp://host/x", "s3://", "http://x/y"):
        with pytest.raises(ValueError, match="image_dir="):
            st.check_image_dir(bad)
    with pytest.raises(TypeError, match="image_dir must be"):
        st.check_image_dir(3)
    assert st.location_in("/d", "n", True) == "/d/n.img"
    assert st.location_in(None, "n", False) is None
    assert st.location_in(None, "n", True) == "spark:n.img"
    assert st.location_in("s3://b/dir", "n", False) == "s3://b/dir/n.img"


def test_private_dir_made_0700_and_refused_when_steerable(tmp_path):
    d = str(tmp_path / "mine")
    assert st.private_dir(d) == d
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700
    # group or other can write it: another user could plant images or locks
    os.chmod(d, 0o777)
    with pytest.raises(PermissionError, match="group or other can write it"):
        st.private_dir(d)
    # a symlink at its name is not followed, even to a good directory
    good = str(tmp_path / "good")
    os.mkdir(good, 0o700)
    link = str(tmp_path / "link")
    os.symlink(good, link)
    with pytest.raises(PermissionError, match="not a directory"):
        st.private_dir(link)
    with open(str(tmp_path / "file"), "w"):
        pass
    with pytest.raises(PermissionError, match="not a directory"):
        st.private_dir(str(tmp_path / "file"))


@pytest.mark.skipif(not ROOT, reason="needs root to make a directory another user owns")
def test_private_dir_of_another_user_is_refused(tmp_path):
    d = str(tmp_path / "theirs")
    os.mkdir(d, 0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(PermissionError, match="belongs to uid 65534"):
        st.private_dir(d)


def test_lock_never_follows_a_symlink_and_needs_no_write(tmp_path):
    target = str(tmp_path / "victim")
    with open(target, "w") as f:
        f.write("keep")
    img = str(tmp_path / "x.img")
    os.symlink(target, img + ".lock")
    with pytest.raises(OSError):
        with st.locked(img):
            pass
    assert open(target).read() == "keep"
    # a read-only lock file is locked all the same (taken on O_RDONLY)
    other = str(tmp_path / "y.img")
    with open(other + ".lock", "w"):
        pass
    os.chmod(other + ".lock", 0o444)
    with st.locked(other):
        pass


def test_lock_excludes(tmp_path):
    img = str(tmp_path / "z.img")
    inside, order = threading.Event(), []

    def second():
        inside.wait()
        with st.locked(img):
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    with st.locked(img):
        inside.set()
        t.join(0.3)
        order.append("first")
    t.join()
    assert order == ["first", "second"]


def test_upload_then_fetch_once_checked(tmp_path):
    src, sl = _image(tmp_path)
    store = tmp_path / "store"
    uri = f"file://{store}/dir/topicmatch-nats-x.img"
    st.upload(src, uri)
    assert st.remote_exists(uri)
    assert [n for n in os.listdir(store / "dir")] == ["topicmatch-nats-x.img"]   # no temporary left
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    local = st.fetch(uri, cache, st.locked)
    assert local == os.path.join(cache, "topicmatch-nats-x.img")
    got = st.open_location(uri, cache)
    assert sorted(got.match("a.1").subs) == [1] and len(got) == len(sl)
    # fetched once: a second fetch finds the host's copy (the store's is gone)
    os.remove(store / "dir" / "topicmatch-nats-x.img")
    assert st.fetch(uri, cache, st.locked) == local


def test_a_damaged_stored_image_is_never_kept(tmp_path):
    src, _ = _image(tmp_path)
    data = bytearray(open(src, "rb").read())
    data[len(data) // 2] ^= 0xFF
    store = tmp_path / "store"
    store.mkdir()
    (store / "bad.img").write_bytes(bytes(data))
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    with pytest.raises(ValueError):
        st.fetch(f"file://{store}/bad.img", cache, st.locked)
    assert [n for n in os.listdir(cache) if not n.endswith(".lock")] == []   # nothing partial kept
    with pytest.raises(FileNotFoundError):
        st.fetch(f"file://{store}/missing.img", cache, st.locked)
