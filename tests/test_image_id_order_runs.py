"""Ids out of order in a mapped image (verify=False), on rows of three runs
or more: test_image_id_order.py's question for the merge's other paths.

A row's biggest run takes the others between its stretches; of three runs
or more, the second biggest and the rest's merge are merged first (on the
stack, or read in place where the rest is one run), and past 256 other ids
every run is merged in place (csrc/match/fs_result.c, merge_tallied_if).
Here one run of such a row is stored descending, the image resealed, and
every way of matching must raise ValueError naming the damage or give the
undamaged index's ids (in any order).  Up to 256 other ids, the row is
checked after the merge, and the damage must be found.  The children run
in their own process, so that a crash fails the case instead of pytest."""
import json
import subprocess
import sys

import pytest

import image_codec as C
import topicmatch

# filters a.b.c matches, the literal first: (case, ids per filter, the one
# stored descending); the biggest holds the row's big run
CASES = [("second-small", [40, 5, 3, 2], 1),      # the second biggest under eight ids
         ("second-big", [40, 20, 9, 4], 2),       # a run of the rest's merge damaged
         ("rest-one", [60, 30, 12], 2),           # the rest one run, read in place
         ("second-damaged", [60, 30, 12], 1),
         ("big-damaged", [50, 10, 10, 3], 0),
         ("six-runs", [30, 9, 8, 8, 7, 2], 4),
         ("many", [300, 200, 100], 2)]            # past 256 others: merged in place
CHECKED = 256          # FEW_SMALL: up to this many other ids the row is checked


def filters(dialect):
    one, rest, sep = ("+", "#", "/") if dialect == "mqtt" else ("*", ">", ".")
    return [sep.join(f) for f in (["a", "b", "c"], ["a", one, "c"], [one, "b", "c"], ["a", "b", one],
                                  ["a", rest], [rest])], sep.join(["a", "b", "c"])


def build(dialect, sizes):
    """Each filter's ids interleaved with the others' (so that each merge
    step meets them)."""
    sl = topicmatch.Sublist(dialect)
    fl, subject = filters(dialect)
    for r, n in enumerate(sizes):
        for i in range(n):
            sl.insert(fl[r], 10 * i + r)
    return sl, subject


def descending(dialect, sizes, damaged):
    sl, subject = build(dialect, sizes)
    img = C.Image(sl.to_bytes())
    n = img.entry(filters(dialect)[0][damaged])
    assert len(n.ids) == sizes[damaged]
    for k, v in enumerate(sorted(n.ids, reverse=True)):
        img.put("<q", n.ids_off + 8 * k, v)
    return img.seal(), subject, sorted(sl.match(subject).subs)


CHILD = """
import json, sys, topicmatch
data = bytes.fromhex(sys.stdin.read())
subject = sys.argv[1]
every = []
for cache in (0, 64):
    for simd in (True, False):
        topicmatch._core._set_merge_simd(simd)
        out = []
        sl = topicmatch.Sublist.from_bytes(data, verify=False, cache_size=cache)
        calls = [("match", lambda: sorted(sl.match(subject).subs)),
                 ("match again", lambda: sorted(sl.match(subject).subs))]
        for threads in (1, 2):
            for queues in ("all", "none"):
                calls.append((f"match_many threads={threads} queues={queues}",
                              lambda: sorted(sl.match_many([subject] * 40, queues=queues, threads=threads)[7].tolist())))
        for name, f in calls:
            try:
                out.append([name, "ok", f()])
            except ValueError as e:
                out.append([name, "ValueError", str(e)])
        every.append([cache, simd, out])
print(json.dumps(every))
"""


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dialect", ["nats", "mqtt"])
def test_descending_run_of_many_is_refused_or_answered_right(dialect, case):
    name, sizes, damaged = case
    data, subject, want = descending(dialect, sizes, damaged)
    with pytest.raises(ValueError, match="ids not in strictly increasing order"):
        topicmatch.Sublist.from_bytes(data, verify=True)
    r = subprocess.run([sys.executable, "-c", CHILD, subject], input=data.hex(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"child exited with {r.returncode}\n{r.stderr[-6000:]}"
    for cache, simd, outcomes in json.loads(r.stdout):
        refused = False
        for call, how, got in outcomes:
            where = f"cache_size={cache} simd={simd} {call}"
            if how == "ValueError":
                assert "is damaged" in got, f"{where}: {got}"
                refused = True
                continue
            assert not refused, f"{where} answered after the damage was reported"
            assert got == want, where
        if sum(sizes) - max(sizes) <= CHECKED:
            assert refused, f"cache_size={cache} simd={simd}: no call found the descending ids"
