"""`python -m fastsub ...`: the same command line as the `fastsub` script."""
import sys

from fastsub.cli import main

if __name__ == "__main__":
    sys.exit(main())
