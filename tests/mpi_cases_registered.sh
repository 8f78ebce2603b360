#!/usr/bin/env bash
# Every test case a GoogleTest binary lists has its own CTest entries (tests/CMakeLists.txt
# reads the cases from the source): usage mpi_cases_registered.sh MPIEXEC BINARY "CASES".
set -euo pipefail
mpirun=$1 bin=$2 registered=$3
# --gtest_list_tests prints "Suite." lines followed by indented case names.
listed=$("$mpirun" --oversubscribe --allow-run-as-root -np 1 "$bin" --gtest_list_tests | awk '/^[^ ]/ {suite=$1; next} /^  / {print suite $1}' | sort)
expected=$(tr ' ' '\n' <<<"$registered" | sed '/^$/d' | sort)
if [[ "$listed" != "$expected" ]]; then
  echo "FAIL: $bin lists cases that CTest does not run, or the other way round:" >&2
  diff <(echo "$expected") <(echo "$listed") >&2 || true
  echo "write each case as 'TEST(Suite, Case)' at the start of a line so tests/CMakeLists.txt finds it" >&2
  exit 1
fi
echo "ok: $(wc -l <<<"$listed") cases registered for $(basename "$bin")"
