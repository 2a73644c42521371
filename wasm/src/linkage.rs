//! Hierarchical clustering of a condensed distance matrix, SciPy `linkage` semantics.
//!
//! This is SciPy's `nn_chain` (scipy/cluster/_hierarchy.pyx) step for step, so that results
//! agree with SciPy bit for bit, ties included:
//! - the chain starts at the lowest live cluster; the nearest neighbour of the chain's top x is
//!   the previous chain element when it is at minimal distance, else the lowest-numbered live
//!   cluster at minimal distance (strict `<` while scanning in index order);
//! - merging x < y keeps the new cluster in slot y and retires slot x;
//! - Lance-Williams updates: average (nx*dxi + ny*dyi) / (nx + ny), single min, complete max;
//! - merges are then stably sorted by distance and relabelled with a union-find (new cluster
//!   n + m for the m-th sorted merge, lower label first).
//! Output Z: (n-1) rows of [a, b, distance, size] as f64.

use crate::memory::{try_filled, view_mut, OK, OUT_OF_MEMORY};

pub const AVERAGE: u32 = 0;
pub const SINGLE: u32 = 1;
pub const COMPLETE: u32 = 2;

/// Clusters `n` points; `d` is the condensed matrix (n(n-1)/2 entries), used as working storage
/// and left modified; `z` receives 4(n-1) values. Returns `OK`, `OUT_OF_MEMORY`, or 0 for an
/// unknown method.
///
/// # Safety
/// `d` and `z` must be valid host buffers of those lengths.
#[no_mangle]
pub unsafe extern "C" fn ctxr_linkage(d: *mut f64, n: usize, method: u32, z: *mut f64) -> i32 {
    if method > COMPLETE {
        return 0;
    }
    if n < 2 {
        return OK;
    }
    let d = view_mut(d, n * (n - 1) / 2);
    let z = view_mut(z, 4 * (n - 1));
    match nn_chain(d, n, method, z) {
        Some(()) => OK,
        None => OUT_OF_MEMORY,
    }
}

fn nn_chain(d: &mut [f64], n: usize, method: u32, z: &mut [f64]) -> Option<()> {
    // Condensed index of (i, j), i < j: row[i] + j, with row[i] = n*i - i(i+1)/2 - i - 1
    // (kept as a wrapping offset so row[0] = -1 needs no special case).
    let mut row = try_filled(n, 0usize)?;
    for i in 0..n {
        row[i] = (n * i).wrapping_sub(i * (i + 1) / 2).wrapping_sub(i + 1);
    }
    let at = |row: &[usize], a: usize, b: usize| -> usize {
        if a < b {
            row[a].wrapping_add(b)
        } else {
            row[b].wrapping_add(a)
        }
    };
    let mut size = try_filled(n, 1u32)?;
    // Live cluster slots in increasing order (a compact list, so scans skip retired slots).
    let mut live: Vec<u32> = try_filled(n, 0u32)?;
    for (i, v) in live.iter_mut().enumerate() {
        *v = i as u32;
    }
    let mut chain = try_filled(n, 0usize)?;
    let mut chain_len = 0usize;
    let mut merges = try_filled(n - 1, (0usize, 0usize, 0f64))?;

    for k in 0..n - 1 {
        if chain_len == 0 {
            chain[0] = live[0] as usize;
            chain_len = 1;
        }
        let (mut x, mut y, current_min);
        loop {
            x = chain[chain_len - 1];
            let mut best;
            if chain_len > 1 {
                y = chain[chain_len - 2];
                best = d[at(&row, x, y)];
            } else {
                y = usize::MAX;
                best = f64::INFINITY;
            }
            // Scan live clusters in increasing order: those below x live in column x of the
            // upper triangle (one per row), those above x in row x (contiguous).
            let split = live.partition_point(|&i| (i as usize) < x);
            for &i in &live[..split] {
                let i = i as usize;
                let dist = d[row[i].wrapping_add(x)];
                if dist < best {
                    best = dist;
                    y = i;
                }
            }
            let row_x = &d[row[x].wrapping_add(x + 1)..row[x].wrapping_add(n)];
            for &i in &live[split + 1..] {
                let i = i as usize;
                let dist = row_x[i - x - 1];
                if dist < best {
                    best = dist;
                    y = i;
                }
            }
            if chain_len > 1 && y == chain[chain_len - 2] {
                current_min = best;
                break;
            }
            chain[chain_len] = y;
            chain_len += 1;
        }
        chain_len -= 2;
        if x > y {
            core::mem::swap(&mut x, &mut y);
        }
        let nx = size[x];
        let ny = size[y];
        merges[k] = (x, y, current_min);
        size[x] = 0;
        size[y] = nx + ny;
        let (fx, fy) = (nx as f64, ny as f64);
        let total = (nx + ny) as f64;
        for &i in live.iter() {
            let i = i as usize;
            if i == x || i == y {
                continue;
            }
            let ix = at(&row, i, x);
            let iy = at(&row, i, y);
            let (dxi, dyi) = (d[ix], d[iy]);
            d[iy] = match method {
                AVERAGE => (fx * dxi + fy * dyi) / total,
                SINGLE => {
                    if dxi < dyi {
                        dxi
                    } else {
                        dyi
                    }
                }
                _ => {
                    if dxi > dyi {
                        dxi
                    } else {
                        dyi
                    }
                }
            };
        }
        let gone = live.binary_search(&(x as u32)).ok()?;
        live.remove(gone);
    }

    // Stable sort by distance (as NumPy's mergesort), then union-find relabelling.
    let mut order: Vec<usize> = (0..n - 1).collect();
    order.sort_by(|&a, &b| merges[a].2.partial_cmp(&merges[b].2).unwrap_or(core::cmp::Ordering::Equal));
    let mut parent = try_filled(2 * n - 1, usize::MAX)?;
    let mut csize = try_filled(2 * n - 1, 1u32)?;
    let find = |parent: &mut [usize], mut v: usize| -> usize {
        let mut root = v;
        while parent[root] != usize::MAX {
            root = parent[root];
        }
        while parent[v] != usize::MAX && parent[v] != root {
            let next = parent[v];
            parent[v] = root;
            v = next;
        }
        root
    };
    for (m, &o) in order.iter().enumerate() {
        let (a, b, dist) = merges[o];
        let ra = find(&mut parent, a);
        let rb = find(&mut parent, b);
        let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
        let label = n + m;
        parent[lo] = label;
        parent[hi] = label;
        csize[label] = csize[lo] + csize[hi];
        z[4 * m] = lo as f64;
        z[4 * m + 1] = hi as f64;
        z[4 * m + 2] = dist;
        z[4 * m + 3] = csize[label] as f64;
    }
    Some(())
}
