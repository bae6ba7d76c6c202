//! An ordered set of queue slots as a doubly linked list in arrays: O(1) push, remove and
//! membership, growing only when a queue slot is added.

use alloc::vec::Vec;

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub(crate) struct SlotList {
    head: u32,
    tail: u32,
    next: Vec<u32>,
    prev: Vec<u32>,
    on: Vec<bool>,
}

impl SlotList {
    pub(crate) fn new() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            ..Self::default()
        }
    }

    /// Room for slots `0..n` (allocates: call when a queue slot is added).
    pub(crate) fn grow(&mut self, n: usize) {
        if n > self.on.len() {
            self.next.resize(n, NIL);
            self.prev.resize(n, NIL);
            self.on.resize(n, false);
        }
    }

    pub(crate) fn contains(&self, s: u32) -> bool {
        self.on.get(s as usize).is_some_and(|&on| on)
    }

    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    pub(crate) fn next(&self, s: u32) -> Option<u32> {
        let n = self.next[s as usize];
        (n != NIL).then_some(n)
    }

    /// Appends `s` (nothing if it is already on).
    pub(crate) fn push_back(&mut self, s: u32) {
        if self.contains(s) {
            return;
        }
        let i = s as usize;
        self.prev[i] = self.tail;
        self.next[i] = NIL;
        if self.tail == NIL {
            self.head = s;
        } else {
            self.next[self.tail as usize] = s;
        }
        self.tail = s;
        self.on[i] = true;
    }

    /// Takes `s` off (nothing if it is not on).
    pub(crate) fn remove(&mut self, s: u32) {
        if !self.contains(s) {
            return;
        }
        let i = s as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.on[i] = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order() {
        let mut l = SlotList::new();
        l.grow(4);
        for s in [2, 0, 3] {
            l.push_back(s);
        }
        l.push_back(0); // already on
        l.remove(0);
        assert_eq!(l.front(), Some(2));
        assert_eq!(l.next(2), Some(3));
        assert_eq!(l.next(3), None);
        l.remove(2);
        l.remove(3);
        assert_eq!(l.front(), None);
        assert!(!l.contains(1));
    }
}
