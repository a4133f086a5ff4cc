"""Hostile mapped images (file format version 3, csrc/serial/fs_image.c, fs_image_verify.c).

Images of real indexes of each dialect -- literal filters, shaped filters,
trie filters (deeper than a shape holds: 50 tokens; AMQP's '#' in the
middle), nodes with one id, with several, with queue groups -- damaged in
every way a file can be:

* truncated at many lengths, as they are (the header's length no longer
  fits) and "resealed" (header, root block and checksum made to fit the cut:
  only the objects past it are gone), and with their tail zeroed (a file
  whose last pages never reached the disk);
* single bit flips at every bit of the header and the root block, and at a
  bit of every 8-byte word of the objects plus random ones (as they are, and
  resealed with a valid checksum);
* forged images with a valid checksum (tests/image_codec.py), one per broken
  invariant: offsets outside the image, misaligned, into the header; a node
  reached twice; a filter both in a shape and in the trie; ids and queue
  groups out of order; caps that are not powers of two; trie loops; counts
  that do not add up; a shape table holding a filter of another shape;
  probe sets naming missing or wrong shapes; ...

Each image is opened twice.  verify=True must raise ValueError (a forged
case: naming the problem), or -- only where the damage left a valid image,
say a flipped id -- open an index that answers exactly like the index
rebuilt from it.  verify=False must raise ValueError at open, or at the
first call that reaches the damage (match, match_many, has_interest,
num_interest, reverse_match, to_bytes), after which every query call raises
it; or answer.  It must never crash, hang, or raise anything but ValueError.

The images are opened in child processes, so that a crash or a hang fails
the case instead of pytest: a child runs a batch of cases and reports each;
one that dies is restarted after the case it died in, which is reported
with its signal.  A per-case watchdog (faulthandler) turns a hang into a
failure; outside the sanitizer passes an address-space limit turns a
runaway allocation into MemoryError, which fails the case too.

Library bugs found here are listed in KNOWN_BUGS, each with a strict xfail
reproducer (test_known_bug_*); the sweeps tolerate exactly those outcomes
(narrowly: by the damaged field and the failing call), and say so.  When a
bug is fixed, its reproducer XPASSes (a failure, strict): drop it from
KNOWN_BUGS, which makes the sweeps strict again.
"""
import faulthandler
import functools
import json
import os
import random
import resource
import struct
import subprocess
import sys
import warnings

import pytest

import topicmatch
from image_helpers import verdict
import image_codec as C
from examples import REPEAT

HERE = os.path.dirname(os.path.abspath(__file__))
DIALECTS = ("nats", "mqtt", "amqp")
SANITIZED = any(rt in os.environ.get("LD_PRELOAD", "") for rt in ("libasan", "libclang_rt.asan"))
CASE_SECONDS = 60 if SANITIZED else 20      # a healthy case takes milliseconds

SEP = {"nats": ".", "mqtt": "/", "amqp": "."}
ONE = {"nats": "*", "mqtt": "+", "amqp": "*"}
REST = {"nats": ">", "mqtt": "#", "amqp": "#"}
M64 = (1 << 64) - 1

# ------------------------------------------------------------ the indexes


def subscriptions(d):
    """(filter, id, queue) of the base index: literal, shaped and trie
    filters, nodes with one id, several ids and queue groups."""
    o, r = ONE[d], REST[d]

    def j(*t):
        return SEP[d].join(t)

    deep = ["a"] + [f"d{k}" for k in range(1, 50)]      # 50 tokens: more than a shape holds
    deep1 = deep[:3] + [o] + deep[4:]                    # a.d1.d2.*.d4...d49
    deep2 = deep[:49] + [r]                              # a.d1...d48.>
    deep3 = deep[:20] + [o] + deep[21:]
    subs = [("a", 1, None), (j("a", "b"), 2, None), (j("a", "b"), 3, None), (j("a", "b"), 4, "q"),
            (j("a", "b"), 40, "r"), (j("a", "b"), 41, "r"), (j("orders", "eu", "created"), 5, None),
            ("lit1", 50, None), (j("lit2", "x"), 51, None),
            (j("a", o), 6, None), (j("a", o), 7, "g"), (j("a", o), 8, "g"), (j(o, "b", r), 9, None),
            (j("x", o, "y", r), 10, "h"), (j("c", "d", o, "e"), 11, None), (r, 12, None),
            (j(*deep1), 20, None), (j(*deep1), 21, None), (j(*deep1), 22, "dq"), (j(*deep1), 23, "dq"),
            (j(*deep2), 24, None), (j(*deep3), 25, "dr"), (j(*deep3), 26, None),
            (j(*deep1[:49], "e1"), 27, None), (j(*deep1[:49], "e2"), 28, None)]   # a level of 3 in 4 slots
    if d == "amqp":
        subs += [(j("a", r, "b"), 30, None), (j(r, "z"), 31, "q"), (j("m", r, r, "n"), 32, None)]
    if d == "mqtt":
        subs += [("$SYS/x", 33, None), (j("", o), 34, None), ("$share/sg/a/+", 35, None)]
    return subs


def build(d):
    sl = topicmatch.Sublist(d)
    for f, i, q in subscriptions(d):
        sl.insert(f, i, queue=q)
    return sl


def subject_of(d, f):
    if f.startswith("$share/"):
        f = f.split("/", 2)[2]
    toks = ["zz" if t == ONE[d] else "yy" if t == REST[d] else t for t in f.split(SEP[d])]
    return SEP[d].join(toks)


@functools.lru_cache(maxsize=None)
def probes(d):
    s = SEP[d]
    subs = sorted({subject_of(d, f) for f, _, _ in subscriptions(d)})
    return tuple(subs + [f"a{s}b{s}c", f"nope{s}x", f"b{s}b{s}b", f"{'$SYS' if d != 'amqp' else 'q'}{s}x", "zz"])


@functools.lru_cache(maxsize=None)
def reverse_queries(d):
    s, o, r = SEP[d], ONE[d], REST[d]
    q = [r, f"a{s}{o}", f"a{s}b", f"{o}{s}{o}", f"a{s}d1{s}{r}"]
    return tuple(q + ([f"a{s}#{s}d49"] if d == "amqp" else []))


@functools.lru_cache(maxsize=None)
def base(d):
    return build(d).to_bytes()


@functools.lru_cache(maxsize=None)
def parsed(d):
    return C.Image(base(d))


# ------------------------------------------------------------ exercising an index


def norm(r):
    return [sorted(r.subs), sorted((g[0], g[1], sorted(g[2])) for g in r.groups)]


def answers(sl, d):
    """Everything the index answers over the probes (JSON-able)."""
    ps = list(probes(d))
    out = {"len": len(sl), "match": [norm(sl.match(s)) for s in ps],
           "has": [sl.has_interest(s) for s in ps], "num": [list(sl.num_interest(s)) for s in ps],
           "reverse": [sorted(sl.reverse_match(q), key=repr) for q in reverse_queries(d)]}
    b = sl.match_many(ps, queues="all")
    out["many"] = [sorted(b[i].tolist()) for i in range(len(ps))]
    return out


