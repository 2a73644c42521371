#!/usr/bin/env bash
# The runtime-neutral suites (runtime, index, kernels, accounting, online, proxy) under Deno, with the deno npm package.
# deno.json maps "bun:test" to test/deno/bunTest.ts (Deno.test plus jest's expect). --no-check: the
# sources are type-checked with Bun's types by tsc; --expose-gc: the memory tests collect garbage.
# Extra arguments (files, folders, deno test flags) replace the default suites.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
suites=(test/runtime test/index test/kernels test/accounting test/online test/proxy)
[ $# -gt 0 ] && suites=("$@")
exec node_modules/.bin/deno test -A --no-check --v8-flags=--expose-gc --unstable-no-legacy-abort "${suites[@]}"
