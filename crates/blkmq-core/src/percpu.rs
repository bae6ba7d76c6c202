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
//! # A sole holder's counts
//!
//! Where the platform promises that one context alone writes with a CPU's id
//! ([`Platform::exclusive_cpu`](crate::Platform::exclusive_cpu)) and can fence every
//! other context from one ([`Platform::fence_all`](crate::Platform::fence_all)), that
//! holder counts on a half of the CPU's part nobody else writes (`own`), with a plain load
//! and store, and looks at `dead` with no fence in between; everyone else counts on the
//! other half (`shared`) as above. The freeze pays for it: after the kill has set `dead`
//! it calls `fence_all`, and only then does it sum (a freeze that finds the queue killed
//! already, nested, calls it too). Dekker's pattern still holds, its fence
//! on the holder's side moved into that call (an asymmetric fence, as Linux's
//! `percpu_ref` moves it into an RCU grace period): wherever the holder's barrier falls,
//! either its add comes before the barrier, and so before every later sum's reads, or its
//! look at `dead` comes after, and sees it set. A plain store is a release, so step 3
//! holds for the holder's let-go as well.
//!
//! The loom models `freeze_drains_against_entering_submitters_and_completions` and
//! `freeze_counts_readers_that_move_between_cpus` (`tests/loom_queue.rs`) check it, and each
//! step is needed: without the look at `dead` after the add (step 1), without the move to
//! `central` (step 2), or with `central` read before the parts (step 3), one of them fails.
//! Summing only some of the parts fails both. Their `_sole_holders` twins run the same
//! races with every thread its CPU's sole holder, the asymmetric fence modelled as a
//! `SeqCst` fence on each side (loom cannot make one thread interrupt another with a
//! barrier): without the holder's side the first fails. That every freeze makes the call,
//! `tests/usage_fence.rs` checks.

use alloc::boxed::Box;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicUsize, Ordering, asymmetric_light, seqcst_pair};

/// The count, per CPU (see the module's protocol).
pub(crate) struct PercpuRef {
    /// One part per CPU, each on its own cache line; wrapping, read as signed.
    parts: Box<[CachePadded<Part>]>,
    /// Where references taken while dead are counted.
    central: CachePadded<AtomicUsize>,
    /// Set by [`kill`](Self::kill): no new live reference.
    dead: AtomicBool,
}

/// A CPU's part of the count: the sum of its halves.
#[derive(Default)]
struct Part {
    /// Written only by the CPU's sole holder, with plain loads and stores.
    own: AtomicUsize,
    /// Written by anyone else, with locked adds.
    shared: AtomicUsize,
}

impl PercpuRef {
    /// A count of zero, live, with a part for each of `nr_cpus` CPUs (at least one).
    pub(crate) fn new(nr_cpus: usize) -> Self {
        Self {
            parts: (0..nr_cpus.max(1))
                .map(|_| CachePadded::new(Part::default()))
                .collect(),
            central: CachePadded::new(AtomicUsize::new(0)),
            dead: AtomicBool::new(false),
        }
    }

    #[inline(always)]
    fn part(&self, cpu: usize) -> &Part {
        &self.parts[cpu.min(self.parts.len() - 1)]
    }

    /// The half of `cpu`'s part the caller writes, and whether it writes it alone: `sole`
    /// says the caller is `cpu`'s sole holder on a platform that fences all (see the
    /// module's protocol). A CPU past the parts shares the last part with others, so it
    /// counts as anyone.
    #[inline(always)]
    fn half(&self, cpu: usize, sole: bool) -> (&AtomicUsize, bool) {
        let sole = sole && cpu < self.parts.len();
        let part = self.part(cpu);
        if sole {
            (&part.own, true)
        } else {
            (&part.shared, false)
        }
    }

    /// Adds `delta` (wrapping) to `half`: by its one writer with a plain load and store,
    /// else with a locked add.
    #[inline(always)]
    fn add(half: &AtomicUsize, sole: bool, delta: usize) {
        if sole {
            // Release: a sum that reads this sees what the holder did before (step 3).
            half.store(
                half.load(Ordering::Relaxed).wrapping_add(delta),
                Ordering::Release,
            );
        } else {
            half.fetch_add(delta, Ordering::SeqCst);
        }
    }

    /// Takes a reference on `cpu`'s part unless killed; whether it did. `sole`: the caller
    /// is `cpu`'s sole holder on a platform whose kill fences all (see the module's
    /// protocol).
    #[inline]
    pub(crate) fn get(&self, cpu: usize, sole: bool) -> bool {
        let (half, sole) = self.half(cpu, sole);
        Self::add(half, sole, 1);
        if sole {
            // The holder's side of the asymmetric fence: nothing on hardware (the kill's
            // `fence_all` stands for it), a fence under loom, which models that call.
            asymmetric_light();
        } else {
            seqcst_pair();
        }
        if !self.dead.load(Ordering::SeqCst) {
            return true;
        }
        Self::add(half, sole, 1usize.wrapping_neg());
        false
    }

    /// Takes a reference even when killed: on `cpu`'s part while live, on `central` once
    /// killed. The rare path: on the part's shared half, with locked operations, whoever
    /// the caller is.
    pub(crate) fn get_any(&self, cpu: usize) {
        let part = &self.part(cpu).shared;
        part.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        if self.dead.load(Ordering::SeqCst) {
            // Move it to `central` before the part lets go of it (step 2 of the protocol).
            self.central.fetch_add(1, Ordering::SeqCst);
            part.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Lets go of one reference, on `cpu`'s part (any CPU: the sum is what counts); `sole`
    /// as for [`get`](Self::get).
    #[inline]
    pub(crate) fn put(&self, cpu: usize, sole: bool) {
        let (half, sole) = self.half(cpu, sole);
        Self::add(half, sole, 1usize.wrapping_neg());
    }

    /// No new live reference from now on ([`get`](Self::get) fails). Where sole holders
    /// count, the caller makes the platform's `fence_all` after this and before it sums
    /// (see the module's protocol).
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
            sum.wrapping_add(part.own.load(Ordering::SeqCst))
                .wrapping_add(part.shared.load(Ordering::SeqCst))
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
