//! Keys by the sector their request ends at, to find back merges (Linux's `elv_rqhash_*`).

use alloc::vec;
use alloc::vec::Vec;

use crate::NIL;

/// Keys by the sector their request ends at (to find back merges), chained in buckets.
///
/// ```
/// use blkmq_sched_index::EndHash;
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
    /// Per key: its end sector, the next key of its bucket, and whether it is hashed,
    /// together (one bounds check, one line).
    entries: Vec<Entry>,
}

/// A key's entry.
#[derive(Clone, Copy, Debug)]
struct Entry {
    end: u64,
    next: u32,
    present: bool,
}

/// A key not hashed.
const ABSENT: Entry = Entry {
    end: 0,
    next: NIL,
    present: false,
};

impl EndHash {
    /// An empty hash over keys `0..nr_keys`.
    ///
    /// ```
    /// use blkmq_sched_index::EndHash;
    ///
    /// let ends = EndHash::new(64);
    /// assert_eq!(ends.find(0, |_| true), None);
    /// ```
    pub fn new(nr_keys: usize) -> Self {
        let nr = nr_keys.next_power_of_two().max(16);
        Self {
            buckets: vec![NIL; nr],
            entries: vec![ABSENT; nr_keys],
        }
    }

    #[inline]
    fn bucket(&self, end: u64) -> usize {
        (end.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize & (self.buckets.len() - 1)
    }

    /// Whether `key` is in the hash (false for a key out of range).
    ///
    /// ```
    /// use blkmq_sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(3, 8);
    /// assert!(ends.contains(3) && !ends.contains(0) && !ends.contains(99));
    /// ```
    #[inline]
    pub fn contains(&self, key: usize) -> bool {
        self.entries.get(key).is_some_and(|e| e.present)
    }

    /// Files `key` under `end` (moving it if it was filed under another end).
    ///
    /// ```
    /// use blkmq_sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(0, 8);
    /// ends.insert(0, 24); // the request grew
    /// assert_eq!((ends.find(8, |_| true), ends.find(24, |_| true)), (None, Some(0)));
    /// ```
    #[inline]
    pub fn insert(&mut self, key: usize, end: u64) {
        if self.entries[key].present {
            self.remove(key);
        }
        let b = self.bucket(end);
        self.entries[key].end = end;
        self.entries[key].next = self.buckets[b];
        self.buckets[b] = key as u32;
        self.entries[key].present = true;
    }

    /// Takes `key` out, giving back the end it was filed under (`None`: it was not in).
    ///
    /// ```
    /// use blkmq_sched_index::EndHash;
    ///
    /// let mut ends = EndHash::new(4);
    /// ends.insert(1, 8);
    /// assert_eq!(ends.remove(1), Some(8));
    /// assert_eq!(ends.remove(1), None);
    /// assert_eq!(ends.find(8, |_| true), None);
    /// ```
    #[inline]
    pub fn remove(&mut self, key: usize) -> Option<u64> {
        if !self.entries[key].present {
            return None;
        }
        let b = self.bucket(self.entries[key].end);
        let mut at = self.buckets[b];
        let mut prev = NIL;
        while at != NIL {
            if at as usize == key {
                if prev == NIL {
                    self.buckets[b] = self.entries[key].next;
                } else {
                    self.entries[prev as usize].next = self.entries[key].next;
                }
                break;
            }
            prev = at;
            at = self.entries[at as usize].next;
        }
        self.entries[key].present = false;
        Some(self.entries[key].end)
    }

    /// The keys filed under `end`, offered to `f` until it returns true; returns that key.
    ///
    /// ```
    /// use blkmq_sched_index::EndHash;
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
            if self.entries[k].end == end && f(k) {
                return Some(k);
            }
            at = self.entries[k].next;
        }
        None
    }
}
