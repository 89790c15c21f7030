#!/usr/bin/env bash
# The torch-compatibility run (`make compat TORCH=2.15.0`; .ci/run runs it for the newest tested release
# and the floor, collnb/torch_versions.py's TESTED): the fast tests and every English notebook executed,
# on another torch release, in a venv of its own (.venv-torch-VERSION), with every other package pinned
# as constraints.txt pins it. The extras are the pinned run's (make test) less lint: the tests of the book,
# the classroom and the Chinese edition need them.
#
#   tools/compat.sh VERSION [--notebooks-only | --tests-only | --install-only]
#
# --install-only makes the venv and stops (.ci/run starts it in the background while the book builds:
# the install is mostly a download, ~280 s; the run that follows finds torch installed and goes on).
#
# torch comes from PyPI (Linux: the CUDA build, ~5 GB installed, which runs on the CPU; where the CPU
# index https://download.pytorch.org/whl/cpu is reachable, its CPU wheel instead, ~0.9 GB). A pip
# configuration that caps torch (PIP_CONSTRAINT in a global pip.conf) is lifted for this venv only.
# The Chinese twins are not executed here: their code cells are the English ones' (tools/twins.py
# checks), and the pinned run executes both editions.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:?usage: tools/compat.sh TORCH_VERSION [--notebooks-only|--tests-only|--install-only]}"
what="${2:-all}"
case "$version" in
  [0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "tools/compat.sh: '$version' is not a torch release (e.g. 2.15.0)" >&2; exit 2 ;;
esac
case "$what" in
  all|--notebooks-only|--tests-only|--install-only) ;;
  *) echo "tools/compat.sh: unknown option '$what' (--notebooks-only, --tests-only or --install-only)" >&2; exit 2 ;;
esac
PYTHON="${PYTHON:-python3}"
venv=".venv-torch-$version"
start=$(date +%s)

if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
# constraints.txt without its torch pin, plus this release.
grep -v '^torch==' constraints.txt > "$venv/constraints.txt"
echo "torch==$version" >> "$venv/constraints.txt"

if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  index=()
  if timeout 10 "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('https://download.pytorch.org/whl/cpu/', timeout=8)" 2>/dev/null; then
    index=(--extra-index-url https://download.pytorch.org/whl/cpu)
  fi
  # PIP_CONSTRAINT=/dev/null: a machine-wide cap on torch (pip.conf's constraint) would refuse newer releases.
  PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install --quiet "${index[@]}" "torch==$version"
fi
PYTHONWARNINGS="ignore:Editable installation" PIP_CONSTRAINT=/dev/null \
  "$venv/bin/python" -m pip install --quiet -c "$venv/constraints.txt" -e ".[lab,test,docs,classroom]"
"$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'in $venv, installed in', $(date +%s) - $start, 's')"
if [ "$what" = "--install-only" ]; then
  exit 0
fi

export COLLNB_TORCH_COMPAT="$version"  # tests/test_docs.py then checks this release is the one installed
status=0
if [ "$what" != "--notebooks-only" ]; then
  t=$(date +%s)
  # on make test's workers (TEST_WORKERS, 2 as the Makefile sets it; each test file on one worker)
  "$venv/bin/python" -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile -m "not slow" -q -p no:cacheprovider || status=1
  echo "torch $version: fast tests in $(( $(date +%s) - t )) s"
fi
if [ "$what" != "--tests-only" ]; then
  t=$(date +%s)
  COLLNB_TEST_EXECUTE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_notebooks.py \
    -k "test_notebook_runs_top_to_bottom" || status=1
  echo "torch $version: every notebook executed in $(( $(date +%s) - t )) s"
fi
echo "torch $version: compatibility run $( [ $status = 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - start )) s"
exit $status
