"""python -m topicmatch.cli: the `topicmatch` command."""
import sys

from topicmatch.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
