#!/bin/bash
# Used by scripts/ab.sh and for any timing taken while builds run: `scripts/quiet.sh CMD ...`.
# Run a command while every process at nice >= 10 (helpers' builds/tests) is stopped,
# including ones started while it runs (re-scanned every 0.2 s).
stopfile=$(mktemp)
( while [ -e "$stopfile" ]; do
    ps -eo pid=,ni=,stat= | awk '$2>=10 && $3 !~ /^T/ {print $1}' | xargs -r kill -STOP 2>/dev/null
    sleep 0.2
  done ) &
watcher=$!
cleanup() {
  rm -f "$stopfile"; kill $watcher 2>/dev/null; wait $watcher 2>/dev/null
  ps -eo pid=,ni= | awk '$2>=10{print $1}' | xargs -r kill -CONT 2>/dev/null
}
trap cleanup EXIT
sleep 0.3
"$@"
