"""Helpers of tests/test_image.py: every answer an index gives for a set of
probes, as plain data (so that it can be compared exactly, across
processes too), the same answers restated from topicmatch._reference, and the
two functions a spawned child runs (this module is light to import: no
Hypothesis, no test module)."""
import topicmatch
from topicmatch import _core, _reference as R

MODES = ("all", "none", "pick")
BAD_FILTER = {"nats": "a..b", "mqtt": "a/#/b", "amqp": "x" * 256}


def inner(dialect, f):
    """The filter that holds a subscription: MQTT's '$share/G/f' is f."""
    return R.split_share(f)[0] if dialect == "mqtt" else f


def build(dialect, subs, cache_size=0):
    sl = topicmatch.Sublist(dialect, cache_size=cache_size)
    for f, i, q in subs:
        sl.insert(f, i, queue=q)
    return sl


def reference(dialect, subs):
    ref = R.ReferenceSublist(dialect)
    for f, i, q in subs:
        ref.insert(f, i, queue=q)
    return ref


def _valid(s, dialect):
    return isinstance(s, str) and R.is_valid_subject(s, dialect)


def observed(e, probes):
    """Everything e answers for probes = (subjects, batch, keys, rfilters),
    in the order e gives it (rows are compared as lists, not sets)."""
    subjects, batch, keys, rfilters = probes
    got = {"len": len(e)}
    for s in subjects:
        for dd in (False, True):
            m = e.match(s, dedupe=dd)
            got["match", s, dd] = (list(m.subs), [tuple(g) for g in m.groups])
        got["num", s] = tuple(e.num_interest(s))
        got["has", s] = e.has_interest(s)
    for q in MODES:
        for kk in (None, keys):
            for dd in (False, True):
                b = e.match_many(batch, keys=kk, queues=q, dedupe=dd)
                got["many", q, kk is not None, dd] = [None if b.invalid[i] else b[i].tolist()
                                                      for i in range(len(batch))]
    for f in rfilters:
        got["rev", f] = [tuple(t) for t in e.reverse_match(f)]
    return got


def expected(ref, probes):
    """observed()'s answers, restated from the reference (docs/guide.md, "The
    order of a row")."""
    d = ref.dialect
    subjects, batch, keys, rfilters = probes
    want = {"len": len(ref)}
    for s in subjects:
        for dd in (False, True):
            m = ref.match(s, dedupe=dd)
            want["match", s, dd] = (list(m.subs), [tuple(g) for g in m.groups])
        want["num", s] = ref.num_interest(s)
        want["has", s] = ref.has_interest(s)
    for q in MODES:
        for kk in (None, keys):
            for dd in (False, True):
                rows = []
                for i, s in enumerate(batch):
                    if not _valid(s, d):
                        rows.append(None)
                        continue
                    key = s if kk is None or kk[i] is None else kk[i]
                    rows.append(R.batch_row(ref.match(s), q, key=key, dialect=d, dedupe=dd or d == "amqp"))
                want["many", q, kk is not None, dd] = rows
    for f in rfilters:
        want["rev", f] = [tuple(t) for t in ref.reverse_match(f)]
    return want


def diff(got, want):
    """The first few answers that differ, for an assertion message."""
    out = [(k, got.get(k, "<missing>"), want.get(k, "<missing>"))
           for k in sorted(set(got) | set(want), key=repr) if got.get(k) != want.get(k)]
    return out[:5]


# ---- run in a spawned child (test_image.py, "another process")

def child_build_and_save(dialect, subs, path, probes):
    """Build the index here, save its image to path; its answers."""
    sl = build(dialect, subs)
    sl.save(path)
    return observed(sl, probes)


def child_open_and_answer(path, probes):
    """Open the image at path here; its answers, its bytes and its stats."""
    sl = topicmatch.Sublist.open(path)
    got = observed(sl, probes)
    st = sl.stats()
    return got, sl.to_bytes(), st["mapped_bytes"], st["inserts"], sl.dialect


def verdict(data, threads):
    """Sublist.from_bytes(data, verify=True)'s verdict: "opened", or the
    refusal's message.  threads: the full check forced onto 4 threads (the
    tables cut among them, the checksum beside them) whatever the image's
    size; else in one thread whatever its size."""
    saved_min = _core._set_image_parallel_min(0 if threads else 1 << 62)
    saved = _core._set_batch_threading(cpus=4)
    try:
        topicmatch.Sublist.from_bytes(data, verify=True)
        return "opened"
    except ValueError as e:
        return str(e)
    finally:
        _core._set_batch_threading(**saved)
        _core._set_image_parallel_min(saved_min)
