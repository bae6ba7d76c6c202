//! Flush sequencing (Linux's `block/blk-flush.c`): writes with
//! [`BioFlags::PREFLUSH`] or [`BioFlags::FUA`] and [`Op::Flush`] bios run as a preflush, the
//! data and a postflush, as the device's cache needs; flushes serve every request waiting
//! for one when they are issued. The module documentation of the queue (`mod.rs`, "The
//! flush sequence") tells the whole story; this file is the machine.

use alloc::collections::VecDeque;

use crate::bio::{Bio, BioFlags, Op, Status};
use crate::driver::Driver;
use crate::platform::Platform;
use crate::request::flush::{ACTIONS, AS_FLUSH, DATA, DONE, IN_SEQ, POSTFLUSH, PREFLUSH};
use crate::request::{Rq, RqIo, RqState};
use crate::sync::Ordering;

use super::RequestQueue;

/// How long a flush may be held back while data of the sequence is in flight, so that
/// one flush serves a postflush and the preflushes that came meanwhile (Linux's
/// `FLUSH_PENDING_TIMEOUT`, 5 s), in platform nanoseconds.
///
/// ```
/// assert_eq!(blkmq_core::FLUSH_PENDING_TIMEOUT_NS, 5_000_000_000);
/// ```
pub const FLUSH_PENDING_TIMEOUT_NS: u64 = 5_000_000_000;

/// A hardware queue's flush state (Linux's `blk_flush_queue`).
///
/// # Invariants
/// * `lists[pending_idx]` holds the requests waiting for the next flush, oldest first;
///   while a flush is in flight (`pending_idx != running_idx`), `lists[running_idx]` holds
///   the requests it serves but the one issued as the flush, whose I/O is in `aside`.
///   With no flush in flight `lists[running_idx]` is that same pending list and `aside` is
///   empty.
/// * `data_in_flight` counts sequenced requests between the start and the end of their
///   data step (on the dispatch list, in the driver, or requeued).
/// * `done` holds requests whose sequence ended, with their status, to be ended and freed
///   outside the lock by whoever put them there; it is empty between sequencer calls.
/// * Every request here has a non-zero flush state ([`IN_SEQ`]) and is this hardware
///   queue's; each list has room for every request of the queue, so no push allocates.
pub(super) struct FlushQueue {
    lists: [VecDeque<Rq>; 2],
    pending_idx: usize,
    running_idx: usize,
    data_in_flight: usize,
    /// When the pending list last became non-empty (platform nanoseconds).
    pending_since: u64,
    aside: RqIo,
    done: VecDeque<(Rq, Status)>,
}

impl FlushQueue {
    /// Room for `capacity` requests in each list.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            lists: [
                VecDeque::with_capacity(capacity),
                VecDeque::with_capacity(capacity),
            ],
            pending_idx: 0,
            running_idx: 0,
            data_in_flight: 0,
            pending_since: 0,
            aside: RqIo::aside(),
            done: VecDeque::with_capacity(capacity),
        }
    }
}

/// Whether `bio` asks for anything of the flush machinery: a flush, or a flag of one.
#[inline(always)]
pub(super) fn is_flush_bio(bio: &Bio) -> bool {
    bio.op == Op::Flush
        || bio
            .flags
            .intersects(BioFlags::PREFLUSH.union(BioFlags::FUA))
}

impl<D: Driver> RequestQueue<D> {
    /// A bio with a flush flag, or a flush, as it comes in (Linux's part of
    /// `submit_bio_noacct`): on a device with no volatile cache the flags are dropped and
    /// an empty flush ends at once with [`Status::Ok`] (`None`: nothing left to submit).
    #[cold]
    #[inline(never)]
    pub(super) fn flush_prepare(&self, mut bio: Bio) -> Option<Bio> {
        if self.limits.write_cache || !matches!(bio.op, Op::Write | Op::Flush) {
            return Some(bio);
        }
        if bio.op == Op::Flush {
            let status = self.limits.check(&bio).unwrap_or(Status::Ok);
            self.splits.end(bio, status);
            return None;
        }
        bio.flags.remove(BioFlags::PREFLUSH | BioFlags::FUA);
        Some(bio)
    }

    /// The steps a request of `op`, `flags` and `sectors` needs (Linux's
    /// `blk_flush_policy`).
    fn flush_policy(&self, op: Op, flags: BioFlags, sectors: u64) -> u8 {
        let mut policy = 0;
        if sectors != 0 {
            policy |= DATA;
        }
        if self.limits.write_cache && matches!(op, Op::Write | Op::Flush) {
            if op == Op::Flush || flags.contains(BioFlags::PREFLUSH) {
                policy |= PREFLUSH;
            }
            if flags.contains(BioFlags::FUA) && !self.limits.fua {
                policy |= POSTFLUSH;
            }
        }
        policy
    }

