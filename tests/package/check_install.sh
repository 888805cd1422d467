#!/usr/bin/env bash
# Installs the build into a temporary prefix, checks that the installed headers stand alone
# (each compiles as the only include of a translation unit, terse.h as C too, and none includes
# a terse header that was not installed), then builds and runs a consumer program against it
# twice: through find_package(terse) and through pkg-config. Proves the exported package works.
set -euo pipefail
build_dir=$1 source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"

bash "$source_dir/tests/package/check_headers.sh" "$work/prefix/include"

cmake -S "$source_dir/tests/package/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/cmake" > "$work/build.log"
"$work/cmake/app" | tee "$work/cmake.out"
grep -q "^ok 1 2 3$" "$work/cmake.out"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
c++ -std=c++17 "$source_dir/tests/package/consumer/main.cc" $(pkg-config --cflags --libs terse) -o "$work/app-pc"
"$work/app-pc" | grep -q "^ok 1 2 3$"
echo "find_package(terse) and pkg-config both build and run a consumer"
