#!/bin/sh
# Writes the standard workloads (deterministic, seed 42) under DIR (default:
# bench/data) and checks their md5 against bench/README.md.  The table of
# workloads and their generator arguments is WORKLOADS in bench/workloads.py.
set -e
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON:-python3}" "$here/workloads.py" "$@"
