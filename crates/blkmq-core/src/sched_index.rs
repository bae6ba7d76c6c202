//! Allocation-free orders over request keys, shared by the I/O schedulers (what Linux's
//! `elv_rb_add` and `elv_rqhash_*` give every elevator).
//!
//! An elevator holds its requests in an array indexed by [key](crate::ElvCx::key). These
//! structures order those keys without allocating per request: each is a set of arrays made
//! once for all keys, linking keys by index.
//!
//! * [`SectorForest`]: sector-sorted search trees (treaps), one per queue of the scheduler
//!   (a class and direction for mq-deadline, a process queue for BFQ);
//! * [`KeyLists`]: doubly linked lists (FIFOs, dispatch lists);
//! * [`EndHash`]: keys by the sector their request ends at, to find back merges;
//! * [`SortedRequests`]: the requests themselves, by key, in a [`SectorForest`] and an
//!   [`EndHash`], with the merge operations over them.
//!
//! A key is in at most one tree and one list at a time, so all trees share one set of node
//! arrays, and all lists another. Trees and lists may be added later ([`SectorForest::add_tree`],
//! [`KeyLists::add_list`]): that allocates, so it belongs where a scheduler creates a queue,
//! not where it handles a request.
//!
//! ```
//! use blkmq_core::sched_index::{EndHash, KeyLists, SectorForest};
//!
//! // Two queues over 8 request keys.
//! let mut sorted = SectorForest::new(2, 8);
//! let mut fifo = KeyLists::new(2, 8);
//! let mut ends = EndHash::new(8);
//! for (key, sector) in [(3, 800), (5, 0), (6, 64)] {
//!     sorted.insert(0, key, sector);
//!     fifo.push_back(0, key);
//!     ends.insert(key, sector + 8);
//! }
//! assert_eq!(sorted.lower_bound(0, 1), Some(6)); // the first at or after sector 1
//! assert_eq!(fifo.front(0), Some(3)); // the oldest
//! assert_eq!(ends.find(8, |_| true), Some(5)); // a bio at sector 8 merges behind key 5
//! ```

use alloc::vec;
use alloc::vec::Vec;

use crate::{Bio, ElvCx, MergeKind, Rq};

/// No node: the link value meaning "none" in the arrays.
const NIL: u32 = u32::MAX;

/// Sector-sorted binary search trees over keys, balanced as treaps (deterministic
/// pseudo-random priorities, heap-ordered): O(log n) expected per operation.
///
/// Keys with equal sectors are ordered by key, so the order is total and stable.
///
/// ```
/// use blkmq_core::sched_index::SectorForest;
///
/// let mut forest = SectorForest::new(1, 4);
/// forest.insert(0, 2, 100);
/// forest.insert(0, 0, 50);
/// forest.insert(0, 1, 100);
/// let order: Vec<usize> = core::iter::successors(forest.first(0), |&k| forest.next(k)).collect();
/// assert_eq!(order, [0, 1, 2]); // by sector, equal sectors by key
/// ```
#[derive(Clone, Debug)]
pub struct SectorForest {
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

impl SectorForest {
    /// A forest of `nr_trees` empty trees over keys `0..nr_keys`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let forest = SectorForest::new(6, 64);
    /// assert_eq!((forest.nr_trees(), forest.nr_keys()), (6, 64));
    /// assert!(forest.is_empty(5));
    /// ```
    pub fn new(nr_trees: usize, nr_keys: usize) -> Self {
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

    /// How many trees there are.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    /// assert_eq!(SectorForest::new(3, 8).nr_trees(), 3);
    /// ```
    #[inline]
    pub fn nr_trees(&self) -> usize {
        self.roots.len()
    }

    /// How many keys the forest holds room for.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    /// assert_eq!(SectorForest::new(3, 8).nr_keys(), 8);
    /// ```
    #[inline]
    pub fn nr_keys(&self) -> usize {
        self.tree.len()
    }

    /// Adds an empty tree and returns its index (allocates when the roots array grows:
    /// call it when a scheduler queue is created, not per request).
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(0, 8);
    /// let t = forest.add_tree();
    /// forest.insert(t, 7, 40);
    /// assert_eq!((t, forest.first(t)), (0, Some(7)));
    /// ```
    pub fn add_tree(&mut self) -> usize {
        self.roots.push(NIL);
        self.roots.len() - 1
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

    /// Whether `key` is in some tree (false for a key out of range).
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 1, 8);
    /// assert!(forest.contains(1) && !forest.contains(2) && !forest.contains(99));
    /// ```
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.tree.get(key).is_some_and(|&t| t != NIL)
    }

