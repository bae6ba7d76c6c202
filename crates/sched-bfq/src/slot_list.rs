//! An ordered set of queue slots as a doubly linked list in arrays: O(1) push, remove and
//! membership, growing only when a queue slot is added.

use alloc::vec::Vec;

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub(crate) struct SlotList {
    head: u32,
    tail: u32,
    /// Per slot: its neighbours and whether it is on, together (one bounds check).
    links: Vec<Link>,
}

/// A slot's place in the list.
#[derive(Clone, Copy, Debug)]
struct Link {
    next: u32,
    prev: u32,
    on: bool,
}

/// A slot not on the list.
const OFF: Link = Link {
    next: NIL,
    prev: NIL,
    on: false,
};

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
        if n > self.links.len() {
            self.links.resize(n, OFF);
        }
    }

    pub(crate) fn contains(&self, s: u32) -> bool {
        self.links.get(s as usize).is_some_and(|l| l.on)
    }

    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    pub(crate) fn next(&self, s: u32) -> Option<u32> {
        let n = self.links[s as usize].next;
        (n != NIL).then_some(n)
    }

    /// Appends `s` (nothing if it is already on).
    pub(crate) fn push_back(&mut self, s: u32) {
        if self.contains(s) {
            return;
        }
        let i = s as usize;
        self.links[i].prev = self.tail;
        self.links[i].next = NIL;
        if self.tail == NIL {
            self.head = s;
        } else {
            self.links[self.tail as usize].next = s;
        }
        self.tail = s;
        self.links[i].on = true;
    }

    /// Takes `s` off (nothing if it is not on).
    pub(crate) fn remove(&mut self, s: u32) {
        if !self.contains(s) {
            return;
        }
        let i = s as usize;
        let (p, n) = (self.links[i].prev, self.links[i].next);
        if p == NIL {
            self.head = n;
        } else {
            self.links[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.links[n as usize].prev = p;
        }
        self.links[i].on = false;
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
