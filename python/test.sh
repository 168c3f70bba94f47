#!/usr/bin/env bash
# The Python package's checks: builds the extension into a venv (with the
# workspace's cargo target dir), type-checks the examples with mypy --strict,
# and runs the pytest suite (which needs the `tenure` command for the lease
# server: built here too).
#
#   python/test.sh [PYTEST ARGS...]    build, then check
#   python/test.sh --build-only         the venv and the extension (cargo runs here)
#   python/test.sh --venv-only          the venv and the tools from PyPI (no cargo)
#   python/test.sh --check-only [ARGS]  mypy and pytest on what --build-only built
#                                       (no cargo: it can run beside a cargo build)
#
# Servers: the suite reads the same TENURE_TEST_* variables as the Rust tests
# and skips a store whose server is not configured, unless
# TENURE_REQUIRE_SERVERS=1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TARGET_DIR="$target"
venv="$target/python-venv"
python="${PYTHON:-python3}"
venv_step=1 build=1 check=1
case "${1:-}" in
    --venv-only) build=0 check=0; shift ;;
    --build-only) check=0; shift ;;
    --check-only) venv_step=0 build=0; shift ;;
esac

if [ "$venv_step" = 1 ]; then
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "maturin==1.16.0" "pytest==9.2.0" "mypy==2.4.1" "filelock==4.3.1" "redis==8.1.0"
fi

if [ "$build" = 1 ]; then
    # The `tenure` command for the lease server: the one given (scripts/test
    # passes the one its tests built: a build of tenure-cli alone would resolve
    # features apart from the workspace's and compile tokio and the rest again).
    if [ -z "${TENURE_BIN:-}" ]; then
        cargo build -p tenure-cli --all-features
        export TENURE_BIN="$target/debug/tenure"
    fi

    (cd "$here" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --quiet)
fi

if [ "$check" = 1 ]; then
    [ -x "$venv/bin/python" ] || { echo "python/test.sh: no venv at $venv: run python/test.sh --build-only first" >&2; exit 1; }
    if [ -z "${TENURE_BIN:-}" ]; then
        export TENURE_BIN="$target/debug/tenure"
    fi
    (cd "$here" && "$venv/bin/python" -m mypy --strict examples tenure tests bench.py)
    (cd "$here" && "$venv/bin/python" -m pytest -q tests "$@")
fi
