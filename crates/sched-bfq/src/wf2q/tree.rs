//! The service trees: AVL trees of entities by `(finish, id)`, every node of an active
//! tree holding the smallest start of its subtree.

use super::{NIL, Wf2q, ts_gt};

impl Wf2q {
    pub(super) fn active_insert(&mut self, x: u32) {
        let root = self.tree_of_mut(x).active;
        let root = self.avl_insert(root, x);
        self.tree_of_mut(x).active = root;
    }

    pub(super) fn active_extract(&mut self, x: u32) {
        let root = self.tree_of_mut(x).active;
        let root = self.avl_remove(root, x);
        self.tree_of_mut(x).active = root;
    }

    pub(super) fn idle_insert(&mut self, x: u32) {
        let root = self.tree_of_mut(x).idle;
        let root = self.avl_insert(root, x);
        self.tree_of_mut(x).idle = root;
    }

    pub(super) fn idle_extract(&mut self, x: u32) {
        let root = self.tree_of_mut(x).idle;
        let root = self.avl_remove(root, x);
        self.tree_of_mut(x).idle = root;
    }

    /// The eligible entity (`S <= v`) with the smallest `(F, id)` in the tree at `root`.
    pub(super) fn first_eligible(&self, root: u32, v: u64) -> u32 {
        let mut n = root;
        while n != NIL {
            let node = &self.ents[n as usize];
            // Everything on the left finishes earlier: go there if anything is eligible.
            if node.left != NIL && !ts_gt(self.ents[node.left as usize].min_start, v) {
                n = node.left;
            } else if !ts_gt(node.start, v) {
                return n;
            } else if node.right != NIL && !ts_gt(self.ents[node.right as usize].min_start, v) {
                n = node.right;
            } else {
                return NIL;
            }
        }
        NIL
    }

    pub(super) fn leftmost(&self, mut n: u32) -> u32 {
        if n == NIL {
            return NIL;
        }
        while self.ents[n as usize].left != NIL {
            n = self.ents[n as usize].left;
        }
        n
    }

    /// Tree order: finish, then id (so ties are deterministic).
    fn before(&self, a: u32, b: u32) -> bool {
        let (fa, fb) = (self.ents[a as usize].finish, self.ents[b as usize].finish);
        ts_gt(fb, fa) || (fa == fb && a < b)
    }

    fn height(&self, n: u32) -> u8 {
        if n == NIL {
            0
        } else {
            self.ents[n as usize].height
        }
    }

    /// Recomputes the height and smallest start of `n` from its children.
    fn update(&mut self, n: u32) {
        let (l, r) = (self.ents[n as usize].left, self.ents[n as usize].right);
        let mut min_start = self.ents[n as usize].start;
        for c in [l, r] {
            if c != NIL {
                let m = self.ents[c as usize].min_start;
                if ts_gt(min_start, m) {
                    min_start = m;
                }
            }
        }
        let height = 1 + self.height(l).max(self.height(r));
        let node = &mut self.ents[n as usize];
        node.min_start = min_start;
        node.height = height;
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        let l = self.ents[n as usize].left;
        self.ents[n as usize].left = self.ents[l as usize].right;
        self.ents[l as usize].right = n;
        self.update(n);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        let r = self.ents[n as usize].right;
        self.ents[n as usize].right = self.ents[r as usize].left;
        self.ents[r as usize].left = n;
        self.update(n);
        self.update(r);
        r
    }

    /// Restores the AVL balance at `n` (its subtrees balanced); returns the subtree root.
    fn rebalance(&mut self, n: u32) -> u32 {
        self.update(n);
        let (l, r) = (self.ents[n as usize].left, self.ents[n as usize].right);
        let (hl, hr) = (self.height(l), self.height(r));
        if hl > hr + 1 {
            let (ll, lr) = (self.ents[l as usize].left, self.ents[l as usize].right);
            if self.height(lr) > self.height(ll) {
                self.ents[n as usize].left = self.rotate_left(l);
            }
            self.rotate_right(n)
        } else if hr > hl + 1 {
            let (rl, rr) = (self.ents[r as usize].left, self.ents[r as usize].right);
            if self.height(rl) > self.height(rr) {
                self.ents[n as usize].right = self.rotate_right(r);
            }
            self.rotate_left(n)
        } else {
            n
        }
    }

    /// Inserts `x` (its finish set) into the tree at `root`; returns the new root.
    /// Recursion depth is the tree height, below 1.45 log2(n) + 2.
    fn avl_insert(&mut self, root: u32, x: u32) -> u32 {
        if root == NIL {
            let node = &mut self.ents[x as usize];
            node.left = NIL;
            node.right = NIL;
            self.update(x);
            return x;
        }
        if self.before(x, root) {
            let l = self.avl_insert(self.ents[root as usize].left, x);
            self.ents[root as usize].left = l;
        } else {
            let r = self.avl_insert(self.ents[root as usize].right, x);
            self.ents[root as usize].right = r;
        }
        self.rebalance(root)
    }

    /// Removes `x` (in the tree, its finish unchanged since insertion) from the tree at
    /// `root`; returns the new root.
    fn avl_remove(&mut self, root: u32, x: u32) -> u32 {
        assert_ne!(
            root, NIL,
            "wf2q: removing an entity from a tree it is not in"
        );
        let (l, r) = (
            self.ents[root as usize].left,
            self.ents[root as usize].right,
        );
        if root == x {
            if l == NIL {
                return r;
            }
            if r == NIL {
                return l;
            }
            let (r, successor) = self.avl_remove_min(r);
            self.ents[successor as usize].left = l;
            self.ents[successor as usize].right = r;
            return self.rebalance(successor);
        }
        if self.before(x, root) {
            let l = self.avl_remove(l, x);
            self.ents[root as usize].left = l;
        } else {
            let r = self.avl_remove(r, x);
            self.ents[root as usize].right = r;
        }
        self.rebalance(root)
    }

    /// Detaches the first node of the tree at `root`: (new root, detached node).
    fn avl_remove_min(&mut self, root: u32) -> (u32, u32) {
        let l = self.ents[root as usize].left;
        if l == NIL {
            return (self.ents[root as usize].right, root);
        }
        let (l, min) = self.avl_remove_min(l);
        self.ents[root as usize].left = l;
        (self.rebalance(root), min)
    }
}
