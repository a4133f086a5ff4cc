"""What `topicmatch match` writes after the subject of a delivery:
`sub_id<TAB>filter[<TAB>queue]`.

The engine answers with sub ids only.  When every sub id has one row (a
filter list, numbered by line; most tables) a dict gives its filter.  A
table may give one sub id several filters (a subscriber of `a.*` and
`a.b`): the engine then returns the id once per matching filter, and the
k-th time it appears for a subject it is labelled with the k-th of its
filters that match the subject (in the table's order).  An image carries no
table: its rows are listed by the index itself (`reverse_match` of the
dialect's catch-all filter), and the few a catch-all cannot list (MQTT
filters under a `$` topic) are looked up per subject when they match.
"""
from topicmatch import subject_matches

#: The filter that every stored filter of the dialect can overlap, except
#: MQTT's `$` topics (which `#` never matches, by the MQTT rule).
CATCH_ALL = {"nats": ">", "mqtt": "#", "amqp": "#"}


def _label(sid, f, q):
    return f"{sid}\t{f}" + (f"\t{q}" if q is not None else "") + "\n"


class Labels:
    """one: {sub_id: label} of the ids with one row; many: {sub_id:
    [(filter, queue)]} of the others; complete: no id needs a lookup."""

    def __init__(self, sublist, rows=None):
        self.sublist, self.dialect = sublist, sublist.dialect
        if rows is None:
            triples = [(sid, f, q) for f, sid, q in sublist.reverse_match(CATCH_ALL[self.dialect])]
        else:
            pylist = lambda c: c if isinstance(c, list) else c.to_pylist()  # noqa: E731
            ids, filters = pylist(rows.sub_ids), pylist(rows.filters)
            queues = pylist(rows.queues) if rows.queues is not None else [None] * len(ids)
            triples = zip(ids, filters, queues)
        self.many = {}
        one = {}
        n = 0
        for sid, f, q in triples:
            n += 1
            if sid in self.many:
                self.many[sid].append((f, q))
            elif sid in one:
                self.many[sid] = [one.pop(sid), (f, q)]
            else:
                one[sid] = (f, q)
        self.one = {sid: _label(sid, f, q) for sid, (f, q) in one.items()}
        self.complete = not self.many and (rows is not None or n == len(sublist))

    def lines(self, subjects, row_of, sub_ids):
        """The delivery lines of one block: subjects[row_of[j]] gets sub_ids[j]."""
        one = self.one
        if self.complete:
            return "".join([f"{subjects[k]}\t{one[sid]}" for k, sid in zip(row_of, sub_ids)])
        out, seen, row = [], {}, -1
        for k, sid in zip(row_of, sub_ids):
            if k != row:
                row, seen = k, {}
            label = one.get(sid)
            if label is None:
                nth = seen[sid] = seen.get(sid, -1) + 1
                label = self._nth(subjects[k], sid, nth)
            out.append(f"{subjects[k]}\t{label}")
        return "".join(out)

    def _nth(self, subject, sid, nth):
        rows = self.many.get(sid)
        if rows is None:                # an image's row the catch-all did not list
            rows = [(f, q) for f, i, q in self._reverse(subject) if i == sid]
        hits = [(f, q) for f, q in rows if subject_matches(f, subject, self.dialect)] or rows
        if not hits:
            # Unreachable while the engine and reverse_match agree; the id
            # still goes out, with an empty filter rather than a wrong one.
            return _label(sid, "", None)
        f, q = hits[min(nth, len(hits) - 1)]
        return _label(sid, f, q)

    def _reverse(self, subject):
        from topicmatch import InvalidSubjectError
        try:
            return self.sublist.reverse_match(subject)
        except InvalidSubjectError:
            return []
