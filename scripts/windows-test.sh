#!/usr/bin/env bash
# Builds the Windows side of rocmguard (windows/: rocmguard.dll, rocmguard.exe, and the
# simulated HIP runtime and rocBLAS as amdhip64_6.dll and rocblas.dll) with Debian's rustc 1.63
# cross toolchain, and tests it under wine64 with a C program that reaches the runtime through
# its import table (linked) and through LoadLibraryExW + GetProcAddress by full path (loaded).
# Wine, not Windows; the simulator, not a Radeon: see docs/windows.md.
#
# Self-contained: installs its Debian packages if missing (apt-get), builds, runs, prints
# `N passed, N failed` and exits non-zero on any failure. WINEPREFIX defaults to a private one
# under windows/target/.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=x86_64-pc-windows-gnu
REL=$ROOT/windows/target/$TARGET/release
W=$ROOT/windows/target/windows-test
PKGS="rustc cargo libstd-rust-dev-windows gcc-mingw-w64-x86-64 wine64 librust-once-cell-dev librust-libc-dev rust-clippy"
# The mingw linker and wine leave files of their own in the temporary directory (ccXXXXXX,
# wine-XXXXXX): give them a folder of ours, removed on exit (after wineserver, below).
OWN_TMP=$(mktemp -d)
export TMPDIR=$OWN_TMP
WINESERVER=""
trap '[ -n "$WINESERVER" ] && { "$WINESERVER" -k; "$WINESERVER" -w; } >/dev/null 2>&1; rm -rf "$OWN_TMP"' EXIT

die() {
    echo "windows-test: $*" >&2
    echo "0 passed, 1 failed"
    exit 1
}

# --- packages -------------------------------------------------------------------------------
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "windows-test: installing$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y --no-install-recommends $missing >/dev/null ||
        { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y --no-install-recommends $missing >/dev/null; } ||
        die "could not install$missing"
fi
WINE=$(dpkg -L wine64 | grep -E '/wine64$' | head -n1)
WINESERVER=$(dpkg -L wine64 | grep -E '/wineserver64$' | head -n1)
[ -x "$WINE" ] || die "wine64 is installed but its binary was not found (dpkg -L wine64)"

# --- build (Debian's cargo and rustc; the rustup toolchain has no Windows target) -------------
cargo_win() {
    (cd "$ROOT/windows" && RUSTC=/usr/bin/rustc /usr/bin/cargo "$@" --offline --release --target $TARGET)
}
echo "windows-test: building windows/ with $(/usr/bin/rustc --version)"
cargo_win build --workspace || die "the Windows build failed"
# Clippy as on Linux, with Debian's 1.63 clippy for the Windows target (its driver must see
# Debian's sysroot, which has the Windows std). As the rustc wrapper, not `cargo clippy`: that
# lints only this workspace's members, and the guard and the core (shim/guard, shim/core) are
# path dependencies whose Windows-only code no Linux run compiles. One lint is allowed: 1.63
# flags `thread_local!` with a `const {}` initializer (its own expansion) as an
# interior-mutable const; newer clippy wants that form.
(cd "$ROOT/windows" && SYSROOT=/usr PATH=/usr/bin:$PATH RUSTC=/usr/bin/rustc \
    RUSTC_WRAPPER=/usr/bin/clippy-driver CARGO_TARGET_DIR="$ROOT/windows/target/clippy" \
    RUSTFLAGS="-D warnings -A clippy::declare_interior_mutable_const" /usr/bin/cargo build \
    --offline --release --target $TARGET --workspace --all-targets) ||
    die "clippy found warnings in windows/ or in the shared crates built for Windows"

rm -rf "$W"
mkdir -p "$W/bin" "$W/linked" "$W/loaded/sim"
cp "$REL/rocmguard.exe" "$REL/rocmguard.dll" "$W/bin/"
cp "$REL/amdhip64_6.dll" "$REL/rocblas.dll" "$W/linked/"
cp "$REL/amdhip64_6.dll" "$REL/rocblas.dll" "$W/loaded/sim/"
CC=x86_64-w64-mingw32-gcc
$CC -O2 -Wall -Werror -DLINKED -o "$W/linked/guard.exe" windows/tests/c/guard.c -L"$REL" -lamdhip64_6 -lrocblas ||
    die "building the linked test program failed"
$CC -O2 -Wall -Werror -DLOADED -o "$W/loaded/guard.exe" windows/tests/c/guard.c ||
    die "building the loaded test program failed"
printf 'not a DLL\n' >"$W/bin/broken.dll"

