# cases.awk -- turns one test's log into its test cases, for tests/run.sh.
#
#   awk -v kind=c|sh -v prefix=plain/test_store -v rc=STATUS -v why=TEXT \
#       -v ci=0|1 -f tests/cases.awk LOG
#
# prints one line per case, fields separated by a tab:
#
#   PASS|FAIL|SKIP <tab> prefix:case name <tab> detail
#
# kind=c  (a cmocka binary): `[       OK ] name` passes, `[  FAILED  ] name`
#         and `[  ERROR   ] name` (a setup or teardown that failed) fail,
#         `[  SKIPPED ] name` skips.  The names cmocka lists again in its
#         summary ("N test(s), listed below:") are not counted twice.
# kind=sh (a shell test): `ok    NAME` passes, `FAIL  NAME` fails (lib.sh's
#         ok/bad), `SKIP  NAME` skips, and a Python suite's
#         `CASE PASS|FAIL|SKIP <id> <seconds> [why]` (tests/e2e/run_e2e.py)
#         is one case.  A script that prints no case line at all is one case
#         of its own, decided by its exit status.
# Whatever the lines say, a nonzero exit status (rc) with no failing case is
# one failure (why says what happened: exit status, timeout, not built); a
# cmocka binary that ran no case, or lib.sh's "0 checks", is a failure.
# With ci=1 (CI=true) every skip is a failure.

function emit(status, name, detail) {
    gsub(/\t/, " ", name)
    gsub(/\t/, " ", detail)
    if (status == "SKIP" && ci) {
        status = "FAIL"
        detail = "skipped, and under CI=true a skip is a failure" (detail != "" ? ": " detail : "")
    }
    n[status]++
    printf "%s\t%s\t%s\n", status, name, detail
}

function rest(line, re) {
    sub(re, "", line)
    sub(/[ \t\r]+$/, "", line)
    return line
}

BEGIN { listing = ""; summary = -1; n["PASS"] = n["FAIL"] = n["SKIP"] = 0; lib_checks = -1 }

kind == "c" && /^\[  (FAILED|SKIPPED)  ?\] [0-9]+ test\(s\), listed below:/ {
    listing = ($0 ~ /FAILED/) ? "FAILED" : "SKIPPED"
    next
}
kind == "c" && listing != "" {
    if (listing == "FAILED" && /^\[  FAILED  \] /) next
    if (listing == "SKIPPED" && /^\[  SKIPPED \] /) next
    listing = ""
}
kind == "c" && /^\[       OK \] / { emit("PASS", prefix ":" rest($0, "^\\[       OK \\] "), ""); next }
kind == "c" && /^\[  FAILED  \] / { emit("FAIL", prefix ":" rest($0, "^\\[  FAILED  \\] "), "failed"); next }
kind == "c" && /^\[  SKIPPED \] / { emit("SKIP", prefix ":" rest($0, "^\\[  SKIPPED \\] "), "skipped"); next }
kind == "c" && /^\[  ERROR   \] / {
    name = rest($0, "^\\[  ERROR   \\] ")
    if (name !~ /^---/) emit("FAIL", prefix ":" name, "error (its setup or teardown failed)")
    next
}
kind == "c" && /^\[  PASSED  \] [0-9]+ test\(s\)/ {
    s = $0
    sub(/^\[  PASSED  \] /, "", s)
    summary = (summary < 0 ? 0 : summary) + (s + 0)
    next
}

kind == "sh" && /^ok +[^ ]/ { emit("PASS", prefix ":" rest($0, "^ok +"), ""); next }
kind == "sh" && /^FAIL +[^ ]/ { emit("FAIL", prefix ":" rest($0, "^FAIL +"), "failed"); next }
kind == "sh" && /^SKIP +[^ ]/ { emit("SKIP", prefix ":" rest($0, "^SKIP +"), "skipped"); next }
kind == "sh" && /^CASE (PASS|FAIL|SKIP) [^ ]+ [0-9.]+/ {
    detail = $0
    sub(/^CASE [A-Z]+ [^ ]+ [0-9.]+ ?/, "", detail)
    emit($2, prefix ":" $3, (detail != "" ? detail "; " : "") $4 "s")
    next
}
kind == "sh" && /^[0-9]+ checks, [0-9]+ failed(, [0-9]+ skipped)?$/ { lib_checks = $1 + 0; next }

END {
    total = n["PASS"] + n["FAIL"] + n["SKIP"]
    if (kind == "sh" && total == 0) {
        # a script without case lines is one case
        if (rc == 0) emit("PASS", prefix, "")
        else emit("FAIL", prefix, why)
        exit
    }
    if (rc != 0 && n["FAIL"] == 0)
        emit("FAIL", prefix, why (total > 0 ? ", with no failing case reported" : ""))
    if (kind == "c" && total == 0 && rc == 0)
        emit("FAIL", prefix, "ran no test case")
    if (kind == "c" && rc == 0 && summary >= 0 && summary != n["PASS"])
        emit("FAIL", prefix, "cmocka's summary says " summary " passed; " n["PASS"] " OK lines counted")
    if (kind == "sh" && lib_checks == 0)
        emit("FAIL", prefix, "lib.sh counted 0 checks")
}
