//! The greedy prefix trie (context ordering without pairwise distances), the twin of
//! src/index/greedyPrefixTrie.ts and src/index/greedyPartition.ts. Results are identical to the
//! TypeScript version: the reordered blocks, every node's parent and prefix length, the node ids
//! (creation order) and the leaf of every context.
//!
//! Starting at the root with every context, a group of contexts is partitioned by the blocks its
//! contexts still hold (not yet placed in their prefix): the block held by the most contexts
//! takes all of them, the rest compete for the next block, and so on until no block is held by
//! two remaining contexts. Pick key: count desc, position sum asc (positions 0-based in the
//! context's original order), block asc. With lookahead L > 0 (and unless the best block is held
//! by every remaining context), the L best blocks are compared by the value
//! (members - 1) + sum over a plain greedy partition of those members, the block itself left
//! out, of (group size - 1); the first in key order wins ties. Members are taken in posting
//! order (the group's contexts in order).
//!
//! Each sub-group becomes a child node (prefix + its block) and is expanded depth first, first
//! child first; a group whose contexts all hold one block extends its node instead (never the
//! root); contexts sharing nothing more get leaves: one shared leaf for the fully placed
//! (identical) ones, one leaf each for the others (prefix length = the whole context).
//!
//! Everything is preallocated per call: per-block counts, a postings buffer as long as the input,
//! each context's unplaced blocks as a compact list (so partitions skip no placed positions),
//! one arena of n context numbers for the pending groups (a stack: the children of the group
//! just popped are written over its own slot), at most 2n + 1 nodes.
//!
//! Speed-ups that cannot change a result: the heap is built by heapify (which block is the best
//! live one does not depend on the heap's shape); a lookahead candidate is evaluated only while
//! it can still beat the best so far (a group of m contexts gains at most m - 1), and the last
//! candidate only until it does.

use crate::memory::{try_filled, view, view_mut, OK, OUT_OF_MEMORY};

/// Returned when the tree would need more than 2n + 1 nodes (cannot happen for valid input).
pub const NODE_OVERFLOW: i32 = -3;

const NONE: u32 = u32::MAX;

/// Builds the trie over `n` contexts: context i is `flat[offsets[i]..offsets[i+1])`, dense
/// block numbers below `block_count`, distinct within a context.
///
/// Outputs: `ordered` (flat_len) the reordered blocks; `parent` and `prefix_length` (2n + 1
/// entries each, the first `*node_count` written; node 0 is the root, parent -1); `leaf_of`
/// (n) the leaf node of each context; `node_count` (one u32).
///
/// Returns `OK`, `OUT_OF_MEMORY`, `NODE_OVERFLOW`, or the index of the first context whose
/// offsets or blocks are invalid (out of range, repeated within the context); n when
/// `offsets[n] != flat_len`.
///
/// # Safety
/// All pointers must be valid host buffers of the lengths above.
#[no_mangle]
pub unsafe extern "C" fn ctxr_greedy_prefix_trie(
    flat: *const i32,
    flat_len: usize,
    offsets: *const i32,
    n: usize,
    block_count: usize,
    lookahead: u32,
    ordered: *mut i32,
    parent: *mut i32,
    prefix_length: *mut i32,
    leaf_of: *mut i32,
    node_count: *mut u32,
) -> i32 {
    let flat = view(flat, flat_len);
    let offsets = view(offsets, n + 1);
    if let Err(status) = check_contexts(flat, offsets, block_count) {
        return status;
    }
    // Valid: every block is in 0..block_count, so the casts below are exact.
    let flat: &[u32] = core::slice::from_raw_parts(flat.as_ptr() as *const u32, flat_len);
    let offsets: &[u32] = core::slice::from_raw_parts(offsets.as_ptr() as *const u32, n + 1);
    let out = Output {
        ordered: view_mut(ordered, flat_len),
        parent: view_mut(parent, 2 * n + 1),
        prefix_length: view_mut(prefix_length, 2 * n + 1),
        leaf_of: view_mut(leaf_of, n),
        nodes: 0,
    };
    let mut trie = match Trie::new(flat, offsets, block_count, lookahead as usize, out) {
        Some(t) => t,
        None => return OUT_OF_MEMORY,
    };
    let status = trie.run();
    *node_count = trie.out.nodes as u32;
    status
}