    /// The tree `key` is in, if any.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(2, 4);
    /// forest.insert(1, 3, 8);
    /// assert_eq!((forest.tree_of(3), forest.tree_of(0)), (Some(1), None));
    /// ```
    #[inline]
    pub fn tree_of(&self, key: usize) -> Option<usize> {
        match self.tree.get(key) {
            Some(&t) if t != NIL => Some(t as usize),
            _ => None,
        }
    }

    /// The sector `key` is (or was last) sorted by.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 2, 4096);
    /// assert_eq!(forest.sector(2), 4096);
    /// ```
    #[inline]
    pub fn sector(&self, key: usize) -> u64 {
        self.sector[key]
    }

    /// Whether tree `t` is empty.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(2, 4);
    /// forest.insert(0, 0, 0);
    /// assert!(!forest.is_empty(0) && forest.is_empty(1));
    /// ```
    #[inline]
    pub fn is_empty(&self, t: usize) -> bool {
        self.roots[t] == NIL
    }

    /// Orders by sector, then by key, so equal sectors have a stable order.
    #[inline]
    fn less(&self, a: u32, b: u32) -> bool {
        (self.sector[a as usize], a) < (self.sector[b as usize], b)
    }

    /// Inserts `key` (in no tree) at `sector` into tree `t`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 3, 16);
    /// forest.insert(0, 1, 8);
    /// assert_eq!(forest.first(0), Some(1));
    /// ```
    pub fn insert(&mut self, t: usize, key: usize, sector: u64) {
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
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 0, 8);
    /// forest.remove(0);
    /// forest.remove(0); // already out: nothing
    /// assert!(forest.is_empty(0));
    /// ```
    pub fn remove(&mut self, key: usize) {
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

    /// The first key of tree `t` at or after sector `pos`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 0, 8);
    /// forest.insert(0, 1, 64);
    /// assert_eq!(forest.lower_bound(0, 8), Some(0));
    /// assert_eq!(forest.lower_bound(0, 9), Some(1));
    /// assert_eq!(forest.lower_bound(0, 65), None);
    /// ```
    #[inline]
    pub fn lower_bound(&self, t: usize, pos: u64) -> Option<usize> {
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

    /// The lowest key of tree `t`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// assert_eq!(forest.first(0), None);
    /// forest.insert(0, 2, 30);
    /// forest.insert(0, 3, 10);
    /// assert_eq!(forest.first(0), Some(3));
    /// ```
    #[inline]
    pub fn first(&self, t: usize) -> Option<usize> {
        let mut at = self.roots[t];
        if at == NIL {
            return None;
        }
        while self.left[at as usize] != NIL {
            at = self.left[at as usize];
        }
        Some(at as usize)
    }

    /// The highest key of tree `t`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// assert_eq!(forest.last(0), None);
    /// forest.insert(0, 2, 30);
    /// forest.insert(0, 3, 10);
    /// assert_eq!(forest.last(0), Some(2));
    /// ```
    #[inline]
    pub fn last(&self, t: usize) -> Option<usize> {
        let mut at = self.roots[t];
        if at == NIL {
            return None;
        }
        while self.right[at as usize] != NIL {
            at = self.right[at as usize];
        }
        Some(at as usize)
    }

    /// The key after `key` (in a tree) in its tree's order.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 0, 8);
    /// forest.insert(0, 1, 64);
    /// assert_eq!((forest.next(0), forest.next(1)), (Some(1), None));
    /// ```
    #[inline]
    pub fn next(&self, key: usize) -> Option<usize> {
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

    /// The key before `key` (in a tree) in its tree's order.
    ///
    /// ```
    /// use blkmq_core::sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 0, 8);
    /// forest.insert(0, 1, 64);
    /// assert_eq!((forest.prev(1), forest.prev(0)), (Some(0), None));
    /// ```
    #[inline]
    pub fn prev(&self, key: usize) -> Option<usize> {
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

/// Doubly linked lists over keys (FIFOs, dispatch lists), with their lengths.
///
/// ```
/// use blkmq_core::sched_index::KeyLists;
///
/// let mut lists = KeyLists::new(2, 8);
/// lists.push_back(0, 4);
/// lists.push_back(0, 2);
/// lists.push_front(1, 7);
/// assert_eq!((lists.front(0), lists.len(0), lists.total()), (Some(4), 2, 3));
/// ```
#[derive(Clone, Debug)]
pub struct KeyLists {
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

impl KeyLists {
    /// `nr_lists` empty lists over keys `0..nr_keys`.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let lists = KeyLists::new(9, 32);
    /// assert_eq!((lists.nr_lists(), lists.total()), (9, 0));
    /// ```
    pub fn new(nr_lists: usize, nr_keys: usize) -> Self {
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

    /// How many lists there are.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    /// assert_eq!(KeyLists::new(2, 4).nr_lists(), 2);
    /// ```
    #[inline]
    pub fn nr_lists(&self) -> usize {
        self.heads.len()
    }

    /// Adds an empty list and returns its index (allocates when the arrays grow: call it
    /// when a scheduler queue is created, not per request).
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// let l = lists.add_list();
    /// lists.push_back(l, 3);
    /// assert_eq!((l, lists.front(l)), (1, Some(3)));
    /// ```
    pub fn add_list(&mut self) -> usize {
        self.heads.push(NIL);
        self.tails.push(NIL);
        self.lens.push(0);
        self.heads.len() - 1
    }

    /// Whether `key` is on some list (false for a key out of range).
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 1);
    /// assert!(lists.contains(1) && !lists.contains(0) && !lists.contains(99));
    /// ```
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.list.get(key).is_some_and(|&l| l != NIL)
    }

    /// The list `key` is on, if any.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(2, 4);
    /// lists.push_back(1, 0);
    /// assert_eq!((lists.list_of(0), lists.list_of(1)), (Some(1), None));
    /// ```
    #[inline]
    pub fn list_of(&self, key: usize) -> Option<usize> {
        match self.list.get(key) {
            Some(&l) if l != NIL => Some(l as usize),
            _ => None,
        }
    }

    /// The length of list `l`.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(0, 1);
    /// assert_eq!(lists.len(0), 2);
    /// ```
    #[inline]
    pub fn len(&self, l: usize) -> usize {
        self.lens[l]
    }

    /// Whether list `l` is empty.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// assert!(lists.is_empty(0));
    /// lists.push_back(0, 2);
    /// assert!(!lists.is_empty(0));
    /// ```
    #[inline]
    pub fn is_empty(&self, l: usize) -> bool {
        self.lens[l] == 0
    }

    /// Keys on any list.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(2, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(1, 1);
    /// assert_eq!(lists.total(), 2);
    /// ```
    #[inline]
    pub fn total(&self) -> usize {
        self.total
    }

    /// The first key of list `l`.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// assert_eq!(lists.front(0), None);
    /// lists.push_back(0, 3);
    /// lists.push_back(0, 1);
    /// assert_eq!(lists.front(0), Some(3));
    /// ```
    #[inline]
    pub fn front(&self, l: usize) -> Option<usize> {
        let h = self.heads[l];
        (h != NIL).then_some(h as usize)
    }

    /// The key after `key` (on a list) on its list.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 3);
    /// lists.push_back(0, 1);
    /// assert_eq!((lists.next(3), lists.next(1)), (Some(1), None));
    /// ```
    #[inline]
    pub fn next(&self, key: usize) -> Option<usize> {
        let n = self.next[key];
        (n != NIL).then_some(n as usize)
    }

    /// Appends `key` (on no list) to list `l`.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 2);
    /// lists.push_back(0, 0);
    /// assert_eq!((lists.front(0), lists.next(2)), (Some(2), Some(0)));
    /// ```
    #[inline]
    pub fn push_back(&mut self, l: usize, key: usize) {
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

    /// Puts `key` (on no list) at the head of list `l`.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 2);
    /// lists.push_front(0, 0);
    /// assert_eq!(lists.front(0), Some(0));
    /// ```
    #[inline]
    pub fn push_front(&mut self, l: usize, key: usize) {
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

    /// Puts `key` (on no list) just before `before` (on a list), on that list.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(0, 1);
    /// lists.insert_before(1, 2);
    /// assert_eq!((lists.next(0), lists.next(2)), (Some(2), Some(1)));
    /// ```
    pub fn insert_before(&mut self, before: usize, key: usize) {
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
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(2, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(0, 1);
    /// lists.push_back(1, 2);
    /// assert!(lists.same_list(0, 1) && !lists.same_list(0, 2) && !lists.same_list(3, 3));
    /// ```
    #[inline]
    pub fn same_list(&self, a: usize, b: usize) -> bool {
        self.contains(a) && self.list[a] == self.list[b]
    }

    /// Puts `key` (on no list) just after `after` (on a list), on that list.
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 0);
    /// lists.insert_after(0, 3);
    /// assert_eq!((lists.next(0), lists.len(0)), (Some(3), 2));
    /// ```
    pub fn insert_after(&mut self, after: usize, key: usize) {
        let n = self.next[after];
        if n == NIL {
            self.push_back(self.list[after] as usize, key);
        } else {
            self.insert_before(n as usize, key);
        }
    }

    /// Takes `key` off its list (nothing if it is on none).
    ///
    /// ```
    /// use blkmq_core::sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(0, 1);
    /// lists.remove(0);
    /// lists.remove(0); // already off: nothing
    /// assert_eq!((lists.front(0), lists.total()), (Some(1), 1));
    /// ```
    #[inline]
    pub fn remove(&mut self, key: usize) {
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
///
/// ```
/// use blkmq_core::sched_index::EndHash;
///
/// let mut ends = EndHash::new(8);
/// ends.insert(1, 16);
/// ends.insert(2, 16);
/// // Of the requests ending at 16, the first the filter accepts.
/// assert_eq!(ends.find(16, |k| k == 2), Some(2));
/// ```
#[derive(Clone, Debug)]
pub struct EndHash {
    buckets: Vec<u32>,
    next: Vec<u32>,
    end: Vec<u64>,
    present: Vec<bool>,
}

impl EndHash {
    /// An empty hash over keys `0..nr_keys`.
    ///
    /// ```
    /// use blkmq_core::sched_index::EndHash;
    ///
    /// let ends = EndHash::new(64);
    /// assert_eq!(ends.find(0, |_| true), None);
    /// ```
    pub fn new(nr_keys: usize) -> Self {
        let nr = nr_keys.next_power_of_two().max(16);
        Self {
            buckets: vec![NIL; nr],
            next: vec![NIL; nr_keys],
            end: vec![0; nr_keys],
            present: vec![false; nr_keys],
        }
    }

    #[inline]
    fn bucket(&self, end: u64) -> usize {
        (end.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize & (self.buckets.len() - 1)
    }

    /// Whether `key` is in the hash (false for a key out of range).
    ///
    /// ```
    /// use blkmq_core::sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(3, 8);
    /// assert!(ends.contains(3) && !ends.contains(0) && !ends.contains(99));
    /// ```
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.present.get(key).is_some_and(|&p| p)
    }

    /// Files `key` under `end` (moving it if it was filed under another end).
    ///
    /// ```
    /// use blkmq_core::sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(0, 8);
    /// ends.insert(0, 24); // the request grew
    /// assert_eq!((ends.find(8, |_| true), ends.find(24, |_| true)), (None, Some(0)));
    /// ```
    #[inline]
    pub fn insert(&mut self, key: usize, end: u64) {
        if self.present[key] {
            self.remove(key);
        }
        let b = self.bucket(end);
        self.end[key] = end;
        self.next[key] = self.buckets[b];
        self.buckets[b] = key as u32;
        self.present[key] = true;
    }

    /// Takes `key` out, giving back the end it was filed under (`None`: it was not in).
    ///
    /// ```
    /// use blkmq_core::sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(1, 8);
    /// assert_eq!(ends.remove(1), Some(8));
    /// assert_eq!(ends.remove(1), None);
    /// assert_eq!(ends.find(8, |_| true), None);
    /// ```
    #[inline]
    pub fn remove(&mut self, key: usize) -> Option<u64> {
        if !self.present[key] {
            return None;
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
        Some(self.end[key])
    }

    /// The keys filed under `end`, offered to `f` until it returns true; returns that key.
    ///
    /// ```
    /// use blkmq_core::sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(0, 8);
    /// ends.insert(1, 8);
    /// ends.insert(2, 9);
    /// let mut seen = Vec::new();
    /// assert_eq!(ends.find(8, |k| { seen.push(k); false }), None);
    /// seen.sort();
    /// assert_eq!(seen, [0, 1]); // key 2 ends elsewhere
    /// ```
    #[inline]
    pub fn find(&self, end: u64, mut f: impl FnMut(usize) -> bool) -> Option<usize> {
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

/// The requests an elevator holds, by key, with their sector order and end hash: the
/// storage and the merge operations mq-deadline and BFQ share (Linux's `elv_rb_*`,
/// `elv_rqhash_*` and the `elv_merge` hooks over them).
///
/// A request is held either *sorted* ([`hold_sorted`](Self::hold_sorted): in one of the
/// sector-sorted trees and filed by its end, a merge candidate) or outside the orders
/// ([`hold`](Self::hold): on a dispatch list, say). The trees are read through
/// [`forest`](Self::forest) (`first`, `lower_bound`, `next`, `tree_of`, ...); changes go
/// through the methods here, which keep the requests, the trees and the hash
/// together. Which tree a request goes to, and which requests may merge, is the
/// scheduler's policy: the merge methods take the tree, or a filter over `(key, tree)`.
///
/// ```
/// use blkmq_core::sched_index::SortedRequests;
/// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let mut tags = set.attach().unwrap();
/// tags.attach_scheduler(None, |_| ()).unwrap();
/// let limits = QueueLimits::new(1 << 20);
/// let cx = ElvCx::new(&tags, &limits, 0);
/// let mut held = SortedRequests::new(1, tags.nr_keys());
/// for sector in [64, 0] {
///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
///     let key = cx.key(&rq);
///     held.hold_sorted(0, key, rq, sector, sector + 8);
/// }
/// // A bio at 8 merges at the back of the request at 0, the first in sector order.
/// let (key, kind) = held.request_merge(&cx, &Bio::new(Op::Read, 8, 8), 0, true, |_, _| true).unwrap();
/// assert_eq!((held.forest().first(0), kind), (Some(key), MergeKind::Back));
/// for key in held.held_keys().collect::<Vec<_>>() {
///     tags.free(held.take_request(key).unwrap()).unwrap();
/// }
/// ```
#[derive(Debug)]
pub struct SortedRequests {
    slots: Vec<Option<Rq>>,
    sorted: SectorForest,
    ends: EndHash,
}

impl SortedRequests {
    /// The sector-sorted trees, to read (changes go through the methods of `self`).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    ///
    /// let held = SortedRequests::new(2, 16);
    /// assert!(held.forest().is_empty(1));
    /// assert_eq!(held.forest().nr_trees(), 2);
    /// ```
    #[inline]
    pub fn forest(&self) -> &SectorForest {
        &self.sorted
    }

    /// Room for requests of keys `0..nr_keys` in `nr_trees` empty trees.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    ///
    /// let held = SortedRequests::new(6, 64);
    /// assert_eq!((held.forest().nr_trees(), held.forest().nr_keys(), held.held_keys().count()), (6, 64, 0));
    /// ```
    pub fn new(nr_trees: usize, nr_keys: usize) -> Self {
        let mut slots = Vec::with_capacity(nr_keys);
        slots.resize_with(nr_keys, || None);
        Self {
            slots,
            sorted: SectorForest::new(nr_trees, nr_keys),
            ends: EndHash::new(nr_keys),
        }
    }

    /// Makes room for keys `0..nr_keys` (never less than now) in `nr_trees` empty trees:
    /// the requests held stay held, out of every order (allocates: call it where the
    /// queue's depth changes, not per request).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 4);
    /// held.hold_sorted(0, 2, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// held.resize(2, 16);
    /// assert_eq!((held.forest().nr_trees(), held.forest().nr_keys()), (2, 16));
    /// assert!(held.request(2).is_some() && !held.forest().contains(2)); // held, in no tree
    /// # tags.free(held.take_request(2).unwrap()).unwrap();
    /// ```
    pub fn resize(&mut self, nr_trees: usize, nr_keys: usize) {
        let nr_keys = nr_keys.max(self.slots.len());
        let mut slots = Vec::with_capacity(nr_keys);
        slots.append(&mut self.slots);
        slots.resize_with(nr_keys, || None);
        self.slots = slots;
        self.sorted = SectorForest::new(nr_trees, nr_keys);
        self.ends = EndHash::new(nr_keys);
    }

    /// Adds an empty tree and returns its index (see [`SectorForest::add_tree`]).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    ///
    /// let mut held = SortedRequests::new(0, 8);
    /// assert_eq!((held.add_tree(), held.forest().nr_trees()), (0, 1));
    /// ```
    pub fn add_tree(&mut self) -> usize {
        self.sorted.add_tree()
    }

    /// The keys of the requests held, in key order.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(5, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// held.hold_sorted(0, 1, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// assert_eq!(held.held_keys().collect::<Vec<_>>(), [1, 5]);
    /// # for key in [1, 5] { tags.free(held.take_request(key).unwrap()).unwrap(); }
    /// ```
    pub fn held_keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(key, slot)| slot.as_ref().map(|_| key))
    }

    /// The request held with `key` (what [`Elevator::request`](crate::Elevator::request)
    /// gives).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert!(held.request(3).is_some() && held.request(2).is_none() && held.request(99).is_none());
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request(&self, key: usize) -> Option<&Rq> {
        self.slots.get(key)?.as_ref()
    }

    /// The request held with `key`, to change.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert!(held.request_mut(3).is_some() && held.request_mut(4).is_none());
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        self.slots.get_mut(key)?.as_mut()
    }

    /// Holds `rq` with `key` outside the orders (a dispatch list's request, say).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert!(held.request(3).is_some() && !held.forest().contains(3));
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn hold(&mut self, key: usize, rq: Rq) {
        self.slots[key] = Some(rq);
    }

    /// Holds `rq` with `key` in tree `t` at `sector`, filed under `end` (the sector it
    /// ends at): a merge candidate.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(2, 8);
    /// held.hold_sorted(1, 3, tags.alloc(&Alloc::new(0, 0)).unwrap(), 100, 108);
    /// assert_eq!((held.forest().tree_of(3), held.forest().sector(3)), (Some(1), 100));
    /// # tags.free(held.take_request(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn hold_sorted(&mut self, t: usize, key: usize, rq: Rq, sector: u64, end: u64) {
        self.sorted.insert(t, key, sector);
        self.ends.insert(key, end);
        self.slots[key] = Some(rq);
    }

    /// Takes `key` out of its tree and the end hash, giving back the end it was filed under
    /// (`None`: it was in neither); its request stays held.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold_sorted(0, 3, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// assert_eq!(held.unlink(3), Some(8)); // the end it was filed under
    /// assert_eq!(held.unlink(3), None); // already out: nothing
    /// assert!(held.forest().is_empty(0) && held.request(3).is_some());
    /// # tags.free(held.take(3).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn unlink(&mut self, key: usize) -> Option<u64> {
        self.sorted.remove(key);
        self.ends.remove(key)
    }

    /// Gives back the request held with `key`, leaving the orders as they are (for one
    /// already unlinked, or held outside them).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// let rq = held.take(3).unwrap();
    /// assert!(held.take(3).is_none() && held.take(99).is_none());
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn take(&mut self, key: usize) -> Option<Rq> {
        self.slots.get_mut(key)?.take()
    }

    /// Takes `key` out of its tree and the end hash and gives its request back (what
    /// [`Elevator::take_request`](crate::Elevator::take_request) does).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold_sorted(0, 3, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// let rq = held.take_request(3).unwrap();
    /// assert!(held.forest().is_empty(0) && held.request(3).is_none());
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn take_request(&mut self, key: usize) -> Option<Rq> {
        self.unlink(key);
        self.take(key)
    }

    /// Whether the request held with `key` may take `bio` at its `kind` end.
    #[inline]
    fn fits(&self, cx: &ElvCx<'_>, key: usize, bio: &Bio, kind: MergeKind) -> bool {
        self.slots[key]
            .as_ref()
            .and_then(|rq| cx.io(rq).ok())
            .is_some_and(|io| cx.limits().merge_kind(io, bio) == Some(kind))
    }

    /// A sorted request `bio` merges into (what
    /// [`Elevator::request_merge`](crate::Elevator::request_merge) finds): at the back, one
    /// ending where it starts that `accept(key, its tree)` takes; else, with `front`, at
    /// the front, one of tree `t` starting where it ends. Only a request that can take
    /// the bio counts: one that cannot does not hide another that can.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(2, tags.nr_keys());
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 16, 8)).unwrap();
    /// let key = cx.key(&rq);
    /// held.hold_sorted(1, key, rq, 16, 24);
    /// let (back, front) = (Bio::new(Op::Read, 24, 8), Bio::new(Op::Read, 8, 8));
    /// assert_eq!(held.request_merge(&cx, &back, 1, true, |_, t| t == 1), Some((key, MergeKind::Back)));
    /// assert_eq!(held.request_merge(&cx, &back, 1, true, |_, t| t == 0), None); // not its tree
    /// assert_eq!(held.request_merge(&cx, &front, 1, true, |_, _| true), Some((key, MergeKind::Front)));
    /// assert_eq!(held.request_merge(&cx, &front, 1, false, |_, _| true), None); // no front merges
    /// # tags.free(held.take_request(key).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request_merge(
        &self,
        cx: &ElvCx<'_>,
        bio: &Bio,
        t: usize,
        front: bool,
        accept: impl Fn(usize, usize) -> bool,
    ) -> Option<(usize, MergeKind)> {
        let back = self.ends.find(bio.sector, |k| {
            self.sorted.tree_of(k).is_some_and(|tree| accept(k, tree))
                && self.fits(cx, k, bio, MergeKind::Back)
        });
        if let Some(key) = back {
            return Some((key, MergeKind::Back));
        }
        if !front {
            return None;
        }
        let end = bio.end_sector();
        let mut at = self.sorted.lower_bound(t, end);
        while let Some(key) = at {
            if self.sorted.sector(key) != end {
                return None;
            }
            if self.fits(cx, key, bio, MergeKind::Front) {
                return Some((key, MergeKind::Front));
            }
            at = self.sorted.next(key);
        }
        None
    }

    /// A bio merged into the request held with `key` at its `kind` end (what
    /// [`Elevator::request_merged`](crate::Elevator::request_merged) sees): a front merge
    /// moves it in its tree to its new start, a back merge files it under its new end.
    /// Returns its length now (sectors); `None`, changing nothing, when no request of
    /// this queue is held with `key`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(1, tags.nr_keys());
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 16, 8)).unwrap();
    /// let key = cx.key(&rq);
    /// held.hold_sorted(0, key, rq, 16, 24);
    /// cx.merge_bio(held.request_mut(key).unwrap(), Bio::new(Op::Read, 8, 8)).unwrap();
    /// assert_eq!(held.request_merged(&cx, key, MergeKind::Front), Some(16));
    /// assert_eq!(held.forest().sector(key), 8);
    /// # tags.free(held.take_request(key).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<u64> {
        let io = cx.io(self.slots[key].as_ref()?).ok()?;
        let (sector, end, sectors) = (io.sector(), io.end_sector(), io.sectors());
        match kind {
            MergeKind::Front => {
                if let Some(t) = self.sorted.tree_of(key) {
                    self.sorted.remove(key);
                    self.sorted.insert(t, key, sector);
                }
            }
            MergeKind::Back => self.ends.insert(key, end),
        }
        Some(sectors)
    }

    /// After a `kind` merge into `key`, the sorted request that may now merge with it
    /// (what [`Elevator::next_request`](crate::Elevator::next_request) gives): the next in
    /// its tree after a back merge, the previous one after a front merge.
    ///
    /// ```
    /// use blkmq_core::MergeKind;
    /// use blkmq_core::sched_index::SortedRequests;
    /// # use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    ///
    /// let mut held = SortedRequests::new(1, 8);
    /// held.hold_sorted(0, 1, tags.alloc(&Alloc::new(0, 0)).unwrap(), 0, 8);
    /// held.hold_sorted(0, 2, tags.alloc(&Alloc::new(0, 0)).unwrap(), 8, 16);
    /// held.hold(3, tags.alloc(&Alloc::new(0, 0)).unwrap());
    /// assert_eq!(held.next_request(1, MergeKind::Back), Some(2));
    /// assert_eq!(held.next_request(2, MergeKind::Front), Some(1));
    /// assert_eq!(held.next_request(3, MergeKind::Back), None); // in no tree
    /// # for key in [1, 2, 3] { tags.free(held.take_request(key).unwrap()).unwrap(); }
    /// ```
    #[inline]
    pub fn next_request(&self, key: usize, kind: MergeKind) -> Option<usize> {
        if !self.sorted.contains(key) {
            return None;
        }
        match kind {
            MergeKind::Back => self.sorted.next(key),
            MergeKind::Front => self.sorted.prev(key),
        }
    }

    /// A request was appended to the one held with `into` (what
    /// [`Elevator::requests_merged`](crate::Elevator::requests_merged) sees): `into` is
    /// filed under its new end. Returns its length now (sectors); `None`, changing
    /// nothing, when no request of this queue is held with `into`.
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(1, tags.nr_keys());
    /// let mut keys = Vec::new();
    /// for sector in [0, 8] {
    ///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    ///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
    ///     keys.push(cx.key(&rq));
    ///     held.hold_sorted(0, cx.key(&rq), rq, sector, sector + 8);
    /// }
    /// let from = held.take_request(keys[1]).unwrap();
    /// cx.merge_requests(held.request_mut(keys[0]).unwrap(), from).unwrap();
    /// assert_eq!(held.requests_merged(&cx, keys[0]), Some(16));
    /// let bio = Bio::new(Op::Read, 16, 8);
    /// assert_eq!(held.request_merge(&cx, &bio, 0, false, |_, _| true), Some((keys[0], MergeKind::Back)));
    /// # tags.free(held.take_request(keys[0]).unwrap()).unwrap();
    /// ```
    #[inline]
    pub fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize) -> Option<u64> {
        let io = cx.io(self.slots[into].as_ref()?).ok()?;
        let (end, sectors) = (io.end_sector(), io.sectors());
        self.ends.insert(into, end);
        Some(sectors)
    }

    /// An insert merge: appends `rq`, which starts at `sector`, to a sorted request
    /// ending there that `accept(key, its tree)` takes and that can take it; gives back
    /// that request's key, or `rq` when none takes it. The caller then finishes the merge
    /// as after [`requests_merged`](Self::requests_merged) (which files the survivor under
    /// its new end).
    ///
    /// ```
    /// use blkmq_core::sched_index::SortedRequests;
    /// use blkmq_core::{Alloc, Bio, ElvCx, Op, QueueLimits, StdPlatform, TagSet};
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut held = SortedRequests::new(1, tags.nr_keys());
    /// let mut make = |sector| {
    ///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    ///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
    ///     rq
    /// };
    /// let (first, next, far) = (make(0), make(8), make(100));
    /// let key = cx.key(&first);
    /// held.hold_sorted(0, key, first, 0, 8);
    /// assert_eq!(held.insert_merge(&cx, next, 8, |_, _| true), Ok(key));
    /// assert_eq!(held.requests_merged(&cx, key), Some(16));
    /// let far = held.insert_merge(&cx, far, 100, |_, _| true).unwrap_err(); // touches none
    /// # tags.free(far).unwrap();
    /// # tags.free(held.take_request(key).unwrap()).unwrap();
    /// ```
    pub fn insert_merge(
        &mut self,
        cx: &ElvCx<'_>,
        rq: Rq,
        sector: u64,
        accept: impl Fn(usize, usize) -> bool,
    ) -> Result<usize, Rq> {
        let into = self.ends.find(sector, |k| {
            self.sorted.tree_of(k).is_some_and(|tree| accept(k, tree))
                && self.slots[k]
                    .as_ref()
                    .is_some_and(|target| cx.can_append(target, &rq))
        });
        let Some(into) = into else {
            return Err(rq);
        };
        let Some(target) = self.slots[into].as_mut() else {
            return Err(rq);
        };
        cx.merge_requests(target, rq).map(|()| into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;
    use proptest::prelude::*;

    proptest! {
        /// The forest against a sorted set: same order, same bounds, same neighbours.
        #[test]
        fn forest_matches_a_sorted_set(ops in proptest::collection::vec((0usize..32, 0u64..64, any::<bool>()), 1..200)) {
            let mut forest = SectorForest::new(2, 32);
            let mut model: [BTreeSet<(u64, usize)>; 2] = [BTreeSet::new(), BTreeSet::new()];
            let mut sectors = [0u64; 32];
            for (key, sector, insert) in ops {
                let t = key % 2;
                if insert && !forest.contains(key) {
                    forest.insert(t, key, sector);
                    sectors[key] = sector;
                    model[t].insert((sector, key));
                } else if forest.contains(key) {
                    prop_assert_eq!(forest.tree_of(key), Some(t));
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
                    prop_assert_eq!(forest.first(t), order.first().copied());
                    prop_assert_eq!(forest.last(t), order.last().copied());
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
            let mut lists = KeyLists::new(2, 16);
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
                    let walked: Vec<usize> =
                        core::iter::successors(lists.front(l), |&k| lists.next(k)).collect();
                    prop_assert_eq!(&walked, v);
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

    #[test]
    fn trees_and_lists_grow() {
        let mut forest = SectorForest::new(1, 4);
        let mut lists = KeyLists::new(1, 4);
        forest.insert(0, 0, 5);
        lists.push_back(0, 0);
        let (t, l) = (forest.add_tree(), lists.add_list());
        forest.insert(t, 1, 1);
        lists.push_back(l, 1);
        assert_eq!((forest.first(0), forest.first(t)), (Some(0), Some(1)));
        assert_eq!(
            (lists.front(0), lists.front(l), lists.total()),
            (Some(0), Some(1), 2)
        );
    }
}
