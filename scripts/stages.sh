# Sourced by scripts/test.sh: the test stages' runner. `stages_begin` makes $logs (removed at
# exit), where each `stage NAME CMD...` keeps CMD's output (NAME.log) and exit status (NAME.rc)
# for scripts/verdict.sh, and points TMPDIR at a folder of the suite's own; `tidy` (the last
# stage) checks that the stages left nothing there, nor any new rocmguard-* or hipsim-* entry
# in /tmp (what ignores TMPDIR).

ours='^(rocmguard|hipsim)'

stages_begin() {
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
    export TMPDIR=$logs/tmp
    mkdir "$TMPDIR"
    tmp_before=$(ls -A /tmp | grep -E "$ours" | sort || true)
}

# A stage's own count is shown as `NAME: N passed, N failed` (its log keeps the line as it was,
# for the verdict), so the verdict is the one line of that form the suite prints.
stage() {
    local name=$1
    shift
    set +e
    "$@" 2>&1 | tee "$logs/$name.log" | sed -u -E "s/^([0-9]+ passed, [0-9]+ failed)$/$name: \1/"
    echo "${PIPESTATUS[0]}" >"$logs/$name.rc"
    set -e
}

tidy() {
    local left
    left=$(ls -A "$TMPDIR" | sed "s|^|$TMPDIR/|"
        comm -13 <(echo "$tmp_before") <(ls -A /tmp | grep -E "$ours" | sort) | sed 's|^|/tmp/|')
    if [ -n "$left" ]; then
        echo "tidy: FAIL: the suite left $(echo "$left" | wc -l) entries in the temporary directory:"
        echo "$left" | head -20 | sed 's/^/    /'
        return 1
    fi
    echo "tidy: ok: the suite left nothing in the temporary directory"
}
