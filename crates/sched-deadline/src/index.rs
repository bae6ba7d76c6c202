//! Allocation-free orders over request keys: sector-sorted trees (treaps) and FIFO lists,
//! each node an index into arrays made once for all keys.
//!
//! A key is in at most one tree and one list at a time, so every tree shares one set of
//! node arrays (a forest), and every list another.

use alloc::vec;
use alloc::vec::Vec;

/// No node.
pub(crate) const NIL: u32 = u32::MAX;

/// Sector-sorted binary search trees over keys, balanced as treaps (random priorities,
/// heap-ordered), O(log n) expected per operation.
pub(crate) struct Forest {
    roots: Vec<u32>,
    left: Vec<u32>,
    right: Vec<u32>,
    parent: Vec<u32>,
    priority: Vec<u32>,
    sector: Vec<u64>,
    /// The tree each key is in, or `NIL`.
    tree: Vec<u32>,
    seed: u32,
}

impl Forest {
    pub(crate) fn new(nr_trees: usize, nr_keys: usize) -> Self {
        Self {
            roots: vec![NIL; nr_trees],
            left: vec![NIL; nr_keys],
            right: vec![NIL; nr_keys],
            parent: vec![NIL; nr_keys],
            priority: vec![0; nr_keys],
            sector: vec![0; nr_keys],
            tree: vec![NIL; nr_keys],
            seed: 0x9e37_79b9,
        }
    }

    fn next_priority(&mut self) -> u32 {
        // xorshift32: deterministic, good enough to balance.
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.seed = x;
        x
    }

    /// Whether `key` is in some tree.
    pub(crate) fn contains(&self, key: usize) -> bool {
        self.tree.get(key).is_some_and(|&t| t != NIL)
    }

    /// The sector `key` is sorted by.
    pub(crate) fn sector(&self, key: usize) -> u64 {
        self.sector[key]
    }

    /// Whether tree `t` is empty.
    #[cfg(test)]
    pub(crate) fn is_empty(&self, t: usize) -> bool {
        self.roots[t] == NIL
    }

    /// Orders by sector, then by key, so equal sectors have a stable order.
    fn less(&self, a: u32, b: u32) -> bool {
        (self.sector[a as usize], a) < (self.sector[b as usize], b)
    }

    /// Inserts `key` at `sector` into tree `t`.
    pub(crate) fn insert(&mut self, t: usize, key: usize, sector: u64) {
        debug_assert!(!self.contains(key));
        let k = key as u32;
        self.sector[key] = sector;
        self.left[key] = NIL;
        self.right[key] = NIL;
        self.tree[key] = t as u32;
        self.priority[key] = self.next_priority();
        // Plain search-tree insert as a leaf...
        let mut parent = NIL;
        let mut at = self.roots[t];
        while at != NIL {
            parent = at;
            at = if self.less(k, at) {
                self.left[at as usize]
            } else {
                self.right[at as usize]
            };
        }
        self.parent[key] = parent;
        if parent == NIL {
            self.roots[t] = k;
        } else if self.less(k, parent) {
            self.left[parent as usize] = k;
        } else {
            self.right[parent as usize] = k;
        }
        // ... then up while it outranks its parent.
        while self.parent[key] != NIL
            && self.priority[self.parent[key] as usize] < self.priority[key]
        {
            self.rotate_up(k);
        }
    }

    /// Removes `key` from its tree (nothing if it is in none).
    pub(crate) fn remove(&mut self, key: usize) {
        if !self.contains(key) {
            return;
        }
        let k = key as u32;
        // Down until a leaf, lifting the higher-priority child each time.
        loop {
            let (l, r) = (self.left[key], self.right[key]);
            let child = match (l, r) {
                (NIL, NIL) => break,
                (c, NIL) | (NIL, c) => c,
                (l, r) => {
                    if self.priority[l as usize] > self.priority[r as usize] {
                        l
                    } else {
                        r
                    }
                }
            };
            self.rotate_up(child);
        }
        let p = self.parent[key];
        let t = self.tree[key] as usize;
        if p == NIL {
            self.roots[t] = NIL;
        } else if self.left[p as usize] == k {
            self.left[p as usize] = NIL;
        } else {
            self.right[p as usize] = NIL;
        }
        self.parent[key] = NIL;
        self.tree[key] = NIL;
    }

    /// Rotates `x` above its parent.
    fn rotate_up(&mut self, x: u32) {
        let xi = x as usize;
        let p = self.parent[xi];
        let pi = p as usize;
        let g = self.parent[pi];
        if self.left[pi] == x {
            let b = self.right[xi];
            self.left[pi] = b;
            if b != NIL {
                self.parent[b as usize] = p;
            }
            self.right[xi] = p;
        } else {
            let b = self.left[xi];
            self.right[pi] = b;
            if b != NIL {
                self.parent[b as usize] = p;
            }
            self.left[xi] = p;
        }
        self.parent[pi] = x;
        self.parent[xi] = g;
        if g == NIL {
            self.roots[self.tree[xi] as usize] = x;
        } else if self.left[g as usize] == p {
            self.left[g as usize] = x;
        } else {
            self.right[g as usize] = x;
        }
    }