# --- wine ----------------------------------------------------------------------------------
export WINEPREFIX=${WINEPREFIX:-$ROOT/windows/target/wineprefix}
export WINEDEBUG=-all
export WINEDLLOVERRIDES="mscoree,mshtml="
mkdir -p "$WINEPREFIX"
"$WINE" wineboot --init >/dev/null 2>&1
"$WINESERVER" -p 60 >/dev/null 2>&1

# --- helpers -------------------------------------------------------------------------------
PASSED=0
FAILED=0
WHY=""
OUT=""
ERR=""
RC=0
TMP=$(mktemp -d)

# w [VAR=value ...] PROGRAM ARGS...: runs a Windows program under wine from $W.
# A run that printed nothing at all, not even wine's own messages, runs once more: wine's start
# up has failed that way (empty stdout and stderr, session 26), which says nothing of ours. A
# program that truly prints nothing prints nothing twice and is judged on that.
w() {
    local vars=() try
    while [ $# -gt 0 ] && [[ $1 == *=* ]]; do vars+=("$1"); shift; done
    for try in 1 2; do
        (cd "$W" && env ${vars[@]+"${vars[@]}"} timeout 120 "$WINE" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null)
        RC=$?
        OUT=$(tr -d '\r' <"$TMP/out")
        ERR=$(tr -d '\r' <"$TMP/err")
        [ -n "$OUT$ERR" ] && break
        [ $try = 1 ] && echo "windows-test: '$*' printed nothing (exit $RC); running it once more" >&2
    done
}
# The value of `key value` line KEY of the last run's stdout.
val() { awk -v k="$1" '$1 == k { print $2; exit }' <<<"$OUT"; }
want() {
    local got
    got=$(val "$1")
    [ "$got" = "$2" ] || WHY="$WHY$1 is '$got', want '$2'; "
}
want_rc() { [ "$RC" = "$1" ] || WHY="${WHY}exit code $RC, want $1; "; }
want_err() { grep -qF -- "$1" <<<"$ERR" || WHY="${WHY}stderr lacks '$1'; "; }
verdict() {
    if [ -z "$WHY" ]; then
        PASSED=$((PASSED + 1))
        echo "ok   $1"
    else
        FAILED=$((FAILED + 1))
        echo "FAIL $1: $WHY"
        echo "---- stdout"; echo "$OUT"; echo "---- stderr"; echo "$ERR"; echo "----"
    fi
    WHY=""
}

GIB=1073741824
RUN="bin/rocmguard.exe run"

# --- tests ---------------------------------------------------------------------------------
for how in linked loaded; do
    P=$how/guard.exe

    w HIPSIM_VRAM=1536MiB $RUN --cap 1GiB -- $P cap
    for k in total free device_total attribute props_total; do want $k $GIB; done
    want free_after_600MiB $((GIB - 600 * 1048576))
    verdict "$how: the memory queries show the 1 GiB cap"
    want past_cap 2
    want past_cap_pointer_null 1
    want last_error_after_refusal 2
    want last_error_then 0
    want after_free 0
    want_rc 0
    want_err "[VRAM Limit] refused"
    [[ $ERR == "rocmguard "* ]] || WHY="${WHY}stderr does not start with the first-use line; "
    verdict "$how: past the cap hipMalloc is refused with hipErrorOutOfMemory and the program goes on"

    w $RUN --cap 1GiB -- $P cap
    want total $GIB
    want attribute $GIB
    verdict "$how: on a 16 GiB device the total-memory attribute (saturated at INT_MAX) shows the cap"

    w HIPSIM_VRAM=1536MiB $P cap
    want total 1610612736
    want past_cap 0
    want_rc 0
    verdict "$how: without the launcher the program is unguarded"

    w HIPSIM_FAIL_NTH=1 $RUN -- $P transient
    want transient 0
    want last_error 0
    w HIPSIM_FAIL_NTH=1 $P transient
    want transient 2
    verdict "$how: a transient out-of-memory (HIPSIM_FAIL_NTH=1) is absorbed, and is not without"

    w HIPSIM_FAIL_NTH=1 $RUN -- $P blas
    want create 0
    want handle 1
    want destroy 0
    w HIPSIM_FAIL_NTH=1 $P blas
    want create 5
    verdict "$how: rocblas_create_handle survives its workspace failing once, and fails without"

    w $RUN --cap 1GiB -- $P workspace
    want create 0
    want after_handle 2
    w $P workspace
    want after_handle 0
    verdict "$how: rocblas.dll's own hipMalloc counts against the cap (its imports are hooked)"

    w $RUN --cap 1GiB -- $P procaddr
    want procaddr_past_cap 2
    verdict "$how: functions from hipGetProcAddress are guarded"

    w HIPSIM_VRAM=1536MiB $RUN --cap 1GiB -- $P spawn
    want total $GIB
    want past_cap 2
    want child_exit 0
    want_rc 0
    verdict "$how: a process the program starts (CreateProcessW) is guarded too"

    w $RUN -- $P exit 7
    want_rc 7
    verdict "$how: the program's exit code comes through the launcher"
done

P=loaded/guard.exe
for call in A ExA ExW ctypes; do
    how=LoadLibrary$call
    [ $call = ctypes ] && how="kernel32's LoadLibraryExW from GetProcAddress (as ctypes calls it)"
    w GUARD_LOADER=$call $RUN --cap 1GiB -- $P workspace
    want create 0
    want after_handle 2
    verdict "loaded with $how: rocblas.dll's imports of the runtime are hooked"
done

w $RUN --dll bin/broken.dll -- $P exit 5
want_rc 5
want_err "could not inject"
want_err "UNGUARDED"
verdict "an injection that fails leaves the program running unguarded, and says so"

w $RUN --dll bin/missing.dll -- $P exit 0
want_rc 0
want_err "UNGUARDED"
verdict "a missing rocmguard.dll: the program runs unguarded, and the launcher says so"

rm -f "$W/guard.log"
w ROCMGUARD_LOG_FILE=guard.log $RUN --cap 1GiB -- $P cap
grep -qF "[VRAM Limit] refused" "$W/guard.log" 2>/dev/null || WHY="guard.log lacks the refusal; "
verdict "ROCMGUARD_LOG_FILE gets the log as well as stderr"

w $RUN --stats --cap 1GiB -- $P cap
want_err "HIP memory at exit"
want_err "dev0"
verdict "--stats prints the per-device table at exit"

w HIPSIM_VRAM=1536MiB $RUN --cap 1GiB --set disable=1 -- $P cap
want total 1610612736
want past_cap 0
want_err "ROCMGUARD_DISABLE"
verdict "--set disable=1 passes every call through"

w $RUN --trim-threshold 2 -- $P exit 0
want_rc 2
want_err "at most 1"
verdict "a bad option value stops the launch with the guard's reason"

w $RUN --dry-run --cap 20GiB --headroom 1GiB --set retries=5 -- $P exit 0
grep -qx "set ROCMGUARD_VRAM_LIMIT=20GiB" <<<"$OUT" || WHY="${WHY}no cap in the dry run; "
grep -qx "set ROCMGUARD_HEADROOM=1GiB" <<<"$OUT" || WHY="${WHY}no headroom in the dry run; "
grep -qx "set ROCMGUARD_RETRIES=5" <<<"$OUT" || WHY="${WHY}no retries in the dry run; "
verdict "options map to ROCMGUARD_* variables (--dry-run)"

w $RUN -- no-such-program.exe
want_rc 127
verdict "a command that does not exist exits 127"

rm -f "$W/trace.csv"
w ROCMGUARD_TRACE=trace.csv $RUN -- $P transient
head -n1 "$W/trace.csv" 2>/dev/null | grep -q "^Thread,Time,Action,Pointer,Size" || WHY="no trace header; "
grep -q ",allocate,0x" "$W/trace.csv" 2>/dev/null || WHY="${WHY}no allocate row; "
verdict "ROCMGUARD_TRACE records the hooked calls"

w HIPSIM_VRAM=2GiB HIPSIM_INTEGRATED=1 ROCMGUARD_UMA=0 $RUN -- $P cap
want total $GIB
uma_off=$(val total)
w HIPSIM_VRAM=2GiB HIPSIM_INTEGRATED=1 ROCMGUARD_UMA=1 $RUN -- $P cap
uma_on=$(val total)
[ -n "$uma_on" ] && [ "$uma_on" -gt "${uma_off:-0}" ] ||
    WHY="${WHY}unified view total '$uma_on' not above the runtime's '$uma_off'; "
verdict "an integrated device's total grows to the shared-memory ceiling with ROCMGUARD_UMA=1"

# Unit tests of the launcher's options and of the simulator (its VirtualAlloc mapping), run
# by wine as cargo's runner.
if CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$WINE cargo_win test -p rocmguard-launcher -p hipsim-windows \
    >"$TMP/unit" 2>&1; then
    OUT=""
else
    WHY="cargo test failed: $(grep -E '^(test .* FAILED|error)' "$TMP/unit" | head -n5 | tr '\n' ' ')"
    OUT=$(tail -n 30 "$TMP/unit")
fi
ERR=""
verdict "unit tests (launcher options, simulator mapping) under wine"

rm -rf "$TMP"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