/// `Err(index of the first context with bad offsets or blocks)` (n when offsets[n] is not
/// flat_len), or `Err(OUT_OF_MEMORY)`.
fn check_contexts(flat: &[i32], offsets: &[i32], block_count: usize) -> Result<(), i32> {
    let n = offsets.len() - 1;
    if offsets[0] != 0 {
        return Err(0);
    }
    let mut last_seen = try_filled(block_count, u32::MAX).ok_or(OUT_OF_MEMORY)?;
    for i in 0..n {
        let (start, end) = (offsets[i], offsets[i + 1]);
        // start >= 0 here (offsets[0] = 0, non-decreasing); a negative end fails the first test
        if end < start || end as usize > flat.len() {
            return Err(i as i32);
        }
        for &b in &flat[start as usize..end as usize] {
            if b < 0 || b as usize >= block_count || last_seen[b as usize] == i as u32 {
                return Err(i as i32);
            }
            last_seen[b as usize] = i as u32;
        }
    }
    if offsets[n] as usize != flat.len() {
        return Err(n as i32);
    }
    Ok(())
}

struct Output<'a> {
    ordered: &'a mut [i32],
    parent: &'a mut [i32],
    prefix_length: &'a mut [i32],
    leaf_of: &'a mut [i32],
    nodes: usize,
}

impl<'a> Output<'a> {
    fn add_node(&mut self, parent: u32, prefix_length: u32) -> Option<u32> {
        let id = self.nodes;
        if id >= self.parent.len() {
            return None;
        }
        self.nodes += 1;
        self.parent[id] = parent as i32;
        self.prefix_length[id] = prefix_length as i32;
        Some(id as u32)
    }
}

// The hot loops below index with `get_unchecked`: every index is a block below block_count, a
// context below n, a flat position below flat_len, or a posting below the postings' length, all
// checked once by `check_contexts` or bounded by construction.
macro_rules! at {
    ($slice:expr, $i:expr) => {
        *$slice.get_unchecked($i as usize)
    };
}
macro_rules! at_mut {
    ($slice:expr, $i:expr) => {
        *$slice.get_unchecked_mut($i as usize)
    };
}

/// A block a context still holds (not yet placed in its prefix), with its original position.
#[derive(Clone, Copy)]
struct Live {
    block: u32,
    position: u32,
}

/// The contexts as the partitions read them: context c's unplaced blocks are
/// live[offsets[c] .. offsets[c] + live_len[c]], in original order.
#[derive(Clone, Copy)]
struct Contexts<'a> {
    offsets: &'a [u32],
    live: &'a [Live],
    live_len: &'a [u32],
}

impl<'a> Contexts<'a> {
    /// The unplaced blocks of context c.
    #[inline(always)]
    fn live_of(&self, c: u32) -> &'a [Live] {
        unsafe {
            let start = at!(self.offsets, c) as usize;
            self.live.get_unchecked(start..start + at!(self.live_len, c) as usize)
        }
    }
}

/// A heap entry: a block with the key it had when pushed.
#[derive(Clone, Copy)]
struct Entry {
    count: u32,
    block: u32,
    position_sum: u64,
}

/// The pick order: count desc, position sum asc, block asc (a strict total order).
#[inline(always)]
fn before(a: &Entry, b: &Entry) -> bool {
    if a.count != b.count {
        return a.count > b.count;
    }
    if a.position_sum != b.position_sum {
        return a.position_sum < b.position_sum;
    }
    a.block < b.block
}

