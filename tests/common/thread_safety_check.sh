#!/usr/bin/env bash
# thread_safety_check.sh CLANG SRC_DIR FLAG... [--built-with OPTION...]:
# with the project's own thread-safety flags (CMakeLists.txt,
# XPU_CLANG_WARNINGS), thread_safety_misuse.cc compiles as written and fails
# to compile, with clang's thread-safety diagnostic, for each misuse it holds
# (see that file). With --built-with (the clang builds), each flag must also
# be among the options our code is compiled with.
set -euo pipefail
clang=$1 src=$2
shift 2
flags=()
while [ $# -gt 0 ] && [ "$1" != --built-with ]; do flags+=("$1"); shift; done
[ ${#flags[@]} -gt 0 ] || { echo "FAIL: no thread-safety flags given"; exit 1; }
if [ "${1:-}" = --built-with ]; then
  shift
  for f in "${flags[@]}"; do
    printf '%s\n' "$@" | grep -qxF -- "$f" || {
      echo "FAIL: this clang build compiles our code without $f (options: $*)"; exit 1; }
  done
  echo "the clang build compiles our code with ${flags[*]}"
fi
here=$(cd "$(dirname "$0")" && pwd)
compile() {
  "$clang" -std=c++20 -fsyntax-only "${flags[@]}" -I "$src" \
    -DXPU_MISUSE="$1" "$here/thread_safety_misuse.cc" 2>&1
}
compile 0 || { echo "FAIL: the correct uses do not compile"; exit 1; }
for misuse in 1 2 3 4 5; do
  if out=$(compile $misuse); then
    echo "FAIL: misuse $misuse compiled: -Wthread-safety does not see it"
    exit 1
  fi
  grep -q -- "\[-Werror,-Wthread-safety" <<<"$out" || {
    echo "FAIL: misuse $misuse failed for another reason:"; echo "$out"; exit 1; }
  echo "misuse $misuse refused: $(grep -m1 'error:' <<<"$out" | sed 's/.*error: //')"
done
