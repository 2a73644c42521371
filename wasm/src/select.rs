//! Top-k and top-p selection over f32 scores, row by row.
//!
//! The order: higher score first, equal scores by lower index first (-0 and +0 are equal). This
//! is a strict total order, so any correct selection gives the same indices as the TypeScript
//! twin's full sort.
//!
//! top-p of a row: with total = the f64 sum of the row's scores in index order and
//! target = p * total (f64), the result is
//! - every index with a positive score, in order, when p >= 1;
//! - nothing when target <= 0 (p <= 0, or an all-zero row);
//! - else the shortest prefix of the order whose f64 running sum (accumulated in that order)
//!   reaches target, or every positive-score index if rounding keeps the sum below target.
//! top-p scores must be finite and >= 0; top-k scores must not be NaN (the host turns the
//! returned index of an offending score into an error).

use core::arch::wasm32::*;

use crate::memory::{try_filled, view, view_mut, OK, OUT_OF_MEMORY};

/// Up to this k, top-k keeps a sorted buffer while scanning instead of selecting in an index
/// array.
const SMALL_K: usize = 32;

/// A u64 whose ascending order is the selection order: the high half ranks the score
/// (descending; -0 and +0 alike), the low half is the index. Sorting plain integers is much
/// faster than sorting indices through a comparator that reads the scores.
#[inline(always)]
fn key(score: f32, index: usize) -> u64 {
    let bits = (score + 0.0).to_bits(); // -0 + 0 = +0
    // Order-preserving map of a non-NaN f32 to u32 (ascending), then inverted for descending.
    let ascending = if bits & 0x8000_0000 != 0 { !bits } else { bits | 0x8000_0000 };
    ((!ascending as u64) << 32) | index as u64
}

#[inline(always)]
fn index_of(key: u64) -> u32 {
    key as u32
}

/// The index of the first score that fails `bad` (a lane-wise SIMD test), or None.
fn first_bad(s: &[f32], bad: impl Fn(v128) -> v128, bad1: impl Fn(f32) -> bool) -> Option<usize> {
    let quads = s.len() / 4;
    let mut any = u32x4_splat(0);
    unsafe {
        let p = s.as_ptr();
        for t in 0..quads {
            any = v128_or(any, bad(v128_load(p.add(4 * t) as *const v128)));
        }
    }
    if !v128_any_true(any) && !s[4 * quads..].iter().any(|&v| bad1(v)) {
        return None;
    }
    s.iter().position(|&v| bad1(v))
}

/// Top `k` of each of `rows` rows of `row_len` scores; writes rows * min(k, row_len) indices
/// (within the row) to `out`. Returns `OK`, `OUT_OF_MEMORY`, or the flat index of a NaN score.
///
/// # Safety
/// `scores` has rows * row_len entries, `out` rows * min(k, row_len).
#[no_mangle]
pub unsafe extern "C" fn ctxr_top_k_rows(
    scores: *const f32,
    rows: usize,
    row_len: usize,
    k: usize,
    out: *mut u32,
) -> i32 {
    let all = view(scores, rows * row_len);
    if let Some(bad) = first_bad(all, |v| f32x4_ne(v, v), |v| v.is_nan()) {
        return bad as i32;
    }
    let kk = k.min(row_len);
    let out = view_mut(out, rows * kk);
    if kk == 0 {
        return OK;
    }
    let mut keys = if kk <= SMALL_K {
        Vec::new()
    } else {
        match try_filled(row_len, 0u64) {
            Some(v) => v,
            None => return OUT_OF_MEMORY,
        }
    };
    for r in 0..rows {
        let s = &all[r * row_len..(r + 1) * row_len];
        let dst = &mut out[r * kk..(r + 1) * kk];
        if kk <= SMALL_K {
            top_k_small(s, dst);
        } else {
            for (t, v) in keys.iter_mut().enumerate() {
                *v = key(s[t], t);
            }
            if kk < row_len {
                keys.select_nth_unstable(kk - 1);
            }
            keys[..kk].sort_unstable();
            for (d, &k) in dst.iter_mut().zip(&keys[..kk]) {
                *d = index_of(k);
            }
        }
    }
    OK
}