    /// Whether a request for `bio` goes through the flush sequence rather than as an
    /// ordinary request: it needs a flush step. One test of the operation and the flags for
    /// every other bio.
    #[inline(always)]
    pub(super) fn flush_sequenced(&self, bio: &Bio) -> bool {
        is_flush_bio(bio) && self.flush_needs_steps(bio)
    }

    #[cold]
    #[inline(never)]
    fn flush_needs_steps(&self, bio: &Bio) -> bool {
        matches!(bio.op, Op::Write | Op::Flush)
            && self.flush_policy(bio.op, bio.flags, u64::from(bio.sectors)) & !DATA != 0
    }

    /// The I/O of one of this queue's requests, which the sequencer holds.
    fn seq_io<'a>(&'a self, rq: &'a mut Rq) -> &'a mut RqIo {
        self.tags()
            .io_mut(rq)
            .expect("a sequenced request is its queue's")
    }

    /// A fresh request that needs a flush step enters its sequence (Linux's
    /// `blk_insert_flush`): the driver will see it without PREFLUSH, and without FUA unless
    /// the device honours it.
    #[cold]
    #[inline(never)]
    pub(super) fn flush_insert(&self, mut rq: Rq) {
        let hctx = self.rq_hctx(&rq, 0);
        let fua = self.limits.fua;
        let io = self.seq_io(&mut rq);
        let policy = self.flush_policy(io.op(), io.flags(), io.sectors());
        let mut flags = io.flags();
        flags.remove(BioFlags::PREFLUSH);
        if !fua {
            flags.remove(BioFlags::FUA);
        }
        // What PREFLUSH and FUA implied, kept once they are gone (as Linux's REQ_SYNC).
        io.set_flags(flags | BioFlags::SYNC);
        if policy == 0 {
            // An empty flush with nothing to flush.
            self.flush_free(rq, Status::Ok);
            return;
        }
        // The steps not needed count as done.
        io.set_flush_state(IN_SEQ | (ACTIONS & !policy));
        {
            let mut fq = self.hctxs[hctx].flush.lock();
            self.flush_complete_seq(&mut fq, hctx, rq, 0, Status::Ok);
            self.flush_kick(&mut fq, hctx);
        }
        self.flush_after(hctx);
    }

    /// Marks `seq` done for `rq` and moves it to its next step (Linux's
    /// `blk_flush_complete_seq`, but the kick, which the caller does): waiting for a flush,
    /// issued for its data, or, with every step done or any failed, ended with `status`.
    fn flush_complete_seq(
        &self,
        fq: &mut FlushQueue,
        hctx: usize,
        mut rq: Rq,
        seq: u8,
        status: Status,
    ) {
        let next = {
            let io = self.seq_io(&mut rq);
            debug_assert_eq!(io.flush_state() & seq, 0, "a step ends once");
            io.set_flush_state(io.flush_state() | seq);
            let next = if status.is_ok() {
                io.flush_next()
            } else {
                DONE
            };
            if next == DONE {
                // INVARIANT: outside a sequence the state is zero.
                io.set_flush_state(0);
            }
            next
        };
        match next {
            PREFLUSH | POSTFLUSH => {
                let pending = fq.pending_idx;
                if fq.lists[pending].is_empty() {
                    fq.pending_since = self.platform().now_ns();
                }
                fq.lists[pending].push_back(rq);
            }
            DATA => {
                fq.data_in_flight += 1;
                // Past the elevator, straight to dispatch; in the order the steps began.
                self.push_dispatch(hctx, rq, false);
            }
            _ => fq.done.push_back((rq, status)),
        }
    }

    /// Issues a flush for the pending requests if one may go now (Linux's
    /// `blk_kick_flush`): none in flight, someone waiting, and no data of a sequence in
    /// flight unless the oldest waiter has waited [`FLUSH_PENDING_TIMEOUT_NS`]. The flush
    /// is the oldest waiter itself, its I/O held aside.
    fn flush_kick(&self, fq: &mut FlushQueue, hctx: usize) {
        let pending = fq.pending_idx;
        if pending != fq.running_idx || fq.lists[pending].is_empty() {
            return;
        }
        if fq.data_in_flight != 0
            && self.platform().now_ns() < fq.pending_since.saturating_add(FLUSH_PENDING_TIMEOUT_NS)
        {
            // The data's completion kicks again.
            return;
        }
        fq.pending_idx ^= 1;
        let Some(mut first) = fq.lists[pending].pop_front() else {
            return;
        };
        self.seq_io(&mut first).hold_aside(&mut fq.aside);
        self.push_dispatch(hctx, first, true);
    }

