#!/usr/bin/env bash
# Makes a Compose CLI available for `docker compose config` (tests/test_deploy.py runs
# this in CI): Docker's plugin when it is there, else Debian's docker-compose package
# (Compose v1, which reads and checks a file without a Docker daemon), installed with
# apt-get. Prints the command to use, e.g. `docker-compose`.
set -euo pipefail

if docker compose version >/dev/null 2>&1; then
    echo "docker compose"
    exit 0
fi
if ! command -v docker-compose >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { echo "install-compose: installing docker-compose needs root (apt-get)" >&2; exit 1; }
    log=$(mktemp)
    echo "install-compose: installing docker-compose with apt-get (log: $log)" >&2
    # A stale package list is the usual reason the first install fails.
    if ! apt-get install -y -q -o DPkg::Lock::Timeout=300 docker-compose >"$log" 2>&1; then
        apt-get update -q -o DPkg::Lock::Timeout=300 >>"$log" 2>&1
        apt-get install -y -q -o DPkg::Lock::Timeout=300 docker-compose >>"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; exit 1; }
    fi
fi
echo "docker-compose"
