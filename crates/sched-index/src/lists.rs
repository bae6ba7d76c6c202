//! Doubly linked lists over request keys: FIFOs and dispatch lists.

use alloc::vec;
use alloc::vec::Vec;

use crate::NIL;

/// Doubly linked lists over keys (FIFOs, dispatch lists), with their lengths.
///
/// ```
/// use blkmq_sched_index::KeyLists;
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
    /// Per key: its neighbours and its list, together (one bounds check, one line).
    links: Vec<Link>,
}

/// A key's place: the keys after and before it and the list it is on ([`NIL`]: none).
#[derive(Clone, Copy, Debug)]
struct Link {
    next: u32,
    prev: u32,
    list: u32,
}

/// A key on no list.
const UNLINKED: Link = Link {
    next: NIL,
    prev: NIL,
    list: NIL,
};

impl KeyLists {
    /// `nr_lists` empty lists over keys `0..nr_keys`.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
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
            links: vec![UNLINKED; nr_keys],
        }
    }

    /// How many lists there are.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
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
    /// use blkmq_sched_index::KeyLists;
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
    /// use blkmq_sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 1);
    /// assert!(lists.contains(1) && !lists.contains(0) && !lists.contains(99));
    /// ```
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.links.get(key).is_some_and(|k| k.list != NIL)
    }

    /// The list `key` is on, if any.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(2, 4);
    /// lists.push_back(1, 0);
    /// assert_eq!((lists.list_of(0), lists.list_of(1)), (Some(1), None));
    /// ```
    #[inline]
    pub fn list_of(&self, key: usize) -> Option<usize> {
        match self.links.get(key) {
            Some(k) if k.list != NIL => Some(k.list as usize),
            _ => None,
        }
    }

    /// The length of list `l`.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
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
    /// use blkmq_sched_index::KeyLists;
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
    /// use blkmq_sched_index::KeyLists;
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
    /// use blkmq_sched_index::KeyLists;
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
    /// use blkmq_sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 3);
    /// lists.push_back(0, 1);
    /// assert_eq!((lists.next(3), lists.next(1)), (Some(1), None));
    /// ```
    #[inline]
    pub fn next(&self, key: usize) -> Option<usize> {
        let n = self.links[key].next;
        (n != NIL).then_some(n as usize)
    }

    /// Appends `key` (on no list) to list `l`.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
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
        self.links[key] = Link {
            next: NIL,
            prev: tail,
            list: l as u32,
        };
        if tail == NIL {
            self.heads[l] = k;
        } else {
            self.links[tail as usize].next = k;
        }
        self.tails[l] = k;
        self.lens[l] += 1;
        self.total += 1;
    }

    /// Puts `key` (on no list) at the head of list `l`.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
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
        self.links[key] = Link {
            next: head,
            prev: NIL,
            list: l as u32,
        };
        if head == NIL {
            self.tails[l] = k;
        } else {
            self.links[head as usize].prev = k;
        }
        self.heads[l] = k;
        self.lens[l] += 1;
        self.total += 1;
    }

    /// Puts `key` (on no list) just before `before` (on a list), on that list.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(0, 1);
    /// lists.insert_before(1, 2);
    /// assert_eq!((lists.next(0), lists.next(2)), (Some(2), Some(1)));
    /// ```
    pub fn insert_before(&mut self, before: usize, key: usize) {
        let l = self.links[before].list as usize;
        let p = self.links[before].prev;
        if p == NIL {
            self.push_front(l, key);
            return;
        }
        let k = key as u32;
        self.links[key].prev = p;
        self.links[key].next = before as u32;
        self.links[p as usize].next = k;
        self.links[before].prev = k;
        self.links[key].list = l as u32;
        self.lens[l] += 1;
        self.total += 1;
    }

    /// Whether `a` and `b` are on the same list.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(2, 4);
    /// lists.push_back(0, 0);
    /// lists.push_back(0, 1);
    /// lists.push_back(1, 2);
    /// assert!(lists.same_list(0, 1) && !lists.same_list(0, 2) && !lists.same_list(3, 3));
    /// ```
    #[inline]
    pub fn same_list(&self, a: usize, b: usize) -> bool {
        self.contains(a) && self.links[a].list == self.links[b].list
    }

    /// Puts `key` (on no list) just after `after` (on a list), on that list.
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
    ///
    /// let mut lists = KeyLists::new(1, 4);
    /// lists.push_back(0, 0);
    /// lists.insert_after(0, 3);
    /// assert_eq!((lists.next(0), lists.len(0)), (Some(3), 2));
    /// ```
    pub fn insert_after(&mut self, after: usize, key: usize) {
        let n = self.links[after].next;
        if n == NIL {
            self.push_back(self.links[after].list as usize, key);
        } else {
            self.insert_before(n as usize, key);
        }
    }

    /// Takes `key` off its list (nothing if it is on none).
    ///
    /// ```
    /// use blkmq_sched_index::KeyLists;
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
        let Link {
            next: n,
            prev: p,
            list: l,
        } = self.links[key];
        let l = l as usize;
        if p == NIL {
            self.heads[l] = n;
        } else {
            self.links[p as usize].next = n;
        }
        if n == NIL {
            self.tails[l] = p;
        } else {
            self.links[n as usize].prev = p;
        }
        self.links[key].list = NIL;
        self.lens[l] -= 1;
        self.total -= 1;
    }
}
