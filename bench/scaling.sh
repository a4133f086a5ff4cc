#!/bin/sh
# The thread-scaling table (bench/run_batch.py --threads) on any machine,
# from a built cp312 wheel, with nothing but Python 3.12, numpy and pyarrow:
#
#   bench/scaling.sh topicmatch-*-cp312-*.whl [THREADS] [WORKLOADS] [REPEAT]
#
# THREADS defaults to 1,2,4,8,16; WORKLOADS to light,hot1k,heavy (add
# light1m, light10m: light's generator at 1M, 10M filters, ~10 s per million);
# REPEAT (medians of) to 5.  Where that Python already imports numpy and
# pyarrow, the wheel is unpacked into $SCALING_DIR/site (default
# ./scaling-run) and used beside them: no network, no venv.  Otherwise it
# makes a venv there and installs the wheel, numpy and pyarrow (pip; set
# PIP_INDEX_URL / PIP_FIND_LINKS for a mirror or local wheels).  It generates
# the standard workloads with bench/gen_workload.py into $SCALING_DIR/data
# (md5-checked against bench/workloads.py), then prints the table and
# writes it as JSON to $SCALING_DIR/scaling.json, with uptime before and
# after (the load average: the figures mean little on a busy machine).
# Only this directory's run_batch.py, workloads.py and gen_workload.py are
# read from the repository; topicmatch comes from the wheel.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wheel=${1:?usage: bench/scaling.sh WHEEL [THREADS] [WORKLOADS] [REPEAT]}
threads=${2:-1,2,4,8,16}
only=${3:-light,hot1k,heavy}
repeat=${4:-5}
dir=${SCALING_DIR:-scaling-run}
py=${PYTHON:-python3.12}

"$py" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
    || { echo "scaling.sh: needs Python 3.12 (PYTHON=...) for a cp312 wheel"; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if "$py" -c 'import numpy, pyarrow' 2>/dev/null; then
    # numpy and pyarrow already there (a machine without network): the
    # wheel is unpacked beside them, no venv, no pip.
    rm -rf "$dir/site"
    "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$dir/site"
    export PYTHONPATH="$dir/site"
    run="$py"
else
    if [ ! -x "$dir/venv/bin/python" ]; then
        "$py" -m venv "$dir/venv"
    fi
    "$dir/venv/bin/python" -m pip install -q --upgrade --force-reinstall --no-deps "$wheel"
    "$dir/venv/bin/python" -m pip install -q numpy pyarrow
    run="$dir/venv/bin/python"
fi
export TOPICMATCH_BENCH_DATA="$dir/data"
# The workloads named, made here (light1m is made by run_batch.py itself).
names=$(echo "$only" | tr ',' '\n' | grep -v '^light[0-9]*m$' | tr '\n' ' ')
(cd "$dir" && "$run" -c "
import sys
sys.path.insert(0, '$here')
import workloads
workloads.ensure_data(sys.argv[1:])
for n in sys.argv[1:]:
    workloads.verify(n)
" $names)
echo "== uptime before: $(uptime)"
# From $dir, so `import topicmatch` finds the wheel, not a source tree.
(cd "$dir" && "$run" -c "import topicmatch, sys; print('topicmatch', topicmatch.__file__, sys.version.split()[0])")
(cd "$dir" && "$run" "$here/run_batch.py" --threads "$threads" --only "$only" \
    --repeat "$repeat" --json "$dir/scaling.json")
echo "== uptime after: $(uptime)"
