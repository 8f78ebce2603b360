# Sourced first by the CLI case scripts, as `source "$(dirname "$0")/cli_case.sh" "$@"` in a
# script run as SCRIPT STRATA_BINARY CASE: sets bin, case_name, src (the checkout), tmp (a
# directory removed on exit), and loads test_lib.sh's helpers.
set -u
bin=$1; case_name=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$src/tests/test_lib.sh"
