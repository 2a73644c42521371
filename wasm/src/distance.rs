//! Pairwise context distance (ContextPilot eq. 1).
//!
//! For contexts Ci, Cj (distinct dense block numbers; position = index within the context) with
//! shared blocks S:
//!   d = 1                                                   when |S| = 0
//!   d = 1 - |S| / max(|Ci|, |Cj|) + alpha * (sum_{b in S} |pos_i(b) - pos_j(b)| / |S|)
//! evaluated in f64 in exactly that order. |S| and the position sum are integers held exactly in
//! f64 (they stay far below 2^53), so any summation order gives the same values and the result is
//! bit-identical to the TypeScript twin.
//!
//! Inputs are validated by the host (blocks in 0..block_count, distinct within a context,
//! non-decreasing offsets); out-of-range input makes the module trap, never read stray memory.

use core::arch::wasm32::*;

use crate::memory::{try_filled, view, view_mut, OK, OUT_OF_MEMORY};

/// The distance from the shared-block count, the position-difference sum and both lengths.
#[inline(always)]
fn distance(shared: f64, pos_sum: f64, len_i: f64, len_j: f64, alpha: f64) -> f64 {
    if shared == 0.0 {
        1.0
    } else {
        let longest = if len_i < len_j { len_j } else { len_i };
        1.0 - shared / longest + alpha * (pos_sum / shared)
    }
}

/// Contexts as the host passes them: `flat` block numbers, `offsets` (n + 1 entries).
struct Contexts<'a> {
    flat: &'a [i32],
    offsets: &'a [i32],
}

impl<'a> Contexts<'a> {
    #[inline(always)]
    fn range(&self, i: usize) -> (usize, usize) {
        (self.offsets[i] as usize, self.offsets[i + 1] as usize)
    }
}

/// Rows `row_start..row_end` of the condensed (SciPy `pdist` order) distance matrix of `n`
/// contexts, written consecutively to `out` (row i holds pairs (i, i+1) .. (i, n-1)).
///
/// Method: an inverted index (block -> contexts holding it, with positions) over contexts
/// `row_start..n`. For row i, every block of Ci walks the later holders of that block and adds to
/// their shared count and position sum; one SIMD pass then turns the per-j accumulators into
/// distances (two f64 divisions per pair, done two pairs at a time) and clears them. The work is
/// proportional to the number of actual (pair, shared block) incidences plus the output size.
///
/// Returns `OK`, or `OUT_OF_MEMORY`.
///
/// # Safety
/// Pointers must be valid host buffers of the stated lengths: `flat` (flat_len), `offsets`
/// (n + 1), `out` (number of pairs in the rows).
#[no_mangle]
pub unsafe extern "C" fn ctxr_context_distance_rows(
    flat: *const i32,
    flat_len: usize,
    offsets: *const i32,
    n: usize,
    block_count: usize,
    alpha: f64,
    row_start: usize,
    row_end: usize,
    out: *mut f64,
) -> i32 {
    let ctx = Contexts { flat: view(flat, flat_len), offsets: view(offsets, n + 1) };
    let row_end = row_end.min(n);
    if row_start >= row_end {
        return OK;
    }
    let pair_count: usize = (row_start..row_end).map(|i| n - 1 - i).sum();
    let out = view_mut(out, pair_count);
    match distance_rows(&ctx, n, block_count, alpha, row_start, row_end, out) {
        Some(()) => OK,
        None => OUT_OF_MEMORY,
    }
}

fn distance_rows(
    ctx: &Contexts,
    n: usize,
    block_count: usize,
    alpha: f64,
    row_start: usize,
    row_end: usize,
    out: &mut [f64],
) -> Option<()> {
    // Inverted index over contexts row_start..n (earlier contexts never appear as j > i).
    let base = ctx.offsets[row_start] as usize;
    let end = ctx.offsets[n] as usize;
    let block_of = &ctx.flat[base..end];
    let mut post_start = try_filled(block_count + 1, 0u32)?;
    for &b in block_of {
        post_start[b as usize + 1] += 1;
    }
    for b in 0..block_count {
        post_start[b + 1] += post_start[b];
    }
    let mut cursor = try_filled(block_count, 0u32)?;
    cursor.copy_from_slice(&post_start[..block_count]);
    // postings[slot] = [context, position]; slot_of[k] = the slot of flat position base + k.
    let mut postings = try_filled(block_of.len(), [0u32; 2])?;
    let mut slot_of = try_filled(block_of.len(), 0u32)?;
    for i in row_start..n {
        let (s, e) = ctx.range(i);
        for k in s..e {
            let b = ctx.flat[k] as usize;
            let slot = cursor[b];
            cursor[b] += 1;
            postings[slot as usize] = [i as u32, (k - s) as u32];
            slot_of[k - base] = slot;
        }
    }
    drop(cursor);

    let mut lengths = try_filled(n, 0f64)?;
    for (i, len) in lengths.iter_mut().enumerate() {
        let (s, e) = ctx.range(i);
        *len = (e - s) as f64;
    }
    // Per-j accumulators for the current row, all zero between rows.
    let mut shared = try_filled(n, 0f64)?;
    let mut pos_sum = try_filled(n, 0f64)?;

    let mut written = 0usize;
    for i in row_start..row_end {
        let (s, e) = ctx.range(i);
        for k in s..e {
            let p = (k - s) as i32;
            let b = ctx.flat[k] as usize;
            let first = slot_of[k - base] as usize + 1;
            let last = post_start[b + 1] as usize;
            for &[j, q] in &postings[first..last] {
                let j = j as usize;
                shared[j] += 1.0;
                pos_sum[j] += (p - q as i32).unsigned_abs() as f64;
            }
        }
        let row_len = n - 1 - i;
        let row = &mut out[written..written + row_len];
        finish_row(i, lengths[i], alpha, &lengths, &mut shared, &mut pos_sum, row);
        written += row_len;
    }
    Some(())
}

