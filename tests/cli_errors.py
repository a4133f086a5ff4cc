"""What the command-line tests share: a run that must end in one error line."""
from topicmatch import cli

PREFIX = "topicmatch: error: "


def one_error_line(capsys, argv):
    """Run `topicmatch argv` in-process: exit status 2 and exactly one stderr
    line, `topicmatch: error: ...`, which is returned whole."""
    rc = cli.main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2, captured
    assert len(lines) == 1 and lines[0].startswith(PREFIX), captured.err
    return lines[0]
