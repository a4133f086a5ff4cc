"""Ids stored out of order in a mapped image opened with verify=False
(issue 47, D2).

An image holds each node's ids, and each queue group's members, strictly
increasing; verify=True checks that, verify=False and verify="checksum"
do not.  The merges that put a row together (csrc/match/fs_result.c,
fs_hits_merge; fs_runs_add for groups) were written for sorted runs: a
descending run once gave a negative length to a copy, and match returned
uninitialised heap, then the process aborted.

Here one node's ids (or one group's members) are stored descending, the
image resealed with a valid checksum, and every way of matching --
match, match with a result cache (a miss and a hit), match_many on one
thread and two, with queues all/pick/none -- must raise ValueError naming
the damage or give the right answer: the ids of the undamaged index, in
any order (verify=False promises no order it cannot see).  Each size of
row takes another path through the merge: the damaged node alone (a
copy), with up to 256 other ids (put between the big run's stretches;
the sizes below were chosen for an earlier merge that searched up to 8
in and merged 9-256 from both ends), with more (merged run by run).  The children run in their own
process, so that a crash fails the case instead of pytest.
"""
import json
import subprocess
import sys

import pytest

import image_codec as C
import topicmatch

# (name, ids of the literal, ids of the wildcard, the node damaged): how
# many ids the row's nodes hold decides the merge's path (fs_result.c,
# fs_hits_merge), and which run is out of order what it meets
SIZES = [("alone", 40, 0, "lit"),            # one node: a copy
         ("few-big", 40, 5, "lit"),          # up to 8 others: searched into the big run...
         ("few-small", 40, 5, "wild"),       # ... or the searched ones out of order
         ("some", 40, 30, "lit"),            # 9-256 others: merged from both ends, the big run damaged
         ("some-small", 40, 100, "lit"),     # the same, the damaged run the smaller one
         ("many", 300, 400, "lit")]          # over 256 others: merged run by run
# the runs out of order that a merge meets and reports
FOUND = {"few-small", "some", "some-small"}


