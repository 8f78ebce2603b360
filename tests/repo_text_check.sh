#!/usr/bin/env bash
# Keeps the repository written for its readers: usage repo_text_check.sh SOURCE_DIR CHECK
#   readme       README.md stays a user's page: at most 300 lines, no dates, no words about
#                how the project is developed, no first person, no tracker tags.
#   source_tags  no source, test, script or CMake file under src, cpu, kernels, io, bench or
#                tests carries a tracker tag or cites a file outside the repository.
#   family_switches  no source outside src/model/families/ compares a model family's name or
#                architecture string: families are looked up in the registry (model_family.h).
# A tracker tag is an S followed by one or two digits standing alone (the pattern is built
# below so that this file does not match itself).
set -euo pipefail
src=$1 check=$2
tag='\bS''[0-9]{1,2}\b'
fail=0
report() { echo "FAIL: $1" >&2; fail=1; }

case $check in
  readme)
    readme=$src/README.md
    lines=$(wc -l <"$readme")
    ((lines <= 300)) || report "README.md has $lines lines; keep it at most 300 and move detail to docs/"
    for pattern in "$tag" '\b[Ss]essions?\b' 'this VM' '\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b' \
                   "(^|[ (\"])(I|I'm|I've|we|We|our|Our|my|My)([ ,.;:']|$)"; do
      if hits=$(grep -nE "$pattern" "$readme"); then
        report "README.md matches /$pattern/ (no tracker tags, session words, dates or first person):"
        echo "$hits" >&2
      fi
    done
    ;;
  source_tags)
    for dir in src cpu kernels io bench tests; do
      # -I passes over binary fixtures.
      if hits=$(grep -rnIE "$tag|shared"'/design' "$src/$dir"); then
        report "files under $dir/ carry tracker tags or cite files outside the repository:"
        echo "$hits" >&2
      fi
    done
    ;;
  family_switches)
    if hits=$(grep -rnE '(family|arch|arch\(\)|model_type) *[!=]= *"' "$src/src" "$src/cpu" "$src/kernels" "$src/io" \
              "$src/bench" --include='*.h' --include='*.cpp' --include='*.cu' | grep -v "^$src/src/model/families/"); then
      report "a family's name is compared outside src/model/families/ (look the family up in the registry):"
      echo "$hits" >&2
    fi
    ;;
  *)
    echo "usage: repo_text_check.sh SOURCE_DIR readme|source_tags|family_switches" >&2
    exit 2
    ;;
esac
((fail == 0)) && echo "ok: $check"
exit $fail
