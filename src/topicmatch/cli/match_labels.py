"""What `topicmatch match` writes after the subject of a delivery:
`sub_id<TAB>filter[<TAB>queue]`.

The engine answers with sub ids only.  When every sub id has one row (a
filter list, numbered by line; most tables) a dict gives its filter.  A
table may give one sub id several filters (a subscriber of `a.*` and
`a.b`): the engine then returns the id once per matching filter, and the
k-th time it appears for a subject it is labelled with the k-th of its
filters that match the subject (in the table's order).  An image carries no
table, and listing a million rows up front would cost seconds of the
millisecond it takes to open: its labels are looked up per delivered
subject (`reverse_match` of the subject: the stored filters that can match
it) each time (an id of one row for this subject may have others).
"""
from topicmatch import subject_matches


def _label(sid, f, q):
    return f"{sid}\t{f}" + (f"\t{q}" if q is not None else "") + "\n"


class Labels:
    """one: {sub_id: label} of the ids with one row; many: {sub_id:
    [(filter, queue)]} of the others; complete: no id needs a lookup."""

    def __init__(self, sublist, rows=None):
        self.sublist, self.dialect = sublist, sublist.dialect
        self.many, self.one = {}, {}
        self.complete = False
        self.table = rows is not None
        if rows is None:                # an image: looked up as deliveries come
            return
        pylist = lambda c: c if isinstance(c, list) else c.to_pylist()  # noqa: E731
        ids, filters = pylist(rows.sub_ids), pylist(rows.filters)
        queues = pylist(rows.queues) if rows.queues is not None else [None] * len(ids)
        one = {}
        for sid, f, q in zip(ids, filters, queues):
            if sid in self.many:
                self.many[sid].append((f, q))
            elif sid in one:
                self.many[sid] = [one.pop(sid), (f, q)]
            else:
                one[sid] = (f, q)
        self.one = {sid: _label(sid, f, q) for sid, (f, q) in one.items()}
        self.complete = not self.many

    def lines(self, subjects, row_of, sub_ids):
        """The delivery lines of one block: subjects[row_of[j]] gets sub_ids[j]."""
        one = self.one
        if self.complete:
            return "".join([f"{subjects[k]}\t{one[sid]}" for k, sid in zip(row_of, sub_ids)])
        out, seen, row, found = [], {}, -1, None
        for k, sid in zip(row_of, sub_ids):
            if k != row:
                row, seen, found = k, {}, None
            label = one.get(sid)
            if label is None:
                nth = seen[sid] = seen.get(sid, -1) + 1
                if found is None:
                    found = self._found(subjects[k])
                label = self._nth(subjects[k], sid, nth, found)
            out.append(f"{subjects[k]}\t{label}")
        return "".join(out)

    def _found(self, subject):
        """{sub_id: [(filter, queue)]} of the stored rows matching `subject`
        (an image's; a table's are in `many`)."""
        if self.table:
            return {}
        got = {}
        for f, sid, q in self._reverse(subject):
            if subject_matches(f, subject, self.dialect):
                got.setdefault(sid, []).append((f, q))
        return got

    def _nth(self, subject, sid, nth, found):
        rows = self.many.get(sid)
        if rows is not None:
            hits = [(f, q) for f, q in rows if subject_matches(f, subject, self.dialect)] or rows
        else:
            hits = sorted(found.get(sid, ()), key=lambda r: (r[1] is not None, r[1] or "", r[0]))
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
