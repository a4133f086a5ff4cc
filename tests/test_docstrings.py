"""Every public function and method of the extension documents its
signature once: the docstring opens with `name(...)` (or
`Class.name(...)`), with its return type, and nothing else in it repeats
that line (Cython's embedsignature used to put its own signature, without
the return type, before the hand-written one)."""
import inspect

import pytest

import topicmatch
from topicmatch import _core


def _public_callables():
    for name in sorted(dir(_core)):
        obj = getattr(_core, name)
        if name.startswith("_") or not callable(obj):
            continue
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue
            for meth in sorted(set(dir(obj)) - set(dir(object))):     # its C side's too
                if not meth.startswith("_") and callable(getattr(obj, meth)):
                    yield f"{name}.{meth}", meth, getattr(obj, meth)
        else:
            yield name, name, obj


CALLABLES = list(_public_callables())


def signature_lines(name, doc):
    """The lines of doc that read as a signature of name: `name(` or
    `Class.name(` at a line's start."""
    return [ln for ln in doc.splitlines() if ln.strip().split("(")[0].split(".")[-1] == name
            and "(" in ln and not ln.startswith(" ")]


def test_the_check_sees_a_repeated_signature():
    doc = "Sublist.insert(self, filter, sub_id)\n\ninsert(filter, sub_id) -> bool\n\nAdd it."
    assert len(signature_lines("insert", doc)) == 2
    assert len(signature_lines("insert", doc.split("\n\n", 1)[1])) == 1


@pytest.mark.parametrize("qualname,name,fn", CALLABLES, ids=[c[0] for c in CALLABLES])
def test_signature_once(qualname, name, fn):
    doc = fn.__doc__
    assert doc, f"{qualname} has no docstring"
    first = doc.lstrip()
    assert first.startswith((name + "(", qualname + "(")), f"{qualname}'s docstring does not open with its signature: {doc[:80]!r}"
    assert len(signature_lines(name, doc)) == 1, f"{qualname}'s signature is given more than once: {doc[:160]!r}"


def test_some_callables_are_checked():
    names = {c[0] for c in CALLABLES}
    assert {"Sublist.insert", "Sublist.match_many", "subject_matches"} <= names, names
    assert topicmatch.Sublist is _core.Sublist
