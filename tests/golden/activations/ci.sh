#!/usr/bin/env bash
# The CI's steps (.github/workflows/ci.yml runs this script), the same on your machine: lint, build, test.
# Install torch first; on a machine without a GPU its CPU build:
#   pip install torch --index-url https://download.pytorch.org/whl/cpu
set -euo pipefail
cd "$(dirname "$0")"

python -m pip install "setuptools>=77" "ruff==0.17.6"
python -m ruff check .
python -m ruff format --check .
python -m pip install --no-build-isolation -e '.[test]'
# The suite; its tests/test_wheel.py also builds the wheel and runs the suite against it in a fresh venv.
python -m pytest -q "$@"  # bash ci.sh -x -k opcheck: arguments go to pytest
