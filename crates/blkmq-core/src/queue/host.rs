//! The host: the driver, its tag set, and what its request queues share.

use alloc::boxed::Box;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::fmt;

use crossbeam_utils::CachePadded;

use crate::driver::Driver;
use crate::error::ConfigError;
use crate::platform::{Platform, Service};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::tagset::{TagSet, TagSetBuilder};

use super::config::QueueConfig;
use super::restart::RestartSet;

use super::{Lock, RequestQueue};

/// Where a hardware queue's completion count starts in its `in_driver` word.
const ENDED_SHIFT: u32 = 32;

/// One completion, in an `in_driver` word.
const ENDED_ONE: u64 = 1 << ENDED_SHIFT;

/// An `in_driver` word's count of requests in the driver (far above any tag space).
const HELD: u64 = ENDED_ONE - 1;

/// A host: the driver, its tag set and what its request queues share (restart, quiesce).
///
/// ```
/// use blkmq_core::*;
///
/// struct Null;
/// impl Driver for Null {
///     type Platform = StdPlatform;
///     type Payload = ();
///     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
///         cx.queue().end_request(rq, Status::Ok).unwrap();
///         Ok(())
///     }
/// }
///
/// fn done(bio: Bio, status: Status) {
///     assert_eq!((bio.sector, status), (8, Status::Ok));
/// }
///
/// let host = Host::new(TagSet::builder(32).hw_queues(2), StdPlatform::new(), Null).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// queue.submit(Bio::new(Op::Read, 8, 8).end_io(done)).unwrap();
/// assert_eq!(host.set().busy(), 0);
/// ```
pub struct Host<D: Driver> {
    pub(super) driver: D,
    pub(super) set: Arc<TagSet<D::Payload, D::Platform>>,
    pub(super) queues: Lock<D, Vec<Option<Weak<RequestQueue<D>>>>>,
    /// Queue slots with a hardware queue waiting for a completion.
    pub(super) restart: RestartSet,
    /// Queue slots with a hardware queue kicked (to run from [`Host::run_kicked`]).
    pub(super) kicked: RestartSet,
    /// Per hardware queue, each on a line of its own: the requests of it the driver holds
    /// (issued, not yet ended or requeued) in the low half, its completions (and requeues)
    /// so far in the high half, so a completion does both with one locked operation.
    /// Written at the issue and at the completion of that hardware queue's requests only,
    /// never host-wide.
    pub(super) in_driver: Box<[CachePadded<AtomicU64>]>,
    /// Read on every dispatch: kept off the lines the counters above bounce.
    pub(super) quiesced: CachePadded<AtomicUsize>,
    /// Per queue slot, the platform time its kicked hardware queues are due to run at
    /// (`0`: at once, `u64::MAX`: nothing delayed), for [`Host::service`].
    pub(super) due: Box<[AtomicU64]>,
    /// The periodic work's next times (`0`: not armed): timeout checks, tag idling.
    pub(super) ticks: super::service::Ticks,
}