/// Turns the accumulators of j = i+1..n into `row` (row[j-i-1]) and zeroes them.
#[inline(always)]
fn finish_row(
    i: usize,
    len_i: f64,
    alpha: f64,
    lengths: &[f64],
    shared: &mut [f64],
    pos_sum: &mut [f64],
    row: &mut [f64],
) {
    let n = lengths.len();
    let lengths = &lengths[i + 1..n];
    let shared = &mut shared[i + 1..n];
    let pos_sum = &mut pos_sum[i + 1..n];
    let m = row.len();
    assert!(lengths.len() == m && shared.len() == m && pos_sum.len() == m);
    let pairs = m / 2;
    unsafe {
        // Lane-wise the same IEEE operations as `distance`: 1 - s/max + alpha*(sum/s), with
        // s == 0 replaced by exactly 1.0.
        let one = f64x2_splat(1.0);
        let zero = f64x2_splat(0.0);
        let alpha2 = f64x2_splat(alpha);
        let len_i2 = f64x2_splat(len_i);
        let sp = shared.as_mut_ptr() as *mut v128;
        let pp = pos_sum.as_mut_ptr() as *mut v128;
        let lp = lengths.as_ptr() as *const v128;
        let op = row.as_mut_ptr() as *mut v128;
        for t in 0..pairs {
            let s = v128_load(sp.cast::<f64>().add(2 * t) as *const v128);
            let q = v128_load(pp.cast::<f64>().add(2 * t) as *const v128);
            let lj = v128_load(lp.cast::<f64>().add(2 * t) as *const v128);
            // pmax(a, b) = a < b ? b : a, the scalar `longest` above.
            let longest = f64x2_pmax(len_i2, lj);
            let d = f64x2_add(
                f64x2_sub(one, f64x2_div(s, longest)),
                f64x2_mul(alpha2, f64x2_div(q, s)),
            );
            let d = v128_bitselect(one, d, f64x2_eq(s, zero));
            v128_store(op.cast::<f64>().add(2 * t) as *mut v128, d);
            v128_store(sp.cast::<f64>().add(2 * t) as *mut v128, zero);
            v128_store(pp.cast::<f64>().add(2 * t) as *mut v128, zero);
        }
    }
    for t in 2 * pairs..m {
        row[t] = distance(shared[t], pos_sum[t], len_i, lengths[t], alpha);
        shared[t] = 0.0;
        pos_sum[t] = 0.0;
    }
}

/// Distances of arbitrary pairs: `pairs` holds `pair_count` (i, j) pairs flattened; `out[t]` is
/// the distance of pair t. i == j is allowed (distance 0 for a non-empty context, 1 for an empty
/// one). Consecutive pairs with the same i reuse the scattered positions of Ci.
///
/// Returns `OK`, `OUT_OF_MEMORY`, or the index of the first pair with an index >= n.
///
/// # Safety
/// As `ctxr_context_distance_rows`; `pairs` has 2 * pair_count entries, `out` pair_count.
#[no_mangle]
pub unsafe extern "C" fn ctxr_context_distance_pairs(
    flat: *const i32,
    flat_len: usize,
    offsets: *const i32,
    n: usize,
    block_count: usize,
    alpha: f64,
    pairs: *const u32,
    pair_count: usize,
    out: *mut f64,
) -> i32 {
    let ctx = Contexts { flat: view(flat, flat_len), offsets: view(offsets, n + 1) };
    let pairs = view(pairs, 2 * pair_count);
    let out = view_mut(out, pair_count);
    // position + 1 of each block of the current i (0 = not in Ci).
    let mut pos_plus_one = match try_filled(block_count, 0u32) {
        Some(v) => v,
        None => return OUT_OF_MEMORY,
    };
    let mut current: Option<usize> = None;
    for t in 0..pair_count {
        let (i, j) = (pairs[2 * t] as usize, pairs[2 * t + 1] as usize);
        if i >= n || j >= n {
            return t as i32;
        }
        if current != Some(i) {
            if let Some(c) = current {
                let (s, e) = ctx.range(c);
                for &b in &ctx.flat[s..e] {
                    pos_plus_one[b as usize] = 0;
                }
            }
            let (s, e) = ctx.range(i);
            for (p, &b) in ctx.flat[s..e].iter().enumerate() {
                pos_plus_one[b as usize] = p as u32 + 1;
            }
            current = Some(i);
        }
        let (si, ei) = ctx.range(i);
        let (sj, ej) = ctx.range(j);
        let mut shared = 0u32;
        let mut pos_sum = 0f64;
        for (q, &b) in ctx.flat[sj..ej].iter().enumerate() {
            let pp = pos_plus_one[b as usize];
            if pp != 0 {
                shared += 1;
                pos_sum += ((pp - 1) as i32 - q as i32).unsigned_abs() as f64;
            }
        }
        out[t] = distance(shared as f64, pos_sum, (ei - si) as f64, (ej - sj) as f64, alpha);
    }
    OK
}
