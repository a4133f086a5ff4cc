"""The core's table of settings and counters for tests (csrc/api/fs_tuning.c,
reached through topicmatch._core._tuning and the hooks of _tuning.py): a name
it does not hold, a counter, and a value out of a setting's range are
refused, and a setting set is read back and restored."""
import pytest

import topicmatch
from topicmatch import _core


def test_a_setting_is_read_back_and_restored():
    before = _core._tuning("column_feed_rows", 77)
    try:
        assert _core._tuning("column_feed_rows") == 77
    finally:
        assert _core._tuning("column_feed_rows", before) == 77
    assert _core._tuning("column_feed_rows") == before


def test_unknown_names_counters_and_out_of_range_values_are_refused():
    with pytest.raises(topicmatch.TopicmatchValueError, match="no setting or counter 'nope'"):
        _core._tuning("nope")
    with pytest.raises(topicmatch.TopicmatchValueError, match="'pool_threads' cannot be set"):
        _core._tuning("pool_threads", 3)
    with pytest.raises(topicmatch.TopicmatchValueError, match="'merge_simd' cannot be set to 2"):
        _core._tuning("merge_simd", 2)
    assert _core._tuning("merge_simd") == 1        # left as it was


def test_batch_threading_returns_its_settings_to_pass_back():
    old = _core._set_batch_threading(cpus=3)
    try:
        assert old["cpus"] == 0
        assert _core._set_batch_threading()["cpus"] == 3
    finally:
        _core._set_batch_threading(**old)
    assert _core._tuning("column_cpus") == 0
