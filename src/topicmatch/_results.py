"""match_many's result, BatchResult, in plain Python: the Cython layer
(_batch.pxi) makes one from the three arrays the C core filled, and
everything a caller does with it -- rows, equality, hashing, its repr,
Arrow -- is numpy and pyarrow over those arrays."""
import operator

from topicmatch import _columns
from topicmatch._errors import TopicmatchIndexError, TopicmatchOverflowError

#: BatchResult's repr shows every row up to this many rows and ids, else
#: the first and last REPR_EDGE rows (numpy's arrays summarize alike).
_REPR_ROWS, _REPR_IDS, _REPR_EDGE = 20, 200, 3


class BatchResult:
    """What match_many found, in CSR form.

    offsets: int64 array of n+1; row i's ids are sub_ids[offsets[i]:offsets[i+1]]
    sub_ids: int64 array (read-only view of the C buffer)
    invalid: bool array of n; True where the subject was null or invalid

    A value: all three arrays are read-only, two results are equal when
    their rows are (the same ids in each row, the same rows invalid), and
    equal results hash alike."""
    __module__ = "topicmatch._core"     # its home, as it always was (topicmatch._core.BatchResult)
    __slots__ = ("_offsets", "_sub_ids", "_invalid", "_hash")

    @property
    def offsets(self):
        return self._offsets

    @property
    def sub_ids(self):
        return self._sub_ids

    @property
    def invalid(self):
        return self._invalid

    @classmethod
    def _of(cls, offsets, sub_ids, invalid):
        """The result over the three arrays (read-only ones: it is a value)."""
        r = cls.__new__(cls)
        r._offsets, r._sub_ids, r._invalid, r._hash = offsets, sub_ids, invalid, 0
        return r

    def __eq__(self, other):
        import numpy as np
        if not isinstance(other, BatchResult):
            return NotImplemented
        # The offsets and the ids together are the rows (CSR: equal rows,
        # equal arrays); an invalid row has no ids, so the mask is compared too.
        return (self is other or (len(self.invalid) == len(other.invalid) and len(self.sub_ids) == len(other.sub_ids)
                                  and bool(np.array_equal(self.invalid, other.invalid))
                                  and bool(np.array_equal(self.offsets, other.offsets))
                                  and bool(np.array_equal(self.sub_ids, other.sub_ids))))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        # Over the arrays' bytes in place (CRC-32 reads a buffer without a
        # copy; hash() of a memoryview asks its owner, and numpy arrays
        # refuse); kept, the arrays cannot change.
        import zlib
        if self._hash == 0:
            h = hash((len(self.invalid), len(self.sub_ids), zlib.crc32(self.offsets),
                      zlib.crc32(self.sub_ids), zlib.crc32(self.invalid)))
            self._hash = h if h != 0 else 1
        return self._hash

    def __len__(self):
        return len(self.invalid)

    def __getitem__(self, i):
        """The ids of row i (a numpy view)."""
        n = len(self.invalid)
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise TopicmatchIndexError(f"row {i} out of range for {n} rows")
        return self.sub_ids[self.offsets[i]:self.offsets[i + 1]]

    def counts(self):
        """counts() -> numpy.ndarray: the number of ids per row (int64)."""
        import numpy as np
        return np.diff(self.offsets)

    def to_arrow(self):
        """to_arrow() -> pyarrow.ListArray: int32 offsets, int64 values, null
        where invalid.  The values are not copied."""
        import numpy as np
        import pyarrow as pa
        if len(self.sub_ids) > 0x7FFFFFFF:
            raise TopicmatchOverflowError("more than 2**31-1 ids: split the batch for a 32-bit-offset ListArray")
        values = _columns.numpy_as_arrow(self.sub_ids, pa.int64())
        offsets = _columns.numpy_as_arrow(self.offsets.astype(np.int32), pa.int32())
        mask = _columns.numpy_as_arrow(self.invalid, pa.bool_()) if self.invalid.any() else None
        return pa.ListArray.from_arrays(offsets, values, mask=mask)

    def _row(self, i, most=-1):
        """Row i as its repr shows it: None if invalid, else its ids (at
        most `most` of them and '...', when most >= 0)."""
        if self.invalid[i]:
            return "None"
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        if 0 <= most < b - a:
            return "[" + ", ".join(str(x) for x in self.sub_ids[a:a + most].tolist()) + ", ...]"
        return repr(self.sub_ids[a:b].tolist())

    def __repr__(self):
        # Every row of a small result, so that equal reprs mean equal
        # results (as __eq__ says); a large one shows its edges and sizes.
        n = len(self.invalid)
        if n <= _REPR_ROWS and len(self.sub_ids) <= _REPR_IDS:
            return "BatchResult([" + ", ".join(self._row(i) for i in range(n)) + "])"
        rows = [self._row(i, 10) for i in range(_REPR_EDGE)] + ["..."] + \
            [self._row(i, 10) for i in range(n - _REPR_EDGE, n)] if n > 2 * _REPR_EDGE else \
            [self._row(i, 10) for i in range(n)]
        return (f"BatchResult([{', '.join(rows)}], rows={n}, ids={len(self.sub_ids)}, "
                f"invalid={int(self.invalid.sum())})")
