#!/usr/bin/env bash
# The test command's last line: `N passed, N failed` over every stage's log in DIR (NAME.log, with
# its exit status in NAME.rc). Counts cargo's `test result:` lines, Python unittest's summary and
# a script's own `N passed, N failed` line; a stage with none counts as one test (its exit
# status), and a stage that failed with no failed test counted adds one failure.
set -euo pipefail
dir=$1
total_pass=0
total_fail=0
for log in "$dir"/*.log; do
    rc=$(cat "${log%.log}.rc" 2>/dev/null || echo 1)
    read -r pass fail counted < <(awk '
        /^test result: / {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
            }
            n = 1
        }
        /^Ran [0-9]+ tests? in / { ran = $2; n = 1 }
        /^(OK|FAILED)( \(|$)/ && ran != "" {
            bad = 0; skip = 0
            if (match($0, /failures=[0-9]+/)) bad += substr($0, RSTART + 9, RLENGTH - 9)
            if (match($0, /errors=[0-9]+/)) bad += substr($0, RSTART + 7, RLENGTH - 7)
            if (match($0, /skipped=[0-9]+/)) skip = substr($0, RSTART + 8, RLENGTH - 8)
            p += ran - bad - skip; f += bad; ran = ""
        }
        /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3; n = 1 }
        END { print p + 0, f + 0, n + 0 }
    ' "$log")
    if [ "$counted" -eq 0 ]; then
        if [ "$rc" -eq 0 ]; then pass=1; else fail=1; fi
    elif [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
        fail=1
    fi
    total_pass=$((total_pass + pass))
    total_fail=$((total_fail + fail))
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