def build(dialect, n_lit, others):
    """An index whose subject a.b (a/b) matches the literal a.b, holding
    n_lit ids and a queue group of 30 members, and a wildcard filter holding
    `others` ids, interleaved with the literal's (so that each merge step
    meets them), and 10 members of the same queue group."""
    sep = "/" if dialect == "mqtt" else "."
    one = "+" if dialect == "mqtt" else "*"
    sl = topicmatch.Sublist(dialect)
    lit, wild = f"a{sep}b", f"a{sep}{one}"
    for i in range(n_lit):
        sl.insert(lit, 100 + 2 * i)
    for i in range(30):
        sl.insert(lit, 5000 + 2 * i, queue="q")
    step = max(1, n_lit // max(others, 1))      # a few: spread over the literal's range
    for k in range(others):
        sl.insert(wild, 101 + 2 * step * k if k < n_lit else 100000 + k)
    for i in range(10):
        sl.insert(wild, 5001 + 4 * i, queue="q")
    return sl, lit


def descending(dialect, n_lit, others, node, what):
    """The image of build() with the ids (what="ids") of the literal entry
    (node="lit") or the wildcard's, or the literal's group's members
    (what="members"), stored descending, resealed."""
    sl, subject = build(dialect, n_lit, others)
    img = C.Image(sl.to_bytes())
    one = "+" if dialect == "mqtt" else "*"
    n = img.entry(subject if node == "lit" else subject[:2] + one)
    if what == "ids":
        at, ids = n.ids_off, n.ids
    else:
        _, _, ids, at = n.group_list[0]
    for k, v in enumerate(sorted(ids, reverse=True)):
        img.put("<q", at + 8 * k, v)
    return img.seal(), subject


def _norm(subs, groups):
    return [sorted(subs), sorted((g[0], g[1], sorted(g[2])) for g in groups)]


CHILD = """
import json, sys, topicmatch
data = bytes.fromhex(sys.stdin.read())
subject, configs = json.loads(sys.argv[1])
def norm(r):
    return [sorted(r.subs), sorted((g[0], g[1], sorted(g[2])) for g in r.groups)]
def attempt(name, f):
    try:
        out.append([name, "ok", f()])
    except ValueError as e:
        out.append([name, "ValueError", str(e)])
every = []
for verify, cache, simd in configs:
    topicmatch._core._set_merge_simd(simd)
    out = []
    sl = topicmatch.Sublist.from_bytes(data, verify=verify, cache_size=cache)
    attempt("match", lambda: norm(sl.match(subject)))
    attempt("match again", lambda: norm(sl.match(subject)))         # a cache hit, when cached
    attempt("match dedupe", lambda: norm(sl.match(subject, dedupe=True)))
    for threads in (1, 2):
        for queues in ("all", "pick", "none"):
            attempt(f"match_many threads={threads} queues={queues}",
                    lambda: sorted(sl.match_many([subject] * 40, queues=queues, threads=threads)[7].tolist()))
    attempt("num_interest", lambda: list(sl.num_interest(subject)))
    every.append(out)
print(json.dumps(every))
"""
# simd: the merge's AVX2 form where the processor has it, or its scalar
# form, which a machine with AVX2 would otherwise never run (fs_merge_simd)
CONFIGS = [[verify, cache, simd] for verify in (False, "checksum") for cache in (0, 64) for simd in (True, False)]


def run_child(data, subject):
    """Per config (verify, cache_size, simd), the child's outcomes: [call, "ok"
    or "ValueError", answer or message]."""
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps([subject, CONFIGS])],
                       input=data.hex(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (f"child exited with {r.returncode}"
                               f"{' (signal %d)' % -r.returncode if r.returncode < 0 else ''}\n{r.stderr[-6000:]}")
    return json.loads(r.stdout)


def right_answers(dialect, n_lit, others, subject):
    sl, _ = build(dialect, n_lit, others)
    m = sl.match(subject)
    md = sl.match(subject, dedupe=True)
    many = {}
    for queues in ("all", "pick", "none"):
        many[queues] = sorted(sl.match_many([subject] * 40, queues=queues)[7].tolist())
    want = {"match": _norm(m.subs, m.groups), "match dedupe": _norm(md.subs, md.groups), "many": many,
            "num_interest": list(sl.num_interest(subject))}
    return json.loads(json.dumps(want))          # as the child's answers come: lists, not tuples


@pytest.mark.parametrize("what", ["ids", "members"])
@pytest.mark.parametrize("size", SIZES, ids=[s[0] for s in SIZES])
@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_descending_run_is_refused_or_answered_right(dialect, size, what):
    case, n_lit, others, node = size
    if what == "members" and node != "lit":
        pytest.skip("the wildcard's group is the literal's other part: one case is enough")
    data, subject = descending(dialect, n_lit, others, node, what)
    with pytest.raises(ValueError, match="ids not in strictly increasing order"):
        topicmatch.Sublist.from_bytes(data, verify=True)
    want = right_answers(dialect, n_lit, others, subject)
    damaged_seen = False
    for (verify, cache, simd), outcomes in zip(CONFIGS, run_child(data, subject)):
        refused = False
        for call, how, got in outcomes:
            where = f"verify={verify!r} cache_size={cache} simd={simd} {call}"
            if how == "ValueError":
                assert "is damaged" in got, f"{where}: {got}"
                refused = damaged_seen = True
                continue
            # once a call found the damage, every later one says so
            assert not refused, f"{where} answered after the damage was reported"
            if call.startswith("match_many"):
                # queues="pick" too: a rendezvous pick depends on the set
                # of members alone, not on their order
                assert got == want["many"][call.rsplit("=", 1)[1]], where
            else:
                assert got == want["match" if call == "match again" else call], where
    # the searches and the two-ended merge that meet the disorder report it
    # (a node alone is copied, and runs merged run by run are each put in
    # once: their ids come back out of order, which verify=False allows)
    if case in FOUND and what == "ids":
        assert damaged_seen, "no call found the descending ids"


def test_merge_finds_disorder_on_both_paths():
    """A row of a big node and a few ids out of order (searched into it),
    and of two dozens-strong runs, either out of order (merged from both
    ends): each reports the damage."""
    for _, n_lit, others, node in [s for s in SIZES if s[0] in FOUND]:
        data, subject = descending("nats", n_lit, others, node, "ids")
        sl = topicmatch.Sublist.from_bytes(data, verify=False)
        with pytest.raises(ValueError, match="is damaged"):
            sl.match(subject)
        with pytest.raises(ValueError, match="is damaged"):
            sl.match_many([subject])


def test_verified_image_with_shared_ids_merges_clean():
    """The two-ended merge's check on sorted runs that share ids (the same
    id in the big node and in others, at the meeting point and elsewhere):
    no damage reported, the ids in order."""
    for n_big, n_small, shift in [(20, 9, 0), (20, 20, 0), (21, 9, 11), (9, 9, 0), (40, 30, 5), (10, 11, 0)]:
        sl = topicmatch.Sublist()
        for i in range(n_big):
            sl.insert("a.b", i)
        for i in range(n_small):
            sl.insert("a.*", i + shift)
            sl.insert("*.b", i + shift)       # the same ids twice among the small runs
        want = sl.match("a.b").subs
        assert want == sorted(want)
        img = topicmatch.Sublist.from_bytes(sl.to_bytes(), verify=False)
        assert img.match("a.b").subs == want
        assert img.match_many(["a.b"], queues="none")[0].tolist() == want

