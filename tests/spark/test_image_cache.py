"""A host's image directory as a bounded cache (topicmatch.spark.image_cache),
without Spark: least recently used first down to the bound, never an image
a process holds, is building or fetching, or used in the last minutes;
leftovers of dead processes removed, nothing else touched; a build or a
fetch prunes the host's directory; an evicted image is fetched again; the
`topicmatch images` command.  A file:// URI stands in for the object store."""
import os
import subprocess
import sys
import threading
import time

import pytest

import topicmatch
from topicmatch.cli import main
from topicmatch.spark import image_cache as ic
from topicmatch.spark import image_store as st
from topicmatch.spark.images import build_at, sublist_builder

HOUR = 3600.0


def _image(path, n, age=0.0):
    """An image of n subscriptions at path, last used `age` seconds ago."""
    sl = topicmatch.Sublist()
    sl.insert_many([f"a.{i}" for i in range(n)], list(range(n)))
    sl.save(str(path))
    t = time.time() - age
    os.utime(path, (t, t))
    return str(path)


def test_least_recently_used_go_first_down_to_the_bound(tmp_path):
    old = _image(tmp_path / "topicmatch-nats-v3-old.img", 300, age=3 * HOUR)
    mid = _image(tmp_path / "topicmatch-nats-v3-mid.img", 300, age=2 * HOUR)
    new = _image(tmp_path / "topicmatch-nats-v3-new.img", 300, age=1 * HOUR)
    assert [i.name for i in ic.list_images(str(tmp_path))] == [os.path.basename(p) for p in (old, mid, new)]
    size = os.path.getsize(new)
    got = ic.prune(str(tmp_path), max_bytes=size + os.path.getsize(mid))
    assert got.removed == [os.path.basename(old)] and got.busy == []
    assert got.freed == size and got.kept_bytes == 2 * size   # the three are the same size
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (mid, new))
    assert ic.prune(str(tmp_path), max_bytes=10 * size).removed == []     # within the bound: nothing
    assert ic.prune(str(tmp_path), max_bytes=0).removed == [os.path.basename(mid), os.path.basename(new)]


def test_an_image_used_lately_is_kept_over_the_bound(tmp_path):
    recent = _image(tmp_path / "topicmatch-nats-v3-recent.img", 10, age=60)
    got = ic.prune(str(tmp_path), max_bytes=0)
    assert got.removed == [] and got.busy == [os.path.basename(recent)] and os.path.exists(recent)
    assert ic.prune(str(tmp_path), max_bytes=0, min_idle=30).removed == [os.path.basename(recent)]


def test_an_image_another_process_maps_is_kept_until_it_exits(tmp_path):
    path = _image(tmp_path / "topicmatch-nats-v3-held.img", 50, age=2 * HOUR)
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from topicmatch.spark.image_store import open_location\n"
         f"sl = open_location({path!r}, {str(tmp_path)!r})\n"
         "print(len(sl), flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "50"
        # opening it marked it used now: kept as recent, and as held
        assert time.time() - os.path.getmtime(path) < 60
        [listed] = ic.list_images(str(tmp_path))
        assert listed.in_use
        got = ic.prune(str(tmp_path), max_bytes=0, min_idle=0)
        assert got.removed == [] and got.busy == [os.path.basename(path)] and os.path.exists(path)
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert not ic.list_images(str(tmp_path))[0].in_use
    assert ic.prune(str(tmp_path), max_bytes=0, min_idle=0).removed == [os.path.basename(path)]


def test_this_process_holding_an_image_keeps_it_too(tmp_path):
    path = _image(tmp_path / "topicmatch-nats-v3-mine.img", 5, age=2 * HOUR)
    sl = st.open_location(path, str(tmp_path))
    assert ic.prune(str(tmp_path), max_bytes=0, min_idle=0).removed == []
    assert len(sl) == 5


def test_an_image_being_built_or_fetched_is_kept(tmp_path):
    path = _image(tmp_path / "topicmatch-nats-v3-busy.img", 5, age=2 * HOUR)
    entered, leave = threading.Event(), threading.Event()

    def build():
        with st.locked(path):
            entered.set()
            leave.wait(30)
    t = threading.Thread(target=build)
    t.start()
    try:
        assert entered.wait(30)
        assert ic.list_images(str(tmp_path))[0].in_use
        assert ic.prune(str(tmp_path), max_bytes=0, min_idle=0).removed == []
    finally:
        leave.set()
        t.join()
    got = ic.prune(str(tmp_path), max_bytes=0, min_idle=0)
    assert got.removed == [os.path.basename(path)]
    assert os.listdir(tmp_path) == []       # its lock file went with it


