"""The thresholds of fastsub.spark, read at call time.

A user (or a test's monkeypatch) sets them on the package,
``fastsub.spark.BROADCAST_MAX_BYTES = n``, where they are defined with their
defaults (fastsub/spark/__init__.py); every reader asks ``limit(name)``, so
the value is read in one place, when it is used.  A leaf: it imports nothing
of fastsub (the package is found in sys.modules, loaded by then).
"""
import sys

#: The names a user may set on fastsub.spark.
SETTABLE = ("AUTO_SHARD_MIN_SUBS", "BROADCAST_MAX_BYTES", "INLINE_MAX_BYTES")


def limit(name: str) -> int:
    """fastsub.spark.<name> as it is now."""
    if name not in SETTABLE:
        raise KeyError(f"{name!r} is no threshold of fastsub.spark (those are {', '.join(SETTABLE)})")
    return getattr(sys.modules[__package__], name)
