#!/usr/bin/env bash
# Builds the kernel module wasm/ctxr_kernels.wasm from the Rust crate in wasm/ and writes its
# checksum to wasm/ctxr_kernels.wasm.sha256 (sha256sum format).
#
#   scripts/build-wasm.sh          rebuild and overwrite the committed .wasm and .sha256
#   scripts/build-wasm.sh --check  rebuild into a temporary folder; exit 1 if the bytes differ
#                                  from the committed .wasm or the .sha256 does not match it
#                                  (exit 2 when the toolchain is missing)
#
# Toolchain: Debian's rustc 1.63 with the wasm32 standard library
#   apt-get install -y rustc libstd-rust-dev-wasm32
# (override with RUSTC=/path/to/rustc). The crate has no dependencies, so rustc is called
# directly; all flags live here. The output is byte-reproducible: the crate folder is remapped
# to a fixed name, so the checkout path does not leak into the module.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CRATE="$ROOT/wasm"
WASM="$CRATE/ctxr_kernels.wasm"
SUM="$CRATE/ctxr_kernels.wasm.sha256"
RUSTC=${RUSTC:-/usr/bin/rustc}
EXPECTED_RUSTC="rustc 1.63.0"

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "build-wasm.sh: unknown argument '$1' (use --check or nothing)" >&2; exit 2 ;;
esac

if ! command -v "$RUSTC" >/dev/null 2>&1; then
  echo "build-wasm.sh: rustc not found at '$RUSTC' (apt-get install -y rustc libstd-rust-dev-wasm32, or set RUSTC)" >&2
  exit 2
fi
version=$("$RUSTC" --version)
if [[ "$version" != "$EXPECTED_RUSTC"* ]]; then
  echo "build-wasm.sh: warning: $version is not $EXPECTED_RUSTC; the bytes may differ from the committed module" >&2
fi

# build OUTPUT: compile the crate to OUTPUT.
build() {
  local output=$1
  (
    cd "$CRATE"
    "$RUSTC" \
      --crate-name ctxr_kernels --crate-type cdylib --edition 2021 \
      --target wasm32-unknown-unknown \
      -C opt-level=3 -C lto -C panic=abort -C codegen-units=1 -C strip=symbols \
      -C debuginfo=0 -C target-feature=+simd128 \
      --remap-path-prefix "$CRATE=/ctxr/wasm" \
      src/lib.rs -o "$output"
  )
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ctxr-wasm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
build "$tmp/ctxr_kernels.wasm"
fresh_sum=$(cd "$tmp" && sha256sum ctxr_kernels.wasm)

if [[ $mode == build ]]; then
  cp "$tmp/ctxr_kernels.wasm" "$WASM"
  echo "$fresh_sum" > "$SUM"
  echo "built $WASM ($(stat -c %s "$WASM") bytes)"
  echo "$fresh_sum"
  exit 0
fi

status=0
if [[ ! -f "$WASM" ]]; then
  echo "build-wasm.sh --check: FAIL: $WASM is missing; run scripts/build-wasm.sh and commit it" >&2
  exit 1
fi
if ! cmp -s "$tmp/ctxr_kernels.wasm" "$WASM"; then
  echo "build-wasm.sh --check: FAIL: wasm/ctxr_kernels.wasm differs from a fresh build of wasm/src" >&2
  echo "  committed: $(cd "$CRATE" && sha256sum ctxr_kernels.wasm)" >&2
  echo "  rebuilt:   $fresh_sum" >&2
  echo "  run scripts/build-wasm.sh and commit wasm/ctxr_kernels.wasm and wasm/ctxr_kernels.wasm.sha256" >&2
  status=1
fi
if [[ ! -f "$SUM" ]] || ! (cd "$CRATE" && sha256sum --check --status ctxr_kernels.wasm.sha256); then
  echo "build-wasm.sh --check: FAIL: wasm/ctxr_kernels.wasm.sha256 does not match wasm/ctxr_kernels.wasm" >&2
  status=1
fi
if [[ $status == 0 ]]; then
  echo "build-wasm.sh --check: OK ($fresh_sum)"
fi
exit $status
