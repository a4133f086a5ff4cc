"""Sublist.stats()'s dict, in plain Python: the public names of the C
core's counters (fs_stats, csrc/api/sublist.h) and the figures derived
from them.  The Cython layer reads the counters (a struct, which Cython
hands over as a dict of its fields) and passes them here; the stub
(_core.pyi, _Stats) names the same keys, and tests/test_typing.py checks
that it does."""


def as_dict(st):
    """stats()'s dict from st, the fields of fs_stats (its cache's a dict
    of their own): the counters under their public names, the cache's hit
    rate (0.0 before any lookup) and the mean fanout of a match (0.0
    before any match)."""
    cache = st["cache"]
    lookups = cache["hits"] + cache["misses"]
    return {
        "subscriptions": st["subscriptions"],
        "nodes": st["nodes"],
        "memory_bytes": st["memory_bytes"],
        "cache_entries": cache["entries"],
        "cache_capacity": cache["capacity"],
        "inserts": st["inserts"],
        "removes": st["removes"],
        "matches": st["matches"],
        "cache_hits": cache["hits"],
        "cache_misses": cache["misses"],
        "cache_hit_rate": cache["hits"] / lookups if lookups else 0.0,
        "max_fanout": st["fanout_max"],
        "avg_fanout": st["fanout_total"] / st["matches"] if st["matches"] else 0.0,
        "generation": st["generation"],
        "mapped_bytes": st["mapped_bytes"],
        "live_subscriptions": st["live_subscriptions"],
        "live_bytes": st["live_bytes"],
    }