/// Top dst.len() (1..=SMALL_K) of `s` by one scan with a sorted buffer; a SIMD pre-test skips
/// groups of four scores that cannot enter (not strictly above the buffer's last score: a later
/// index with an equal score ranks lower).
fn top_k_small(s: &[f32], dst: &mut [u32]) {
    let kk = dst.len();
    let mut best = [0u32; SMALL_K];
    let mut best_score = [0f32; SMALL_K];
    // Seed with the first kk scores, insertion-sorted.
    for j in 0..kk {
        let v = s[j];
        let mut p = j;
        while p > 0 && best_score[p - 1] < v {
            best[p] = best[p - 1];
            best_score[p] = best_score[p - 1];
            p -= 1;
        }
        best[p] = j as u32;
        best_score[p] = v;
    }
    let mut threshold = best_score[kk - 1];
    let mut insert = |j: usize, v: f32, threshold: &mut f32| {
        // v > threshold: v goes before every kept score below it, after every equal one.
        let mut p = kk - 1;
        while p > 0 && best_score[p - 1] < v {
            best[p] = best[p - 1];
            best_score[p] = best_score[p - 1];
            p -= 1;
        }
        best[p] = j as u32;
        best_score[p] = v;
        *threshold = best_score[kk - 1];
    };
    let mut j = kk;
    unsafe {
        let ptr = s.as_ptr();
        while j + 4 <= s.len() {
            let v = v128_load(ptr.add(j) as *const v128);
            if v128_any_true(f32x4_gt(v, f32x4_splat(threshold))) {
                for t in j..j + 4 {
                    if s[t] > threshold {
                        insert(t, s[t], &mut threshold);
                    }
                }
            }
            j += 4;
        }
    }
    for t in j..s.len() {
        if s[t] > threshold {
            insert(t, s[t], &mut threshold);
        }
    }
    dst.copy_from_slice(&best[..kk]);
}

/// Top-p of each of `rows` rows of `row_len` scores (see the module notes). Writes the selected
/// indices of all rows, concatenated, to `out_idx` (room for rows * row_len) and rows + 1
/// offsets to `out_offsets`. Returns `OK`, `OUT_OF_MEMORY`, or the flat index of a score that is
/// NaN, infinite or negative.
///
/// # Safety
/// `scores` and `out_idx` have rows * row_len entries, `out_offsets` rows + 1.
#[no_mangle]
pub unsafe extern "C" fn ctxr_top_p_rows(
    scores: *const f32,
    rows: usize,
    row_len: usize,
    p: f64,
    out_idx: *mut u32,
    out_offsets: *mut u32,
) -> i32 {
    let all = view(scores, rows * row_len);
    let bad = first_bad(
        all,
        |v| v128_not(v128_and(f32x4_ge(v, f32x4_splat(0.0)), f32x4_lt(v, f32x4_splat(f32::INFINITY)))),
        |v| !(v >= 0.0 && v < f32::INFINITY),
    );
    if let Some(bad) = bad {
        return bad as i32;
    }
    let out_idx = view_mut(out_idx, rows * row_len);
    let out_offsets = view_mut(out_offsets, rows + 1);
    let mut keys = match try_filled(row_len, 0u64) {
        Some(v) => v,
        None => return OUT_OF_MEMORY,
    };
    let mut written = 0usize;
    out_offsets[0] = 0;
    for r in 0..rows {
        let s = &all[r * row_len..(r + 1) * row_len];
        let count = top_p_row(s, p, &mut keys);
        for (d, &k) in out_idx[written..written + count].iter_mut().zip(&keys[..count]) {
            *d = index_of(k);
        }
        written += count;
        out_offsets[r + 1] = written as u32;
    }
    OK
}

/// Leaves the selection's keys in keys[..returned count].
fn top_p_row(s: &[f32], p: f64, keys: &mut [u64]) -> usize {
    let mut total = 0f64;
    for &v in s {
        total += v as f64;
    }
    let target = p * total;
    if p < 1.0 && !(target > 0.0) {
        return 0;
    }
    // Only positive scores can be needed: zeros come last in the order and add nothing.
    let mut positive = 0usize;
    for (j, &v) in s.iter().enumerate() {
        if v > 0.0 {
            keys[positive] = key(v, j);
            positive += 1;
        }
    }
    let keys = &mut keys[..positive];
    if p >= 1.0 {
        keys.sort_unstable();
        return positive;
    }
    // Select and sort the next best chunk (doubling its size) until the running sum reaches
    // the target: O(row) for small results instead of a full sort.
    let mut acc = 0f64;
    let mut lo = 0usize;
    let mut chunk = 64usize;
    while lo < positive {
        let hi = (lo + chunk).min(positive);
        if hi < positive {
            keys[lo..].select_nth_unstable(hi - lo - 1);
        }
        keys[lo..hi].sort_unstable();
        for q in lo..hi {
            acc += s[index_of(keys[q]) as usize] as f64;
            if acc >= target {
                return q + 1;
            }
        }
        lo = hi;
        chunk *= 2;
    }
    positive
}
