//! Kendall-tau distance between two orders of the same items: the number of discordant pairs
//! divided by m(m-1)/2 (0 when m < 2), O(m log m) per segment.
//!
//! Each item of the b order is mapped to its position in the a order (both orders are sorted by
//! item and matched, which also checks they hold the same distinct items); the discordant pairs
//! are then the inversions of that position sequence, counted by a bottom-up merge sort.

use crate::memory::{try_filled, view, view_mut, OK, OUT_OF_MEMORY};

/// Segment s of `a` and of `b` is `offsets[s]..offsets[s+1]` (segments + 1 offsets, validated by
/// the host). `out[s]` receives the distance of segment s.
///
/// Returns `OK`, `OUT_OF_MEMORY`, or the index of the first segment whose a and b do not hold the
/// same set of distinct items.
///
/// # Safety
/// `a`, `b` have `len` entries, `offsets` segments + 1, `out` segments.
#[no_mangle]
pub unsafe extern "C" fn ctxr_kendall_tau(
    a: *const i32,
    b: *const i32,
    len: usize,
    offsets: *const i32,
    segments: usize,
    out: *mut f64,
) -> i32 {
    let a = view(a, len);
    let b = view(b, len);
    let offsets = view(offsets, segments + 1);
    let out = view_mut(out, segments);
    let longest = (0..segments)
        .map(|s| (offsets[s + 1] - offsets[s]) as usize)
        .max()
        .unwrap_or(0);
    let buffers = (
        try_filled(longest, 0u64),
        try_filled(longest, 0u64),
        try_filled(longest, 0u32),
        try_filled(longest, 0u32),
    );
    let (mut keys_a, mut keys_b, mut ranks, mut scratch) = match buffers {
        (Some(p), Some(q), Some(r), Some(t)) => (p, q, r, t),
        _ => return OUT_OF_MEMORY,
    };
    for s in 0..segments {
        let (start, end) = (offsets[s] as usize, offsets[s + 1] as usize);
        let m = end - start;
        // key = (item with its sign bit flipped, so unsigned order is signed order) << 32 | pos
        let key = |item: i32, pos: usize| (((item as u32) ^ 0x8000_0000) as u64) << 32 | pos as u64;
        let ka = &mut keys_a[..m];
        let kb = &mut keys_b[..m];
        for p in 0..m {
            ka[p] = key(a[start + p], p);
            kb[p] = key(b[start + p], p);
        }
        ka.sort_unstable();
        kb.sort_unstable();
        let r = &mut ranks[..m];
        for t in 0..m {
            let (item_a, item_b) = (ka[t] >> 32, kb[t] >> 32);
            if item_a != item_b || (t > 0 && ka[t - 1] >> 32 == item_a) {
                return s as i32;
            }
            // the item at position pos_b in b is at position pos_a in a
            r[(kb[t] & 0xffff_ffff) as usize] = (ka[t] & 0xffff_ffff) as u32;
        }
        out[s] = if m < 2 {
            0.0
        } else {
            let discordant = count_inversions(r, &mut scratch[..m]) as f64;
            discordant / ((m as f64) * ((m - 1) as f64) / 2.0)
        };
    }
    OK
}

/// Number of pairs p < q with v[p] > v[q]; sorts `v`, uses `scratch` (same length).
fn count_inversions(v: &mut [u32], scratch: &mut [u32]) -> u64 {
    let m = v.len();
    let mut inversions = 0u64;
    let mut width = 1;
    let (mut src, mut dst) = (v, scratch);
    while width < m {
        let mut lo = 0;
        while lo < m {
            let mid = (lo + width).min(m);
            let hi = (lo + 2 * width).min(m);
            let (mut p, mut q, mut o) = (lo, mid, lo);
            while p < mid && q < hi {
                if src[q] < src[p] {
                    dst[o] = src[q];
                    q += 1;
                    inversions += (mid - p) as u64;
                } else {
                    dst[o] = src[p];
                    p += 1;
                }
                o += 1;
            }
            dst[o..o + (mid - p)].copy_from_slice(&src[p..mid]);
            o += mid - p;
            dst[o..o + (hi - q)].copy_from_slice(&src[q..hi]);
            lo = hi;
        }
        core::mem::swap(&mut src, &mut dst);
        width *= 2;
    }
    inversions
}