    /// The first key of tree `t` at or after `pos`, by sector.
    pub(crate) fn lower_bound(&self, t: usize, pos: u64) -> Option<usize> {
        let mut at = self.roots[t];
        let mut best = NIL;
        while at != NIL {
            if self.sector[at as usize] >= pos {
                best = at;
                at = self.left[at as usize];
            } else {
                at = self.right[at as usize];
            }
        }
        (best != NIL).then_some(best as usize)
    }

    /// The key after `key` in its tree's order.
    pub(crate) fn next(&self, key: usize) -> Option<usize> {
        let mut at = self.right[key];
        if at != NIL {
            while self.left[at as usize] != NIL {
                at = self.left[at as usize];
            }
            return Some(at as usize);
        }
        let mut child = key as u32;
        let mut up = self.parent[key];
        while up != NIL && self.right[up as usize] == child {
            child = up;
            up = self.parent[up as usize];
        }
        (up != NIL).then_some(up as usize)
    }

    /// The key before `key` in its tree's order.
    pub(crate) fn prev(&self, key: usize) -> Option<usize> {
        let mut at = self.left[key];
        if at != NIL {
            while self.right[at as usize] != NIL {
                at = self.right[at as usize];
            }
            return Some(at as usize);
        }
        let mut child = key as u32;
        let mut up = self.parent[key];
        while up != NIL && self.left[up as usize] == child {
            child = up;
            up = self.parent[up as usize];
        }
        (up != NIL).then_some(up as usize)
    }
}

/// Doubly linked lists over keys (FIFOs, dispatch lists).
pub(crate) struct Lists {
    heads: Vec<u32>,
    tails: Vec<u32>,
    lens: Vec<usize>,
    /// Keys on any list.
    total: usize,
    next: Vec<u32>,
    prev: Vec<u32>,
    /// The list each key is on, or `NIL`.
    list: Vec<u32>,
}

impl Lists {
    pub(crate) fn new(nr_lists: usize, nr_keys: usize) -> Self {
        Self {
            heads: vec![NIL; nr_lists],
            tails: vec![NIL; nr_lists],
            lens: vec![0; nr_lists],
            total: 0,
            next: vec![NIL; nr_keys],
            prev: vec![NIL; nr_keys],
            list: vec![NIL; nr_keys],
        }
    }

    pub(crate) fn contains(&self, key: usize) -> bool {
        self.list.get(key).is_some_and(|&l| l != NIL)
    }

    pub(crate) fn len(&self, l: usize) -> usize {
        self.lens[l]
    }

    /// Keys on any list.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    pub(crate) fn front(&self, l: usize) -> Option<usize> {
        let h = self.heads[l];
        (h != NIL).then_some(h as usize)
    }

    pub(crate) fn push_back(&mut self, l: usize, key: usize) {
        debug_assert!(!self.contains(key));
        let k = key as u32;
        let tail = self.tails[l];
        self.prev[key] = tail;
        self.next[key] = NIL;
        if tail == NIL {
            self.heads[l] = k;
        } else {
            self.next[tail as usize] = k;
        }
        self.tails[l] = k;
        self.list[key] = l as u32;
        self.lens[l] += 1;
        self.total += 1;
    }

    pub(crate) fn push_front(&mut self, l: usize, key: usize) {
        debug_assert!(!self.contains(key));
        let k = key as u32;
        let head = self.heads[l];
        self.next[key] = head;
        self.prev[key] = NIL;
        if head == NIL {
            self.tails[l] = k;
        } else {
            self.prev[head as usize] = k;
        }
        self.heads[l] = k;
        self.list[key] = l as u32;
        self.lens[l] += 1;
        self.total += 1;
    }

    /// Puts `key` (not on a list) just before `before` (on list `l`).
    pub(crate) fn insert_before(&mut self, before: usize, key: usize) {
        let l = self.list[before] as usize;
        let p = self.prev[before];
        if p == NIL {
            self.push_front(l, key);
            return;
        }
        let k = key as u32;
        self.prev[key] = p;
        self.next[key] = before as u32;
        self.next[p as usize] = k;
        self.prev[before] = k;
        self.list[key] = l as u32;
        self.lens[l] += 1;
        self.total += 1;
    }

    /// Whether `a` and `b` are on the same list.
    pub(crate) fn same_list(&self, a: usize, b: usize) -> bool {
        self.contains(a) && self.list[a] == self.list[b]
    }

    /// Puts `key` (not on a list) just after `after` (on a list).
    pub(crate) fn insert_after(&mut self, after: usize, key: usize) {
        let n = self.next[after];
        if n == NIL {
            self.push_back(self.list[after] as usize, key);
        } else {
            self.insert_before(n as usize, key);
        }
    }

    pub(crate) fn remove(&mut self, key: usize) {
        if !self.contains(key) {
            return;
        }
        let l = self.list[key] as usize;
        let (p, n) = (self.prev[key], self.next[key]);
        if p == NIL {
            self.heads[l] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tails[l] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.list[key] = NIL;
        self.lens[l] -= 1;
        self.total -= 1;
    }
}

