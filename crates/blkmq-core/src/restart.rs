//! The set of hardware queues waiting to be run again: what makes a completion rerun exactly
//! the queues that wait, and nothing when none does.
//!
//! # The problem
//!
//! A dispatch that runs out of a shared resource (a driver tag, the driver's budget, room in
//! the hardware) gives up and leaves its requests queued; a later completion must run that
//! hardware queue again, or the requests are stranded. Linux once answered "run every
//! hardware queue on every completion and let each check for work", which with 128 hardware
//! queues sharing one tag space cost a RAID HBA a quarter of its IOPS. Here a completion
//! consults a [`RestartSet`]: O(1) when nobody waits, and otherwise it visits only the words
//! that hold a waiting queue.
//!
//! # The protocol
//!
//! Two sides, each doing its two steps in this order:
//!
//! * **the dispatcher that gives up**: [`mark`](RestartSet::mark) its queue, *then* look at
//!   the resource again (and, if it is there now, run on instead of waiting);
//! * **the completion**: give the resource back, *then* [`drain`](RestartSet::drain) the set
//!   and run every queue it hands out.
//!
//! Every access is sequentially consistent, and a mark's last write and a drain's first read
//! are on the same word (the root of the tree below). That is Dekker's pattern: either the
//! dispatcher's second look sees the returned resource, or the completion's drain sees the
//! mark, and then runs the queue after the dispatcher queued its requests. No interleaving
//! leaves a marked queue with its resource free and nobody about to run it (checked with
//! loom in `tests/loom.rs`).
//!
//! # Layout
//!
//! A tree of 64-bit words: a bit per hardware queue in the leaves, and in each level above a
//! bit per word below that may hold a mark, up to a single root word (one level for up to 64
//! queues, two up to 4096, three up to 65536). A mark sets its bit in every level, leaf
//! first, root last — even bits already set, since that last write is what a drain's first
//! read must see. A drain reads the root (zero: done, one load) and descends, clearing each
//! parent bit before it looks below it and taking each leaf word whole. A mark racing a
//! drain either lands below a bit the drain has not cleared yet (and is taken now) or sets
//! its parents again after the drain cleared them (and is taken by the next drain); a parent
//! bit over an empty word costs the next drain a look, nothing more.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering, seqcst_pair};
use crate::tagset::MAX_HW_QUEUES;

const BITS: usize = 64;

/// A set of hardware queue indices waiting to be run again, for the completion path.
///
/// ```
/// use blkmq_core::RestartSet;
///
/// let waiting = RestartSet::new(128).unwrap();
/// assert!(waiting.is_empty());
/// assert!(waiting.mark(5));
/// assert!(waiting.mark(100));
/// assert!(!waiting.mark(5), "already waiting");
///
/// let mut rerun = Vec::new();
/// waiting.drain(|hctx| rerun.push(hctx));
/// assert_eq!(rerun, [5, 100]);
/// assert!(waiting.is_empty());
/// ```
pub struct RestartSet {
    /// `levels[0]` has a bit per hardware queue; each level above a bit per word of the one
    /// below; the last has one word, the root.
    levels: Box<[Box<[AtomicU64]>]>,
    nr_hctx: usize,
}

impl RestartSet {
    /// A set for hardware queues `0..nr_hctx`, all not waiting.
    ///
    /// # Errors
    /// [`ConfigError::ZeroHwQueues`] for 0, [`ConfigError::TooManyHwQueues`] above
    /// [`MAX_HW_QUEUES`].
    ///
    /// ```
    /// use blkmq_core::{ConfigError, RestartSet};
    /// assert!(RestartSet::new(65536).is_ok());
    /// assert_eq!(RestartSet::new(0).unwrap_err(), ConfigError::ZeroHwQueues);
    /// ```
    pub fn new(nr_hctx: usize) -> Result<Self, ConfigError> {
        if nr_hctx == 0 {
            return Err(ConfigError::ZeroHwQueues);
        }
        if nr_hctx > MAX_HW_QUEUES {
            return Err(ConfigError::TooManyHwQueues {
                nr_hw_queues: nr_hctx,
                max: MAX_HW_QUEUES,
            });
        }
        let mut levels = Vec::new();
        let mut bits = nr_hctx;
        loop {
            let words = bits.div_ceil(BITS);
            levels.push((0..words).map(|_| AtomicU64::new(0)).collect());
            if words == 1 {
                break;
            }
            bits = words;
        }
        Ok(Self {
            levels: levels.into_boxed_slice(),
            nr_hctx,
        })
    }

    fn root(&self) -> &AtomicU64 {
        &self.levels[self.levels.len() - 1][0]
    }

    /// How many hardware queues the set covers.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// assert_eq!(RestartSet::new(9).unwrap().nr_hctx(), 9);
    /// ```
    pub fn nr_hctx(&self) -> usize {
        self.nr_hctx
    }

