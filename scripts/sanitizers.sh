#!/usr/bin/env bash
# Runs strata's tests under sanitizers (nightly toolchain; never part of CI):
#
#   scripts/sanitizers.sh asan    strata-core and strata-runtime test suites, AddressSanitizer
#   scripts/sanitizers.sh tsan    the concurrency tests, ThreadSanitizer
#   scripts/sanitizers.sh all     both (the default)
#
# Both build the standard library instrumented too (-Zbuild-std, needs the rust-src component,
# added here when missing), each into its own target dir under target/sanitizers/. Extra
# arguments go to the test binaries (a name filter, --test-threads 1).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
shift || true
host=$(rustc +nightly -vV | sed -n 's/^host: //p')
rustup +nightly component list --installed | grep -q '^rust-src' ||
    rustup component add rust-src --toolchain nightly

sanitize() { # NAME FLAG CARGO-TEST-ARGS... -- TEST-ARGS...
    local name=$1 flag=$2
    shift 2
    echo "== $name" >&2
    RUSTFLAGS="-Zsanitizer=$flag -Cdebuginfo=1" RUSTDOCFLAGS="-Zsanitizer=$flag" \
        nice -n 10 cargo +nightly test -Zbuild-std --target "$host" --release \
        --target-dir "target/sanitizers/$name" "$@"
}

asan() {
    # Tests that ask for impossible allocations expect a typed error: the sanitizer's allocator
    # must return null for them instead of aborting. Intentional process-lifetime allocations
    # (the global registry, thread pools) are not leaks worth reporting.
    ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0:detect_stack_use_after_return=1 \
        sanitize asan address -p strata-core -p strata-runtime --lib --tests -- "$@"
}

tsan() {
    # The tests where threads share blocks, allocators, budgets, plans and cancel flags.
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        sanitize tsan thread -p strata-core --test concurrency --test registry -- "$@"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        sanitize tsan thread -p strata-core --lib -- budget registry "$@"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        sanitize tsan thread -p strata-runtime --test concurrent_contexts --lib -- "$@"
}

case $mode in
    asan) asan "$@" ;;
    tsan) tsan "$@" ;;
    all) asan "$@"; tsan "$@" ;;
    *) echo "usage: scripts/sanitizers.sh [asan|tsan|all] [TEST-ARGS...]" >&2; exit 2 ;;
esac
