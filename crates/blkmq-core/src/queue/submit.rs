//! Submission: a bio checked, split, placed, merged and put in a request.

use crate::bio::{Bio, BioFlags, Op, Status};
use crate::driver::Driver;
use crate::error::TagError;
use crate::platform::Platform;
use crate::queue_map::QueueType;
use crate::queue_tags::Alloc;
use crate::request::{Request, Rq};
use crate::sync::Ordering;

use super::dispatch::Issued;
use super::plug::Plug;
use super::trace::TraceStamp;
use super::usage::UsageRef;
use super::{NOT_HELD, PENDING};

use super::{RequestQueue, SwCtx};

/// Requests merged by a reverse scan of a software queue, at most (Linux's 8).
const CTX_MERGE_SCAN: usize = 8;

impl<D: Driver> RequestQueue<D> {
    /// The calling CPU, within the set's.
    #[inline]
    pub(super) fn cpu(&self) -> usize {
        self.platform()
            .current_cpu()
            .min(self.host.set.nr_cpus() - 1)
    }

    /// The CPU and the hardware queue for a bio.
    #[inline(always)]
    pub(super) fn place(&self, bio: &Bio) -> Option<(usize, usize, QueueType)> {
        let cpu = self.cpu();
        let (kind, hctx) = self.maps.select(cpu, bio.op, bio.flags);
        if !self.hctxs[hctx].inactive.load(Ordering::Relaxed) {
            return Some((cpu, hctx, kind));
        }
        self.place_elsewhere(cpu, kind)
    }

    /// [`place`](Self::place) when the mapped hardware queue is inactive.
    #[cold]
    fn place_elsewhere(&self, cpu: usize, kind: QueueType) -> Option<(usize, usize, QueueType)> {
        // Another active hardware queue of the same type, else any active one.
        let active = |h: &usize| !self.hctxs[*h].inactive.load(Ordering::SeqCst);
        let same = self
            .maps
            .map(kind)
            .and_then(|m| (m.offset()..m.offset() + m.nr_queues()).find(active));
        let other = same.or_else(|| (0..self.hctxs.len()).find(active))?;
        Some((cpu, other, kind))
    }

    /// Submits a bio: checked against the limits (a bad one ends at once with its status),
    /// split to them, merged where it can be, else put in a request and issued.
    ///
    /// Never waits. A bio the queue cannot take now — no request free, the queue frozen —
    /// comes back untouched, to be submitted again later. One exception: when a bio had to
    /// be split and some of its pieces went in, what comes back is the rest, a piece
    /// marked [`BioFlags::SPLIT`] whose parent ends when it does; submit that piece
    /// (ending it any other way loses the parent's completion until the queue is dropped).
    ///
    /// # Errors
    /// The bio, untouched, when it cannot go in now.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// static ENDED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());
    /// fn done(bio: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push((bio.sector, status));
    /// }
    /// queue.submit(Bio::new(Op::Read, 2048, 8).end_io(done)).unwrap(); // past the end
    /// assert_eq!(*ENDED.lock().unwrap(), [(2048, Status::IoErr)]);
    /// queue.submit(Bio::new(Op::Read, 0, 8).end_io(done)).unwrap(); // to the driver
    /// queue.freeze_start();
    /// let back = queue.submit(Bio::new(Op::Read, 8, 8).end_io(done)).unwrap_err();
    /// assert_eq!(back.sector, 8); // not ended: submit it again later
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert_eq!(*ENDED.lock().unwrap(), [(2048, Status::IoErr), (0, Status::Ok)]);
    /// ```
    pub fn submit(&self, bio: Bio) -> Result<(), Bio> {
        self.submit_inner(bio, None)
    }