/// Binary max-heap in pick order, used with lazy deletion as src/index/maxHeap.ts: keys only
/// decrease, so an entry whose key is still live at the top is the best live block. Each block
/// is in the heap at most once, which is why its shape (here built by heapify) never changes a
/// result: the top fresh entry is always the maximum live key.
struct MaxHeap {
    entries: Vec<Entry>,
}

impl MaxHeap {
    #[inline(always)]
    fn push(&mut self, e: Entry) {
        let entries = &mut self.entries;
        let mut i = entries.len();
        entries.push(e);
        unsafe {
            while i > 0 {
                let parent = (i - 1) >> 1;
                if !before(&e, entries.get_unchecked(parent)) {
                    break;
                }
                at_mut!(entries, i) = at!(entries, parent);
                i = parent;
            }
            at_mut!(entries, i) = e;
        }
    }

    #[inline(always)]
    fn top(&self) -> Entry {
        self.entries[0]
    }

    /// Moves `e` down from slot i of entries[..len].
    #[inline(never)]
    fn sift_down(entries: &mut [Entry], mut i: usize, e: Entry) {
        let len = entries.len();
        unsafe {
            loop {
                let left = 2 * i + 1;
                if left >= len {
                    break;
                }
                let right = left + 1;
                let better = if right < len && before(entries.get_unchecked(right), entries.get_unchecked(left)) { right } else { left };
                if !before(entries.get_unchecked(better), &e) {
                    break;
                }
                at_mut!(entries, i) = at!(entries, better);
                i = better;
            }
            at_mut!(entries, i) = e;
        }
    }

    fn pop(&mut self) {
        let last = self.entries.len() - 1;
        let e = self.entries[last];
        self.entries.truncate(last);
        if last > 0 {
            MaxHeap::sift_down(&mut self.entries, 0, e);
        }
    }

    /// Restores heap order after entries were appended unordered.
    fn heapify(&mut self) {
        let len = self.entries.len();
        for i in (0..len / 2).rev() {
            let e = self.entries[i];
            MaxHeap::sift_down(&mut self.entries, i, e);
        }
    }
}

/// What a partition knows about a block: how many of its contexts hold it, the sum of its
/// positions in them, and where its postings end (fill).
#[derive(Clone, Copy, Default)]
struct BlockStat {
    count: u32,
    fill: u32,
    position_sum: u64,
}

/// One partition's working state (the main partitioner and the lookahead evaluator each have
/// their own, as in the TypeScript version).
struct Partitioner {
    stats: Vec<BlockStat>,
    posting_start: Vec<u32>,
    touched: Vec<u32>,
    touched_count: usize,
    postings: Vec<u32>,
    assigned: Vec<u32>,
    stamp: u32,
    heap: MaxHeap,
}

impl Partitioner {
    fn new(n: usize, flat_len: usize, block_count: usize) -> Option<Partitioner> {
        let mut entries = Vec::new();
        entries.try_reserve_exact(block_count).ok()?;
        Some(Partitioner {
            stats: try_filled(block_count, BlockStat::default())?,
            posting_start: try_filled(block_count, 0)?,
            // one spare slot: tally writes the next slot before it knows whether it is new
            touched: try_filled(block_count + 1, 0)?,
            touched_count: 0,
            postings: try_filled(flat_len, 0)?,
            assigned: try_filled(n, 0)?,
            stamp: 0,
            heap: MaxHeap { entries },
        })
    }

    /// The live key of a block, as a heap entry.
    #[inline(always)]
    fn entry(&self, block: u32) -> Entry {
        let s = unsafe { self.stats.get_unchecked(block as usize) };
        Entry { count: s.count, block, position_sum: s.position_sum }
    }