    /// Marks `hctx` as waiting to be run again. Returns whether it was not marked already.
    ///
    /// The caller must look at the resource it lacked again *after* this returns (see the
    /// module documentation), whatever it returns.
    ///
    /// # Panics
    /// When `hctx` is not below [`nr_hctx`](Self::nr_hctx): the caller's own hardware queue
    /// index is always in range, so this is a broken invariant, not bad input.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(4).unwrap();
    /// assert!(waiting.mark(3));
    /// assert!(waiting.is_marked(3));
    /// ```
    pub fn mark(&self, hctx: usize) -> bool {
        assert!(hctx < self.nr_hctx, "hardware queue {hctx} out of range");
        let mut index = hctx;
        let mut new = false;
        for (level, words) in self.levels.iter().enumerate() {
            let bit = 1u64 << (index % BITS);
            // SeqCst, and every level even when the bit is set: the root write is the mark's
            // half of the Dekker pair (see the module documentation).
            let before = words[index / BITS].fetch_or(bit, Ordering::SeqCst);
            if level == 0 {
                new = before & bit == 0;
            }
            index /= BITS;
        }
        seqcst_pair();
        new
    }

    /// Whether `hctx` is marked now (false for an index out of range).
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(4).unwrap();
    /// assert!(!waiting.is_marked(2));
    /// assert!(!waiting.is_marked(99));
    /// ```
    pub fn is_marked(&self, hctx: usize) -> bool {
        hctx < self.nr_hctx
            && self.levels[0][hctx / BITS].load(Ordering::Acquire) & (1 << (hctx % BITS)) != 0
    }

    /// Whether no queue waits: one load, the completion path's cost when nobody waits. It
    /// may say "not empty" for a moment after the last mark was drained or unmarked.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(128).unwrap();
    /// assert!(waiting.is_empty());
    /// waiting.mark(64);
    /// assert!(!waiting.is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        // SeqCst: the completion's half of the Dekker pair, after it gave the resource back.
        seqcst_pair();
        self.root().load(Ordering::SeqCst) == 0
    }

    /// Unmarks every waiting queue and calls `rerun` with each, in increasing order. Costs
    /// one load when none waits; otherwise it visits only the words on the way to a mark.
    /// Returns how many queues it handed out.
    ///
    /// Call it after giving the resource back (see the module documentation).
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(1000).unwrap();
    /// assert_eq!(waiting.drain(|_| unreachable!()), 0);
    /// waiting.mark(999);
    /// waiting.mark(0);
    /// let mut seen = Vec::new();
    /// assert_eq!(waiting.drain(|h| seen.push(h)), 2);
    /// assert_eq!(seen, [0, 999]);
    /// ```
    #[inline]
    pub fn drain(&self, mut rerun: impl FnMut(usize)) -> usize {
        if self.is_empty() {
            return 0;
        }
        self.drain_below(self.levels.len() - 1, 0, &mut rerun)
    }

    /// Drains word `word` of level `level` and everything below it.
    #[cold]
    fn drain_below(&self, level: usize, word: usize, rerun: &mut dyn FnMut(usize)) -> usize {
        let here = &self.levels[level][word];
        if level == 0 {
            let mut taken = here.swap(0, Ordering::SeqCst);
            let n = taken.count_ones() as usize;
            while taken != 0 {
                let bit = taken.trailing_zeros() as usize;
                taken &= taken - 1;
                rerun(word * BITS + bit);
            }
            return n;
        }
        let mut handed = 0;
        let mut pending = here.load(Ordering::SeqCst);
        while pending != 0 {
            let bit = pending.trailing_zeros() as usize;
            pending &= pending - 1;
            // Clear the parent bit before looking below it: a mark that lands below after
            // our look sets it again after our clear.
            here.fetch_and(!(1 << bit), Ordering::SeqCst);
            handed += self.drain_below(level - 1, word * BITS + bit, rerun);
        }
        handed
    }

    /// Unmarks `hctx` (it was run for another reason). Returns whether it was marked.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(4).unwrap();
    /// waiting.mark(1);
    /// assert!(waiting.unmark(1));
    /// assert!(!waiting.unmark(1));
    /// assert_eq!(waiting.len(), 0);
    /// ```
    pub fn unmark(&self, hctx: usize) -> bool {
        if hctx >= self.nr_hctx {
            return false;
        }
        let bit = 1u64 << (hctx % BITS);
        // The parents stay set: the next drain finds nothing below them and clears them.
        self.levels[0][hctx / BITS].fetch_and(!bit, Ordering::SeqCst) & bit != 0
    }

    /// Queues marked now (a snapshot; exact when nothing runs concurrently).
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(200).unwrap();
    /// waiting.mark(7);
    /// waiting.mark(150);
    /// assert_eq!(waiting.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.levels[0]
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
}

impl fmt::Debug for RestartSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let marked: Vec<usize> = (0..self.nr_hctx).filter(|&h| self.is_marked(h)).collect();
        f.debug_struct("RestartSet")
            .field("nr_hctx", &self.nr_hctx)
            .field("marked", &marked)
            .finish()
    }
}
