//! A reference count split per CPU that can be switched off (Linux's `percpu_ref`, without
//! its RCU grace period): who is inside a request queue, counted without a shared line.
//!
//! # The protocol
//!
//! The count is the sum of one part per CPU plus a shared `central` part. A reference is
//! taken on the caller's CPU part and let go on whichever CPU part the caller is on then, so
//! a part alone may go negative; only the sum means anything.
//!
//! * **Live.** [`get`](PercpuRef::get): add one to the CPU's part, then (a `SeqCst` pair)
//!   look at `dead`; if it is set, take the one back from the same part and fail.
//! * **Kill.** [`kill`](PercpuRef::kill) sets `dead`; from then on [`get`](PercpuRef::get)
//!   fails and [`get_any`](PercpuRef::get_any) counts on `central`.
//! * **Sum.** [`sum`](PercpuRef::sum) reads every CPU part, then `central`.
//!
//! Why a sum read after a kill is never below the number of references held (so "zero"
//! means drained):
//!
//! 1. A reference taken on a CPU part succeeded only if its look at `dead` came before the
//!    kill (Dekker's pattern: add, then look; set, then read), so its add comes before the
//!    sum's reads, which see it.
//! 2. A [`get_any`](PercpuRef::get_any) that found `dead` set counts on `central`, moving
//!    the one it may have added to its CPU part there first (add to `central`, then take it
//!    from the part), so the part never shows the reference gone while `central` does not
//!    show it yet.
//! 3. A let-go the sum sees on some part (a release, read by an acquire) brings with it
//!    everything before it, its reference's take among them: a take on a CPU part is case
//!    1; a take on `central` is read after every part, so it is seen too. A let-go the sum
//!    does not see only makes the sum larger.
//!
//! So a sum of zero after a kill says no reference is held, as of the read of `central`;
//! one taken later is a [`get_any`](PercpuRef::get_any) that came after the drain, as it
//! may after a drain with one shared counter too.
//!
//! The loom models `freeze_drains_against_entering_submitters_and_completions` and
//! `freeze_counts_readers_that_move_between_cpus` (`tests/loom_queue.rs`) check it, and each
//! step is needed: without the look at `dead` after the add (step 1), without the move to
//! `central` (step 2), or with `central` read before the parts (step 3), one of them fails.
//! Summing only some of the parts fails both.

use alloc::boxed::Box;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicUsize, Ordering, seqcst_pair};

/// The count, per CPU (see the module's protocol).
pub(crate) struct PercpuRef {
    /// One part per CPU, each on its own cache line; wrapping, read as signed.
    parts: Box<[CachePadded<AtomicUsize>]>,
    /// Where references taken while dead are counted.
    central: CachePadded<AtomicUsize>,
    /// Set by [`kill`](Self::kill): no new live reference.
    dead: AtomicBool,
}

impl PercpuRef {
    /// A count of zero, live, with a part for each of `nr_cpus` CPUs (at least one).
    pub(crate) fn new(nr_cpus: usize) -> Self {
        Self {
            parts: (0..nr_cpus.max(1))
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            central: CachePadded::new(AtomicUsize::new(0)),
            dead: AtomicBool::new(false),
        }
    }

    #[inline(always)]
    fn part(&self, cpu: usize) -> &AtomicUsize {
        &self.parts[cpu.min(self.parts.len() - 1)]
    }

    /// Takes a reference on `cpu`'s part unless killed; whether it did.
    #[inline]
    pub(crate) fn get(&self, cpu: usize) -> bool {
        let part = self.part(cpu);
        part.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        if !self.dead.load(Ordering::SeqCst) {
            return true;
        }
        part.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Takes a reference even when killed: on `cpu`'s part while live, on `central` once
    /// killed.
    pub(crate) fn get_any(&self, cpu: usize) {
        let part = self.part(cpu);
        part.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        if self.dead.load(Ordering::SeqCst) {
            // Move it to `central` before the part lets go of it (step 2 of the protocol).
            self.central.fetch_add(1, Ordering::SeqCst);
            part.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Lets go of one reference, on `cpu`'s part (any CPU: the sum is what counts).
    #[inline]
    pub(crate) fn put(&self, cpu: usize) {
        self.part(cpu).fetch_sub(1, Ordering::SeqCst);
    }

    /// No new live reference from now on ([`get`](Self::get) fails).
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        seqcst_pair();
    }

    /// Live again.
    pub(crate) fn revive(&self) {
        self.dead.store(false, Ordering::SeqCst);
    }

    /// Whether killed.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// References held: every CPU part, then `central` (the order the protocol needs).
    /// Exact once killed and drained; while live, a snapshot that may be off by the
    /// references moving meanwhile (never negative: clamped).
    pub(crate) fn sum(&self) -> usize {
        seqcst_pair();
        let parts = self.parts.iter().fold(0usize, |sum, part| {
            sum.wrapping_add(part.load(Ordering::SeqCst))
        });
        let total = parts.wrapping_add(self.central.load(Ordering::SeqCst));
        if (total as isize) < 0 { 0 } else { total }
    }
}

impl core::fmt::Debug for PercpuRef {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PercpuRef")
            .field("sum", &self.sum())
            .field("dead", &self.is_dead())
            .finish()
    }
}