    /// Counts the unplaced blocks of `contexts`, fills the heap with the blocks held at least
    /// twice except `excluded`, and the postings (holders in context order) of every block.
    /// `excluded` (the candidate a lookahead evaluates, held by all of `contexts`) is counted
    /// like the others but never enters the heap, so it is never picked: the same as leaving it
    /// out, without a test in the loops.
    #[inline(never)]
    fn tally(&mut self, ctx: Contexts, contexts: &[u32], excluded: u32) {
        self.stamp += 1;
        let stats = &mut self.stats[..];
        let touched = &mut self.touched[..];
        let mut touched_count = 0;
        unsafe {
            for &c in contexts {
                for l in ctx.live_of(c) {
                    let s = stats.get_unchecked_mut(l.block as usize);
                    at_mut!(touched, touched_count) = l.block;
                    touched_count += (s.count == 0) as usize;
                    s.count += 1;
                    s.position_sum += l.position as u64;
                }
            }
            self.touched_count = touched_count;

            let entries = &mut self.heap.entries;
            entries.clear();
            let mut total = 0u32;
            for t in 0..touched_count {
                let b = at!(touched, t);
                let s = stats.get_unchecked_mut(b as usize);
                at_mut!(self.posting_start, b) = total;
                s.fill = total;
                total += s.count;
                if s.count >= 2 && b != excluded {
                    entries.push(Entry { count: s.count, block: b, position_sum: s.position_sum });
                }
            }
            self.heap.heapify();

            let postings = &mut self.postings[..];
            for &c in contexts {
                for l in ctx.live_of(c) {
                    let s = stats.get_unchecked_mut(l.block as usize);
                    at_mut!(postings, s.fill) = c;
                    s.fill += 1;
                }
            }
        }
    }

    /// Zeroes the counts `tally` touched.
    fn reset(&mut self) {
        for t in 0..self.touched_count {
            let b = self.touched[t] as usize;
            self.stats[b] = BlockStat::default();
        }
        self.touched_count = 0;
    }

    /// Drops stale heap entries (re-pushing them with live keys); false when no block is shared.
    #[inline(always)]
    fn pop_fresh(&mut self) -> bool {
        while !self.heap.entries.is_empty() {
            let top = self.heap.top();
            let live = self.entry(top.block);
            if live.count == top.count && live.position_sum == top.position_sum {
                return true;
            }
            if live.count >= 2 {
                // Replace the top with its live key and sift it down (a pop and a push in one).
                MaxHeap::sift_down(&mut self.heap.entries, 0, live);
            } else {
                self.heap.pop();
            }
        }
        false
    }

    /// Assigns the unassigned holders of `block` (posting order), taking their blocks out of the
    /// counts; calls `each` with every member; returns how many there were.
    #[inline(never)]
    fn take_group(&mut self, ctx: Contexts, block: u32, mut each: impl FnMut(u32)) -> u32 {
        let stamp = self.stamp;
        let stats = &mut self.stats[..];
        let assigned = &mut self.assigned[..];
        let postings = &self.postings[..];
        let mut m = 0;
        unsafe {
            let (from, to) = (at!(self.posting_start, block), stats.get_unchecked(block as usize).fill);
            for p in from..to {
                let c = at!(postings, p);
                if at!(assigned, c) == stamp {
                    continue;
                }
                at_mut!(assigned, c) = stamp;
                each(c);
                m += 1;
                for l in ctx.live_of(c) {
                    let s = stats.get_unchecked_mut(l.block as usize);
                    s.count -= 1;
                    s.position_sum -= l.position as u64;
                }
            }
        }
        m
    }