def calls(sl, d, rng):
    """The calls a caller makes, (name, thunk), in a seeded order."""
    ps = list(probes(d))
    s = SEP[d]
    c = [("match_many", lambda: sl.match_many(ps, queues=rng.choice(["all", "pick", "none"]),
                                              threads=rng.choice([1, 2]))),
         ("to_bytes(version=2)", lambda: sl.to_bytes(version=2))]
    c += [(f"match({x!r})", lambda x=x: sl.match(x)) for x in ps]
    c += [(f"has_interest({x!r})", lambda x=x: sl.has_interest(x)) for x in ps[::3]]
    c += [(f"num_interest({x!r})", lambda x=x: sl.num_interest(x)) for x in ps[1::4]]
    c += [(f"reverse_match({q!r})", lambda q=q: sl.reverse_match(q)) for q in reverse_queries(d)]
    rng.shuffle(c)
    # a change makes a live part: the walks then merge it with the image
    c.insert(rng.randrange(len(c) + 1), ("insert", lambda: sl.insert(f"a{s}b", 777)))
    return c


DAMAGED = "is damaged"


def exercise(sl, d, rng):
    """verify=False: call everything.  'answered'; or 'damaged' -- a call
    raised ValueError naming damage, and every query call after it raised
    it too; or what went wrong, naming the call."""
    for name, f in calls(sl, d, rng):
        try:
            f()
        except ValueError as e:
            if DAMAGED not in str(e):
                return f"{name}: ValueError not naming damage: {e}"
            p = probes(d)[0]
            later = [("match", lambda: sl.match(p)), ("has_interest", lambda: sl.has_interest(p)),
                     ("num_interest", lambda: sl.num_interest(p)), ("reverse_match", lambda: sl.reverse_match(REST[d])),
                     ("match_many", lambda: sl.match_many(list(probes(d)), threads=2)),
                     ("to_bytes", lambda: sl.to_bytes()), ("to_bytes(version=2)", lambda: sl.to_bytes(version=2)),
                     ("again", f)]
            for lname, g in later:
                try:
                    g()
                except ValueError as e2:
                    if DAMAGED not in str(e2):
                        return f"after damage, {lname}: ValueError not naming damage: {e2}"
                except BaseException as e2:      # noqa: BLE001 - reported
                    return f"after damage, {lname}: {type(e2).__name__}: {e2}"
                else:
                    return f"after the damage was reported in {name}, {lname} answered"
            return "damaged"
        except BaseException as e:               # noqa: BLE001 - reported
            return f"{name}: {type(e).__name__}: {e}"
    return "answered"


def consistent(sl, d):
    """A verified image answers exactly as the index rebuilt from it."""
    rebuilt = topicmatch.Sublist.from_bytes(sl.to_bytes(version=2))
    a, b = answers(sl, d), answers(rebuilt, d)
    if a != b:
        return f"verified image answers unlike its rebuilt index: {[k for k in a if a[k] != b[k]]}"
    return None


def open_both(data, d, rng):
    """The outcomes of opening data with verify=True (in one thread, and on
    threads) and with verify=False."""
    out = {"threads": verdict(data, True)}
    try:
        sl = topicmatch.Sublist.from_bytes(data, verify=True)
    except ValueError as e:
        out["verify"] = "ValueError"
        out["verify_msg"] = str(e)
    except BaseException as e:           # noqa: BLE001 - reported
        out["verify"] = f"{type(e).__name__}: {e}"
    else:
        out["verify"] = "opened"
        try:
            out["consistent"] = consistent(sl, d)
        except BaseException as e:       # noqa: BLE001 - reported
            out["consistent"] = f"{type(e).__name__}: {e}"
        del sl
    try:
        sl = topicmatch.Sublist.from_bytes(data, verify=False, cache_size=rng.choice([0, 0, 64]))
    except ValueError as e:
        out["fast"] = "open-error"
        out["fast_msg"] = str(e)
        return out
    except BaseException as e:           # noqa: BLE001 - reported
        out["fast"] = f"open: {type(e).__name__}: {e}"
        return out
    out["fast"] = exercise(sl, d, rng)
    return out


def problems(out, *, verify_must_fail, expect=None, fast=None):
    """What is wrong with an outcome ([]: nothing).  expect: text (or a
    tuple of alternatives) verify=True's message must hold; fast:
    'refused' when verify=False must refuse (at open or at a call)."""
    if "crash" in out:
        return [f"child died: {out['crash']}"]
    bad = []
    v = out.get("verify")
    alone = out.get("verify_msg") if v == "ValueError" else v
    if "threads" in out and out["threads"] != alone:
        bad.append(f"verify=True on threads: {out['threads']!r}, in one thread: {alone!r}")
    if v == "ValueError":
        msg = out["verify_msg"]
        if not msg.startswith(("corrupt topicmatch index: ", "not a topicmatch image: ")):
            bad.append(f"verify=True: odd message {msg!r}")
        if expect and not any(e in msg for e in (expect if isinstance(expect, tuple) else (expect,))):
            bad.append(f"verify=True: message {msg!r} does not name {expect!r}")
    elif v == "opened":
        if verify_must_fail:
            bad.append("verify=True opened it")
        elif out.get("consistent"):
            bad.append(f"verify=True: {out['consistent']}")
    else:
        bad.append(f"verify=True raised {v}")
    f = out.get("fast")
    if f == "open-error":
        if not out["fast_msg"].startswith(("corrupt topicmatch index: ", "not a topicmatch image: ")):
            bad.append(f"verify=False: odd open message {out['fast_msg']!r}")
    elif f == "answered":
        if fast == "refused":
            bad.append("verify=False: answered every call (the damage was never reported)")
    elif f != "damaged":
        bad.append(f"verify=False: {f}")
    return bad


# ------------------------------------------------------------ known library bugs
#
# Each: what is wrong, and which outcomes it explains (a predicate over the
# problem text and the damaged field).  Reproduced by test_known_bug_*.

# Library bugs these sweeps found, while they stood: each was tolerated by a
# narrow predicate here and reproduced by a strict xfail.  All are fixed now
# (their reproducers below are plain regression tests); a new one goes here
# the same way until it is fixed.
KNOWN_BUGS = {}


def known_bug(prob, field):
    for key, (_, pred) in KNOWN_BUGS.items():
        if pred(prob, field):
            return key
    return None


# ------------------------------------------------------------ child processes
#
# A child runs cases [start, n) of one kind and dialect and prints, per
# case, "B i" as it begins and "R i json" as it ends.  The parent restarts a
# child that died after the case it died in.


def _limit_memory():
    """A runaway allocation becomes MemoryError (not under ASan, which
    reserves terabytes of address space)."""
    if SANITIZED or not hasattr(resource, "RLIMIT_AS") or not os.path.exists("/proc/self/status"):
        return
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.RLIM_INFINITY))


def _child_main(kind, dialect, start):
    cases = CASES[kind](dialect)
    _limit_memory()
    faulthandler.enable()            # a crash prints the Python stack: which call (crash_call)
    for i in range(start, len(cases)):
        print(f"B {i}", flush=True)
        data = cases[i].make()
        faulthandler.dump_traceback_later(CASE_SECONDS, exit=True)
        out = open_both(data, dialect, random.Random(f"{kind}/{dialect}/{i}"))
        faulthandler.cancel_dump_traceback_later()
        print(f"R {i} {json.dumps(out)}", flush=True)


