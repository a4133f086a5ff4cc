"""Sublist, the index: the class, its document and its methods off the hot
paths, in plain Python over its C side, _core._Sublist (the C index, the
guard of its calls, an opened image's mapping; match, insert, discard and
the interest calls, and the primitives each method here calls).  Its
home, __module__, stays topicmatch._core, which names it as it always has."""
from topicmatch import _core, _imagefiles
from topicmatch._errors import TopicmatchKeyError


class Sublist(_core._Sublist):
    """Sublist(dialect="nats", *, cache_size=0)

    An index of subscriptions (filter, sub_id, queue) answering "which
    subscriptions match this subject?".  Safe to use from many threads.
    dialect: "nats" (the default), "mqtt" or "amqp" (RabbitMQ topic
    exchanges: binding keys with '*' and '#' anywhere; each sub_id is
    delivered at most once per routing key, so results are always
    deduplicated).

    close() frees it at once (an opened image: unmaps its file); so does
    the end of a ``with`` block.  Calls after close() raise ClosedError."""
    __slots__ = ()       # no __dict__: the object stays its C side's size

    def close(self):
        """close() -> None

        Free the index now: its memory, and an opened image's mapping (the
        file can then be deleted or replaced everywhere, Windows included).
        Calls in flight on other threads (match, match_many's threads,
        saving) finish first; close() waits for them, and later calls raise
        ClosedError.  A second close() does nothing.  From inside a call on
        an index -- a __del__ or a signal handler that a call of this thread
        runs -- while calls are in flight, close() refuses
        (TopicmatchRuntimeError) rather than wait for its own caller."""
        self._close()

    def __repr__(self):
        if self.closed:
            return f"<topicmatch.Sublist dialect={self.dialect!r} closed>"
        return f"<topicmatch.Sublist dialect={self.dialect!r} subscriptions={len(self)}>"

    def remove(self, filter, sub_id, *, queue=None):
        """remove(filter, sub_id, *, queue=None) -> None

        Remove the subscription; KeyError if it is not there."""
        if not self.discard(filter, sub_id, queue=queue):
            raise TopicmatchKeyError((filter, sub_id, queue))

    def insert_many(self, filters, sub_ids, queues=None):
        """insert_many(filters, sub_ids, queues=None) -> int

        Insert many subscriptions under one lock, all or nothing; returns how
        many were new.  filters (and queues) may be sequences of str or
        Arrow string columns (string, large_string, string_view or
        dictionary of these, chunked or not), read in place (a null queue:
        plain); sub_ids a sequence of int or an Arrow/numpy integer array.
        A wrong type is a TypeError naming the argument and the row
        ("filters[3] must be str, not bytes"); a single str where a sequence
        is expected is refused, and so is a bool as an id."""
        return self._bulk(filters, sub_ids, queues, True)

    def remove_many(self, filters, sub_ids, queues=None):
        """remove_many(filters, sub_ids, queues=None) -> int

        Remove many subscriptions (absent ones are skipped); returns how many
        were removed.  Invalid input removes nothing."""
        return self._bulk(filters, sub_ids, queues, False)

    def match_many(self, subjects, keys=None, queues="pick", threads=1, *, dedupe=False, also=None):
        """match_many(subjects, keys=None, queues="pick", threads=1, *, dedupe=False, also=None) -> BatchResult

        Match a whole column at once, without the GIL.  subjects: list of
        str or None (another type: TypeError naming the row), numpy
        str/object array, or Arrow string / large_string / string_view /
        dictionary<string> column, chunked or not (read in place; a
        dictionary matched once per distinct value; keys likewise).  Null
        or invalid subjects are flagged in .invalid and get no ids.
        queues: "pick" (plain subs plus one member per matching group,
        chosen from a hash of keys[i] -- or the subject -- and the group,
        so reruns give the same rows), "all" or "none".  threads: native
        threads to split the batch over.  dedupe: each sub_id at most once
        per row (its first occurrence), for subscribers holding overlapping
        filters (always so for AMQP).  also: another Sublist of the same
        dialect; each row then gets what one index holding both indexes'
        subscriptions would answer (the same ids in the same order, queue
        picks made over both's members), without building it -- e.g. a
        shard's image and the image of the filters every shard needs.  The
        two should not hold the same subscription (two indexes deliver it
        twice)."""
        return self._match_column(subjects, keys, queues, threads, dedupe, also)

    def to_bytes(self, *, version=4):
        """to_bytes(*, version=4) -> bytes: the index as an image
        (docs/FORMAT.md), the bytes Sublist.save() writes, which
        Sublist.from_bytes() and Sublist.open() match from in place.
        version=3: the same image with the checksum that readers before
        version 4 check (one chain, not blocks); version=2: the older
        compact format, which every reader rebuilds."""
        return _core._sublist_to_bytes(self, version)

    @staticmethod
    def from_bytes(data, *, cache_size=0, verify=True):
        """Sublist.from_bytes(data, *, cache_size=0, verify=True) -> Sublist

        An index over the bytes to_bytes() returned (bytes, memoryview,
        mmap or any buffer).  An image held in bytes (or a memoryview of
        bytes) is matched in place, the buffer kept alive; any other buffer
        is copied first; versions 1 and 2 are rebuilt and checked in full.
        verify (True, "checksum" or False): how much of an image is checked
        before the first match, and what each level guarantees --
        docs/FORMAT.md, "Opening: three levels of checking" (and the stub,
        _core.pyi).  Corrupt, truncated or hostile data raises ValueError.
        close(), or the end of a ``with`` block, lets go of the buffer."""
        return _core._sublist_from_bytes(data, cache_size, verify)

    @staticmethod
    def open(path, *, verify=True, cache_size=0):
        """Sublist.open(path, *, verify=True, cache_size=0) -> Sublist

        Map the image file at path read-only and match straight from it:
        nothing is rebuilt, and every process that opens the file shares
        its pages.  verify as for from_bytes (True: check the whole file
        once; "checksum": its checksum alone; False: O(1), for files this
        library wrote).  Files of versions 1 and 2 (to_bytes(version=2), or
        older topicmatch) are read and rebuilt instead.  path must be a
        regular file: a directory, a FIFO or a device is refused at once
        (ValueError).  The file must not be changed in place while open:
        replace it (save() writes a new file and renames it over).  A file
        truncated or rewritten in place anyway makes the calls on the index
        raise ImageChangedError (from the one that meets it on), not kill
        the process.  close(), or the end of a ``with`` block, unmaps the
        file at once."""
        return _imagefiles.open_mapped(path, verify, cache_size, _core._sublist_from_bytes, _core._MapGuard)

    def save(self, path, *, mode=None, durable=True):
        """save(path, *, mode=None, durable=True) -> None

        Write the index's image to path atomically: a temporary file in the
        same directory, flushed to disk, then renamed over path, so that a
        reader sees the old file or the new one, never a part.  An opened
        index writes its current set (the image and the changes since).
        The file's mode is what open() would give a new file (0o666 less
        the umask), or exactly mode (permission bits, e.g. 0o644) when given.
        durable=False skips the flush to disk (fsync) of the file and of
        the rename: every reader sees the new file at once, but a crash of
        the machine may leave it damaged or empty, so use it only for a
        cache that is checked (open(verify=True)) and rebuilt, as
        topicmatch.spark's hosts keep their images."""
        _core._sublist_save(self, path, mode, durable)


Sublist.__module__ = "topicmatch._core"
