#!/usr/bin/env bash
# Checks an installed include directory (check_install.sh passes the temporary prefix's): only
# terse/*.h is there, every header compiles as the only include of a translation unit with
# nothing but this directory on the include path (terse/terse.h as C too), and no header includes
# a terse header that is not there. Prints every problem, then fails if there was one.
set -euo pipefail
include=$1
err=$(mktemp)
trap 'rm -f "$err"' EXIT
mapfile -t headers < <(cd "$include" && find . -type f -name '*.h' | sed 's|^\./||' | sort)
if [ "${#headers[@]}" -eq 0 ]; then
  echo "no headers installed under $include" >&2
  exit 1
fi
failed=0
for h in "${headers[@]}"; do
  # Only include/terse/ is public: a layer's headers (terse/<layer>/...) must not be installed.
  case $h in
    terse/*/*) echo "installed header outside include/terse/: $h" >&2; failed=1 ;;
  esac
  # Every terse header it includes, "..." or <...>, must be installed too.
  while read -r inc; do
    [ -f "$include/$inc" ] || { echo "$h includes $inc, which is not installed" >&2; failed=1; }
  done < <(sed -nE 's@^[[:space:]]*#[[:space:]]*include[[:space:]]*["<](terse/[^">]+)[">].*@\1@p' "$include/$h")
  # Alone in a translation unit, with nothing but the installed prefix on the include path.
  if ! echo "#include <$h>" | c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I "$include" \
      -x c++ - 2> "$err"; then
    echo "$h does not compile alone as C++:" >&2
    cat "$err" >&2
    failed=1
  fi
done
# The C API's header is C as well.
if ! echo "#include <terse/terse.h>" | cc -std=c11 -Wall -Wextra -Werror -fsyntax-only \
    -I "$include" -x c - 2> "$err"; then
  echo "terse/terse.h does not compile alone as C:" >&2
  cat "$err" >&2
  failed=1
fi
[ "$failed" -eq 0 ] || exit 1
echo "${#headers[@]} installed headers, each self-contained: ${headers[*]}"