def run_cases(kind, dialect):
    """Every case's outcome, by case index."""
    names = [c.name for c in CASES[kind](dialect)]
    results = [None] * len(names)
    start = 0
    while start < len(names):
        code = (f"import sys; sys.path.insert(0, {HERE!r}); import test_image_hostile as H; "
                f"H._child_main({kind!r}, {dialect!r}, {start})")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=CASE_SECONDS * 4 + len(names))
        last = None
        for line in p.stdout.splitlines():
            if line.startswith("B "):
                last = int(line.split()[1])
            elif line.startswith("R "):
                _, i, js = line.split(" ", 2)
                results[int(i)] = json.loads(js)
        if p.returncode == 0:
            break
        assert last is not None and results[last] is None, \
            f"child failed outside a case (rc {p.returncode}):\n{p.stderr[-4000:]}"
        why = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
        if "Timeout (" in p.stderr:
            why = f"hung (over {CASE_SECONDS} s)"
        results[last] = {"crash": f"{why} in {crash_call(p.stderr)!r}; stderr: {p.stderr[-1200:]}"}
        start = last + 1
    for name, out in zip(names, results):
        out["name"] = name
    return results


def crash_call(stderr):
    """The line of this file (a call's lambda) innermost in the stack that
    faulthandler printed for a crashed child: which call crashed."""
    for line in stderr.splitlines():
        if 'test_image_hostile.py", line ' in line:
            n = int(line.split('", line ')[1].split()[0])
            with open(os.path.join(HERE, "test_image_hostile.py")) as f:
                return f.read().splitlines()[n - 1].strip()
    return "?"


@functools.lru_cache(maxsize=None)
def results(kind, dialect):
    return run_cases(kind, dialect)


def report(kind, dialect, check):
    """Fail on every problem of a sweep that no known bug explains
    (check(case, out) -> problems), print the tally and the known ones."""
    cases = CASES[kind](dialect)
    bad, known, tally = [], {}, {}
    for case, out in zip(cases, results(kind, dialect)):
        for k in ("verify", "fast"):
            key = f"{k}:{out.get(k, 'died')}"
            key = key if len(key) < 40 else key[:40] + "..."
            tally[key] = tally.get(key, 0) + 1
        field = parsed(dialect).field_at(case.pos) if case.pos is not None else None
        for prob in check(case, out):
            bug = known_bug(prob, field)
            if bug:
                known.setdefault(bug, []).append(case.name)
            else:
                bad.append(f"{case.name} [{field}]: {prob}")
    print(f"\n{kind}/{dialect}: {len(cases)} cases; {tally}")
    for bug, names in known.items():
        print(f"  known bug {bug}: {len(names)} cases, e.g. {names[:3]}")
        warnings.warn(f"{kind}/{dialect}: {len(names)} cases hit known bug {bug} (e.g. {names[:3]})", stacklevel=2)
    assert not bad, f"{len(bad)} problems; first ones:\n" + "\n".join(bad[:25])
    return tally


class Case:
    """One damaged image: name, make() -> bytes, pos (the damaged byte, if one)."""
    __slots__ = ("name", "make", "pos", "meta")

    def __init__(self, name, make, pos=None, meta=None):
        self.name, self.make, self.pos, self.meta = name, make, pos, meta or {}


# ------------------------------------------------------------ sweeps


def _cut(b, n):
    return b[:n] if n <= len(b) else b + bytes(n - len(b))


def truncated_cases(d):
    b = base(d)
    lengths = sorted(set(range(0, 1100)) | set(range(1100, len(b), 7)) | set(range(len(b) - 64, len(b)))
                     | {len(b) + k for k in (1, 7, 8, 9, 64)})
    if REPEAT:
        lengths = lengths[::10]
    return [Case(f"cut to {n}", functools.partial(_cut, b, n)) for n in lengths]


def _zero(b, at, end):
    x = bytearray(b)
    end = min(end, len(b) - 8)
    x[at:end] = bytes(end - at)
    return C.reseal(x)


def resealed_truncated_cases(d):
    """Cut at every object boundary and every third 8-byte boundary, with
    header, root block and checksum made to fit (only the objects past the
    cut are gone); zeroed from there to the end instead (a file whose tail
    never reached the disk: the root block's offsets still lead into the
    image, to zeros), and 64 zeroed bytes from there (a torn write)."""
    b = base(d)
    img = parsed(d)
    ends = sorted({o for o in img.node} | {o - 16 for o in img.node} | {o for o in img.level}
                  | set(range(C.OBJECTS + 8, len(b) - 8, 24)))
    ends = [e for e in ends if C.OBJECTS < e < len(b) - 8]
    if REPEAT:
        ends = ends[::10]
    return ([Case(f"cut resealed at {e}", functools.partial(C.truncate_sealed, b, e + 8), e) for e in ends]
            + [Case(f"zeroed from {e}", functools.partial(_zero, b, e, len(b)), e) for e in ends[::5]]
            + [Case(f"zeroed [{e}, {e + 64})", functools.partial(_zero, b, e, e + 64), e) for e in ends])


def _flip(b, pos, bit, seal):
    x = bytearray(b)
    x[pos] ^= 1 << bit
    return C.reseal(x) if seal else bytes(x)


def header_flip_cases(d):
    """Every bit of the header and the root block as flipped (the checksum
    no longer matches: verify=False does not read it), and of the checksum."""
    b = base(d)
    spots = [(pos, bit) for pos in range(C.OBJECTS) for bit in range(8)]
    spots += [(pos, bit) for pos in range(len(b) - 8, len(b)) for bit in (0, 7)]
    if REPEAT:
        spots = spots[::10]
    return [Case(f"flip {pos}.{bit}", functools.partial(_flip, b, pos, bit, False), pos) for pos, bit in spots]


def header_flip_sealed_cases(d):
    """Two bits of every header and root-block byte, flipped and resealed:
    only the structural checks stand between them and the walks."""
    b = base(d)
    spots = [(pos, bit) for pos in range(C.OBJECTS) for bit in (pos % 4, pos % 4 + 4)]
    if REPEAT:
        spots = spots[::10]
    return [Case(f"flip resealed {pos}.{bit}", functools.partial(_flip, b, pos, bit, True), pos)
            for pos, bit in spots]


