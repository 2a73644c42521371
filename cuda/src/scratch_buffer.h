// A reusable device (or host) scratch allocation of a Backend, grown on demand.
#pragma once
#include <algorithm>
#include <cstddef>

#include "backend.h"

namespace ctxr {

struct BackendScratch {
  void* p = nullptr;
  size_t bytes = 0;
};

// At least `bytes` of `s`: when it is smaller it is reallocated, by half again at least, so that
// a slowly growing request reallocates rarely. The old contents are not kept.
inline void* grow_scratch(Backend* backend, BackendScratch& s, size_t bytes) {
  if (s.bytes < bytes) {
    if (s.p) backend->release(s.p);
    s.bytes = std::max(bytes, s.bytes * 3 / 2);
    s.p = backend->alloc(s.bytes);
  }
  return s.p;
}

}  // namespace ctxr
