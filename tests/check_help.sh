#!/usr/bin/env bash
# --help of one program: exit 0, its usage and flags on stdout, each group of
# flags named by what it is for or by its file in the source tree, never by
# the directory the program was built in.
# Usage: tests/check_help.sh PROGRAM SOURCE_DIR
set -u
program=$1
source_dir=$2
name=$(basename "$program")
out=$("$program" --help 2>/dev/null)
status=$?
fail() {
  echo "$name --help: $1" >&2
  exit 1
}
[[ $status -eq 0 ]] || fail "exit $status, not 0"
[[ "$out" == "$name: "* ]] || fail "does not start with '$name: ' and its usage"
grep -q -- '^    --[a-z0-9_]* (' <<<"$out" || fail "lists no flags"
groups=$(grep '^  Flags from ' <<<"$out")
[[ -n "$groups" ]] || fail "names no group of flags"
if grep -q -e "$source_dir" -e 'Flags from /' -e 'Flags from \.\.' <<<"$groups"; then
  fail "names a build path: $(grep -e "$source_dir" -e '/' <<<"$groups" | head -1)"
fi
echo "$name --help: ok ($(wc -l <<<"$groups") groups)"
