"""What the command line says on small inputs and while it works (issue 48,
item 9): singular nouns for one ("1 subject", "1 row"), rates that do not
read as nothing done, a description under every command's --help, and a
word on stderr while `match` loads its subscriptions."""
import io

import pytest

from topicmatch import cli
from topicmatch.cli import subs_index
from topicmatch.cli.common import Stderr, per_second, plural
from topicmatch.cli.subs_source import SubsColumns, SubsSource


def test_plural():
    assert plural(1, "subject") == "1 subject"
    assert plural(0, "subject") == "0 subjects"
    assert plural(1_234, "row") == "1,234 rows"
    assert plural(1, "delivery", "deliveries") == "1 delivery"
    assert plural(2, "delivery", "deliveries") == "2 deliveries"


@pytest.mark.parametrize("n, seconds, text", [
    (0, 5.0, "0"), (3, 7.0, "0.43"), (1, 3.0, "0.33"), (9, 1.0, "9"), (25, 2.0, "12"),
    (1_000_000, 2.0, "500,000"), (5, 0.0, "0"),
])
def test_per_second(n, seconds, text):
    assert per_second(n, seconds) == text


def test_one_of_each_is_singular_in_the_match_summary(capsys, tmp_path):
    f, s = tmp_path / "f.txt", tmp_path / "s.txt"
    f.write_text("a.b\n")
    s.write_text("a.b\n")
    assert cli.main(["match", "--filters-file", str(f), "--subjects", str(s)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("topicmatch match: 1 subject = 1 delivered + 0 unmatched + 0 rejected; "
                          "1 delivery from 1 subscription (nats, queues=pick) "), err


@pytest.mark.parametrize("command", ["fanout", "demo", "match", "build"])
def test_every_command_has_a_description(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    body = out.split("\n\n")
    # usage, then a description paragraph, before the option lists
    assert len(body) > 2 and not body[1].startswith(("options:", "optional arguments:")), out


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_loading_says_what_it_does_on_a_terminal(tmp_path):
    p = tmp_path / "subs.csv"
    p.write_text("sub_id,filter\n1,a.b\n2,c.*\n")
    src = SubsSource(str(p), "table", "csv", SubsColumns())
    tty = _Terminal()
    loaded = subs_index.load(src, None, Stderr(tty))
    assert len(loaded.sublist) == 2 and loaded.dialect == "nats"
    text = tty.getvalue()
    assert f"\rtopicmatch: reading subscriptions {p} ..." in text
    assert "\rtopicmatch: indexing 2 subscriptions (nats) ..." in text
    assert text.endswith("\r")                      # the status line cleared once loaded
    plain = io.StringIO()                           # off a terminal: nothing drawn
    subs_index.load(src, None, Stderr(plain))
    assert plain.getvalue() == ""