def test_leftovers_go_and_nothing_else_is_touched(tmp_path):
    def made(name, age, data=b"x" * 10):
        p = tmp_path / name
        p.write_bytes(data)
        t = time.time() - age
        os.utime(p, (t, t))
        return name
    stale = [made(".fetch-abc.part", 2 * HOUR), made(".inbox-abc.part", 2 * HOUR),
             made(".topicmatch-nats-v3-x.img.0a1b2c.tmp", 2 * HOUR), made("topicmatch-nats-v3-gone.img.lock", 2 * HOUR, b"")]
    fresh = [made(".fetch-new.part", 60), made(".topicmatch-nats-v3-y.img.3d4e5f.tmp", 60)]
    others = [made("notes.txt", 2 * HOUR), made("topicmatch-nats-v3-z.img.bak", 2 * HOUR)]
    target = tmp_path / "elsewhere.img"
    _image(target, 3, age=2 * HOUR)
    size = os.path.getsize(target)
    os.symlink(target, tmp_path / "topicmatch-nats-v3-link.img")
    got = ic.prune(str(tmp_path), max_bytes=0, min_idle=0)
    left = set(os.listdir(tmp_path))
    assert not left & set(stale), left
    assert set(fresh + others) <= left and "topicmatch-nats-v3-link.img" in left
    # the real image is evicted; the symlink is not an image of this
    # directory (lstat: never followed), left where it is
    assert got.removed == ["elsewhere.img"] and got.freed == size + 3 * 10


def test_the_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(ic.CACHE_BYTES_ENV, "1.5G")
    assert ic.cache_bytes() == 3 << 29
    monkeypatch.setenv(ic.CACHE_BYTES_ENV, "2MiB")
    assert ic.cache_bytes() == 2 << 20
    monkeypatch.delenv(ic.CACHE_BYTES_ENV)
    assert ic.cache_bytes() == ic.DEFAULT_CACHE_BYTES
    for bad in ("lots", "-1", "G", "inf"):
        monkeypatch.setenv(ic.CACHE_BYTES_ENV, bad)
        with pytest.raises(ValueError, match=f"{ic.CACHE_BYTES_ENV}={bad!r}: give a size"):
            ic.cache_bytes()
    with pytest.raises(ValueError, match="max_bytes=-1"):
        ic.prune("/nonexistent", max_bytes=-1)


def test_a_build_prunes_the_hosts_directory(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv(st.IMAGE_DIR_ENV, str(home))
    home.mkdir()
    old = _image(home / "topicmatch-nats-v3-old.img", 100, age=2 * HOUR)
    monkeypatch.setenv(ic.CACHE_BYTES_ENV, str(os.path.getsize(old)))

    def build():
        sl = topicmatch.Sublist()
        sl.insert_many([f"b.{i}" for i in range(100)], list(range(100)))
        return sl
    status, path, *_ = build_at(None, "topicmatch-nats-v3-new", False, sublist_builder(build), dialect="nats")
    assert status == "built" and os.path.exists(path)
    assert not os.path.exists(old)      # the least recently used went; the new one, recent, stays


def test_a_bad_bound_never_fails_the_task_that_grew_the_cache(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(ic.CACHE_BYTES_ENV, "lots")
    ic.prune_quietly(str(tmp_path))
    assert "could not prune" in caplog.text and ic.CACHE_BYTES_ENV in caplog.text


def test_an_evicted_copy_is_fetched_again(tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    store.mkdir()
    cache.mkdir()
    src = _image(tmp_path / "src.img", 40)
    uri = f"file://{store}/topicmatch-nats-v3-far.img"
    st.upload(src, uri)
    local = st.fetch(uri, str(cache), st.locked)
    os.utime(local, (time.time() - 2 * HOUR,) * 2)
    assert ic.prune(str(cache), max_bytes=0).removed == [os.path.basename(local)]
    sl = st.open_location(uri, str(cache))
    assert len(sl) == 40 and sl.match("a.7").subs == [7] and os.path.exists(local)


def test_the_images_command(tmp_path, capsys):
    _image(tmp_path / "topicmatch-nats-v3-a.img", 20, age=2 * HOUR)
    _image(tmp_path / "topicmatch-nats-v3-b.img", 20, age=60)
    assert main(["images", "list", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path}: 2 images" in out and out.index("-a.img") < out.index("-b.img")
    assert main(["images", "prune", "--dir", str(tmp_path), "--max-bytes", "0"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 image" in out and "1 image over the bound kept" in out
    assert os.listdir(tmp_path) == ["topicmatch-nats-v3-b.img"]
    assert main(["images", "prune", "--dir", str(tmp_path), "--max-bytes", "lots"]) == 2
    assert "--max-bytes='lots': give a size" in capsys.readouterr().err
    assert main(["images", "list", "--dir", str(tmp_path / "nothing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_an_image_the_probe_finds_is_marked_used(tmp_path):
    """The probe found it good: the workers will open it next, so it is
    marked used now and kept through the recent-use window until they hold
    it, however long ago it was last used."""
    from topicmatch.spark.images import probe_at
    path = _image(tmp_path / "topicmatch-nats-v3-found.img", 7, age=5 * HOUR)
    status, got, nsubs, _ = probe_at(path, "topicmatch-nats-v3-found", "nats")
    assert (status, got, nsubs) == ("ok", path, 7)
    assert ic.prune(str(tmp_path), max_bytes=0).removed == []
