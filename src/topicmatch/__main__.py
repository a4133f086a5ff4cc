"""`python -m topicmatch ...`: the same command line as the `topicmatch` script."""
import sys

from topicmatch.cli import main

if __name__ == "__main__":
    sys.exit(main())
