"""The per-thread cache of merged node pairs (csrc/match/fs_pairs.h): a
row whose two biggest runs hold eight ids or more each is answered from a
merge made once per thread.  It must never hand back a merge of another
state: after an insert or a remove on either node, after the index is
freed and another built at the same addresses, on several threads, and on
images (which it never caches).  Each row is checked against the ids
computed here from the subscriptions themselves."""
import gc

import pytest

import topicmatch

# "a.b" holds the biggest run, "a.*" the second (both cached as a pair),
# "*.b" and ">" the rest; ids interleave so that every merge is real.
BIG, SEC, REST, ALL = "a.b", "a.*", "*.b", ">"


def _build(offset=0, n_big=40, n_sec=12, n_rest=3, cache_size=0):
    sl = topicmatch.Sublist("nats", cache_size=cache_size)
    subs = {BIG: [offset + 3 * k for k in range(n_big)],
            SEC: [offset + 3 * k + 1 for k in range(n_sec)],
            REST: [offset + 3 * k + 2 for k in range(n_rest)],
            ALL: [offset + 1000 + k for k in range(2)]}
    for f, ids in subs.items():
        for i in ids:
            sl.insert(f, i)
    return sl, subs


def _want(subs, subject):
    out = []
    for f, ids in subs.items():
        if topicmatch.subject_matches(f, subject, "nats"):
            out += ids
    return sorted(out)


def _rows(sl, subjects, threads=1):
    b = sl.match_many(subjects, queues="all", threads=threads)
    return [b[i].tolist() for i in range(len(b))]


def _check(sl, subs, subjects, threads=1):
    got = _rows(sl, subjects, threads)
    for s, row in zip(subjects, got):
        assert row == _want(subs, s), s


SUBJECTS = ["a.b", "a.c", "x.b", "a.b.c"] * 50


def test_pair_rows_right_and_repeatable():
    sl, subs = _build()
    for _ in range(3):           # the first fills the cache, the others read it
        _check(sl, subs, SUBJECTS)
    assert sl.match("a.b").subs == _want(subs, "a.b")


@pytest.mark.parametrize("node", [BIG, SEC])
def test_insert_and_remove_between_batches(node):
    sl, subs = _build()
    _check(sl, subs, SUBJECTS)
    sl.insert(node, 5_000)       # the pair's counts change: a new merge
    subs[node].append(5_000)
    _check(sl, subs, SUBJECTS)
    sl.remove(node, 5_000)
    subs[node].remove(5_000)
    _check(sl, subs, SUBJECTS)
    # a remove and an insert that leave both counts as they were: only the
    # generation tells the merge is stale
    old = subs[node][3]
    sl.remove(node, old)
    sl.insert(node, old + 100_000)
    subs[node][3] = old + 100_000
    _check(sl, subs, SUBJECTS)
    sl.insert_many([node], [old + 200_000])
    subs[node].append(old + 200_000)
    _check(sl, subs, SUBJECTS)
    sl.remove_many([node], [old + 200_000])
    subs[node].remove(old + 200_000)
    _check(sl, subs, SUBJECTS)


def test_another_index_at_the_same_addresses():
    # the same filters and counts, other ids: a freed index's nodes come
    # back at the same addresses, with the same generation
    for k in range(6):
        sl, subs = _build(offset=k * 10_000)
        _check(sl, subs, SUBJECTS)
        del sl
        gc.collect()


def test_threads_see_changes():
    sl, subs = _build()
    many = SUBJECTS * 200
    for k in range(4):
        _check(sl, subs, many, threads=2)
        sl.insert(SEC, 7_000 + k)
        subs[SEC].append(7_000 + k)
        _check(sl, subs, many, threads=2)
        _check(sl, subs, many, threads=1)


def test_cached_results_and_pairs_agree():
    sl, subs = _build(cache_size=64)
    _check(sl, subs, SUBJECTS)
    sl.insert(BIG, 9_001)
    subs[BIG].append(9_001)
    _check(sl, subs, SUBJECTS)
    assert sl.match("a.b").subs == _want(subs, "a.b")


@pytest.mark.parametrize("verify", [True, False])
def test_images_never_stale(tmp_path, verify):
    sl, subs = _build()
    _check(sl, subs, SUBJECTS)   # the built index's pairs cached
    path = tmp_path / "i.img"
    sl.save(str(path))
    img = topicmatch.Sublist.open(str(path), verify=verify)
    _check(img, subs, SUBJECTS)
    img.insert(SEC, 8_000)       # moves the filter to the live part
    subs[SEC].append(8_000)
    _check(img, subs, SUBJECTS)
    img.remove(BIG, subs[BIG][0])
    subs[BIG].pop(0)
    _check(img, subs, SUBJECTS)
    blob = topicmatch.Sublist.from_bytes(img.to_bytes())
    _check(blob, subs, SUBJECTS)