/// Keys by the sector their request ends at (to find back merges), chained in buckets.
pub(crate) struct EndHash {
    buckets: Vec<u32>,
    next: Vec<u32>,
    end: Vec<u64>,
    present: Vec<bool>,
}

impl EndHash {
    pub(crate) fn new(nr_keys: usize) -> Self {
        let nr = nr_keys.next_power_of_two().max(16);
        Self {
            buckets: vec![NIL; nr],
            next: vec![NIL; nr_keys],
            end: vec![0; nr_keys],
            present: vec![false; nr_keys],
        }
    }

    fn bucket(&self, end: u64) -> usize {
        (end.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize & (self.buckets.len() - 1)
    }

    pub(crate) fn insert(&mut self, key: usize, end: u64) {
        if self.present[key] {
            self.remove(key);
        }
        let b = self.bucket(end);
        self.end[key] = end;
        self.next[key] = self.buckets[b];
        self.buckets[b] = key as u32;
        self.present[key] = true;
    }

    pub(crate) fn remove(&mut self, key: usize) {
        if !self.present[key] {
            return;
        }
        let b = self.bucket(self.end[key]);
        let mut at = self.buckets[b];
        let mut prev = NIL;
        while at != NIL {
            if at as usize == key {
                if prev == NIL {
                    self.buckets[b] = self.next[key];
                } else {
                    self.next[prev as usize] = self.next[key];
                }
                break;
            }
            prev = at;
            at = self.next[at as usize];
        }
        self.present[key] = false;
    }

    /// Keys whose request ends at `end`, calling `f` until it returns true; returns that key.
    pub(crate) fn find(&self, end: u64, mut f: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut at = self.buckets[self.bucket(end)];
        while at != NIL {
            let k = at as usize;
            if self.end[k] == end && f(k) {
                return Some(k);
            }
            at = self.next[k];
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;
    use proptest::prelude::*;

    proptest! {
        /// The forest against a sorted set: same order, same lower bounds, same neighbours.
        #[test]
        fn forest_matches_a_sorted_set(ops in proptest::collection::vec((0usize..32, 0u64..64, any::<bool>()), 1..200)) {
            let mut forest = Forest::new(2, 32);
            let mut model: [BTreeSet<(u64, usize)>; 2] = [BTreeSet::new(), BTreeSet::new()];
            let mut sectors = [0u64; 32];
            for (key, sector, insert) in ops {
                let t = key % 2;
                if insert && !forest.contains(key) {
                    forest.insert(t, key, sector);
                    sectors[key] = sector;
                    model[t].insert((sector, key));
                } else if forest.contains(key) {
                    forest.remove(key);
                    model[t].remove(&(sectors[key], key));
                }
                for (t, set) in model.iter().enumerate() {
                    prop_assert_eq!(forest.is_empty(t), set.is_empty());
                    for pos in [0u64, 10, 31, 63] {
                        let want = set.range((pos, 0)..).next().map(|&(_, k)| k);
                        prop_assert_eq!(forest.lower_bound(t, pos), want);
                    }
                    let order: Vec<usize> = set.iter().map(|&(_, k)| k).collect();
                    for w in order.windows(2) {
                        prop_assert_eq!(forest.next(w[0]), Some(w[1]));
                        prop_assert_eq!(forest.prev(w[1]), Some(w[0]));
                    }
                    if let (Some(&first), Some(&last)) = (order.first(), order.last()) {
                        prop_assert_eq!(forest.prev(first), None);
                        prop_assert_eq!(forest.next(last), None);
                    }
                }
            }
        }

        /// The lists against vectors.
        #[test]
        fn lists_match_vectors(ops in proptest::collection::vec((0usize..16, 0u8..4), 1..200)) {
            let mut lists = Lists::new(2, 16);
            let mut model: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
            for (key, what) in ops {
                let l = key % 2;
                if lists.contains(key) {
                    lists.remove(key);
                    model[l].retain(|&k| k != key);
                } else {
                    match what {
                        0 => { lists.push_back(l, key); model[l].push(key); }
                        1 => { lists.push_front(l, key); model[l].insert(0, key); }
                        _ => match model[l].first().copied() {
                            Some(before) => {
                                lists.insert_before(before, key);
                                model[l].insert(0, key);
                            }
                            None => { lists.push_back(l, key); model[l].push(key); }
                        },
                    }
                }
                for (l, v) in model.iter().enumerate() {
                    prop_assert_eq!(lists.len(l), v.len());
                    prop_assert_eq!(lists.front(l), v.first().copied());
                }
            }
        }
    }

    #[test]
    fn end_hash_finds_by_end() {
        let mut hash = EndHash::new(8);
        hash.insert(1, 100);
        hash.insert(2, 100);
        hash.insert(3, 200);
        assert_eq!(hash.find(100, |k| k == 2), Some(2));
        assert_eq!(hash.find(200, |_| true), Some(3));
        hash.remove(3);
        assert_eq!(hash.find(200, |_| true), None);
        hash.insert(1, 300); // moves
        assert_eq!(hash.find(100, |k| k == 1), None);
        assert_eq!(hash.find(300, |_| true), Some(1));
    }
}
