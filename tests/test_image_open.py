"""Opening an image (issue 47): the three levels of checking, what
Sublist.open accepts, and which buffers from_bytes reads in place.

* verify=True checks the checksum and every invariant; verify="checksum"
  the checksum alone (no structural pass); verify=False the header alone.
  A checksum mismatch names the bytes that were summed.
* Sublist.open maps regular files only: a FIFO, a device or a directory
  is refused at once, naming the path (a FIFO once hung open forever).
* from_bytes keeps in place only bytes that cannot change -- bytes, and
  the read-only mapping open() makes of the file it opened; a read-only
  view whose owner can still write it is copied (once it was trusted, and
  a rewrite of its owner crashed match).
"""
import gc
import mmap
import os
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

import image_codec as C
import topicmatch
from topicmatch import CorruptImageError
from isolated import run_isolated

HERE = os.path.dirname(os.path.abspath(__file__))


def small():
    sl = topicmatch.Sublist()
    for i, f in enumerate(["a.b", "a.*", "a.>", "x.y.z", "x.*.z"]):
        sl.insert(f, i)
        sl.insert(f, 100 + i, queue="q")
    for i in range(10, 20):
        sl.insert("a.b", i)
    return sl


SUBJECTS = ["a.b", "a.c", "x.y.z", "x.q.z", "nope"]


def answers(sl):
    return [(r.subs, r.groups) for r in map(sl.match, SUBJECTS)]


# ------------------------------------------------------------ levels


def test_three_levels_open_a_good_image_alike():
    sl = small()
    blob, want = sl.to_bytes(), answers(sl)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "i.fsb")
        sl.save(path)
        for verify in (True, "checksum", False):
            assert answers(topicmatch.Sublist.from_bytes(blob, verify=verify)) == want, verify
            assert answers(topicmatch.Sublist.open(path, verify=verify, cache_size=8)) == want, verify


def test_checksum_mismatch_names_the_bytes_summed():
    blob = small().to_bytes()
    end = len(blob) - 8                     # 48 + P: the checksum's own offset
    bad = bytearray(blob)
    bad[C.OBJECTS + 40] ^= 0x01             # an object's byte, not resealed
    want = (f"corrupt topicmatch index: checksum mismatch: the checksum of bytes [0, {end}) "
            f"is not the one stored at byte {end}")
    for verify in (True, "checksum"):
        with pytest.raises(ValueError) as e:
            topicmatch.Sublist.from_bytes(bytes(bad), verify=verify)
        assert str(e.value) == want
    # the header is summed too
    bad = bytearray(blob)
    bad[24] ^= 0x01
    with pytest.raises(ValueError, match=r"checksum of bytes \[0, "):
        topicmatch.Sublist.from_bytes(bytes(bad), verify="checksum")
    # verify=False reads no checksum
    topicmatch.Sublist.from_bytes(bytes(blob[:-8] + bytes(8)), verify=False)


def test_checksum_level_makes_no_structural_pass():
    """Bytes forged with a valid checksum: verify=True finds the broken
    invariant; "checksum" (and False) open them, as documented, and find
    the damage only where a call meets it -- never reading outside the
    buffer."""
    sl = small()
    img = C.Image(sl.to_bytes())
    n = img.entry("a.b")
    img.put("<q", n.ids_off, n.ids[1])
    img.put("<q", n.ids_off + 8, n.ids[0])          # two ids swapped
    forged = img.seal()
    with pytest.raises(ValueError, match="ids not in strictly increasing order"):
        topicmatch.Sublist.from_bytes(forged, verify=True)
    for verify in ("checksum", False):
        e = topicmatch.Sublist.from_bytes(forged, verify=verify)     # no structural pass
        assert sorted(e.match("a.c").subs) == sorted(sl.match("a.c").subs)
        # a.b's row merges the swapped ids with a.*'s and a.>'s: the merge
        # meets them out of order, and the image is found damaged there
        with pytest.raises(CorruptImageError, match="is damaged"):
            e.match("a.b")


def test_verify_takes_true_false_or_checksum():
    blob = small().to_bytes()
    for bad in ("full", "", "CHECKSUM"):
        with pytest.raises(ValueError, match="verify must be True, False or 'checksum'"):
            topicmatch.Sublist.from_bytes(blob, verify=bad)
    topicmatch.Sublist.from_bytes(blob, verify=1)      # truthy, as before: everything
    topicmatch.Sublist.from_bytes(blob, verify=0)


