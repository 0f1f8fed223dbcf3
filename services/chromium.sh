#!/usr/bin/env bash
# Debian's Chromium, for the headless screenshots of the Dagster UI (tests/test_ui.py).
#
#   services/chromium.sh      install the `chromium` package with apt-get when no chromium
#                             is on PATH, then print the browser's path on standard output
#
# Progress goes to standard error, apt-get's output to .mce/services/chromium-apt.log
# (MCE_SERVICES_DIR moves that folder, as for services/services.sh). Installing needs root.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${MCE_SERVICES_DIR:-$REPO/.mce/services}"
LOG="$STATE/chromium-apt.log"

log() { printf 'chromium: %s\n' "$*" >&2; }
die() {
    log "$1"
    if [ -f "$LOG" ]; then tail -n 20 "$LOG" >&2; fi
    exit 1
}

found() { command -v chromium || command -v chromium-browser; }

if browser="$(found)"; then
    printf '%s\n' "$browser"
    exit 0
fi

[ "$(id -u)" = 0 ] || die "chromium is not installed, and installing it needs root (apt-get install chromium)"
mkdir -p "$STATE"
log "installing Debian's chromium with apt-get (log: $LOG)"
t0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
# Without an update first when the package lists are fresh enough to have it.
if ! apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 chromium >>"$LOG" 2>&1; then
    apt-get update -q -o DPkg::Lock::Timeout=300 >>"$LOG" 2>&1 || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 chromium >>"$LOG" 2>&1 ||
        die "apt-get install chromium failed"
fi
browser="$(found)" || die "apt-get installed chromium, yet no chromium is on PATH"
log "installed $("$browser" --version 2>/dev/null || echo chromium) in $(($(date +%s) - t0)) s"
printf '%s\n' "$browser"