    /// After a sequencer call, outside its lock: ends what finished and runs the hardware
    /// queue for what was queued.
    fn flush_after(&self, hctx: usize) {
        loop {
            let next = self.hctxs[hctx].flush.lock().done.pop_front();
            let Some((rq, status)) = next else {
                break;
            };
            self.flush_free(rq, status);
        }
        self.run_hw_queue(hctx);
    }

    /// Ends a request whose sequence is over (or that needed none) and frees it.
    fn flush_free(&self, rq: Rq, status: Status) {
        let splits = &self.splits;
        if let Ok(None) = self.tags().complete_with(
            rq,
            status,
            |_, request, io| {
                self.account_done(request.hctx(), io, &mut None);
                true
            },
            |bio, status| splits.end(bio, status),
        ) {
            self.put_usage();
        }
        self.host.restart();
    }

    /// A step of a sequenced request ended in the driver with `status` (its budget is
    /// back, the driver's hook ran): the request waits again, without a driver tag, and
    /// moves on (Linux's `flush_end_io` for the flush, `mq_flush_data_end_io` for the data).
    #[cold]
    #[inline(never)]
    pub(super) fn flush_step_ended(&self, mut rq: Rq, status: Status, hctx: usize) {
        let tags = self.tags();
        if let Ok(request) = tags.request(&rq) {
            // From in flight, or complete when a timeout handler's claim won; idle when it
            // ended before it started.
            let _ = request
                .transition(RqState::InFlight, RqState::Idle)
                .or_else(|_| request.transition(RqState::Complete, RqState::Idle));
        }
        if self.has_elevator.load(Ordering::Relaxed)
            && tags
                .request(&rq)
                .is_ok_and(|r| r.driver_tag() != crate::NO_TAG)
        {
            let _ = tags.put_driver_tag(&mut rq);
        }
        let as_flush = self.seq_io(&mut rq).flush_state() & AS_FLUSH != 0;
        {
            let mut fq = self.hctxs[hctx].flush.lock();
            if as_flush {
                self.flush_ended(&mut fq, hctx, rq, status);
            } else {
                fq.data_in_flight -= 1;
                self.flush_complete_seq(&mut fq, hctx, rq, DATA, status);
            }
            self.flush_kick(&mut fq, hctx);
        }
        self.flush_after(hctx);
    }

    /// The flush issued as `rq` ended: `rq` has its I/O back, and every request it served
    /// moves on, `rq` first (it was the oldest).
    fn flush_ended(&self, fq: &mut FlushQueue, hctx: usize, mut rq: Rq, status: Status) {
        debug_assert_ne!(fq.pending_idx, fq.running_idx, "a flush is in flight");
        let step = {
            let io = self.seq_io(&mut rq);
            io.restore_from(&mut fq.aside);
            io.flush_next()
        };
        let running = fq.running_idx;
        self.flush_complete_seq(fq, hctx, rq, step, status);
        while let Some(mut rq) = fq.lists[running].pop_front() {
            let step = self.seq_io(&mut rq).flush_next();
            debug_assert!(step == PREFLUSH || step == POSTFLUSH);
            self.flush_complete_seq(fq, hctx, rq, step, status);
        }
        // No flush in flight now: the pending list is the one to issue next.
        fq.running_idx ^= 1;
    }

    /// Teardown: every request the sequencer holds, into `orphans`, to be ended with an
    /// error ([`flush_orphan`](Self::flush_orphan) first).
    pub(super) fn flush_orphans(&mut self, orphans: &mut alloc::vec::Vec<Rq>) {
        for h in self.hctxs.iter_mut() {
            let fq = h.flush.get_mut();
            for list in &mut fq.lists {
                orphans.extend(list.drain(..));
            }
            orphans.extend(fq.done.drain(..).map(|(rq, _)| rq));
        }
    }

    /// Teardown, for a request about to be ended: out of any sequence, its I/O back if it
    /// was held aside for a flush.
    pub(super) fn flush_orphan(&self, rq: &mut Rq) {
        let hctx = self.rq_hctx(rq, 0);
        let Some(h) = self.hctxs.get(hctx) else {
            return;
        };
        let mut fq = h.flush.lock();
        if let Ok(io) = self.tags().io_mut(rq) {
            if io.flush_state() & AS_FLUSH != 0 {
                io.restore_from(&mut fq.aside);
            }
            io.set_flush_state(0);
        }
    }

    /// Teardown, last: the I/O held aside for a flush the driver still holds never comes
    /// back; its bios end with `status`.
    pub(super) fn flush_abandon(&self, status: Status) {
        let pool = &self.tags().set().bios;
        let splits = &self.splits;
        for h in self.hctxs.iter() {
            let mut fq = h.flush.lock();
            if fq.aside.nr_bios() != 0 {
                fq.aside
                    .end_bios_with(pool, status, |bio, status| splits.end(bio, status));
            }
        }
    }
}