    /// Sum over a plain greedy partition (no lookahead) of `contexts`, `excluded` left out, of
    /// (group size - 1): the lookahead value less the candidate's own (members - 1). Only
    /// whether it exceeds `need` matters to the caller, so it stops as soon as it cannot (and
    /// returns a value <= need) or, with `first_above`, as soon as it does. Returns the gain and
    /// whether it is exact (the partition ran to its end).
    #[inline(never)]
    fn greedy_gain(&mut self, ctx: Contexts, contexts: &[u32], excluded: u32, need: i64, first_above: bool) -> (i64, bool) {
        // Groups gain at most (contexts they take - 1) together: (remaining - 1) is a bound.
        let bound = |gain: i64, remaining: u32| gain + (remaining as i64 - 1).max(0);
        let mut remaining = contexts.len() as u32;
        let mut gain = 0i64;
        if bound(gain, remaining) <= need {
            return (gain, remaining <= 1);
        }
        self.tally(ctx, contexts, excluded);
        let mut exact = true;
        while remaining > 0 {
            if !self.pop_fresh() {
                break;
            }
            let block = self.heap.top().block;
            self.heap.pop();
            let m = self.take_group(ctx, block, |_| {});
            remaining -= m;
            gain += m as i64 - 1;
            if remaining > 0 && (bound(gain, remaining) <= need || (first_above && gain > need)) {
                exact = false;
                break;
            }
        }
        self.reset();
        (gain, exact)
    }
}

/// A group of a partition: members[start..start+len] hold `block`.
#[derive(Clone, Copy)]
struct Group {
    block: u32,
    start: u32,
    len: u32,
}

/// A group of contexts waiting to be expanded: arena[start..start+len], under (or extending)
/// `node`, with `depth` blocks already placed in each member's prefix.
#[derive(Clone, Copy)]
struct Pending {
    node: u32,
    depth: u32,
    start: u32,
    len: u32,
}

struct Trie<'a> {
    offsets: &'a [u32],
    lookahead: usize,
    main: Partitioner,
    /// None without lookahead (0 or 1: one candidate, never evaluated).
    lookahead_state: Option<Lookahead>,
    /// Unplaced blocks per context (see `Contexts`).
    live: Vec<Live>,
    live_len: Vec<u32>,
    /// Partition output: groups (members in `members`) and leftovers.
    groups: Vec<Group>,
    members: Vec<u32>,
    leftovers: Vec<u32>,
    candidates: Vec<u32>,
    child_nodes: Vec<u32>,
    arena: Vec<u32>,
    pending: Vec<Pending>,
    out: Output<'a>,
}

fn with_capacity<T>(capacity: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(capacity).ok()?;
    Some(v)
}

