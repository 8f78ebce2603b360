# Shared by the shell tests (sourced after bin, src and tmp are set).
fail() { echo "FAIL: $*"; exit 1; }
# expect_error CODE PATTERN -- ARGS: the command must exit with CODE and print PATTERN on stderr
expect_error() {
  local code=$1 pattern=$2; shift 3
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  [[ $rc -eq $code ]] || fail "strata $* exited $rc, expected $code; stderr: $(cat "$tmp/err")"
  grep -q -- "$pattern" "$tmp/err" || fail "strata $* stderr lacks '$pattern': $(cat "$tmp/err")"
  echo "ok: strata $* -> exit $rc: $(head -c 200 "$tmp/err")"
}
# The logged steps of OUT as "step loss lr grad_norm" lines (what must equal another run's).
log_lines() { sed -E 's/.*"step":([0-9]+).*/\1 &/' "$1/metrics.jsonl" | grep -oE '^[0-9]+|"(loss|lr|grad_norm)":[^,]*' | paste -d' ' - - - -; }
