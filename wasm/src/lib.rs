//! ctxr hot-path kernels, exported as raw `extern "C"` functions for the TypeScript loader
//! (src/kernels/wasmKernels.ts). Every kernel takes pointers into this module's memory plus
//! lengths and works on a whole batch per call.
//!
//! Status codes: kernels return an `i32`, `-1` for success; other values are documented per
//! kernel (usually the index of the offending input element or segment), and
//! `memory::OUT_OF_MEMORY` when a scratch buffer could not be allocated.
//!
//! Every kernel has a plain TypeScript twin in src/kernels/; both must produce bit-identical
//! results, so floating point is evaluated in the same operation order on both sides (no fused
//! multiply-add, no reassociation).

mod distance;
mod kendall;
mod linkage;
mod memory;
mod prefix_trie;
mod select;
