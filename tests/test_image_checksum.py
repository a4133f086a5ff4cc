"""_ImageChecksum, the checksum of an image summed as its bytes arrive
(topicmatch.spark's driver receives images so, never holding or mapping one
whole): for any cut of the bytes into pieces, its verdict and its error are
open(verify="checksum")'s."""
import random

import pytest

import topicmatch
from topicmatch import CorruptImageError
from topicmatch._core import _ImageChecksum


def _image():
    sl = topicmatch.Sublist()
    for i in range(2000):
        sl.insert(f"a.b{i}.*", i)
        sl.insert(f"k{i % 7}.>", i, queue=f"q{i % 3}")
    return sl.to_bytes()


def _pieces(data, rng):
    """data cut at random: empty pieces, pieces shorter than the eight
    bytes kept back, stripes cut anywhere, long runs."""
    i = 0
    while i < len(data):
        n = rng.choice([0, 1, 3, 7, 8, 9, 31, 32, 33, rng.randint(0, 70_000)])
        yield data[i:i + n]
        i += n


def _streamed(data, rng, source="x.img"):
    c = _ImageChecksum()
    for piece in _pieces(data, rng):
        c.update(piece)
    c.check(source)


def _opened(data):
    topicmatch.Sublist.from_bytes(data, verify="checksum")


def test_any_cut_of_a_good_image_passes():
    data, rng = _image(), random.Random(7)
    for _ in range(200):
        _streamed(data, rng)
    _opened(data)


def test_a_flipped_bit_anywhere_is_refused_as_open_refuses_it():
    data, rng = _image(), random.Random(8)
    # every byte of the header and of the checksum, and bytes all over the body
    where = list(range(48)) + list(range(len(data) - 8, len(data))) + \
        [rng.randrange(48, len(data) - 8) for _ in range(100)]
    for k in where:
        bad = bytearray(data)
        bad[k] ^= 1 << rng.randrange(8)
        bad = bytes(bad)
        with pytest.raises(CorruptImageError, match="checksum mismatch") as streamed:
            _streamed(bad, rng)
        if k >= 48:         # (a header flip is refused by open's header check first)
            with pytest.raises(CorruptImageError) as opened:
                _opened(bad)
            assert str(streamed.value) == "'x.img': " + str(opened.value), k


def test_a_stream_shorter_than_the_checksum_is_refused():
    for n in range(8):
        c = _ImageChecksum()
        c.update(_image()[:n])
        with pytest.raises(CorruptImageError, match=f"'short.img': .* at byte {n}"):
            c.check("short.img")


def test_pieces_are_bytes_like():
    c = _ImageChecksum()
    with pytest.raises(TypeError):
        c.update("text")
    data = _image()
    c.update(memoryview(data)[:100])
    c.update(bytearray(data[100:]))
    c.check("x.img")
    np = pytest.importorskip("numpy")
    for wrong in (np.zeros(4, dtype=np.int32), memoryview(b"abcdef")[::2], np.zeros((2, 2), dtype=np.uint8)):
        with pytest.raises(BufferError, match="contiguous bytes"):     # wider items, gaps, two dimensions
            _ImageChecksum().update(wrong)


def _large_image():
    """An image of more than one checksum block (1 MiB): version 4 sums
    each block on its own, then the blocks' sums (docs/FORMAT.md)."""
    sl = topicmatch.Sublist()
    sl.insert_many([f"big.b{i}.t{i % 13}" for i in range(22_000)], list(range(22_000)))
    data = sl.to_bytes()
    assert 1 << 20 < len(data) < 3 << 20 and data[8:10] == b"\x04\x00"
    return data


def test_version_4_checksum_of_blocks_is_the_documented_one():
    # the C writer's checksum, against image_codec's, written from FORMAT.md
    import struct
    from image_codec import image_checksum
    data = _large_image()
    assert struct.unpack_from("<Q", data, len(data) - 8)[0] == image_checksum(data[:-8])
    # version 3 of the same image: one chain (the same bytes but the
    # header's version and the checksum), as readers before 4 check it
    v3 = topicmatch.Sublist.from_bytes(data).to_bytes(version=3)
    assert v3[8:10] == b"\x03\x00" and v3[10:-8] == data[10:-8] and v3[:8] == data[:8]
    assert struct.unpack_from("<Q", v3, len(v3) - 8)[0] == image_checksum(v3[:-8])
    # an opened version 3 image writes version 4, and version 3 on request, byte for byte
    assert topicmatch.Sublist.from_bytes(v3).to_bytes() == data
    assert topicmatch.Sublist.from_bytes(v3).to_bytes(version=3) == v3


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_version_4_blocks_on_threads_find_a_flip_in_any_block(threads):
    data = _large_image()
    rng = random.Random(5)
    # (the full check on threads from any size: its blocks beside the tables)
    old = topicmatch._core._tuning("column_cpus", threads), topicmatch._core._tuning("image_parallel_min", 1)
    try:
        for verify in ("checksum", True):
            topicmatch.Sublist.from_bytes(data, verify=verify)
        for at in (11, 30, (1 << 20) - 1, 1 << 20, len(data) - 9):
            bad = bytearray(data)
            bad[at] ^= 0x20
            for verify in ("checksum", True):
                with pytest.raises(CorruptImageError, match="checksum mismatch|dialect|payload"):
                    topicmatch.Sublist.from_bytes(bytes(bad), verify=verify)
        for _ in range(3):
            _streamed(data, rng)
    finally:
        topicmatch._core._tuning("column_cpus", old[0])
        topicmatch._core._tuning("image_parallel_min", old[1])


def test_a_stream_without_memory_is_a_memory_error_and_the_next_one_sums():
    # the stream's one allocation (sublist.h's fs_checksum_stream) failed:
    # MemoryError before any byte, and a later stream sums as ever
    data = _image()
    topicmatch._core._tuning("alloc_fail_nth", 1)
    try:
        with pytest.raises(MemoryError):
            _ImageChecksum()
        assert topicmatch._core._tuning("alloc_failed") == 1
    finally:
        topicmatch._core._tuning("alloc_fail_nth", 0)
    _streamed(data, random.Random(7))
