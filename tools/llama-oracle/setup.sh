#!/usr/bin/env bash
# Sets up llama.cpp as the oracle of ctxr's tests (test/helpers/llamaOracle.ts), under this folder:
#   node_modules/      node-llama-cpp 3.22.1 and its prebuilt linux-x64 libllama (npm ci from the lock,
#                      without the optional CUDA/Vulkan/other-platform variants, without install scripts)
#   build/llama.cpp/   a sparse checkout of the llama.cpp commit those libraries were built from, out of
#                      the git bundle inside node-llama-cpp: include/, ggml/include/ (headers), gguf-py/,
#                      and llama.cpp's own SentencePiece vocabularies of Llama 2 and Phi-3 with their test
#                      texts (models/ggml-vocab-{llama-spm,phi-3}.gguf{,.inp,.out}: the tokenizer oracle)
#   build/llama-oracle the driver (llama_oracle.cpp, conversation.cpp) linked against that libllama
# Idempotent: a stamp of the inputs makes a second run a no-op. Prints the driver's path on success.
# package-lock.json names node-llama-cpp's other-platform optional packages (mac, win, riscv64) with
# their version only: the registry the lock was made against lacks them, npm ci insists that the
# lock lists every dependency, and --omit=optional never fetches them.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BUILD="$HERE/build"
SRC="$BUILD/llama.cpp"
BIN="$BUILD/llama-oracle"
STAMP="$BUILD/ready.stamp"
PKG="$HERE/node_modules/node-llama-cpp"
LIBS="$HERE/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"

inputs_hash() {
  { cat "$HERE/package-lock.json" "$HERE"/*.cpp "$HERE"/*.h "$HERE/setup.sh"; echo "$HERE"; } | sha256sum | cut -d' ' -f1
}

if [ -x "$BIN" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ]; then
  echo "$BIN"
  exit 0
fi

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "llama-oracle: the prebuilt llama.cpp it uses is linux-x64 only (this is $(uname -s)-$(uname -m))" >&2
  exit 1
fi
for tool in npm git g++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "llama-oracle: needs $tool" >&2; exit 1; }
done
mkdir -p "$BUILD"
rm -f "$STAMP"

lock_hash="$(sha256sum "$HERE/package-lock.json" | cut -d' ' -f1)"
if [ ! -d "$LIBS" ] || [ ! -f "$PKG/llama/gitRelease.bundle" ] || [ "$(cat "$BUILD/npm.stamp" 2>/dev/null)" != "$lock_hash" ]; then
  echo "llama-oracle: npm ci (node-llama-cpp 3.22.1, linux-x64 only)" >&2
  (cd "$HERE" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  echo "$lock_hash" > "$BUILD/npm.stamp"
fi

commit="$(git bundle list-heads "$PKG/llama/gitRelease.bundle" | awk '$2 == "HEAD" { print $1 }')"
[ -n "$commit" ] || { echo "llama-oracle: no HEAD in $PKG/llama/gitRelease.bundle" >&2; exit 1; }
if [ "$(git -C "$SRC" rev-parse HEAD 2>/dev/null)" != "$commit" ] || [ ! -f "$SRC/include/llama.h" ] || [ ! -d "$SRC/gguf-py/gguf" ] || [ ! -f "$SRC/models/ggml-vocab-phi-3.gguf.inp" ]; then
  echo "llama-oracle: checking out llama.cpp ${commit:0:10} (include/, ggml/include/, gguf-py/, two vocabularies in models/) from the bundle" >&2
  rm -rf "$SRC"
  git clone --quiet --no-checkout "$PKG/llama/gitRelease.bundle" "$SRC"
  git -C "$SRC" sparse-checkout set --no-cone /include/ /ggml/include/ /gguf-py/ '/models/ggml-vocab-llama-spm.gguf*' '/models/ggml-vocab-phi-3.gguf*'
  git -C "$SRC" -c advice.detachedHead=false checkout --quiet "$commit"
fi

libllama="$(cd "$LIBS" && ls libllama.v*.so | head -1)"
libggml="$(cd "$LIBS" && ls libggml.v*.so | head -1)"
[ -n "$libllama" ] && [ -n "$libggml" ] && [ -f "$LIBS/libggml-base.so" ] || { echo "llama-oracle: libllama/libggml not found in $LIBS" >&2; exit 1; }
echo "llama-oracle: compiling the driver against $libllama" >&2
g++ -O2 -std=c++17 -Wall -I"$SRC/include" -I"$SRC/ggml/include" -DLLAMA_ORACLE_LIB_DIR="\"$LIBS\"" \
  -o "$BIN.tmp" "$HERE/llama_oracle.cpp" "$HERE/conversation.cpp" "$HERE/expert_routes.cpp" \
  -L"$LIBS" -l:"$libllama" -l:"$libggml" -l:libggml-base.so -Wl,-rpath,"$LIBS"
mv "$BIN.tmp" "$BIN"
inputs_hash > "$STAMP"
echo "$BIN"