impl<'a> Trie<'a> {
    fn new(flat: &'a [u32], offsets: &'a [u32], block_count: usize, lookahead: usize, out: Output<'a>) -> Option<Trie<'a>> {
        let n = offsets.len() - 1;
        let flat_len = flat.len();
        let lookahead_state = if lookahead > 1 { Some(Lookahead::new(n, flat_len, block_count)?) } else { None };
        let mut live = with_capacity(flat_len)?;
        let mut live_len = with_capacity(n)?;
        for c in 0..n {
            let (start, end) = (offsets[c] as usize, offsets[c + 1] as usize);
            for f in start..end {
                live.push(Live { block: flat[f], position: (f - start) as u32 });
            }
            live_len.push((end - start) as u32);
        }
        Some(Trie {
            offsets,
            lookahead,
            main: Partitioner::new(n, flat_len, block_count)?,
            lookahead_state,
            live,
            live_len,
            groups: with_capacity(n)?,
            members: with_capacity(n)?,
            leftovers: with_capacity(n)?,
            candidates: with_capacity(lookahead.max(1).min(block_count.max(1)))?,
            child_nodes: with_capacity(n)?,
            arena: try_filled(n, 0)?,
            pending: with_capacity(n + 1)?,
            out,
        })
    }

    fn run(&mut self) -> i32 {
        let n = self.offsets.len() - 1;
        if self.out.add_node(NONE, 0).is_none() {
            return NODE_OVERFLOW;
        }
        self.out.parent[0] = -1;
        for (i, v) in self.arena.iter_mut().enumerate() {
            *v = i as u32;
        }
        self.pending.push(Pending { node: 0, depth: 0, start: 0, len: n as u32 });
        while let Some(group) = self.pending.pop() {
            if self.expand(group).is_none() {
                return NODE_OVERFLOW;
            }
        }
        OK
    }

    #[inline(always)]
    fn length_of(&self, c: u32) -> u32 {
        self.offsets[c as usize + 1] - self.offsets[c as usize]
    }

    /// Moves `block` from the context's unplaced blocks to the end of its prefix.
    fn place_block(&mut self, context: u32, block: u32) {
        let c = context as usize;
        let start = self.offsets[c] as usize;
        let len = self.live_len[c] as usize;
        let placed = self.length_of(context) as usize - len;
        let live = &mut self.live[start..start + len];
        if let Some(i) = live.iter().position(|l| l.block == block) {
            live.copy_within(i + 1.., i);
            self.live_len[c] -= 1;
            self.out.ordered[start + placed] = block as i32;
        }
    }

    /// Appends the context's unplaced blocks in original order and puts it at `leaf`.
    fn finish_at(&mut self, context: u32, leaf: u32) {
        let c = context as usize;
        let start = self.offsets[c] as usize;
        let len = self.live_len[c] as usize;
        let placed = self.length_of(context) as usize - len;
        for i in 0..len {
            self.out.ordered[start + placed + i] = self.live[start + i].block as i32;
        }
        self.live_len[c] = 0;
        self.out.leaf_of[c] = leaf as i32;
    }

    /// Pops one pending group: extends its node, finishes identical contexts, or branches.
    fn expand(&mut self, group: Pending) -> Option<()> {
        let (start, len) = (group.start as usize, group.len as usize);
        self.partition(start, len);
        let is_root = group.node == 0;

        if self.groups.len() == 1 && self.leftovers.is_empty() && !is_root {
            // Every context holds the block: extend this node instead of branching.
            let g = self.groups[0];
            for i in 0..g.len as usize {
                let c = self.members[g.start as usize + i];
                self.place_block(c, g.block);
            }
            self.out.prefix_length[group.node as usize] = (group.depth + 1) as i32;
            let members = &self.members[g.start as usize..(g.start + g.len) as usize];
            self.arena[start..start + members.len()].copy_from_slice(members);
            self.pending.push(Pending { node: group.node, depth: group.depth + 1, start: group.start, len: g.len });
            return Some(());
        }

        if self.groups.is_empty() && !is_root && self.leftovers.iter().all(|&c| self.live_len[c as usize] == 0) {
            // Identical contexts: this node is their shared leaf.
            for i in 0..self.leftovers.len() {
                let c = self.leftovers[i];
                self.finish_at(c, group.node);
            }
            return Some(());
        }

        self.child_nodes.clear();
        for gi in 0..self.groups.len() {
            let g = self.groups[gi];
            for i in 0..g.len as usize {
                let c = self.members[g.start as usize + i];
                self.place_block(c, g.block);
            }
            let child = self.out.add_node(group.node, group.depth + 1)?;
            self.child_nodes.push(child);
        }
        let mut identical_leaf = NONE;
        for i in 0..self.leftovers.len() {
            let c = self.leftovers[i];
            if self.live_len[c as usize] == 0 {
                if identical_leaf == NONE {
                    identical_leaf = self.out.add_node(group.node, group.depth)?;
                }
                self.finish_at(c, identical_leaf);
            } else {
                let leaf = self.out.add_node(group.node, self.length_of(c))?;
                self.finish_at(c, leaf);
            }
        }
        // Depth-first, first child first: children go on the stack in reverse, each over the
        // arena slot of the group just expanded (they are a subset of it).
        let mut at = start;
        for gi in (0..self.groups.len()).rev() {
            let g = self.groups[gi];
            let members = &self.members[g.start as usize..(g.start + g.len) as usize];
            self.arena[at..at + members.len()].copy_from_slice(members);
            self.pending.push(Pending { node: self.child_nodes[gi], depth: group.depth + 1, start: at as u32, len: g.len });
            at += g.len as usize;
        }
        Some(())
    }

    /// Partitions arena[start..start+len] into self.groups / self.members / self.leftovers.
    #[inline(never)]
    fn partition(&mut self, start: usize, len: usize) {
        let ctx = Contexts { offsets: self.offsets, live: &self.live, live_len: &self.live_len };
        let contexts = &self.arena[start..start + len];
        let main = &mut self.main;
        main.tally(ctx, contexts, NONE);
        self.groups.clear();
        self.members.clear();
        self.leftovers.clear();

        let lookahead = self.lookahead;
        let mut remaining = len as u32;
        while remaining > 0 {
            self.candidates.clear();
            // A block every remaining context holds goes first: nothing can beat sharing it.
            let want = if lookahead > 0 && !(main.pop_fresh() && main.heap.top().count == remaining) { lookahead } else { 1 };
            while self.candidates.len() < want && main.pop_fresh() {
                self.candidates.push(main.heap.top().block);
                main.heap.pop();
            }
            if self.candidates.is_empty() {
                break;
            }
            let block = match &mut self.lookahead_state {
                Some(state) if self.candidates.len() > 1 => state.best(main, ctx, &self.candidates),
                _ => self.candidates[0],
            };
            for &other in &self.candidates {
                if other != block {
                    main.heap.push(main.entry(other));
                }
            }
            let group_start = self.members.len() as u32;
            let members = &mut self.members;
            let m = main.take_group(ctx, block, |c| members.push(c));
            remaining -= m;
            self.groups.push(Group { block, start: group_start, len: m });
        }

        let stamp = main.stamp;
        for &c in contexts {
            if main.assigned[c as usize] != stamp {
                self.leftovers.push(c);
            }
        }
        main.reset();
    }
}

/// The lookahead's state: its own partitioner, the members of the candidate being evaluated,
/// and per block the last exact value computed in the current partition.
struct Lookahead {
    evaluator: Partitioner,
    members: Vec<u32>,
    memo: Vec<Memo>,
}

/// A candidate's value, valid while the partition (stamp) and the candidate's member count are
/// the same: its members, and so its value, can only change when one of them is assigned.
#[derive(Clone, Copy, Default)]
struct Memo {
    stamp: u32,
    count: u32,
    value: i64,
}

impl Lookahead {
    fn new(n: usize, flat_len: usize, block_count: usize) -> Option<Lookahead> {
        Some(Lookahead {
            evaluator: Partitioner::new(n, flat_len, block_count)?,
            members: with_capacity(n)?,
            memo: try_filled(block_count, Memo::default())?,
        })
    }

