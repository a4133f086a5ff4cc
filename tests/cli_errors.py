"""What the command-line tests share: a run that must end in one error line."""
from fastsub import cli

PREFIX = "fastsub: error: "


def one_error_line(capsys, argv):
    """Run `fastsub argv` in-process: exit status 2 and exactly one stderr
    line, `fastsub: error: ...`, which is returned whole."""
    rc = cli.main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2, captured
    assert len(lines) == 1 and lines[0].startswith(PREFIX), captured.err
    return lines[0]
