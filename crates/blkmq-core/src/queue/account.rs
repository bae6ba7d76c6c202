//! Where a request queue counts for its I/O accounting (`stats.rs`), and its readings.
//!
//! Each hook is one call from the path it counts on, behind one test of whether accounting
//! is on; the counting itself is here. Each asks the platform once whether the caller holds
//! its CPU alone ([`Platform::exclusive_cpu`]), which decides the half of the CPU's part it
//! counts in.

use crate::bio::Bio;
use crate::bio::Op;
use crate::driver::Driver;
use crate::platform::Platform;
use crate::request::{Rq, RqIo};
use crate::stats::{Accounting, IoStats, Issuing, Latency, OpGroup, Writer, stamp_start};

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// Who counts in `acct` for the calling context: its CPU's own half when the platform
    /// says it holds that CPU alone, else the shared half of CPU `cpu()`.
    #[inline(always)]
    fn acct_writer(&self, acct: &Accounting, cpu: impl FnOnce() -> usize) -> Writer {
        acct.writer(self.platform().exclusive_cpu(), cpu)
    }

    /// The coarse clock's reading for a request about to be made (in the caller's batch on
    /// hardware queue `batch`, the batch's reading: see `batch.rs`), when accounting is on:
    /// what its allocation stamps it with ([`QueueTags::alloc_with_bio`]'s `start`) and
    /// [`account_start`](Self::account_start) counts it at.
    ///
    /// [`QueueTags::alloc_with_bio`]: crate::QueueTags
    #[inline(always)]
    pub(super) fn account_stamp(&self, batch: Option<usize>) -> Option<u64> {
        self.acct.as_ref()?;
        Some(match batch {
            Some(hctx) => self.batch_now(hctx),
            None => self.platform().coarse_now_ns(),
        })
    }

    /// A request of `op` was made on `cpu` for `hctx` at `start` (from
    /// [`account_stamp`](Self::account_stamp); `stamped`: its allocation stamped it
    /// already, else it is stamped here): counts it in flight. Returns the reading, which
    /// serves as the request's start stamp too when it is issued at once; `None` when
    /// accounting is off.
    ///
    /// With it, where the caller holds its CPU alone and the hardware queues do not block,
    /// the mark that the caller's submission is in progress with that reading: requests of
    /// `hctx` the submission ends before the mark is dropped (a driver that ends them inside
    /// `queue_rq`) take the reading as their end too, and read no clock (see `stats.rs`).
    /// The caller keeps it to the end of the submission.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn account_start(
        &self,
        rq: &mut Rq,
        op: Op,
        cpu: usize,
        hctx: usize,
        start: Option<u64>,
        stamped: bool,
    ) -> (Option<u64>, Option<Issuing<'_>>) {
        let (Some(acct), Some(now)) = (self.acct.as_ref(), start) else {
            return (None, None);
        };
        if !stamped {
            match self.tags().io_mut(rq) {
                Ok(io) => stamp_start(io, now),
                Err(_) => return (Some(now), None),
            }
        }
        let writer = self.acct_writer(acct, || cpu);
        (Some(now), acct.started(writer, hctx, op, now))
    }

    /// `bio` merged into a request of `hctx`.
    #[inline]
    pub(super) fn account_bio_merge(&self, bio: &Bio, hctx: usize) {
        if let Some(acct) = &self.acct {
            let writer = self.acct_writer(acct, || self.cpu());
            acct.merged(writer, hctx, OpGroup::of(bio.op), false);
        }
    }

    /// `rq` merged into another request and is about to be freed.
    #[inline]
    pub(super) fn account_request_merge(&self, rq: &Rq) {
        let Some(acct) = &self.acct else {
            return;
        };
        let tags = self.tags();
        if let (Ok(request), Ok(io)) = (tags.request(rq), tags.io(rq)) {
            if let Some(group) = counted_group(io) {
                let writer = self.acct_writer(acct, || self.cpu());
                acct.merged(writer, request.hctx(), group, true);
            }
        }
    }

    /// The request `io` of `hctx` completed (not a step of a flush sequence). Its end time is
    /// `now`, if the caller has no reading yet the one of the submission the caller is in
    /// (see [`account_start`](Self::account_start)), else read from the coarse clock here
    /// (a batch of completions shares one: they end together, to the coarse clock's
    /// resolution).
    #[inline]
    pub(super) fn account_done(&self, hctx: usize, io: &RqIo, now: &mut Option<u64>) {
        let Some(acct) = &self.acct else {
            return;
        };
        if let Some(group) = counted_group(io) {
            let writer = self.acct_writer(acct, || self.cpu());
            acct.done(writer, hctx, group, io.sectors(), io.alloc_ns, now, || {
                self.platform().coarse_now_ns()
            });
        }
    }

    /// The queue's I/O statistics now, summed over its hardware queues; `None` when
    /// accounting is off ([`QueueConfig::accounting`](crate::QueueConfig::accounting)).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(1024)).accounting(true);
    /// let queue = host.add_queue(config).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(queue.stats().unwrap().in_flight, [1, 0]);
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// let stats = queue.stats().unwrap();
    /// assert_eq!((stats.op(OpGroup::Read).ios, stats.in_flight_total()), (1, 0));
    /// ```
    pub fn stats(&self) -> Option<IoStats> {
        let acct = self.acct.as_ref()?;
        Some(acct.read(None, self.platform().coarse_now_ns()))
    }

    /// Hardware queue `hctx`'s I/O statistics now; `None` when accounting is off or there is
    /// no such hardware queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::with_cpus(2), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64)).accounting(true)).unwrap();
    /// queue.platform().pin_current_thread(1);
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// assert_eq!(queue.hctx_stats(1).unwrap().op(OpGroup::Write).ios, 1);
    /// assert_eq!(queue.hctx_stats(0).unwrap(), IoStats::default());
    /// assert!(queue.hctx_stats(2).is_none());
    /// ```
    pub fn hctx_stats(&self, hctx: usize) -> Option<IoStats> {
        let acct = self.acct.as_ref()?;
        if hctx >= self.hctxs.len() {
            return None;
        }
        Some(acct.read(Some(hctx), self.platform().coarse_now_ns()))
    }

    /// The latency histograms of the queue's completions, per operation group; `None` when
    /// accounting is off.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64)).accounting(true)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 32, 8)).unwrap();
    /// assert_eq!(queue.latency().unwrap().count(OpGroup::Read), 2);
    /// ```
    pub fn latency(&self) -> Option<Latency> {
        self.acct.as_ref().map(|acct| acct.latency())
    }

    /// Whether the queue keeps I/O statistics.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert!(!queue.accounting());
    /// ```
    pub fn accounting(&self) -> bool {
        self.acct.is_some()
    }
}

/// The group a request was counted in flight for, if it was.
#[inline]
fn counted_group(io: &RqIo) -> Option<OpGroup> {
    match io.acct {
        0 => None,
        // The groups in index order: the match is the index itself, no table.
        g => Some(match (g - 1) & 3 {
            0 => OpGroup::Read,
            1 => OpGroup::Write,
            2 => OpGroup::Discard,
            _ => OpGroup::Flush,
        }),
    }
}
