//! Sector-sorted trees over request keys (Linux's `elv_rb_add`, `elv_rb_del`, `elv_rb_find`).

use alloc::vec;
use alloc::vec::Vec;

use crate::NIL;

/// Sector-sorted binary search trees over keys, balanced as treaps (deterministic
/// pseudo-random priorities, heap-ordered): O(log n) expected per operation.
///
/// Keys with equal sectors are ordered by key, so the order is total and stable.
///
/// ```
/// use blkmq_sched_index::SectorForest;
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
    /// Per key: its place in its tree and its sector, together (one bounds check, one
    /// line).
    nodes: Vec<Node>,
    seed: u32,
}

/// A key's node: its sector, children, parent, priority, and the tree it is in, or `NIL`.
#[derive(Clone, Copy, Debug)]
struct Node {
    sector: u64,
    left: u32,
    right: u32,
    parent: u32,
    priority: u32,
    tree: u32,
}

/// A key in no tree.
const OUT: Node = Node {
    sector: 0,
    left: NIL,
    right: NIL,
    parent: NIL,
    priority: 0,
    tree: NIL,
};

impl SectorForest {
    /// A forest of `nr_trees` empty trees over keys `0..nr_keys`.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let forest = SectorForest::new(6, 64);
    /// assert_eq!((forest.nr_trees(), forest.nr_keys()), (6, 64));
    /// assert!(forest.is_empty(5));
    /// ```
    pub fn new(nr_trees: usize, nr_keys: usize) -> Self {
        Self {
            roots: vec![NIL; nr_trees],
            nodes: vec![OUT; nr_keys],
            seed: 0x9e37_79b9,
        }
    }

    /// How many trees there are.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    /// assert_eq!(SectorForest::new(3, 8).nr_trees(), 3);
    /// ```
    #[inline]
    pub fn nr_trees(&self) -> usize {
        self.roots.len()
    }

    /// How many keys the forest holds room for.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    /// assert_eq!(SectorForest::new(3, 8).nr_keys(), 8);
    /// ```
    #[inline]
    pub fn nr_keys(&self) -> usize {
        self.nodes.len()
    }

