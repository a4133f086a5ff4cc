"""The dialect names, written once.

Every Python module of the package that lists the dialects takes them from
here.  Three places cannot: the compiled core (_core.pyx, which takes
them from the C core's table, fs_dialect_name), its stub (_core.pyi, a Literal), and the reference
matcher (_reference.py, loaded on its own, without the package, when the
core is not built); tests/test_layout.py checks that they name the same
dialects as DIALECTS.  This module imports nothing when loaded (its one
error imports the package's class for it, when raised).
"""

#: The dialects a Sublist speaks, in the order the messages name them.
DIALECTS = ("nats", "mqtt", "amqp")


def expected() -> str:
    """The dialects as an error message lists them: 'nats', 'mqtt' or 'amqp'."""
    names = [repr(d) for d in DIALECTS]
    return ", ".join(names[:-1]) + " or " + names[-1]


def check_dialect(dialect) -> None:
    """TopicmatchValueError (a ValueError) unless `dialect` is one of DIALECTS."""
    if dialect not in DIALECTS:
        from topicmatch._core import TopicmatchValueError
        raise TopicmatchValueError(f"unknown dialect {dialect!r}: expected {expected()}")