def object_flip_cases(d):
    """A bit of every 8-byte word of the objects, and random bits, resealed."""
    b = base(d)
    rng = random.Random(f"objects/{d}")
    end = len(b) - 8
    spots = [(w + k // 8, k % 8) for w, k in ((w, (w // 8 * 7) % 64) for w in range(C.OBJECTS, end, 8))]
    spots += [(rng.randrange(C.OBJECTS, end), rng.randrange(8)) for _ in range(400)]
    if REPEAT:
        spots = spots[::10]
    return [Case(f"flip resealed {pos}.{bit}", functools.partial(_flip, b, pos, bit, True), pos)
            for pos, bit in spots]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncated_images_are_refused_at_open(dialect):
    """Cut (or lengthened): the header's payload length no longer fits, so
    both modes refuse it at open."""
    def check(case, out):
        bad = problems(out, verify_must_fail=True)
        if out.get("fast") != "open-error":
            bad.append(f"verify=False: {out.get('fast')}, not refused at open")
        return bad
    report("truncated", dialect, check)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncated_resealed_and_zeroed_tails(dialect):
    """Resealed cuts: verify=True refuses every one (each loses part of a
    reachable object); verify=False refuses (mostly at open: the shapes'
    tables are written last) or answers.  Zeroed bytes: verify=True refuses
    every one; verify=False refuses at open, at the first call that reaches
    a zeroed node (no longer an image's node), or answers (zeroed slots and
    links read as empty ones)."""
    tally = report("truncated_sealed", dialect, lambda case, out: problems(out, verify_must_fail=True))
    assert tally.get("fast:damaged", 0) > 20         # the walks met the damage, not only open


@pytest.mark.parametrize("dialect", DIALECTS)
def test_header_and_root_block_bit_flips(dialect):
    """Every bit of bytes [0, 1024) and of the checksum: verify=True always
    refuses (the checksum, or a header check before it); verify=False
    refuses, or answers -- never worse."""
    report("header_flips", dialect, lambda case, out: problems(out, verify_must_fail=True))


def _root_byte_read(d, pos):
    """Does the image read header / root-block byte pos?  (Not the padding
    after the root block's fields, nor the offsets of shapes it lacks.)"""
    n = parsed(d).nshapes
    return pos < C.ROOT_SHAPE + 8 * n or C.ROOT_PROBE <= pos < C.ROOT_END


@pytest.mark.parametrize("dialect", DIALECTS)
def test_header_and_root_block_bit_flips_resealed(dialect):
    """Resealed: verify=True refuses every flip of a byte the image reads;
    a flip elsewhere (padding, offsets of shapes it lacks) leaves an index
    that answers like its rebuilt copy."""
    report("header_flips_sealed", dialect,
           lambda case, out: problems(out, verify_must_fail=_root_byte_read(dialect, case.pos)))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_object_bit_flips_resealed(dialect):
    """A bit of every word of the objects and random ones, resealed:
    verify=True refuses, or opens an index that answers like its rebuilt
    copy (a flipped id, a stale bitmap bit); verify=False refuses, reports
    damage at a call, or answers -- never worse."""
    tally = report("object_flips", dialect, lambda case, out: problems(out, verify_must_fail=False))
    assert tally.get("verify:ValueError", 0) > len(CASES["object_flips"](dialect)) // 2
    assert tally.get("fast:damaged", 0) > 50


# ------------------------------------------------------------ forged images
#
# One broken invariant each, with a valid checksum.  A mutator edits the
# parsed base image (image_codec.Image) and returns nothing, or False where
# the case does not apply to the dialect.  expect: what verify=True's
# message must name (alternatives: a tuple); fast: "refused" where
# verify=False must refuse too (an offset the walks follow), "open" where
# it must refuse at open (the header and root block are checked there).

FORGED = []


def forged(name, expect, fast=None):
    def deco(f):
        FORGED.append((name, f, expect, fast))
        return f
    return deco


def _deep(d):
    """The deep trie filter's tokens a.d1.d2.*.d4...d49 (bytes)."""
    return [b"a", b"d1", b"d2", ONE[d].encode()] + [f"d{k}".encode() for k in range(4, 50)]


def _deep_rest(d):
    """The trie filter a.d1...d48.> (bytes): its last node a rest wildcard."""
    return [b"a"] + [f"d{k}".encode() for k in range(1, 49)] + [REST[d].encode()]


# -- offsets outside the image
for _name, _at in (("past the end", lambda img: len(img.b) + 64), ("at the checksum", lambda img: len(img.b) - 8),
                   ("at 2**64 - 8", lambda img: M64 - 7), ("at 2**63", lambda img: 1 << 63)):
    forged(f"literal slot's node {_name}", "node outside the image", "refused")(
        lambda img, d, at=_at: img.put64(img.slot_of(img.entry("a")) + 8, at(img)))


@forged("shape slot's node past the end", "node outside the image", "refused")
def _(img, d):
    img.put64(img.slot_of(img.entry(f"a{SEP[d]}{ONE[d]}")) + 8, len(img.b) + 4096)


@forged("trie node's next level past the end", "level outside the image", "refused")
def _(img, d):
    img.put64(img.trie("a").link + 8, len(img.b) + 4096)


@forged("trie level's one child past the end", "node outside the image", "refused")
def _(img, d):
    img.put64(img.level[img.trie("a", "d1", "d2").next].off + C.LV_ONE, len(img.b) + 64)


@forged("trie level's rest child past the end", "node outside the image", "refused")
def _(img, d):
    img.put64(img.level[img.trie("a", "d1", "d2").next].off + C.LV_REST, len(img.b) + 64)


@forged("trie node's parent past the end", ("not where its parent", "not reaching the root"), "refused")
def _(img, d):
    img.put64(img.trie("a", "d1").link, len(img.b) + 64)


@forged("ids past the end", "node outside the image", "refused")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put64(n.off + C.ND_SUBS, len(img.b) + 8 - n.off)


@forged("queue groups past the end", "node outside the image", "refused")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put64(n.off + C.ND_GROUPS, len(img.b) - n.off)


@forged("a group's ids past the end", "node outside the image", "refused")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[0][0]
    img.put64(g + 8, len(img.b) - g)


@forged("a group's name past the end", "node outside the image", "refused")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[0][0]
    img.put64(g, len(img.b) - g)


@forged("trie level's slots past the end", "level outside the image", "refused")
def _(img, d):
    img.put64(img.level[img.trie("a").next].off + C.LV_SLOTS, len(img.b) + 8)


@forged("literal table's bitmap past the end", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(img.lit + C.LV_FILTER, len(img.b))


@forged("root block's root past the end", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(C.ROOT_ROOT, len(img.b) + 64)


@forged("root block's literal table past the end", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(C.ROOT_LITERALS, len(img.b) + 64)


@forged("root block's shape past the end", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(C.ROOT_SHAPE + 8, len(img.b) - 16)


@forged("a token running past the end", "node outside the image", "refused")
def _(img, d):
    n = img.trie(*_deep(d)[:6])
    img.put("<H", n.off + C.ND_TOKLEN, len(img.b) - n.off)


@forged("nsubs running past the end", "node outside the image", "refused")
def _(img, d):
    img.put32(img.entry(f"a{SEP[d]}b").off + C.ND_NSUBS, 1 << 30)


@forged("two ids in a node with room for one", "node outside the image", "refused")
def _(img, d):
    img.put32(img.entry("a").off + C.ND_NSUBS, 2)


@forged("a thousand queue groups", "node outside the image", "refused")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put32(n.off + n.groups, 1000)


# -- misaligned
@forged("literal slot's node misaligned", "node outside the image", "refused")
def _(img, d):
    s = img.slot_of(img.entry("a")) + 8
    img.put64(s, img.u("<Q", s) + 4)


@forged("trie node's next level misaligned", "level outside the image", "refused")
def _(img, d):
    s = img.trie("a").link + 8
    img.put64(s, img.u("<Q", s) + 4)


@forged("trie level's one child misaligned", "node outside the image", "refused")
def _(img, d):
    s = img.level[img.trie("a", "d1", "d2").next].off + C.LV_ONE
    img.put64(s, img.u("<Q", s) + 1)


@forged("ids misaligned", "node outside the image", "refused")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put64(n.off + C.ND_SUBS, n.subs + 4)


@forged("trie level's slots misaligned", "level outside the image", "refused")
def _(img, d):
    L = img.level[img.trie("a").next]
    img.put64(L.off + C.LV_SLOTS, L.slots + 4)


@forged("root block's root misaligned", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(C.ROOT_ROOT, img.root + 4)


# -- into the header and the root block
@forged("literal slot's node in the header", "node outside the image", "refused")
def _(img, d):
    img.put64(img.slot_of(img.entry("a")) + 8, 8)


@forged("literal slot's node in the root block", "node outside the image", "refused")
def _(img, d):
    img.put64(img.slot_of(img.entry("a")) + 8, C.ROOT_SHAPE)


@forged("trie node's next level in the root block", "level outside the image", "refused")
def _(img, d):
    img.put64(img.trie("a").link + 8, C.HEADER)


@forged("ids in the header", "node outside the image", "refused")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put64(n.off + C.ND_SUBS, 16 - n.off)


@forged("root block's literal table in the header", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(C.ROOT_LITERALS, 8)


@forged("root block's root at offset 0", "root block's offsets outside the image", "open")
def _(img, d):
    img.put64(C.ROOT_ROOT, 0)


# -- a node reached twice: duplicate subscriptions
@forged("a literal entry in two slots", "node reached twice")
def _(img, d):
    n = img.entry("a")
    L = img.level[img.lit]
    s = img.empty_slots(L)[0]
    img.b[s:s + 16] = img.b[img.slot_of(n):img.slot_of(n) + 16]


@forged("a trie child in two slots", "node reached twice")
def _(img, d):
    L = img.level[img.trie(*_deep(d)[:49]).next]     # 3 children in 4 slots
    s, c = img.empty_slots(L)[0], L.slot_list[0][0]
    img.b[s:s + 16] = img.b[c:c + 16]


@forged("the same node as one and rest child", "node reached twice")
def _(img, d):
    L = img.level[img.trie("a", "d1", "d2").next]
    img.put64(L.off + C.LV_REST, L.one)


@forged("a shape entry in a second shape's table", ("node reached twice", "wrong shape's table"))
def _(img, d):
    e = img.entry(f"a{SEP[d]}{ONE[d]}")
    other = next(sh for sh in img.shapes if sh.off != img.shape_holding(e).off)
    s = img.empty_slots(other.table)[0]
    img.b[s:s + 16] = img.b[img.slot_of(e):img.slot_of(e) + 16]


@forged("a filter both in a shape table and in the trie", "filter both in a shape table and in the trie")
def _(img, d):
    # a '*' child under the trie's "a": the trie then holds "a.*", which
    # the shape table holds too; counts made to fit
    a = img.trie("a")
    one = img.trie(*_deep(d)[:4])                 # a wildcard node to copy
    at = img.append(16 + 32 + 8)
    node = at + 16
    img.put64(at, a.off)                          # link: parent, no next level
    img.b[node:node + 40] = img.b[one.off:one.off + 40]
    img.put64(node + C.ND_SUBS, 999)
    img.put64(node + C.ND_GROUPS, 0)
    img.put32(node + C.ND_NSUBS, 1)
    img.put32(node + C.ND_SUBCAP, 1)
    img.put64(img.level[a.next].off + C.LV_ONE, node)
    img.put64(24, img.subs + 1)
    img.put64(40, img.nodes + 1)
    img.put64(C.ROOT_NODES, img.nodes + 1)


@forged("an id twice in a node", "ids not in strictly increasing order")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put("<q", n.ids_off + 8, n.ids[0])


@forged("an id twice in a queue group", "ids not in strictly increasing order")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[1]
    img.put("<q", g[3] + 8, g[2][0])


@forged("a queue group named twice", "queue groups not in strictly increasing name order")
def _(img, d):
    (g0, name0, _, _), (g1, _, _, _) = img.entry(f"a{SEP[d]}b").group_list[:2]
    img.put64(g1, g0 + img.u("<Q", g0) - g1)      # g1's name: g0's bytes
    img.b[g1 + 16:g1 + 24] = img.b[g0 + 16:g0 + 24]   # name_len, name_hash


# -- order
@forged("ids out of order", "ids not in strictly increasing order")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put("<q", n.ids_off, n.ids[1])
    img.put("<q", n.ids_off + 8, n.ids[0])


@forged("a trie node's ids out of order", "ids not in strictly increasing order")
def _(img, d):
    n = img.trie(*_deep(d))
    img.put("<q", n.ids_off, n.ids[1])
    img.put("<q", n.ids_off + 8, n.ids[0])


@forged("a queue group's ids out of order", "ids not in strictly increasing order")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[1]
    img.put("<q", g[3], g[2][1])
    img.put("<q", g[3] + 8, g[2][0])


@forged("queue groups out of name order", "queue groups not in strictly increasing name order")
def _(img, d):
    (g0, _, _, _), (g1, _, _, _) = img.entry(f"a{SEP[d]}b").group_list[:2]
    n0, n1 = g0 + img.u("<Q", g0), g1 + img.u("<Q", g1)
    img.put64(g0, n1 - g0)
    img.put64(g1, n0 - g1)
    a, b = bytes(img.b[g0 + 16:g0 + 24]), bytes(img.b[g1 + 16:g1 + 24])
    img.b[g0 + 16:g0 + 24], img.b[g1 + 16:g1 + 24] = b, a


# -- caps
@forged("literal table's cap not a power of two", "root block's offsets outside the image", "open")
def _(img, d):
    L = img.level[img.lit]
    img.put32(L.off + C.LV_CAP, L.cap - 1)


@forged("trie level's cap not a power of two", "level outside the image", "refused")
def _(img, d):
    L = img.level[img.node[img.root].next]
    img.put32(L.off + C.LV_CAP, 3 if L.cap != 3 else 6)


@forged("shape table's cap not a power of two", "root block's offsets outside the image", "open")
def _(img, d):
    L = img.shapes[0].table
    img.put32(L.off + C.LV_CAP, 3 if L.cap != 3 else 5)


@forged("trie level's cap doubled (slots run into other objects)", None)
def _(img, d):
    L = img.level[img.trie("a", "d1").next]
    img.put32(L.off + C.LV_CAP, L.cap * 2)


@forged("trie level's count over its cap", "level outside the image", "refused")
def _(img, d):
    L = img.level[img.trie("a").next]
    img.put32(L.off + C.LV_COUNT, L.cap + 1)


@forged("literal bitmap's size not a power of two", "root block's offsets outside the image", "open")
def _(img, d):
    L = img.level[img.lit]
    img.put64(L.off + C.LV_MASK, L.filter_mask - 1)


# -- trie loops
@forged("a trie level's one child is an ancestor", "node reached twice")
def _(img, d):
    img.put64(img.level[img.trie(*_deep(d)[:10]).next].off + C.LV_ONE, img.trie(*_deep(d)[:5]).off)


@forged("a trie level's rest child is an ancestor", "node reached twice")
def _(img, d):
    img.put64(img.level[img.trie(*_deep(d)[:10]).next].off + C.LV_REST, img.trie(*_deep(d)[:5]).off)


@forged("a trie level's one child is the root", "node reached twice")
def _(img, d):
    img.put64(img.level[img.trie(*_deep(d)[:10]).next].off + C.LV_ONE, img.root)


@forged("a trie level's one child is its own node", "node reached twice")
def _(img, d):
    n = img.trie(*_deep(d)[:10])
    img.put64(img.level[n.next].off + C.LV_ONE, n.off)


@forged("a trie slot leads to an ancestor", ("node reached twice", "not where its parent"))
def _(img, d):
    anc = img.trie(*_deep(d)[:5])
    L = img.level[img.trie(*_deep(d)[:49]).next]
    s = img.empty_slots(L)[0]
    img.b[s:s + 16] = img.b[img.slot_of(anc):img.slot_of(anc) + 16]


@forged("a trie node is its own parent", ("not where its parent", "not reaching the root"))
def _(img, d):
    n = img.trie(*_deep(d)[:10])
    img.put64(n.link, n.off)


@forged("a trie node's parent is its child", ("not where its parent", "not reaching the root"))
def _(img, d):
    n = img.trie(*_deep(d)[:10])
    img.put64(n.link, img.trie(*_deep(d)[:11]).off)


# -- counts that do not add up
@forged("header's subscription count + 1", "subscription count does not match the header")
def _(img, d):
    img.put64(24, img.subs + 1)


@forged("header's literal count + 1", "literal count does not match the header")
def _(img, d):
    img.put64(32, img.literals + 1)


@forged("node count + 1 (header and root block)", "node count does not match the header")
def _(img, d):
    img.put64(40, img.nodes + 1)
    img.put64(C.ROOT_NODES, img.nodes + 1)


@forged("header's node count unlike the root block's", "node count does not match the header", "open")
def _(img, d):
    img.put64(40, img.nodes + 1)


@forged("literal table's count - 1", "table count does not match its slots")
def _(img, d):
    L = img.level[img.lit]
    img.put32(L.off + C.LV_COUNT, L.count - 1)


@forged("trie level's count + 1", "table count does not match its slots")
def _(img, d):
    L = img.level[img.trie(*_deep(d)[:49]).next]     # 3 children in 4 slots
    img.put32(L.off + C.LV_COUNT, L.count + 1)


@forged("shape table's count + 1", "table count does not match its slots")
def _(img, d):
    L = img.shapes[0].table
    img.put32(L.off + C.LV_COUNT, L.count + 1)


@forged("a node's nsubs - 1", "subscription count does not match the header")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put32(n.off + C.ND_NSUBS, n.nsubs - 1)


@forged("a queue group's size - 1", "subscription count does not match the header")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[1][0]
    img.put32(g + 24, img.u("<I", g + 24) - 1)


@forged("a node's queue groups: none", "node outside the image", "refused")
def _(img, d):
    n = img.entry(f"a{SEP[d]}b")
    img.put32(n.off + n.groups, 0)


@forged("one shape fewer (probe sets made to fit)", "subscription count does not match the header")
def _(img, d):
    k = img.nshapes - 1
    img.put64(C.ROOT_NSHAPES, k)
    for i, p in enumerate(img.probe):
        img.put64(C.ROOT_PROBE + 8 * i, p & ~(1 << k))


@forged("65 shapes", "more filter shapes than an index holds", "open")
def _(img, d):
    img.put64(C.ROOT_NSHAPES, 65)


@forged("objects' end short of the payload", "objects' end does not match the payload", "open")
def _(img, d):
    img.put64(C.ROOT_OBJECTS_END, img.objects_end - 8)


# -- shapes
@forged("two shapes' entries swapped", "filter in the wrong shape's table")
def _(img, d):
    s, o, r = SEP[d], ONE[d], REST[d]
    a, b = img.entry(f"a{s}{o}"), img.entry(f"x{s}{o}{s}y{s}{r}")
    sa, sb = img.slot_of(a), img.slot_of(b)
    img.put64(sa + 8, b.off)
    img.put64(sb + 8, a.off)


@forged("a shape entry in the literal table", "wildcard filter in the literal table")
def _(img, d):
    a, b = img.entry("a"), img.entry(f"a{SEP[d]}{ONE[d]}")
    sa, sb = img.slot_of(a), img.slot_of(b)
    img.put64(sa + 8, b.off)
    img.put64(sb + 8, a.off)


@forged("shapes out of canonical order (probe sets made to fit)", "shapes not in canonical order")
def _(img, d):
    s0, s1 = img.shape_offs[:2]
    img.put64(C.ROOT_SHAPE, s1)
    img.put64(C.ROOT_SHAPE + 8, s0)
    for i, p in enumerate(img.probe):
        q = (p & ~3) | ((p & 1) << 1) | ((p >> 1) & 1)
        img.put64(C.ROOT_PROBE + 8 * i, q)


@forged("a shape's first_wild wrong", "invalid shape")
def _(img, d):
    sh = img.shapes[0]
    img.put32(sh.off + C.SH_FIRST_WILD, sh.first_wild ^ 1)


@forged("a shape's ntoks + 1", ("invalid shape", "canonical order", "wrong shape's table",
                                "probe sets do not match the shapes"))
def _(img, d):
    sh = img.shapes[1]
    img.put32(sh.off + C.SH_NTOKS, sh.ntoks + 1)


@forged("a shape's onemask with bit 63", "invalid shape")
def _(img, d):
    sh = img.shapes[1]
    img.put64(sh.off + C.SH_ONEMASK, sh.onemask | 1 << 63)


@forged("an empty shape", "empty shape")
def _(img, d):
    sh = img.shapes[-1]
    for s, _, _, _ in sh.table.slot_list:
        img.b[s:s + 16] = bytes(16)
    img.put32(sh.off + C.LV_COUNT, 0)


# -- probe sets
@forged("a probe set naming a missing shape", "probe set names a shape the image lacks", "open")
def _(img, d):
    img.put64(C.ROOT_PROBE + 8 * 2, img.probe[2] | 1 << img.nshapes)


@forged("a probe set naming shape 63 of fewer", "probe set names a shape the image lacks", "open")
def _(img, d):
    img.put64(C.ROOT_PROBE + 8 * 49, img.probe[49] | 1 << 63)


@forged("a probe set with a shape bit cleared", "probe sets do not match the shapes", "open")
def _(img, d):
    k = next(k for k, p in enumerate(img.probe) if p)
    img.put64(C.ROOT_PROBE + 8 * k, img.probe[k] & (img.probe[k] - 1))


@forged("a probe set naming a longer shape", "probe sets do not match the shapes", "open")
def _(img, d):
    j = max(range(img.nshapes), key=lambda j: (img.shapes[j].ntoks, -img.shapes[j].rest))
    img.put64(C.ROOT_PROBE + 8 * 1, img.probe[1] | 1 << j)


# -- nodes and entries
@forged("a trie node in a table", "trie node in a table")
def _(img, d):
    img.b[img.entry("a").off + C.ND_LINKED] = C.LINK_IMAGE | C.LINK_TRIE


@forged("a node not marked as an image's", "node outside the image", "refused")
def _(img, d):
    img.b[img.entry("a").off + C.ND_LINKED] = 0


@forged("an entry's key unlike its filter", "entry's key does not match its filter")
def _(img, d):
    n = img.entry("a")
    img.put32(n.off + C.ND_HASH, n.hash ^ 1)


@forged("an entry's filter bytes changed", "entry's key does not match its filter")
def _(img, d):
    n = img.entry(SEP[d].join(["orders", "eu", "created"]))
    img.b[n.off + 32] = ord("p")


@forged("an entry in another slot than its key leads to", "entry not where its key leads")
def _(img, d):
    n = img.entry("a")
    L = img.level[img.lit]
    s = img.slot_of(n)
    home = L.slots + 16 * (img.u("<I", s) & (L.cap - 1))
    t = next(x for x in img.empty_slots(L) if x != home)
    img.b[t:t + 16] = img.b[s:s + 16]
    img.b[s:s + 16] = bytes(16)


@forged("the literal table's bitmap cleared", "entry not where its key leads")
def _(img, d):
    L = img.level[img.lit]
    img.b[L.filter:L.filter + (L.filter_mask + 1) // 8] = bytes((L.filter_mask + 1) // 8)


@forged("a table entry without subscriptions", "table entry without subscriptions")
def _(img, d):
    n = img.entry("a")
    img.put32(n.off + C.ND_NSUBS, 0)
    img.put32(n.off + C.ND_SUBCAP, 0)
    img.put64(24, img.subs - 1)


@forged("an empty trie leaf", "empty trie node")
def _(img, d):
    n = img.trie(*_deep_rest(d))
    img.put32(n.off + C.ND_NSUBS, 0)
    img.put32(n.off + C.ND_SUBCAP, 0)
    img.put64(24, img.subs - 1)


@forged("a rest wildcard with children", ("rest wildcard with children", "node reached twice"))
def _(img, d):
    n = img.trie(*_deep_rest(d))
    img.put64(n.link + 8, img.trie(*_deep(d)[:10]).next)


@forged("a trie node's token hash wrong", "trie node not where its parent and token lead")
def _(img, d):
    n = img.trie("a", "d1")
    img.put32(n.off + C.ND_HASH, n.hash ^ 4)


@forged("a trie node's token changed", "trie node not where its parent and token lead")
def _(img, d):
    img.b[img.trie("a", "d1").off + 32] = ord("e")


@forged("a literal trie node marked a wildcard", ("trie node not where its parent", "wildcard node not where"))
def _(img, d):
    img.b[img.trie("a", "d1").off + C.ND_KIND] = C.TOK_ONE


@forged("the root holding an id", "the trie's root is not a bare root node")
def _(img, d):
    img.put32(img.root + C.ND_NSUBS, 1)
    img.put32(img.root + C.ND_SUBCAP, 1)


@forged("the root marked a wildcard", "the trie's root is not a bare root node")
def _(img, d):
    img.b[img.root + C.ND_KIND] = C.TOK_REST


@forged("the root given a hash", "the trie's root is not a bare root node")
def _(img, d):
    img.put32(img.root + C.ND_HASH, 1)


@forged("an invalid queue name (hash made to fit)", "NUL in queue name")
def _(img, d):
    g, name, _, _ = img.entry(f"a{SEP[d]}b").group_list[0]
    img.b[g + img.u("<Q", g)] = 0
    img.put32(g + 20, C.fs_hash(b"\0" + name[1:]))


@forged("a queue name's hash wrong", "queue name hash does not match")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[0][0]
    img.put32(g + 20, img.u("<I", g + 20) ^ 1)


@forged("a queue group with a capacity (a built index's)", "node outside the image", "refused")
def _(img, d):
    g = img.entry(f"a{SEP[d]}b").group_list[0][0]
    img.put32(g + 28, 4)


# -- header
@forged("bad magic", "bad magic", "open")
def _(img, d):
    img.b[1] = ord("G")


@forged("reserved field set", "reserved field not zero", "open")
def _(img, d):
    img.b[12] = 1


@forged("unknown dialect", "unknown dialect", "open")
def _(img, d):
    img.put("<H", 10, 9)


@forged("payload length one word short", "payload length does not match the image's size", "open")
def _(img, d):
    img.put64(16, img.P - 8)


def _forge(d, mutate):
    img = C.Image(base(d))
    if mutate(img, d) is False:
        return None
    return img.seal()


def forged_cases(d):
    return [Case(name, functools.partial(_forge, d, f), meta={"expect": e, "fast": fast})
            for name, f, e, fast in FORGED]


CASES = {
    "truncated": truncated_cases,
    "truncated_sealed": resealed_truncated_cases,
    "header_flips": header_flip_cases,
    "header_flips_sealed": header_flip_sealed_cases,
    "object_flips": object_flip_cases,
    "forged": forged_cases,
}


@pytest.mark.parametrize("name", [name for name, _, _, _ in FORGED])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_forged_image(dialect, name):
    """verify=True refuses the forged image, naming the problem; verify=False
    refuses it at open or at a call (where the case says it must), or
    answers -- never crashes, hangs or raises anything else."""
    i = [n for n, _, _, _ in FORGED].index(name)
    case = CASES["forged"](dialect)[i]
    out = results("forged", dialect)[i]
    bad = problems(out, verify_must_fail=True, expect=case.meta["expect"],
                   fast="refused" if case.meta["fast"] else None)
    if case.meta["fast"] == "open" and out.get("fast") != "open-error":
        bad.append(f"verify=False: {out.get('fast')}, not refused at open")
    known = {known_bug(p, None) for p in bad}
    if bad and None not in known:
        pytest.xfail("known bug " + ", ".join(sorted(known)) + ": " + "; ".join(bad))
    assert not bad, f"{out}\n" + "\n".join(bad)


def test_forged_cases_apply():
    """Every forger finds what it edits in every dialect's image (and the
    untouched image, resealed, still opens)."""
    for d in DIALECTS:
        assert topicmatch.Sublist.from_bytes(C.Image(base(d)).seal(), verify=True)
        for name, f, _, _ in FORGED:
            data = _forge(d, f)
            assert data is not None, (d, name)
            assert data != base(d), (d, name)


def test_codec_reads_what_the_library_writes():
    """image_codec's reading of the base images: every subscription found,
    every field where the tests edit it."""
    for d in DIALECTS:
        img = parsed(d)
        assert img.version == 4 and img.dialect_code == C.DIALECT_CODE[d]
        assert len(img.b) == C.HEADER + img.P + 8 == img.objects_end + 8
        assert img.nodes == img.root_nodes == len(img.node) - 1     # the root is not counted
        assert img.literals == len(img.level[img.lit].slot_list)
        nsubs = sum(n.nsubs + sum(len(g[2]) for g in n.group_list) for n in img.node.values())
        assert nsubs == img.subs == len(subscriptions(d))
        assert C.image_checksum(img.b[:-8]) == struct.unpack_from("<Q", img.b, len(img.b) - 8)[0]
        assert len(img.trie(*_deep(d)).ids) == 2 and img.trie(*_deep(d)).group_list
        assert img.field_at(img.shapes[0].off + C.SH_NTOKS) == ("shape", "ntoks")
        for n in img.trie_nodes:                  # the codec's fs_hash is the library's
            assert n.off == img.root or n.kind != C.TOK_LITERAL or n.hash == C.fs_hash(n.tok), n.tok
        for n in img.entries:
            for g, name, _, _ in n.group_list:
                assert img.u("<I", g + 20) == C.fs_hash(name)
        assert img.field_at(img.trie("a").off + C.ND_TOKLEN) == ("trie node", "toklen")


# ------------------------------------------------------------ known bugs: reproducers
#
# Minimal, each in a child process where it may crash.  Strict xfails: a
# fix makes one XPASS, which fails the run -- then drop the xfail and the
# bug's entry in KNOWN_BUGS (the sweeps then hold the fix too).

def _isolated(code, timeout=120):
    """Run code in a fresh interpreter (tests/ on the path); a crash, a
    non-zero exit or a timeout fails (AssertionError)."""
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r})\n" + code],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (f"child exited with {r.returncode}"
                               f"{' (signal %d)' % -r.returncode if r.returncode < 0 else ''}\n"
                               f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r.stdout



def test_regress_shape_ntoks_crashes_match():
    """One image byte (a shape's ntoks), verify=False: match must answer or
    raise ValueError.  Today: SIGSEGV/SIGBUS in fs_shape_subject_key."""
    _isolated("""
import struct, topicmatch
sl = topicmatch.Sublist("nats")
sl.insert("a.*", 1)
b = bytearray(sl.to_bytes())
shape = struct.unpack_from("<Q", b, 48 + 40)[0]       # the root block's shape[0]
struct.pack_into("<I", b, shape + 64, 0x7FFFFFFF)     # its fs_shape.ntoks
try:
    o = topicmatch.Sublist.from_bytes(bytes(b), verify=False)   # (verify=False reads no checksum)
    print(o.match("a.b"))
except ValueError as e:
    print("refused:", e)
""")


def test_regress_thaw_of_invalid_queue_name_is_memoryerror():
    """A queue name with a NUL, verify=False: to_bytes(version=2) must raise
    ValueError (the image is damaged) and later calls too.  Today:
    MemoryError, and the index answers on."""
    sl = topicmatch.Sublist("nats")
    sl.insert("a.b", 1, queue="q")
    img = C.Image(sl.to_bytes())
    g = img.entry("a.b").group_list[0][0]
    img.b[g + img.u("<Q", g)] = 0                        # the name "q" -> "\0"
    o = topicmatch.Sublist.from_bytes(img.raw(), verify=False)
    with pytest.raises(ValueError, match=DAMAGED):
        o.to_bytes(version=2)
    with pytest.raises(ValueError, match=DAMAGED):
        o.match("a.b")


def test_regress_verify_accepts_a_wildcard_node_with_another_token():
    """A trie '*' node whose token byte reads 'x' (checksum resealed):
    verify=True must refuse it.  Today it opens, and reverse_match reports
    the filter a.a...x.*.b while match answers for a.a...*.*.b.  (Only the
    verifier's "literal filter in the trie" check catches it, where the
    wildcard was the filter's only one.)"""
    sl = topicmatch.Sublist("nats")
    f = ".".join(["a"] * 47 + ["*", "*", "b"])           # 50 tokens: a trie filter
    sl.insert(f, 1)
    img = C.Image(sl.to_bytes())
    star = next(n for n in img.trie_nodes if n.kind == C.TOK_ONE)
    img.b[star.off + 32] = ord("x")
    try:
        o = topicmatch.Sublist.from_bytes(img.seal(), verify=True)
    except ValueError:
        return
    rows = o.reverse_match(">")
    assert rows == [(f, 1, None)], f"verify=True opened it; reverse_match: {rows}"


def test_regress_reverse_match_blames_the_query_for_a_stored_filter():
    """A literal entry whose filter bytes hold a NUL, verify=False:
    reverse_match('>') must answer or raise ValueError naming the damage.
    Today: InvalidSubjectError for '>' built from an uninitialized
    err.reason (garbage text, UnicodeDecodeError, or SIGSEGV)."""
    _isolated(f"""
import topicmatch, image_codec as C
sl = topicmatch.Sublist("nats")
sl.insert("a", 1)
img = C.Image(sl.to_bytes())
img.b[img.entry("a").off + 32] = 0                    # the filter "a" -> "\\0"
o = topicmatch.Sublist.from_bytes(img.raw(), verify=False)
try:
    print(o.reverse_match(">"))
except ValueError as e:
    assert {DAMAGED!r} in str(e), repr(e)
""")


def test_regress_thaw_overflows_its_path_buffer():
    """Trie nodes whose toklen run to the image's end (each node still
    inside the image), verify=False: to_bytes(version=2) must raise
    ValueError.  Today: a heap buffer overflow (abort)."""
    _isolated("""
import topicmatch, image_codec as C
sl = topicmatch.Sublist("nats")
sl.insert(".".join(["a"] * 40 + ["*"] + ["b"] * 9), 1)     # 50 tokens: a trie filter
img = C.Image(sl.to_bytes())
for n in img.trie_nodes:
    if n.off != img.root:
        img.put("<H", n.off + C.ND_TOKLEN, min(65535, img.objects_end - n.off - 32))
o = topicmatch.Sublist.from_bytes(img.raw(), verify=False)
try:
    o.to_bytes(version=2)
except ValueError as e:
    print("refused:", e)
""")


def test_regress_error_position_is_outside_the_image():
    """A literal slot whose node offset is 2**63: the refusal must name a
    byte of the image (the slot), as every other refusal does."""
    sl = topicmatch.Sublist("nats")
    sl.insert("a", 1)
    img = C.Image(sl.to_bytes())
    slot = img.slot_of(img.entry("a"))
    img.put64(slot + 8, 1 << 63)
    data = img.seal()
    with pytest.raises(ValueError, match="node outside the image") as e:
        topicmatch.Sublist.from_bytes(data, verify=True)
    pos = int(str(e.value).rsplit(" ", 1)[1])
    assert pos < len(data), f"{e.value} (the image has {len(data)} bytes; the slot's node is at {slot + 8})"


@pytest.mark.skipif(SANITIZED, reason="needs an address-space limit, which ASan's reservations rule out")
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmSize from /proc")
def test_regress_trie_loop_with_a_raised_node_count_runs_away():
    """A trie level whose one child is the root, with the header's and the
    root block's node count raised: reverse_match('>') must raise ValueError
    (damaged) at once.  Today: it allocates until the limit (MemoryError)."""
    _isolated("""
import resource, topicmatch, image_codec as C
with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.RLIM_INFINITY))
sl = topicmatch.Sublist("nats")
sl.insert(".".join(["a"] * 50 + ["*"]), 1)
img = C.Image(sl.to_bytes())
img.put64(img.level[img.node[img.root].next].off + C.LV_ONE, img.root)   # a loop back to the root
img.put64(40, 1 << 62)                                # the header's node count
img.put64(C.ROOT_NODES, 1 << 62)                      # and the root block's
try:
    o = topicmatch.Sublist.from_bytes(img.raw(), verify=False)
    o.reverse_match(">")
except ValueError as e:
    print("refused:", e)
""", timeout=120)


def test_regress_verify_accepts_plain_ids_on_a_share_trie_node():
    """MQTT: a trie node whose filter starts "$share/" holding a plain id
    (checksum resealed).  No insert makes one (insert("$share/G/f") always
    stores group G on f), and the version 1-2 loader refuses it in the trie
    as in the tables; verify=True must refuse it with the loader's words
    (docs/FORMAT.md, invariant 13).  It opened before the fix."""
    sl = topicmatch.Sublist("mqtt")
    deep = "/".join(["a"] * 50 + ["+"])                  # 51 levels: a trie filter
    sl.insert(f"$share/g/$share/x/{deep}", 1)            # group g on "$share/x/a/.../+"
    img = C.Image(sl.to_bytes())
    toks = ["$share", "x"] + ["a"] * 50 + ["+"]
    n = img.trie(*toks)
    assert n.nsubs == 0 and [name for _, name, _, _ in n.group_list] == [b"g"]
    img.put32(n.off + C.ND_NSUBS, 1)
    img.put32(n.off + C.ND_SUBCAP, 1)
    img.put64(n.off + C.ND_SUBS, 7)
    img.put64(24, img.subs + 1)                          # the header's subscription count
    data = img.seal()
    with pytest.raises(ValueError, match=r"plain subscription on a '\$share/' filter at byte "):
        topicmatch.Sublist.from_bytes(data, verify=True)