    /// Submits a bio into a plug: requests gather there until the plug flushes.
    ///
    /// # Errors
    /// As [`submit`](Self::submit).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 0, 8)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 64, 8)).unwrap();
    /// assert_eq!(plug.len(), 2);
    /// assert!(host.driver().take().is_empty());
    /// drop(plug); // flushes
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 2);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn submit_plugged<'q>(&'q self, plug: &mut Plug<'q, D>, bio: Bio) -> Result<(), Bio> {
        self.submit_inner(bio, Some(plug))
    }

    fn submit_inner<'q>(&'q self, bio: Bio, plug: Option<&mut Plug<'q, D>>) -> Result<(), Bio> {
        // One trace clock reading for the Q, and the G and D of a bio issued directly; the
        // Q is told on the way down (`trace.rs`).
        let stamp = self.trace_stamp();
        if super::flush::is_flush_bio(&bio) {
            self.trace_untold_bio(&bio, stamp);
            return self.submit_flush_bio(bio, plug);
        }
        self.submit_prepared(bio, plug, stamp)
    }

    /// A flush, or a bio with a flag of one: on a device with no cache to flush, the flags
    /// are dropped first and an empty flush ends at once; a bio that comes back has its
    /// flags again, as it went in.
    #[cold]
    #[inline(never)]
    fn submit_flush_bio<'q>(&'q self, bio: Bio, plug: Option<&mut Plug<'q, D>>) -> Result<(), Bio> {
        let flags = bio.flags & (BioFlags::PREFLUSH | BioFlags::FUA);
        let Some(bio) = self.flush_prepare(bio) else {
            return Ok(());
        };
        self.submit_prepared(bio, plug, None).map_err(|mut back| {
            back.flags |= flags;
            back
        })
    }

    #[inline(always)]
    fn submit_prepared<'q>(
        &'q self,
        bio: Bio,
        mut plug: Option<&mut Plug<'q, D>>,
        stamp: TraceStamp,
    ) -> Result<(), Bio> {
        // The common bio in a few steps: no piece of a split, valid, one request whole.
        if !bio.flags.contains(BioFlags::SPLIT) && self.limits.fits_whole(&bio) {
            return match plug {
                None => self.submit_whole(&bio, stamp),
                plug => {
                    self.trace_untold_bio(&bio, stamp);
                    self.submit_general(&bio, true, plug)
                }
            };
        }
        self.trace_untold_bio(&bio, stamp);
        let piece = self.splits.is_piece(&bio);
        if !piece {
            if let Some(status) = self.limits.check(&bio) {
                bio.complete(status);
                return Ok(());
            }
        }
        let len = self.split_len(&bio);
        if len >= bio.sectors {
            return self.submit_general(&bio, false, plug.as_deref_mut());
        }
        if len == 0 {
            // Not one logical block fits the limits: it can never be served.
            self.splits.end(bio, Status::Invalid);
            return Ok(());
        }
        let mut rest = if piece { bio } else { self.splits.start(bio)? };
        // Whether part of the parent is in: then only the rest can come back.
        let mut any_in = piece;
        loop {
            let len = self.split_len(&rest);
            if len >= rest.sectors {
                return self.submit_general(&rest, false, plug.as_deref_mut());
            }
            if len == 0 {
                // The rest can never be served; the parent ends with the error once the
                // pieces in flight have ended.
                self.splits.end(rest, Status::Invalid);
                return Ok(());
            }
            let (first, tail) = self.splits.cut(rest, len);
            self.trace_bio(crate::trace::Action::Split, &first);
            match self.submit_general(&first, false, plug.as_deref_mut()) {
                Ok(()) => {
                    rest = tail;
                    any_in = true;
                }
                Err(first) => {
                    let whole = self.splits.rejoin(first, tail);
                    return Err(if any_in {
                        whole
                    } else {
                        self.splits.abandon(whole)
                    });
                }
            }
        }
    }

    /// Sectors of the first piece of `bio` ([`QueueLimits::split_len`]); zero when not one
    /// logical block fits.
    ///
    /// [`QueueLimits::split_len`]: crate::QueueLimits::split_len
    fn split_len(&self, bio: &Bio) -> u32 {
        self.limits.split_len(bio)
    }

    /// [`submit_one`](Self::submit_one) for the common bio: a read or write that fits one
    /// request whole, with no plug. An instance of its own, so the common submission goes
    /// the whole way in one frame with nothing of the plug's in it.
    ///
    /// `stamp`: the trace clock reading of its Q, for its G and D, and with it its Q is
    /// untold (see [`trace_stamp`](Self::trace_stamp) and `trace.rs`).
    #[inline(never)]
    fn submit_whole(&self, bio: &Bio, stamp: TraceStamp) -> Result<(), Bio> {
        self.submit_one(bio, true, None, stamp)
    }

    /// [`submit_one`](Self::submit_one) for every other bio that fits one request: in a
    /// plug, or a piece of a split.
    fn submit_general<'q>(
        &'q self,
        bio: &Bio,
        whole: bool,
        plug: Option<&mut Plug<'q, D>>,
    ) -> Result<(), Bio> {
        self.submit_one(bio, whole, plug, None)
    }

    /// Submits a bio that fits one request (`whole`: it fits whole,
    /// [`QueueLimits::fits_whole`](crate::QueueLimits::fits_whole), so it has one data
    /// segment): the one way in, in this order, each step an early exit.
    ///
    /// 1. A usage reference, or the bio comes back (frozen).
    /// 2. A hardware queue, or the bio ends with an I/O error (none active).
    /// 3. A merge into the plug's newest request of this queue.
    /// 4. With an elevator: its merge, else a request allocated, prepared and inserted
    ///    (or put in the plug), all under one hold of its lock
    ///    ([`elevator_submit`](Self::elevator_submit)).
    /// 5. Without one: a merge into the newest requests of the CPU's software queue.
    /// 6. A request: into the plug; without an elevator (the common submission) issued at
    ///    once on an idle hardware queue, else queued on the CPU's software queue; a
    ///    flush, or a request whose elevator is gone, on the dispatch list.
    ///
    /// The usage reference is a guard: every exit before a request is made lets it go, and
    /// a request made takes it over.
    ///
    /// Inlined into its two instances, [`submit_whole`](Self::submit_whole) and
    /// [`submit_general`](Self::submit_general).
    #[inline(always)]
    fn submit_one<'q>(
        &'q self,
        bio: &Bio,
        whole: bool,
        mut plug: Option<&mut Plug<'q, D>>,
        stamp: TraceStamp,
    ) -> Result<(), Bio> {
        // The bio is read field by field here and copied only after `enter`: a caller that
        // has just built it has stores in flight, and a wide copy of them would wait for
        // them (`enter`'s locked operation lets them land; a sole holder's plain count
        // takes none, and the copy comes as late as it can).
        let Some(usage) = self.enter() else {
            self.trace_untold_bio(bio, stamp);
            return Err(*bio);
        };
        let Some((cpu, hctx, kind)) = self.place(bio) else {
            drop(usage);
            self.trace_untold_bio(bio, stamp);
            self.splits.end(*bio, Status::IoErr);
            return Ok(());
        };
        let mergeable = crate::merge::mergeable(bio.op, bio.flags);
        // A flush step to take: the flush sequence has the request (`flush.rs`). A bio that
        // may merge has no flush flag: the one test it pays is the one made above.
        let sequenced = !mergeable && self.flush_sequenced(bio);
        // Read with the usage reference held: an elevator switch freezes the queue first,
        // so one that came in since the caller looked shows now. Flushes bypass it.
        let elevated =
            self.has_elevator.load(Ordering::Relaxed) && bio.op != Op::Flush && !sequenced;
        // An untold Q comes only by `submit_whole`, with no plug (see `trace.rs`).
        debug_assert!(stamp.is_none() || plug.is_none());
        let mut stamp = stamp;
        let segments = if whole {
            // One data segment: `fits_whole` said so.
            debug_assert_eq!(self.limits.bio_segments(bio), 1);
            self.limits.whole_span(bio)
        } else {
            self.limits.bio_span(bio)
        };
        if mergeable {
            if let Some(plug) = plug.as_deref_mut() {
                if plug.try_merge(self, bio) {
                    self.account_bio_merge(bio, hctx);
                    return Ok(());
                }
            }
        }
        let usage = if elevated {
            // The elevator tells its own events, after the Q.
            stamp = self.trace_untold_bio(bio, stamp);
            match self.elevator_submit(
                usage,
                bio,
                segments,
                mergeable,
                cpu,
                hctx,
                plug.as_deref_mut(),
            ) {
                Ok(done) => return done,
                // The elevator went away under us (it cannot: switching freezes first).
                Err(usage) => usage,
            }
        } else {
            if let Some(ctx) = self.ctx_to_merge(cpu, kind, mergeable) {
                // A merge tells M: an untold Q is told first.
                stamp = self.trace_untold_bio(bio, stamp);
                if self.ctx_merge_locked(ctx, bio) {
                    self.account_bio_merge(bio, hctx);
                    return Ok(());
                }
            }
            usage
        };
        // The caller's batch on `hctx` (`batch.rs`), where a request may issue directly.
        let batch = match plug {
            None if !elevated => self.holds_batch(hctx),
            _ => None,
        };
        let cached = match plug.as_deref_mut() {
            Some(plug) if !elevated => self.take_cached(plug, bio, segments, cpu, hctx),
            None if batch.is_some() => self.take_kept(bio, segments, cpu, hctx),
            _ => None,
        };
        // The request the token names, where the cache had it at hand.
        let start = self.account_stamp(batch.map(|_| hctx));
        let (mut rq, known) = match cached {
            Some((rq, request)) => (rq, Some(request)),
            None => match self
                .tags()
                .alloc_with_bio(&Alloc::new(hctx, cpu), *bio, segments, start)
            {
                Ok(rq) => (rq, None),
                Err((e, bio)) => {
                    self.trace_untold_bio(&bio, stamp);
                    return self.alloc_failed(usage, e, bio);
                }
            },
        };
        self.trace_get_rq(&rq, bio, cpu, hctx, stamp);
        // Kept to the end: requests ended before it returns take the start's reading.
        let (now, _issuing) =
            self.account_start(&mut rq, bio.op, cpu, hctx, start, known.is_none());
        // INVARIANT: the request holds the usage reference until it is freed.
        usage.hand_to_request();
        match plug {
            _ if sequenced => {
                self.trace_untold(&rq, stamp);
                self.flush_insert(rq)
            }
            Some(plug) => {
                // A flush never goes straight to the driver (`issue_plugged`).
                let issue_on = if bio.op == Op::Flush {
                    super::plug::NO_HCTX
                } else {
                    hctx as u32
                };
                plug.add_placed(self, rq, issue_on, (bio.sector, bio.end_sector()), known);
            }
            // The common submission: issued at once on an idle hardware queue.
            None if !elevated && bio.op != Op::Flush => {
                self.issue_direct(rq, cpu, hctx, kind, now, stamp, batch)
            }
            None => {
                self.trace_untold(&rq, stamp);
                self.insert(rq, hctx, elevated, false);
                self.run_hw_queue(hctx);
            }
        }
        Ok(())
    }

    /// A request of `plug`'s cache carrying `bio` (with its data segments `segments`), for
    /// hardware queue `hctx`, and the request its token names; `None` when the cache has
    /// none for it. A cached token that is no longer ours (the tags were replaced since)
    /// empties the cache.
    #[inline(always)]
    fn take_cached<'q>(
        &'q self,
        plug: &mut Plug<'q, D>,
        bio: &Bio,
        segments: crate::segment::SegSpan,
        cpu: usize,
        hctx: usize,
    ) -> Option<(Rq, &'q Request<D::Payload>)> {
        let mut rq = plug.take_cached(self, hctx, cpu)?;
        let Some(request) = self.tags().set_cached_bio(&mut rq, *bio, segments) else {
            plug.forget_cache();
            return None;
        };
        Some((rq, request))
    }

    /// With the usage reference `usage` held, no request could be had for `bio`: without
    /// one free it comes back to be submitted again; on any other error it ends with an
    /// I/O error.
    #[cold]
    pub(super) fn alloc_failed(
        &self,
        usage: UsageRef<'_, D>,
        error: TagError,
        bio: Bio,
    ) -> Result<(), Bio> {
        drop(usage);
        if error == TagError::WouldBlock {
            return Err(bio);
        }
        self.splits.end(bio, Status::IoErr);
        Ok(())
    }

    /// Without an elevator, a fresh request that is no flush: issued directly when its
    /// hardware queue is idle (nothing queued ahead, the hardware not busy, and nobody
    /// running it, or the caller running it in a batch of its own: see
    /// [`run_batch`](Self::run_batch)), else queued on the CPU's software queue and the
    /// hardware queue run.
    /// `now`, when the caller read the coarse clock a moment ago, is the start stamp;
    /// `stamp`, the trace clock reading for its D when it is issued here, with its Q and G
    /// untold (see [`trace_stamp`](Self::trace_stamp) and `trace.rs`); `batch`, the CPU of
    /// the caller's batch on `hctx` ([`holds_batch`](Self::holds_batch)), if it runs one.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn issue_direct(
        &self,
        rq: Rq,
        cpu: usize,
        hctx: usize,
        kind: QueueType,
        now: Option<u64>,
        stamp: TraceStamp,
        batch: Option<usize>,
    ) {
        let h = &self.hctxs[hctx];
        if let Some(held) = batch {
            // The caller runs `hctx` already: it issues, unless a run was asked for, the
            // dispatch list holds requests, or the hardware is busy, which go first.
            if h.run_claim.load(Ordering::SeqCst) & PENDING == 0
                && self.nothing_ahead(hctx)
                && !self.halted(hctx)
            {
                // Not held while issuing: a request the driver ends inside its `queue_rq`,
                // whose end submits, queues rather than call the driver from within.
                h.held_by.store(NOT_HELD, Ordering::Relaxed);
                let now = now.or_else(|| Some(self.batch_now(hctx)));
                self.issue_claimed(rq, hctx, now, stamp);
                h.held_by.store(held, Ordering::Relaxed);
            } else {
                self.trace_untold(&rq, stamp);
                self.push_ctx_for(cpu, kind, hctx, rq);
                // The batch's end dispatches it.
                h.run_claim.fetch_or(PENDING, Ordering::SeqCst);
            }
            return;
        }
        if self.claim_idle(hctx) {
            if self.halted(hctx) {
                self.trace_untold(&rq, stamp);
                self.push_ctx_for(cpu, kind, hctx, rq);
            } else {
                self.issue_claimed(rq, hctx, now, stamp);
            }
            self.finish_run(hctx);
            return;
        }
        self.trace_untold(&rq, stamp);
        self.push_ctx_for(cpu, kind, hctx, rq);
        self.run_hw_queue(hctx);
    }

    /// As `hctx`'s runner, on a hardware queue not halted: issues `rq` to the driver, and
    /// gives up (see [`give_up`](Self::give_up)) when the driver turns it down for now.
    #[inline(always)]
    fn issue_claimed(&self, rq: Rq, hctx: usize, now: Option<u64>, stamp: TraceStamp) {
        self.arm_restart(hctx);
        if let Issued::GaveUp(rq, status) =
            self.issue_one_at(hctx, hctx, rq, true, None, now, stamp)
        {
            let mut batch = self.hctxs[hctx].run_batch.lock();
            batch.push_back(rq);
            self.give_up(hctx, &mut batch, status);
        }
    }

    fn push_ctx(&self, cpu: usize, kind: QueueType, rq: Rq) {
        let index = cpu * QueueType::ALL.len() + kind as usize;
        let ctx = &self.ctxs[index];
        self.trace_rq(crate::trace::Action::Insert, &rq);
        ctx.list.lock().push_back(rq);
        let h = &self.hctxs[ctx.hctx];
        h.ctx_has_work[ctx.pos / 64].fetch_or(1 << (ctx.pos % 64), Ordering::SeqCst);
    }

    /// Queues `rq` on the software queue of `cpu` that feeds `hctx` (the request was made
    /// for `hctx`; if `cpu`'s context maps elsewhere, on the hardware queue's dispatch list).
    pub(super) fn push_ctx_for(&self, cpu: usize, kind: QueueType, hctx: usize, rq: Rq) {
        let index = cpu * QueueType::ALL.len() + kind as usize;
        if self.ctxs[index].hctx == hctx && self.ctxs[index].pos != usize::MAX {
            self.push_ctx(cpu, kind, rq);
        } else {
            self.push_dispatch(hctx, rq, false);
        }
    }

    pub(super) fn push_dispatch(&self, hctx: usize, rq: Rq, at_head: bool) {
        let h = &self.hctxs[hctx];
        let mut list = h.dispatch.lock();
        if at_head {
            list.push_front(rq);
        } else {
            list.push_back(rq);
        }
        // INVARIANT: `dispatch_len` follows the list, stored under its lock.
        h.dispatch_len.store(list.len(), Ordering::SeqCst);
    }

    /// Without an elevator, for a bio that may merge (`mergeable`): the CPU's software
    /// queue, if something is queued there that it might merge into
    /// ([`ctx_merge_locked`](Self::ctx_merge_locked) tries).
    #[inline(always)]
    fn ctx_to_merge(&self, cpu: usize, kind: QueueType, mergeable: bool) -> Option<&SwCtx<D>> {
        if !mergeable {
            return None;
        }
        let index = cpu * QueueType::ALL.len() + kind as usize;
        let ctx = &self.ctxs[index];
        if ctx.pos == usize::MAX {
            return None;
        }
        // Nothing queued here (its bit is set once a request is in): no lock to take. A
        // request whose bit is not set yet only misses a merge.
        let bit = 1u64 << (ctx.pos % 64);
        if self.hctxs[ctx.hctx].ctx_has_work[ctx.pos / 64].load(Ordering::Relaxed) & bit == 0 {
            return None;
        }
        Some(ctx)
    }

    /// Merges `bio` into one of the newest requests of `ctx`, the CPU's software queue
    /// ([`ctx_to_merge`](Self::ctx_to_merge)); whether it did (else the bio is still the
    /// caller's). The scan, under the software queue's lock.
    #[inline(never)]
    fn ctx_merge_locked(&self, ctx: &SwCtx<D>, bio: &Bio) -> bool {
        let mut list = ctx.list.lock();
        let tags = self.tags();
        list.iter_mut().rev().take(CTX_MERGE_SCAN).any(|rq| {
            crate::merge::merge_into(tags, &self.limits, rq, bio) && self.traced_merge(rq, bio)
        })
    }
}