    /// The candidate (in key order) whose group gains the most one level further down; the
    /// first wins ties. A candidate's value is (members - 1) + greedy_gain(members); only
    /// candidates that can beat the best so far are evaluated, and only as far as needed.
    #[inline(never)]
    fn best(&mut self, main: &Partitioner, ctx: Contexts, candidates: &[u32]) -> u32 {
        let mut best = candidates[0];
        let mut best_value = -1i64;
        for (i, &candidate) in candidates.iter().enumerate() {
            let live = main.stats[candidate as usize];
            let memo = self.memo[candidate as usize];
            let value = if memo.stamp == main.stamp && memo.count == live.count {
                memo.value
            } else {
                self.members.clear();
                for p in main.posting_start[candidate as usize]..live.fill {
                    let c = main.postings[p as usize];
                    if main.assigned[c as usize] != main.stamp {
                        self.members.push(c);
                    }
                }
                let own = self.members.len() as i64 - 1;
                let last = i + 1 == candidates.len();
                let (gain, exact) = self.evaluator.greedy_gain(ctx, &self.members, candidate, best_value - own, last);
                if exact {
                    self.memo[candidate as usize] = Memo { stamp: main.stamp, count: live.count, value: own + gain };
                }
                own + gain
            };
            if value > best_value {
                best_value = value;
                best = candidate;
            }
        }
        best
    }
}
