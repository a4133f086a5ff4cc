"""Write the seeds of fuzz/fuzz_image.c: small valid version 3 images of
each dialect (fuzz/seeds/image/), made by the library itself.

    PYTHONPATH=src python fuzz/make_image_seeds.py

Each covers a part of the layout: an empty index; literal filters only;
shaped filters with queue groups; trie filters (deeper than a shape holds:
49 tokens; AMQP's '#' in the middle) with several ids and groups; and all
of these in one index.  The last byte of each (a
checksum byte) has bit 0 cleared: the harness then re-forges the checksum,
so that mutations reach the structural checks.  The "runs" seeds -- nodes
of dozens of ids and members, interleaved across the filters one subject
matches, so that every merge path meets them -- have bit 2 set too: the
harness then stores their runs out of order (issue 47, D2).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import topicmatch                      # noqa: E402
import test_image_hostile as H      # noqa: E402

OUT = os.path.join(HERE, "seeds", "image")


def index(d, subs):
    sl = topicmatch.Sublist(d)
    for f, i, q in subs:
        sl.insert(f, i, queue=q)
    return sl


def seeds(d):
    s, o, r = H.SEP[d], H.ONE[d], H.REST[d]

    def j(*t):
        return s.join(t)

    deep = [f"t{k}" for k in range(3)] + [o] + [f"t{k}" for k in range(4, 49)]   # 49 tokens: the trie
    yield "empty", []
    literals = [("a", 11, None), (j("a", "b"), 12, None), (j("a", "b"), 13, None), (j("a", "b"), 14, "q"),
                (j("a", "b"), 15, "r"), (j("x", "y", "z"), 16, "q")]
    shapes = [(j("a", o), 21, None), (j("a", o), 22, "g"), (j("a", o), 23, "g"), (j(o, "b", r), 24, None),
              (j("c", o, "e"), 25, "h"), (r, 26, None)]
    yield "literals", literals
    yield "shapes", shapes
    trie = [(j(*deep), 1, None), (j(*deep), 2, None), (j(*deep), 3, "q"), (j(*deep[:48], r), 4, None),
            (j(*deep[:48], "u"), 5, "r"), (j(*deep[:48], "v"), 6, None)]
    if d == "amqp":
        trie += [(j("a", r, "b"), 6, None), (j("m", r, r, "n"), 7, "q"), (j(r, "z"), 8, None)]
    yield "trie", trie
    yield "mixed", literals + shapes + trie
    # a subject a.b matches all four: runs of 40, 5, 30 and 12 ids whose
    # values interleave, and one queue group's members on two of them
    runs = [(j("a", "b"), 100 + 2 * k, None) for k in range(40)]
    runs += [(j("a", o), 101 + 16 * k, None) for k in range(5)]
    runs += [(j(o, "b"), 103 + 2 * k, None) for k in range(30)]
    runs += [(j("a", r), 90 + 7 * k, None) for k in range(12)]
    runs += [(j("a", "b"), 5000 + 2 * k, "q") for k in range(20)] + [(j("a", o), 5001 + 4 * k, "q") for k in range(8)]
    yield "runs", runs


def regressions():
    """Forged images that reproduced the bugs fuzz_image and
    tests/test_image_hostile.py found, each named by its bug (the empty
    seeds reproduced image-write-qsort-null); all fixed, kept as seeds so
    that a return is found at once."""
    C = H.C
    sl = index("nats", [("a.*", 1, None)])
    img = C.Image(sl.to_bytes())
    img.put32(img.shapes[0].off + C.SH_NTOKS, 0x7FFFFFFF)
    yield "shape-fields-unchecked", img.raw()

    img = C.Image(index("nats", [("a", 1, None), ("b.*", 2, None)]).to_bytes())
    img.b[img.entry("a").off + 32] = 0
    yield "reverse-match-einval-from-stored-filter", img.raw()

    img = C.Image(index("nats", [("x", 1, "q"), ("y", 2, "q")]).to_bytes())
    gx, gy = img.entry("x").group_list[0][0], img.entry("y").group_list[0][0]
    img.put64(gy, gx + img.u("<Q", gx) - gy)          # y's group name: x's bytes, before it
    yield "backward-payload-offsets", img.raw()       # (verify=1 accepts it)

    img = C.Image(index("nats", [("a", 1, None)]).to_bytes())
    img.put64(img.slot_of(img.entry("a")) + 8, 1 << 63)
    yield "error-position-is-the-offset", img.raw()

    img = C.Image(index("nats", [(".".join(["a"] * 40 + ["*"] + ["b"] * 9), 1, None)]).to_bytes())
    for n in img.trie_nodes:
        if n.off != img.root:
            img.put("<H", n.off + C.ND_TOKLEN, min(65535, img.objects_end - n.off - 32))
    yield "thaw-path-overflow", img.raw()

    img = C.Image(index("nats", [(".".join(["a"] * 50 + ["*"]), 1, None)]).to_bytes())
    img.put64(img.level[img.node[img.root].next].off + C.LV_ONE, img.root)
    img.put64(40, 1 << 62)
    img.put64(C.ROOT_NODES, 1 << 62)
    yield "loop-budget-trusts-the-header", img.raw()

    img = C.Image(index("nats", [(".".join(["a"] * 47 + ["*", "*", "b"]), 1, None)]).to_bytes())
    img.b[next(n for n in img.trie_nodes if n.kind == C.TOK_ONE).off + 32] = ord("x")
    yield "verify-skips-wildcard-tokens", img.raw()

    img = C.Image(index("nats", [("a", 1, None), ("b.*", 2, None)]).to_bytes())
    img.b[img.root + C.ND_KIND] = C.TOK_REST
    yield "root-marked-a-wildcard", img.raw()        # (a root of another kind or hash: verify=1 opened it)


def write(name, b):
    b = bytearray(b)
    b[-1] &= 0xFE                               # re-forged by the harness
    if name.endswith("-runs"):
        b[-1] |= 0x04                           # and its runs put out of order
    path = os.path.join(OUT, name)
    with open(path + ".tmp", "wb") as f:       # a new file renamed over: a seed is never rewritten in place
        f.write(b)
    os.replace(path + ".tmp", path)
    print(f"{name}: {len(b)} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    for d in H.DIALECTS:
        for name, subs in seeds(d):
            write(f"{d}-{name}", index(d, subs).to_bytes())
    for name, b in regressions():
        write(f"regress-{name}", b)


if __name__ == "__main__":
    main()
