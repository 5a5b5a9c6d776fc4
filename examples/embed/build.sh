#!/bin/sh
# Build the embedding examples with the flags of the given Python (default: python3) into
# build/embed/. Usage: examples/embed/build.sh [python]
set -eu
python=${1:-python3}
here=$(dirname "$0")
mkdir -p build/embed
flags=$("$python" -m nnc.embed --cflags --ldflags)
for prog in graph backend; do
    # shellcheck disable=SC2086  # the flags are a list of words
    ${CC:-cc} -std=c11 -Wall -Wextra -O1 "$here/$prog.c" -o "build/embed/$prog" $flags
    echo "built build/embed/$prog"
done
echo "run: NNC_PYTHON=$python build/embed/graph"
