"""Regenerate the golden serialized indexes in this directory.

    python tests/golden/make_golden.py [--version N] [NAME ...]

Each NAME.fsb is Sublist.to_bytes(version=2) of a small index, NAME_v1.fsb
version 1's and NAME_v3.fsb version 3's (an image: the v3 files were
written before the package was renamed, so they also show that images
saved under the old name still open); NAME[_vN].json records the
subscriptions it holds and the answers it gave when it was written.
tests/test_serial.py loads every NAME.fsb and checks the answers still
match, so a change to the format that breaks old files fails the tests.
Only regenerate when the format version changes on purpose (and then keep
the old files under a versioned name too)."""
import json
import os

import topicmatch

HERE = os.path.dirname(os.path.abspath(__file__))

SETS = {
    "nats_small": ("nats", [
        ("orders.eu.created", 1, None), ("orders.eu.created", 2, None), ("orders.*.created", 3, None),
        ("orders.>", 4, "workers"), ("orders.>", 5, "workers"), ("orders.*.*", 6, "audit"),
        ("orders.us.*", 7, "workers"), (">", 8, None), ("$SYS.>", 9, None), ("a*b.x>", 10, None),
        ("orders.eu.created", -1, None), ("orders.eu.created", 2 ** 63 - 1, "workers"),
        ("*.*.*", -(2 ** 63), None), ("\u00e9t\u00e9.*", 11, None),
    ], ["orders.eu.created", "orders.us.created", "orders.us", "$SYS.x", "a*b.x>", "\u00e9t\u00e9.juin",
        "x", "orders.eu.created.late"],
       ["orders.>", ">", "orders.eu.*", "*.*.*", "$SYS.x", "\u00e9t\u00e9.*"]),
    "mqtt_small": ("mqtt", [
        ("sport/tennis/player1", 1, None), ("sport/tennis/+", 2, None), ("sport/#", 3, None),
        ("#", 4, None), ("+/+", 5, None), ("$SYS/#", 6, None), ("$share/g1/sport/#", 7, None),
        ("$share/g1/sport/#", 8, None), ("$share/g2/sport/tennis/+", 9, None), ("sport/#", 10, "g1"),
        ("a//b", 11, None), ("/+", 12, None), ("a/", 13, None), ("$share/g/$share/x/+", 14, None),
        ("caf\u00e9/+", 15, None),
    ], ["sport/tennis/player1", "sport", "sport/tennis", "$SYS/x", "a//b", "/x", "a/", "$share/x/y",
        "caf\u00e9/x", "q"],
       ["#", "sport/+", "+/+", "$SYS/#", "a/+/b", "/#", "$share/x/#"]),
    "nats_empty": ("nats", [], ["a", "a.b"], [">"]),
    # AMQP (flags value 2): the empty key, empty words, '#' anywhere and several
    "amqp_small": ("amqp", [
        ("", 1, None), ("#", 2, None), ("#.#", 3, "workers"), ("a.#.b", 4, None), ("a.#.b", 5, "workers"),
        ("*.a", 6, None), ("a..b", 7, None), ("a.*", 8, "audit"), ("a.#", 4, None), ("#.#.x.#.#", 9, None),
        ("a*.#b", 10, None), ("\u00e9t\u00e9.*", 11, None), ("a.b", -(2 ** 63), None),
        ("a.b", 2 ** 63 - 1, "workers"),
    ], ["", ".", "a", "a.b", "a.x.y.b", ".a", "a..b", "x", "q.x.r", "a*.#b", "\u00e9t\u00e9.juin", "a.*"],
       ["#", "a.*", "", "*.*", "x.#"]),
}


def norm(r):
    return [sorted(r.subs), sorted(([q, f, sorted(m)] for q, f, m in r.groups), key=repr)]


def main(only=None, version=2):
    suffix = "" if version == 2 else f"_v{version}"
    for name, (dialect, subs, subjects, qfilters) in SETS.items():
        if only and name not in only:
            continue
        name += suffix
        sl = topicmatch.Sublist(dialect)
        for f, i, q in subs:
            sl.insert(f, i, queue=q)
        stored = []
        for f, i, q in subs:
            if dialect == "mqtt" and f.startswith("$share/"):
                q, f = f.split("/", 2)[1:]
            stored.append([f, i, q])
        want = {
            "dialect": dialect,
            "len": len(sl),
            "stored": sorted(stored, key=repr),
            "match": {s: norm(sl.match(s)) for s in subjects},
            "num_interest": {s: list(sl.num_interest(s)) for s in subjects},
            "reverse_match": {f: sorted((list(t) for t in sl.reverse_match(f)), key=repr) for f in qfilters},
        }
        with open(os.path.join(HERE, name + ".fsb"), "wb") as fh:
            fh.write(sl.to_bytes(version=version))
        with open(os.path.join(HERE, name + ".json"), "w") as fh:
            json.dump(want, fh, indent=1, ensure_ascii=True, sort_keys=True)
            fh.write("\n")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, default=2, help="the format version to write (default 2)")
    ap.add_argument("names", nargs="*", help="the sets to write (default: all)")
    a = ap.parse_args()
    main(a.names, a.version)
