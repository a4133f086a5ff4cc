"""Helpers of tests/test_docs_embedding.py that a spawned process runs
(light to import: no pytest, no test module)."""
import topicmatch


def reopen_while_swapped(path, subjects, stop, out):
    """Open the image at path with verify=True, again and again until stop
    is set, and match subjects from each: every open must find a whole
    file (the old one or a new one, never a part).  Sends (opens, versions
    seen, errors) to the connection out."""
    opens, versions, errors = 0, set(), []
    while not stop.is_set() or opens == 0:
        try:
            index = topicmatch.Sublist.open(path)
            opens += 1
            for s in subjects:
                subs = index.match(s).subs
                if subs:
                    versions.add(subs[0] // 1_000_000)
        except Exception as e:             # noqa: BLE001 -- reported, then asserted on
            errors.append(repr(e))
            if len(errors) > 10:
                break
    out.send((opens, sorted(versions), errors))