impl<D: Driver> Host<D> {
    /// A host of `driver` with the tag set `tags` describes, each request's payload made by
    /// [`Driver::init_request`].
    ///
    /// # Errors
    /// Whatever [`TagSetBuilder::build`] refuses.
    ///
    /// ```
    /// use blkmq_core::*;
    ///
    /// /// Numbers each request's payload by its tag.
    /// struct Numbered;
    /// impl Driver for Numbered {
    ///     type Platform = StdPlatform;
    ///     type Payload = usize;
    ///     fn init_request(&self, init: RequestInit) -> usize {
    ///         init.tag
    ///     }
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         assert_eq!(*cx.request(&rq).unwrap().payload(), rq.tag() as usize);
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(16), StdPlatform::new(), Numbered).unwrap();
    /// assert_eq!(host.set().depth(), 16);
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let zero = Host::new(TagSet::builder(0), StdPlatform::new(), Numbered);
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroDepth);
    /// ```
    pub fn new(
        tags: TagSetBuilder,
        platform: D::Platform,
        driver: D,
    ) -> Result<Arc<Self>, ConfigError> {
        let set = tags.build(platform, |init| driver.init_request(init))?;
        let slots = set.max_queues();
        let nr_hw = set.nr_hw_queues();
        let host = Arc::new(Self {
            driver,
            queues: lock_api::Mutex::new((0..slots).map(|_| None).collect()),
            restart: RestartSet::new(slots)?,
            kicked: RestartSet::new(slots)?,
            set,
            in_driver: (0..nr_hw)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            quiesced: CachePadded::new(AtomicUsize::new(0)),
            due: (0..slots).map(|_| AtomicU64::new(u64::MAX)).collect(),
            ticks: super::service::Ticks::new(),
        });
        // The platform's runtime, if it has one, serves the host from now on.
        let service: Weak<dyn Service> = Arc::downgrade(&host) as Weak<dyn Service>;
        host.set.platform().attach(service);
        Ok(host)
    }

    /// The driver.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// let held = host.driver().take(); // what `Hold` was given
    /// assert_eq!(held.len(), 1);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The tag set.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::new(), Hold::new()).unwrap();
    /// assert_eq!((host.set().depth(), host.set().nr_hw_queues()), (8, 2));
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// assert_eq!(host.set().busy(), 1); // a driver tag, until the request ends
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert_eq!(host.set().busy(), 0);
    /// ```
    pub fn set(&self) -> &Arc<TagSet<D::Payload, D::Platform>> {
        &self.set
    }

    /// Requests the driver holds now, over every queue: the sum of the hardware queues'
    /// counts (one load per hardware queue), exact when nothing is issued or completed
    /// meanwhile.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// a.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// b.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(host.in_driver(), 2);
    /// let held = host.driver().take();
    /// a.end_request(held.into_iter().next().unwrap(), Status::Ok).unwrap(); // the first came from `a`
    /// assert_eq!(host.in_driver(), 1);
    /// # b.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn in_driver(&self) -> usize {
        self.in_driver.iter().fold(0, |sum, n| {
            sum + (n.load(Ordering::Relaxed) & HELD) as usize
        })
    }

    /// One more request of hardware queue `hctx` in the driver.
    #[inline]
    pub(super) fn driver_in(&self, hctx: usize) {
        self.in_driver[hctx].fetch_add(1, Ordering::SeqCst);
    }

    /// `n` requests of hardware queue `hctx` fewer in the driver, without a completion
    /// (handed back at issue, or dropped with their queue).
    #[inline]
    pub(super) fn driver_out(&self, hctx: usize, n: usize) {
        let before = self.in_driver[hctx].fetch_sub(n as u64, Ordering::SeqCst);
        debug_assert!(
            before & HELD >= n as u64,
            "hardware queue {hctx}: {n} out of {before}"
        );
    }

    /// `n` requests of hardware queue `hctx` ended (or requeued): out of the driver, and
    /// one more completion of it, in one locked operation.
    #[inline]
    pub(super) fn driver_ended(&self, hctx: usize, n: usize) {
        let n = n as u64;
        // Adding `ENDED_ONE - n` takes `n` from the low half (which holds at least that
        // many) and adds one to the high half.
        let before = self.in_driver[hctx].fetch_add(ENDED_ONE.wrapping_sub(n), Ordering::SeqCst);
        debug_assert!(
            before & HELD >= n,
            "hardware queue {hctx}: {n} out of {before}"
        );
    }

    /// Completions of hardware queue `hctx` so far (wrapping): what a runner compares
    /// before and after an attempt on it.
    #[inline]
    pub(super) fn driver_ends(&self, hctx: usize) -> u32 {
        (self.in_driver[hctx].load(Ordering::SeqCst) >> ENDED_SHIFT) as u32
    }

    /// How many hardware queues the host has.
    pub(super) fn nr_hw_queues(&self) -> usize {
        self.in_driver.len()
    }

    /// Whether the driver holds nothing, on any hardware queue: a load per hardware queue
    /// (the give-up's slow path). Each load after a restart mark pairs with that count's
    /// completion (see `restart.rs`): a count seen above zero ends after the mark.
    pub(super) fn driver_idle(&self) -> bool {
        self.in_driver
            .iter()
            .all(|n| n.load(Ordering::SeqCst) & HELD == 0)
    }

    /// A request queue (a LUN, a namespace) on this host.
    ///
    /// # Errors
    /// Bad limits ([`ConfigError::BadLimits`]), an elevator on a `NO_SCHED` set, bad queue
    /// maps, scheduler tags the set refuses, or [`ConfigError::QueueBusy`] when the tag set
    /// takes no further queue (its `max_queues`).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let set = TagSet::builder(8).max_queues(1);
    /// let host = Host::new(set, StdPlatform::new(), Null::new()).unwrap();
    /// let limits = QueueLimits::new(64);
    /// let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    /// let err = host.add_queue(QueueConfig::new(limits)).unwrap_err();
    /// assert_eq!(err, ConfigError::QueueBusy); // the set takes one queue
    /// drop(queue);
    /// assert!(host.add_queue(QueueConfig::new(limits)).is_ok());
    /// let bad = QueueLimits { max_segments: 0, ..limits };
    /// let err = host.add_queue(QueueConfig::new(bad)).unwrap_err();
    /// assert_eq!(err, ConfigError::BadLimits { what: "max_segments" });
    /// ```
    pub fn add_queue(
        self: &Arc<Self>,
        config: QueueConfig,
    ) -> Result<Arc<RequestQueue<D>>, ConfigError> {
        RequestQueue::new(self, config)
    }

    /// The live queue in `slot`.
    pub(super) fn queue_at(&self, slot: usize) -> Option<Arc<RequestQueue<D>>> {
        self.queues.lock().get(slot)?.as_ref()?.upgrade()
    }

    /// Calls `f` with each live queue, the registry unlocked (locked once per live queue,
    /// not once per slot).
    pub(super) fn for_each_queue(&self, mut f: impl FnMut(&RequestQueue<D>)) {
        let mut slot = 0;
        loop {
            let queue = {
                let queues = self.queues.lock();
                let Some((at, queue)) = queues
                    .iter()
                    .enumerate()
                    .skip(slot)
                    .find_map(|(at, q)| Some((at, q.as_ref()?.upgrade()?)))
                else {
                    return;
                };
                slot = at + 1;
                queue
            };
            f(&queue);
        }
    }
}

impl<D: Driver> Drop for Host<D> {
    fn drop(&mut self) {
        // The handle given at `attach` no longer upgrades: the platform lets it go (and
        // stops its worker with the last host).
        self.set.platform().detach();
    }
}

impl<D: Driver> fmt::Debug for Host<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("in_driver", &self.in_driver())
            .field("quiesced", &self.is_quiesced())
            .finish_non_exhaustive()
    }
}
