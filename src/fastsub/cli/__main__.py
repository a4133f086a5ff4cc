"""python -m fastsub.cli: the `fastsub` command."""
import sys

from fastsub.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