    /// Adds an empty tree and returns its index (allocates when the roots array grows:
    /// call it when a scheduler queue is created, not per request).
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
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
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 1, 8);
    /// assert!(forest.contains(1) && !forest.contains(2) && !forest.contains(99));
    /// ```
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.nodes.get(key).is_some_and(|n| n.tree != NIL)
    }

    /// The tree `key` is in, if any.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(2, 4);
    /// forest.insert(1, 3, 8);
    /// assert_eq!((forest.tree_of(3), forest.tree_of(0)), (Some(1), None));
    /// ```
    #[inline]
    pub fn tree_of(&self, key: usize) -> Option<usize> {
        match self.nodes.get(key) {
            Some(n) if n.tree != NIL => Some(n.tree as usize),
            _ => None,
        }
    }

    /// The sector `key` is (or was last) sorted by.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 2, 4096);
    /// assert_eq!(forest.sector(2), 4096);
    /// ```
    #[inline]
    pub fn sector(&self, key: usize) -> u64 {
        self.nodes[key].sector
    }

    /// Whether tree `t` is empty.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
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
        (self.nodes[a as usize].sector, a) < (self.nodes[b as usize].sector, b)
    }

    /// Inserts `key` (in no tree) at `sector` into tree `t`.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 3, 16);
    /// forest.insert(0, 1, 8);
    /// assert_eq!(forest.first(0), Some(1));
    /// ```
    pub fn insert(&mut self, t: usize, key: usize, sector: u64) {
        debug_assert!(!self.contains(key));
        let k = key as u32;
        self.nodes[key].sector = sector;
        self.nodes[key].left = NIL;
        self.nodes[key].right = NIL;
        self.nodes[key].tree = t as u32;
        self.nodes[key].priority = self.next_priority();
        // Plain search-tree insert as a leaf...
        let mut parent = NIL;
        let mut at = self.roots[t];
        while at != NIL {
            parent = at;
            at = if self.less(k, at) {
                self.nodes[at as usize].left
            } else {
                self.nodes[at as usize].right
            };
        }
        self.nodes[key].parent = parent;
        if parent == NIL {
            self.roots[t] = k;
        } else if self.less(k, parent) {
            self.nodes[parent as usize].left = k;
        } else {
            self.nodes[parent as usize].right = k;
        }
        // ... then up while it outranks its parent.
        while self.nodes[key].parent != NIL
            && self.nodes[self.nodes[key].parent as usize].priority < self.nodes[key].priority
        {
            self.rotate_up(k);
        }
    }

    /// Removes `key` from its tree (nothing if it is in none).
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
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
            let (l, r) = (self.nodes[key].left, self.nodes[key].right);
            let child = match (l, r) {
                (NIL, NIL) => break,
                (c, NIL) | (NIL, c) => c,
                (l, r) => {
                    if self.nodes[l as usize].priority > self.nodes[r as usize].priority {
                        l
                    } else {
                        r
                    }
                }
            };
            self.rotate_up(child);
        }
        let p = self.nodes[key].parent;
        let t = self.nodes[key].tree as usize;
        if p == NIL {
            self.roots[t] = NIL;
        } else if self.nodes[p as usize].left == k {
            self.nodes[p as usize].left = NIL;
        } else {
            self.nodes[p as usize].right = NIL;
        }
        self.nodes[key].parent = NIL;
        self.nodes[key].tree = NIL;
    }

    /// Rotates `x` above its parent.
    fn rotate_up(&mut self, x: u32) {
        let xi = x as usize;
        let p = self.nodes[xi].parent;
        let pi = p as usize;
        let g = self.nodes[pi].parent;
        if self.nodes[pi].left == x {
            let b = self.nodes[xi].right;
            self.nodes[pi].left = b;
            if b != NIL {
                self.nodes[b as usize].parent = p;
            }
            self.nodes[xi].right = p;
        } else {
            let b = self.nodes[xi].left;
            self.nodes[pi].right = b;
            if b != NIL {
                self.nodes[b as usize].parent = p;
            }
            self.nodes[xi].left = p;
        }
        self.nodes[pi].parent = x;
        self.nodes[xi].parent = g;
        if g == NIL {
            self.roots[self.nodes[xi].tree as usize] = x;
        } else if self.nodes[g as usize].left == p {
            self.nodes[g as usize].left = x;
        } else {
            self.nodes[g as usize].right = x;
        }
    }

    /// The first key of tree `t` at or after sector `pos`.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
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
            if self.nodes[at as usize].sector >= pos {
                best = at;
                at = self.nodes[at as usize].left;
            } else {
                at = self.nodes[at as usize].right;
            }
        }
        (best != NIL).then_some(best as usize)
    }

    /// The lowest key of tree `t`.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
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
        while self.nodes[at as usize].left != NIL {
            at = self.nodes[at as usize].left;
        }
        Some(at as usize)
    }

    /// The highest key of tree `t`.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
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
        while self.nodes[at as usize].right != NIL {
            at = self.nodes[at as usize].right;
        }
        Some(at as usize)
    }

    /// The key after `key` (in a tree) in its tree's order.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 0, 8);
    /// forest.insert(0, 1, 64);
    /// assert_eq!((forest.next(0), forest.next(1)), (Some(1), None));
    /// ```
    #[inline]
    pub fn next(&self, key: usize) -> Option<usize> {
        let mut at = self.nodes[key].right;
        if at != NIL {
            while self.nodes[at as usize].left != NIL {
                at = self.nodes[at as usize].left;
            }
            return Some(at as usize);
        }
        let mut child = key as u32;
        let mut up = self.nodes[key].parent;
        while up != NIL && self.nodes[up as usize].right == child {
            child = up;
            up = self.nodes[up as usize].parent;
        }
        (up != NIL).then_some(up as usize)
    }

    /// The key before `key` (in a tree) in its tree's order.
    ///
    /// ```
    /// use blkmq_sched_index::SectorForest;
    ///
    /// let mut forest = SectorForest::new(1, 4);
    /// forest.insert(0, 0, 8);
    /// forest.insert(0, 1, 64);
    /// assert_eq!((forest.prev(1), forest.prev(0)), (Some(0), None));
    /// ```
    #[inline]
    pub fn prev(&self, key: usize) -> Option<usize> {
        let mut at = self.nodes[key].left;
        if at != NIL {
            while self.nodes[at as usize].right != NIL {
                at = self.nodes[at as usize].right;
            }
            return Some(at as usize);
        }
        let mut child = key as u32;
        let mut up = self.nodes[key].parent;
        while up != NIL && self.nodes[up as usize].left == child {
            child = up;
            up = self.nodes[up as usize].parent;
        }
        (up != NIL).then_some(up as usize)
    }
}