def test_version_2_is_checked_in_full_at_every_level():
    """A compact blob is rebuilt, and its loader trusts nothing: verify
    changes nothing there."""
    v2 = small().to_bytes(version=2)
    bad = bytearray(v2)
    bad[50] ^= 0x01
    for verify in (True, "checksum", False):
        assert answers(topicmatch.Sublist.from_bytes(v2, verify=verify)) == answers(small())
        with pytest.raises(ValueError, match="checksum mismatch: the checksum of bytes"):
            topicmatch.Sublist.from_bytes(bytes(bad), verify=verify)


# ------------------------------------------------------------ what open accepts


def test_open_refuses_a_fifo_at_once():
    """Opening a FIFO nobody writes to must fail within a second (it hung
    in open(2) before); in a child, so that a hang fails this test only."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fifo.fsb")
        os.mkfifo(path)
        code = textwrap.dedent(f"""
            import time, topicmatch
            t = time.monotonic()
            try:
                topicmatch.Sublist.open({path!r})
            except ValueError as e:
                print(round(time.monotonic() - t, 3), e)
            else:
                print("opened")
        """)
        try:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("Sublist.open on a FIFO hung")
        assert r.returncode == 0, r.stderr
        took, msg = r.stdout.split(" ", 1)
        assert float(took) < 1.0, r.stdout
        assert msg.strip() == f"{path!r}: a FIFO, not a topicmatch index file (Sublist.open maps regular files only)"


def test_open_refuses_a_directory_and_a_device():
    with tempfile.TemporaryDirectory() as d:
        with pytest.raises(ValueError, match=rf"^{repr(d)}: a directory, not a topicmatch index file"):
            topicmatch.Sublist.open(d)
    if os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode):
        with pytest.raises(ValueError, match=r"^'/dev/null': a device, not a topicmatch index file"):
            topicmatch.Sublist.open("/dev/null")
    with pytest.raises(FileNotFoundError):
        topicmatch.Sublist.open(os.path.join(HERE, "no such file.fsb"))


def test_open_follows_a_link_to_a_regular_file():
    sl = small()
    with tempfile.TemporaryDirectory() as d:
        path, link = os.path.join(d, "i.fsb"), os.path.join(d, "link.fsb")
        sl.save(path)
        os.symlink(path, link)
        assert answers(topicmatch.Sublist.open(link)) == answers(sl)


# ------------------------------------------------------------ buffers


def test_read_only_view_over_a_bytearray_is_copied():
    """The owner rewrites the bytes after from_bytes: the index answers as
    before (it copied them), and the view is not held.  In a child: before
    the fix this crashed."""
    run_isolated("""
        import struct, gc, topicmatch
        from test_image_open import small, answers
        sl = small()
        want = answers(sl)
        for verify in (True, "checksum", False):
            ba = bytearray(sl.to_bytes())
            view = memoryview(ba).toreadonly()
            assert view.readonly
            e = topicmatch.Sublist.from_bytes(view, verify=verify)
            view.release()                         # not exported: it was copied
            # every word of the objects made an offset far outside the image
            for at in range(1024, len(ba) - 8, 8):
                struct.pack_into("<Q", ba, at, 0x7FFF_FFFF_FFFF_FFF8)
            assert answers(e) == want, verify
            assert answers(e) == want, verify      # and again, from a cache-less index
            del e
            gc.collect()
        print("ok")
    """)


def test_read_only_mmap_of_a_callers_file_is_copied():
    """A mapping the caller made can see its file rewritten: copied.  The
    mapping open() makes of the file it opened itself is read in place."""
    sl = small()
    blob = sl.to_bytes()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "i.fsb")
        sl.save(path)
        with open(path, "rb") as f:
            ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        e = topicmatch.Sublist.from_bytes(ro, verify=False)
        ro.close()                                 # not held: it was copied
        assert answers(e) == answers(sl) and e.stats()["mapped_bytes"] == len(blob)
        opened = topicmatch.Sublist.open(path, verify=False)
        assert opened.stats()["mapped_bytes"] == len(blob) and answers(opened) == answers(sl)


def test_bytes_and_views_of_bytes_are_read_in_place():
    blob = small().to_bytes()
    view = memoryview(blob)
    e = topicmatch.Sublist.from_bytes(view)
    with pytest.raises(BufferError):               # held: read in place
        view.release()
    del e
    gc.collect()
    view.release()
    # a view of a view of bytes: still bytes underneath
    inner = memoryview(memoryview(blob))
    e = topicmatch.Sublist.from_bytes(inner)
    with pytest.raises(BufferError):
        inner.release()
    del e
    gc.collect()
    inner.release()
    # a bytes subclass could hand out another buffer: copied
    class B(bytes):
        pass
    e = topicmatch.Sublist.from_bytes(B(blob))
    assert answers(e) == answers(small())
