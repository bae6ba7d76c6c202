//! Hosts and request queues: software and hardware contexts, submission, plugging,
//! merging, dispatch, restart, completion, requeue, quiesce, freeze and timeouts.
//!
//! # Restart
//!
//! A hardware queue that gives up dispatching (the driver said [`Status::Resource`], the
//! budget or the driver tags ran out) keeps its requests at the head of its dispatch list
//! and marks itself in its queue's [`RestartSet`], and the queue in its host's. Every
//! completion bumps the host's completion epoch and then drains the host's set, rerunning
//! exactly the hardware queues marked — nothing when none are, in one load. The dispatcher
//! reads the epoch before it issues and again after it marks: if a completion came in
//! between (it may have drained before the mark), the dispatcher runs again itself. Every
//! access of that pair is `SeqCst`, so one side always sees the other (Dekker's pattern);
//! `tests/loom.rs` checks every interleaving of insert, give-up and completion.
//!
//! # Runs
//!
//! One thread at a time dispatches a hardware queue. [`RequestQueue::run_hw_queue`] marks
//! the queue pending; whoever finds it not running becomes its runner and dispatches until
//! no run was asked for since it last looked, so a run asked for while another is under
//! way is never lost and never waits.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::fmt;

use crossbeam_utils::CachePadded;

use crate::bio::{Bio, BioFlags, Op, Status};
use crate::driver::{Driver, HctxCx, Rejected, RqBatch, TimeoutAction};
use crate::elevator::{Elevator, ElvBackend, ElvCx};
use crate::error::{ConfigError, TagError};
use crate::limits::QueueLimits;
use crate::platform::Platform;
use crate::queue_map::{QueueMaps, QueueType};
use crate::queue_tags::{Alloc, QueueTags};
use crate::request::{Request, Rq, RqIo, RqState};
use crate::restart::RestartSet;
use crate::split::SplitPool;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, seqcst_pair};
use crate::tagset::{TagSet, TagSetBuilder, TagSetFlags};

type Raw<D> = <<D as Driver>::Platform as Platform>::RawMutex;
type Lock<D, X> = lock_api::Mutex<Raw<D>, X>;

/// Requests merged by a reverse scan of a software queue, at most (Linux's 8).
const CTX_MERGE_SCAN: usize = 8;
/// A [`Plug`] holding this many requests flushes before it takes another.
///
/// ```
/// # use blkmq_core::*;
/// # struct Null;
/// # impl Driver for Null {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         cx.queue().end_request(rq, Status::Ok);
/// #         Ok(())
/// #     }
/// # }
/// let host = Host::new(TagSet::builder(64), StdPlatform::new(), Null).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let mut plug = Plug::new();
/// for i in 0..=PLUG_MAX as u64 {
///     // 8 sectors every 16: no two requests merge.
///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, i * 16, 8)).unwrap();
/// }
/// assert_eq!(plug.len(), 1); // the first PLUG_MAX went to the driver
/// ```
pub const PLUG_MAX: usize = 32;
/// What [`PLUG_MAX`] is for a [`Plug`] holding requests of several queues.
///
/// ```
/// # use blkmq_core::*;
/// # struct Null;
/// # impl Driver for Null {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         cx.queue().end_request(rq, Status::Ok);
/// #         Ok(())
/// #     }
/// # }
/// let host = Host::new(TagSet::builder(128), StdPlatform::new(), Null).unwrap();
/// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let mut plug = Plug::new();
/// for i in 0..PLUG_MAX_MULTI as u64 {
///     let queue = if i % 2 == 0 { &a } else { &b };
///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, i * 16, 8)).unwrap();
/// }
/// assert_eq!(plug.len(), PLUG_MAX_MULTI); // past PLUG_MAX: two queues
/// a.submit_plugged(&mut plug, Bio::new(Op::Read, 1 << 16, 8)).unwrap();
/// assert_eq!(plug.len(), 1);
/// ```
pub const PLUG_MAX_MULTI: usize = 64;
/// A [`Plug`] flushes before it takes a request after one of at least this many bytes
/// (bios still merge into that one).
///
/// ```
/// # use blkmq_core::*;
/// # struct Null;
/// # impl Driver for Null {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         cx.queue().end_request(rq, Status::Ok);
/// #         Ok(())
/// #     }
/// # }
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let sectors = (PLUG_FLUSH_BYTES / SECTOR_SIZE) as u32;
/// let mut plug = Plug::new();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 0, sectors)).unwrap();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Write, sectors.into(), 8)).unwrap(); // merges
/// assert_eq!(plug.len(), 1);
/// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap(); // flushes first
/// assert_eq!(plug.len(), 1);
/// assert_eq!(queue.usage(), 1); // only the read is left
/// ```
pub const PLUG_FLUSH_BYTES: u64 = 128 * 1024;

/// How long a dispatch that ran short with nothing in flight waits for the platform's
/// rerun (Linux's `BLK_MQ_RESOURCE_DELAY`, 3 ms), through [`Platform::kick_after`].
///
/// ```
/// assert_eq!(blkmq_core::RESOURCE_DELAY_NS, 3_000_000);
/// ```
pub const RESOURCE_DELAY_NS: u64 = 3_000_000;

/// The hardware queue is being dispatched.
const RUNNING: u32 = 1;
/// A run was asked for since the runner last looked.
const PENDING: u32 = 2;

/// The usage count's frozen flag (the rest counts holders).
const FROZEN: usize = 1 << (usize::BITS - 1);

/// Where the completion epoch starts in [`Host`]'s `flight` word.
const EPOCH_SHIFT: u32 = 32;

/// One completion, in the `flight` word.
const EPOCH_ONE: u64 = 1 << EPOCH_SHIFT;

/// The `flight` word's count of requests in the driver (far above any tag space).
const IN_DRIVER: u64 = EPOCH_ONE - 1;

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
///         cx.queue().end_request(rq, Status::Ok);
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
    driver: D,
    set: Arc<TagSet<D::Payload, D::Platform>>,
    queues: Lock<D, Vec<Option<Weak<RequestQueue<D>>>>>,
    /// Queue slots with a hardware queue waiting for a completion.
    restart: RestartSet,
    /// Queue slots with a hardware queue kicked (to run from [`Host::run_kicked`]).
    kicked: RestartSet,
    /// Completions (and requeues) so far, the epoch a dispatcher giving up compares, in the
    /// high half; requests the driver holds (issued, not yet ended or requeued) in the low
    /// half. One word, so a completion leaves the driver and moves the epoch with one
    /// locked operation (a batch of them with one).
    flight: CachePadded<AtomicU64>,
    /// Read on every dispatch: kept off the lines the counters above bounce.
    quiesced: CachePadded<AtomicUsize>,
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
    ///         cx.queue().end_request(rq, Status::Ok);
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
        Ok(Arc::new(Self {
            driver,
            queues: lock_api::Mutex::new((0..slots).map(|_| None).collect()),
            restart: RestartSet::new(slots)?,
            kicked: RestartSet::new(slots)?,
            set,
            flight: CachePadded::new(AtomicU64::new(0)),
            quiesced: CachePadded::new(AtomicUsize::new(0)),
        }))
    }

    /// The driver.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// let held = host.driver().take(); // what `Hold` was given
    /// assert_eq!(held.len(), 1);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The tag set.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::new(), Hold::new()).unwrap();
    /// assert_eq!((host.set().depth(), host.set().nr_hw_queues()), (8, 2));
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// assert_eq!(host.set().busy(), 1); // a driver tag, until the request ends
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// assert_eq!(host.set().busy(), 0);
    /// ```
    pub fn set(&self) -> &Arc<TagSet<D::Payload, D::Platform>> {
        &self.set
    }

    /// Requests the driver holds now, over every queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// a.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// b.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(host.in_driver(), 2);
    /// let held = host.driver().take();
    /// a.end_request(held.into_iter().next().unwrap(), Status::Ok); // the first came from `a`
    /// assert_eq!(host.in_driver(), 1);
    /// # b.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn in_driver(&self) -> usize {
        (self.flight.load(Ordering::Relaxed) & IN_DRIVER) as usize
    }

    /// The completion epoch (see `flight`).
    #[inline]
    fn epoch(&self) -> u64 {
        self.flight.load(Ordering::SeqCst) >> EPOCH_SHIFT
    }

    /// Whether the driver holds nothing.
    fn driver_idle(&self) -> bool {
        self.flight.load(Ordering::SeqCst) & IN_DRIVER == 0
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
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let set = TagSet::builder(8).max_queues(1);
    /// let host = Host::new(set, StdPlatform::new(), Null).unwrap();
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
    fn queue_at(&self, slot: usize) -> Option<Arc<RequestQueue<D>>> {
        self.queues.lock().get(slot)?.as_ref()?.upgrade()
    }

    /// Stops every queue of the host from calling [`Driver::queue_rq`] and waits for calls
    /// under way (tag-set wide quiesce). Nests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// host.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(host.driver().take().is_empty()); // queued, not issued
    /// assert!(queue.is_quiesced() && queue.has_work(0));
    /// host.unquiesce();
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn quiesce(&self) {
        self.quiesced.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        self.for_each_queue(|queue| queue.wait_runs());
    }

    /// Undoes one [`quiesce`](Self::quiesce); the last one reruns every queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// host.quiesce();
    /// host.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// host.unquiesce();
    /// assert!(host.is_quiesced() && host.driver().take().is_empty());
    /// host.unquiesce(); // the last one runs the queue
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn unquiesce(&self) {
        if self.quiesced.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.for_each_queue(|queue| queue.run_hw_queues());
        }
    }

    /// Calls `f` with each live queue, the registry unlocked.
    fn for_each_queue(&self, mut f: impl FnMut(&RequestQueue<D>)) {
        let slots = self.queues.lock().len();
        for slot in 0..slots {
            if let Some(queue) = self.queue_at(slot) {
                f(&queue);
            }
        }
    }

    /// Whether the host is quiesced.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(!host.is_quiesced());
    /// host.quiesce();
    /// assert!(host.is_quiesced() && queue.is_quiesced());
    /// host.unquiesce();
    /// assert!(!host.is_quiesced());
    /// ```
    pub fn is_quiesced(&self) -> bool {
        self.quiesced.load(Ordering::SeqCst) != 0
    }

    /// Runs every hardware queue kicked since the last call; the platform calls this after
    /// a [`Platform::kick`]. Returns how many ran.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// /// Turns down the first request ("not now"), then completes everything.
    /// struct Busy(AtomicBool);
    /// impl Driver for Busy {
    ///     type Platform = StdPlatform;
    ///     type Payload = ();
    ///     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         if !self.0.swap(true, Ordering::Relaxed) {
    ///             return Err(Rejected { rq, status: Status::Resource });
    ///         }
    ///         cx.queue().end_request(rq, Status::Ok);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let platform = StdPlatform::new();
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// // Turned down with nothing in flight to complete: the queue asked for a kick.
    /// assert_eq!(platform.take_kicks(), vec![0]);
    /// assert_eq!(queue.usage(), 1);
    /// assert_eq!(host.run_kicked(), 1);
    /// assert_eq!(queue.usage(), 0);
    /// assert_eq!(host.run_kicked(), 0);
    /// ```
    pub fn run_kicked(&self) -> usize {
        let mut ran = 0;
        self.kicked.drain(|slot| {
            if let Some(queue) = self.queue_at(slot) {
                queue.kicked.drain(|hctx| {
                    queue.run_hw_queue(hctx);
                    ran += 1;
                });
            }
        });
        ran
    }

    /// After a completion or requeue: rerun exactly the hardware queues that wait.
    #[inline]
    fn restart(&self) {
        self.restart_after(0);
    }

    /// [`restart`](Self::restart) after `out` requests left the driver, counted off in the
    /// same locked operation that moves the epoch.
    #[inline]
    fn restart_after(&self, out: u64) {
        debug_assert!(out <= IN_DRIVER);
        // Adding `EPOCH_ONE - out` takes `out` from the low half (which holds at least that
        // many) and adds one to the high half.
        self.flight
            .fetch_add(EPOCH_ONE.wrapping_sub(out), Ordering::SeqCst);
        seqcst_pair();
        if self.restart.is_empty() {
            return;
        }
        self.restart_slow();
    }

    #[cold]
    fn restart_slow(&self) {
        self.rerun_waiting(None);
    }

    /// Reruns every hardware queue waiting for a completion, but `except` (a queue slot and
    /// a hardware queue), and clears the marks.
    fn rerun_waiting(&self, except: Option<(usize, usize)>) {
        self.restart.drain(|slot| {
            if let Some(queue) = self.queue_at(slot) {
                queue.restart.drain(|hctx| {
                    if except != Some((slot, hctx)) {
                        queue.rerun(hctx);
                    }
                });
            }
        });
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

/// How to make a [`RequestQueue`].
///
/// ```
/// use blkmq_core::{QueueConfig, QueueLimits};
/// let config = QueueConfig::new(QueueLimits::new(1 << 20)).nr_requests(64);
/// assert_eq!(config.nr_requests, Some(64));
/// assert!(config.elevator.is_none());
/// ```
pub struct QueueConfig {
    /// The device's limits.
    pub limits: QueueLimits,
    /// The I/O scheduler, if any (requests then come from scheduler tags).
    pub elevator: Option<Box<dyn Elevator>>,
    /// Scheduler tags (default 2 x the queue depth, at most 128 x 2).
    pub nr_requests: Option<usize>,
    /// The CPU -> hardware queue maps (default: the driver's, else an even spread).
    pub maps: Option<QueueMaps>,
}

impl QueueConfig {
    /// A queue with `limits`, no elevator, default maps.
    ///
    /// ```
    /// use blkmq_core::{QueueConfig, QueueLimits};
    /// let config = QueueConfig::new(QueueLimits::new(64));
    /// assert_eq!(config.limits.capacity, 64);
    /// assert!(config.elevator.is_none() && config.nr_requests.is_none() && config.maps.is_none());
    /// ```
    pub fn new(limits: QueueLimits) -> Self {
        Self {
            limits,
            elevator: None,
            nr_requests: None,
            maps: None,
        }
    }

    /// With an elevator.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// # /// First in, first out.
    /// # #[derive(Default)]
    /// # struct Fifo(VecDeque<Rq>);
    /// # impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Fifo::default()));
    /// let queue = host.add_queue(config).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap(); // through the elevator to `Null`
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn elevator(mut self, elevator: Box<dyn Elevator>) -> Self {
        self.elevator = Some(elevator);
        self
    }

    /// With `nr` scheduler tags (used only with an [`elevator`](Self::elevator)).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// # /// First in, first out.
    /// # #[derive(Default)]
    /// # struct Fifo(VecDeque<Rq>);
    /// # impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).nr_requests(16);
    /// let plain = host.add_queue(config).unwrap();
    /// assert_eq!(plain.queue_tags().nr_requests(), None); // no elevator: no scheduler tags
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Fifo::default()));
    /// let queue = host.add_queue(config.nr_requests(16)).unwrap();
    /// assert_eq!(queue.queue_tags().nr_requests(), Some(16));
    /// ```
    pub fn nr_requests(mut self, nr: usize) -> Self {
        self.nr_requests = Some(nr);
        self
    }

    /// With these queue maps.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// // Two CPUs; reads go to hardware queue 1, everything else to 0.
    /// let maps = QueueMaps::new(
    ///     QueueMap::spread(2, 1, 0).unwrap(),
    ///     Some(QueueMap::spread(2, 1, 1).unwrap()),
    ///     None,
    /// )
    /// .unwrap();
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::with_cpus(2), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64)).maps(maps)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Write, 32, 8)).unwrap();
    /// let held = host.driver().take();
    /// let hctxs: Vec<usize> = held.iter().map(|rq| queue.request(rq).unwrap().hctx()).collect();
    /// assert_eq!(hctxs, [1, 0]);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn maps(mut self, maps: QueueMaps) -> Self {
        self.maps = Some(maps);
        self
    }
}

impl fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("limits", &self.limits)
            .field("elevator", &self.elevator.as_ref().map(|e| e.name()))
            .field("nr_requests", &self.nr_requests)
            .finish_non_exhaustive()
    }
}

/// A hardware context.
struct HwCtx<D: Driver> {
    run: AtomicU32,
    /// Stopped by the driver ([`RequestQueue::stop_hw_queue`]).
    stopped: AtomicBool,
    /// Its CPUs are gone: no new requests are made for it.
    inactive: AtomicBool,
    /// Requests to issue before anything else (given back, requeued, flushes).
    dispatch: Lock<D, VecDeque<Rq>>,
    dispatch_len: AtomicUsize,
    /// The software contexts mapped here (indices into the queue's), and which have work.
    ctxs: Box<[usize]>,
    pending: Box<[AtomicU64]>,
    /// Where a one-at-a-time pass starts next.
    next_ctx: AtomicUsize,
    /// The driver gave up recently: take one request at a time, round robin.
    busy: AtomicBool,
    /// The runner's batch.
    scratch: Lock<D, VecDeque<Rq>>,
}

/// A software context: one CPU's requests of one queue type.
struct SwCtx<D: Driver> {
    list: Lock<D, VecDeque<Rq>>,
    hctx: usize,
    /// Its bit in the hardware context's `pending`.
    pos: usize,
}

/// What issuing one request came to.
enum Issued {
    /// The driver took it.
    Queued,
    /// It ended (with an error).
    Ended,
    /// Not now: the request, and why.
    GaveUp(Rq, Status),
}

/// What a runner's look at the elevator ([`RequestQueue::pick`]) gave.
enum Pick {
    /// No work (or none to do now: the hardware queue is halted).
    Empty,
    /// Work, but the driver gave no budget.
    NoBudget,
    /// Work the elevator holds back for now (the budget is still held).
    Held,
    /// A request to issue (the budget held for it), whether the elevator had work left
    /// after it, and the freshest time the elevator read, if it read one (the start
    /// stamp needs only the coarse clock).
    Got {
        rq: Rq,
        more: bool,
        time: Option<u64>,
    },
}

/// A request queue: one block device (LUN, namespace) on a [`Host`].
///
/// Bios go in through [`submit`](Self::submit) (or a [`Plug`]); the queue checks and splits
/// them to its [`QueueLimits`], merges them, allocates requests, and issues them to the
/// driver from per-CPU software queues or an [`Elevator`] through per-hardware-queue
/// dispatch. The driver ends them with [`end_request`](Self::end_request).
///
/// ```
/// use blkmq_core::*;
/// use std::sync::Mutex;
///
/// /// Holds what it is given until told to complete it.
/// struct Hold(Mutex<Vec<Rq>>);
/// impl Driver for Hold {
///     type Platform = StdPlatform;
///     type Payload = ();
///     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
///         self.0.lock().unwrap().push(rq);
///         Ok(())
///     }
/// }
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold(Mutex::new(Vec::new())))
///     .unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
/// queue.submit(Bio::new(Op::Read, 2048, 8)).unwrap(); // past the end: fails at once
/// let held: Vec<Rq> = host.driver().0.lock().unwrap().drain(..).collect();
/// assert_eq!(held.len(), 1);
/// for rq in held {
///     queue.end_request(rq, Status::Ok);
/// }
/// assert_eq!(host.set().busy(), 0);
/// ```
pub struct RequestQueue<D: Driver> {
    host: Arc<Host<D>>,
    slot: usize,
    limits: QueueLimits,
    maps: QueueMaps,
    hctxs: Box<[HwCtx<D>]>,
    ctxs: Box<[SwCtx<D>]>,
    /// Changed only frozen (no usage) and quiesced (no runner): see [`Self::tags`].
    tags: UnsafeCell<QueueTags<D::Payload, D::Platform>>,
    elevator: Lock<D, Option<Box<dyn Elevator>>>,
    has_elevator: AtomicBool,
    restart: RestartSet,
    kicked: RestartSet,
    /// Holders (requests, submitters, timeout checks) and the frozen flag.
    usage: AtomicUsize,
    /// Freeze depth; changing it and the frozen flag together.
    freeze_depth: Lock<D, usize>,
    /// Held across run-time changes (elevator, `nr_requests`).
    change: Lock<D, ()>,
    /// Set while the tags are being replaced: readers that may run frozen back off.
    switching: AtomicBool,

    quiesced: AtomicUsize,
    requeue: Lock<D, VecDeque<Rq>>,
    splits: SplitPool<Raw<D>>,
    timeouts: AtomicU64,
}

// SAFETY: the `UnsafeCell` around the tags is written only while no other thread can reach
// them (see `tags`); everything else is `Sync` on its own.
unsafe impl<D: Driver> Sync for RequestQueue<D> where QueueTags<D::Payload, D::Platform>: Sync {}

impl<D: Driver> RequestQueue<D> {
    fn new(host: &Arc<Host<D>>, config: QueueConfig) -> Result<Arc<Self>, ConfigError> {
        config.limits.validate()?;
        let set = &host.set;
        let nr_hw = set.nr_hw_queues();
        let nr_cpus = set.nr_cpus();
        let maps = match config.maps {
            Some(maps) => maps,
            None => match host.driver.map_queues(nr_cpus, nr_hw) {
                Some(maps) => maps,
                None => QueueMaps::spread(nr_cpus, nr_hw)?,
            },
        };
        if maps.nr_hw_queues() > nr_hw
            || QueueType::ALL
                .iter()
                .filter_map(|k| maps.map(*k))
                .any(|m| m.nr_cpus() != nr_cpus)
        {
            return Err(ConfigError::BadQueueMap {
                cpu: 0,
                hctx: maps.nr_hw_queues(),
            });
        }
        let mut tags = set.attach().map_err(|_| ConfigError::QueueBusy)?;
        if let Some(elevator) = &config.elevator {
            tags.attach_scheduler(config.nr_requests, |init| host.driver.init_request(init))?;
            if let Some(depth) = elevator.min_shallow_depth() {
                tags.set_min_shallow_depth(depth)?;
            }
        }
        let capacity = set.depth() + tags.nr_requests().unwrap_or(0);
        // Software contexts, (cpu, type) in order, each mapped to its hardware queue.
        let mut ctx_hctx = Vec::new();
        for cpu in 0..nr_cpus {
            for kind in QueueType::ALL {
                ctx_hctx.push(maps.map(kind).map(|m| m.hctx(cpu)));
            }
        }
        let mut per_hctx: Vec<Vec<usize>> = (0..nr_hw).map(|_| Vec::new()).collect();
        let mut ctxs = Vec::with_capacity(ctx_hctx.len());
        for (index, hctx) in ctx_hctx.iter().enumerate() {
            let (hctx, pos, cap) = match *hctx {
                Some(h) => {
                    per_hctx[h].push(index);
                    (h, per_hctx[h].len() - 1, capacity)
                }
                None => (0, usize::MAX, 0),
            };
            ctxs.push(SwCtx {
                list: lock_api::Mutex::new(VecDeque::with_capacity(cap)),
                hctx,
                pos,
            });
        }
        let hctxs = per_hctx
            .into_iter()
            .map(|ctxs| HwCtx {
                run: AtomicU32::new(0),
                stopped: AtomicBool::new(false),
                inactive: AtomicBool::new(false),
                dispatch: lock_api::Mutex::new(VecDeque::with_capacity(capacity)),
                dispatch_len: AtomicUsize::new(0),
                pending: (0..ctxs.len().div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                ctxs: ctxs.into_boxed_slice(),
                next_ctx: AtomicUsize::new(0),
                busy: AtomicBool::new(false),
                scratch: lock_api::Mutex::new(VecDeque::with_capacity(capacity)),
            })
            .collect();
        let mut slots = host.queues.lock();
        let slot = slots
            .iter()
            .position(Option::is_none)
            .ok_or(ConfigError::QueueBusy)?;
        let mut elevator = config.elevator;
        let nr_keys = tags.nr_keys();
        if let (Some(e), Some(nr)) = (elevator.as_mut(), tags.nr_requests()) {
            e.depth_updated(nr, nr_keys);
        }
        let queue = Arc::new(Self {
            host: host.clone(),
            slot,
            limits: config.limits,
            maps,
            hctxs,
            ctxs: ctxs.into_boxed_slice(),
            has_elevator: AtomicBool::new(elevator.is_some()),
            elevator: lock_api::Mutex::new(elevator),
            tags: UnsafeCell::new(tags),
            restart: RestartSet::new(nr_hw)?,
            kicked: RestartSet::new(nr_hw)?,
            usage: AtomicUsize::new(0),
            freeze_depth: lock_api::Mutex::new(0),
            change: lock_api::Mutex::new(()),
            switching: AtomicBool::new(false),
            quiesced: AtomicUsize::new(0),
            requeue: lock_api::Mutex::new(VecDeque::with_capacity(capacity)),
            splits: SplitPool::new(2 * capacity),
            timeouts: AtomicU64::new(0),
        });
        slots[slot] = Some(Arc::downgrade(&queue));
        Ok(queue)
    }

    /// The tags.
    #[inline(always)]
    fn tags(&self) -> &QueueTags<D::Payload, D::Platform> {
        // SAFETY: the tags are replaced (`switch_elevator`) only while the queue is frozen
        // with no usage left, so no request, submitter or timeout check is inside, and
        // quiesced with no runner, so no dispatch is; every path here reaches the tags
        // holding a usage count or as a runner of an unquiesced queue.
        unsafe { &*self.tags.get() }
    }

    /// The host.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(std::sync::Arc::ptr_eq(queue.host(), &host));
    /// ```
    pub fn host(&self) -> &Arc<Host<D>> {
        &self.host
    }

    /// The driver.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// let held = queue.driver().take(); // what `Hold` was given
    /// assert_eq!(held.len(), 1);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn driver(&self) -> &D {
        &self.host.driver
    }

    /// The platform.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::with_cpus(3), Null).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert_eq!(queue.platform().nr_cpus(), 3);
    /// ```
    pub fn platform(&self) -> &D::Platform {
        self.host.set.platform()
    }

    /// The queue's limits.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let limits = QueueLimits { max_sectors: 64, ..QueueLimits::new(1024) };
    /// let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    /// assert_eq!((queue.limits().capacity, queue.limits().max_sectors), (1024, 64));
    /// ```
    pub fn limits(&self) -> &QueueLimits {
        &self.limits
    }

    /// The queue's maps.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::with_cpus(4), Null).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// // No maps given, none from the driver: an even spread.
    /// assert_eq!(queue.maps(), &QueueMaps::spread(4, 2).unwrap());
    /// ```
    pub fn maps(&self) -> &QueueMaps {
        &self.maps
    }

    /// Its hardware queues.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let tags = TagSet::builder(8).hw_queues(3);
    /// let host = Host::new(tags, StdPlatform::new(), Null).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert_eq!(queue.nr_hw_queues(), 3);
    /// ```
    pub fn nr_hw_queues(&self) -> usize {
        self.hctxs.len()
    }

    /// The queue's tags (to read their state: busy counts, the scheduler tags), held in
    /// place while the guard lives: an elevator switch waits for it, so do not hold one
    /// across [`switch_elevator`](Self::switch_elevator) or
    /// [`set_nr_requests`](Self::set_nr_requests) on the same thread.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let mut busy = 0;
    /// queue.queue_tags().for_each_busy(None, |_| {
    ///     busy += 1;
    ///     true
    /// });
    /// assert_eq!(busy, 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn queue_tags(&self) -> TagsGuard<'_, D> {
        loop {
            if let Some(inside) = self.enter_any() {
                return TagsGuard(inside);
            }
            wait_a_little();
        }
    }

    /// The shared side of one of this queue's requests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let other = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// assert_eq!((request.state(), request.tag()), (RqState::InFlight, rq.tag()));
    /// assert!(other.request(&rq).is_none()); // not a request of `other`
    /// queue.end_request(rq, Status::Ok);
    /// ```
    pub fn request(&self, rq: &Rq) -> Option<&Request<D::Payload>> {
        self.tags().request(rq).ok()
    }

    /// The I/O of one of this queue's requests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 16, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let io = queue.io(&rq).unwrap();
    /// assert_eq!((io.op(), io.sector(), io.sectors(), io.nr_bios()), (Op::Write, 16, 8, 1));
    /// queue.end_request(rq, Status::Ok);
    /// ```
    pub fn io<'a>(&'a self, rq: &'a Rq) -> Option<&'a RqIo> {
        self.tags().io(rq).ok()
    }

    /// Calls `f` with every bio of a request, in order.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 8)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap(); // merges in front
    /// plug.flush();
    /// let rq = host.driver().take().pop().unwrap();
    /// let mut starts = Vec::new();
    /// queue.for_each_bio(&rq, |bio| starts.push(bio.sector));
    /// assert_eq!(starts, [0, 8]);
    /// queue.end_request(rq, Status::Ok);
    /// ```
    pub fn for_each_bio(&self, rq: &Rq, f: impl FnMut(&Bio)) {
        let _ = self.tags().for_each_bio(rq, f);
    }

    /// The elevator's name, if there is one.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// # use std::collections::VecDeque;
    /// # /// First in, first out.
    /// # #[derive(Default)]
    /// # struct Fifo(VecDeque<Rq>);
    /// # impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// # }
    /// assert_eq!(queue.elevator_name(), None);
    /// queue.switch_elevator(Some(Box::new(Fifo::default())), None).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// ```
    pub fn elevator_name(&self) -> Option<&'static str> {
        self.elevator.lock().as_ref().map(|e| e.name())
    }

    /// Runs `f` on the elevator, if the queue has one of type `E` (to read its counters or
    /// change its tunables at run time), under the elevator's lock.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// struct Noop(u32);
    /// impl Elevator for Noop {
    ///     fn name(&self) -> &'static str { "noop" }
    ///     fn insert_requests(&mut self, _: &ElvCx, _: &mut dyn Iterator<Item = Rq>, _: bool) {}
    ///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { None }
    ///     fn has_work(&self, _: usize) -> bool { false }
    /// }
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Null).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Noop(7)));
    /// let queue = host.add_queue(config).unwrap();
    /// assert_eq!(queue.with_elevator(|e: &mut Noop| e.0), Some(7));
    /// ```
    pub fn with_elevator<E: Elevator, R>(&self, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        let mut guard = self.elevator.lock();
        let e: &mut dyn Elevator = guard.as_deref_mut()?;
        let any: &mut dyn core::any::Any = e;
        any.downcast_mut::<E>().map(f)
    }

    /// When the elevator holds work back (idling), the platform time to run the queue
    /// again at ([`Elevator::next_timer`]).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// /// Would hold work back until 5 ms into the platform's time.
    /// struct Idling;
    /// impl Elevator for Idling {
    ///     fn name(&self) -> &'static str { "idling" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, _: &mut dyn Iterator<Item = Rq>, _: bool) {}
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { None }
    /// #     fn has_work(&self, _: usize) -> bool { false }
    ///     fn next_timer(&self) -> Option<u64> { Some(5_000_000) }
    /// }
    /// assert_eq!(queue.next_timer(), None); // no elevator
    /// queue.switch_elevator(Some(Box::new(Idling)), None).unwrap();
    /// assert_eq!(queue.next_timer(), Some(5_000_000));
    /// ```
    pub fn next_timer(&self) -> Option<u64> {
        self.elevator.lock().as_ref().and_then(|e| e.next_timer())
    }

    /// Timeouts fired so far.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let late = queue.platform().now_ns() + DEFAULT_TIMEOUT_NS + 1;
    /// assert_eq!(queue.check_timeouts(late), 1); // `Hold` keeps the default: another timeout
    /// assert_eq!(queue.timeouts(), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// Requests of the queue allocated and not yet freed, plus callers inside it this moment
    /// (a submission under way, a [`TagsGuard`], a timeout check).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(queue.usage(), 2);
    /// let held = host.driver().take();
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn usage(&self) -> usize {
        self.usage.load(Ordering::SeqCst) & !FROZEN
    }

    fn cx(&self, hctx: usize) -> HctxCx<'_, D> {
        HctxCx { queue: self, hctx }
    }

    fn elv_cx(&self) -> ElvCx<'_> {
        // The clock is read only if the elevator asks (many calls never do).
        ElvCx::with_backend(self, &self.limits, crate::elevator::ASK_BACKEND)
    }

    // ----- usage, freeze -----

    /// Takes a usage count unless frozen.
    #[inline]
    fn enter(&self) -> bool {
        if self.usage.fetch_add(1, Ordering::SeqCst) & FROZEN == 0 {
            return true;
        }
        self.usage.fetch_sub(1, Ordering::SeqCst);
        false
    }

    #[inline]
    fn exit(&self) {
        self.usage.fetch_sub(1, Ordering::SeqCst);
    }

    /// Starts a freeze: new bios are refused (given back by [`submit`](Self::submit)) until
    /// [`unfreeze`](Self::unfreeze). Nests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.freeze_start();
    /// let back = queue.submit(Bio::new(Op::Read, 64, 8)).unwrap_err(); // refused, untouched
    /// assert_eq!(back.sector, 64);
    /// assert!(!queue.is_drained()); // the driver still holds one
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// assert!(queue.is_drained());
    /// queue.unfreeze();
    /// assert!(queue.submit(back).is_ok());
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn freeze_start(&self) {
        let mut depth = self.freeze_depth.lock();
        if *depth == 0 {
            self.usage.fetch_or(FROZEN, Ordering::SeqCst);
        }
        *depth += 1;
    }

    /// Whether a started freeze has drained: no request of the queue is left.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.freeze_start();
    /// assert!(!queue.is_drained());
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// assert!(queue.is_drained());
    /// ```
    pub fn is_drained(&self) -> bool {
        self.usage.load(Ordering::SeqCst) & !FROZEN == 0
    }

    /// Freezes the queue and waits until every request in it has ended (Linux's
    /// `blk_mq_freeze_queue`). The waiting spins; completions must come from elsewhere (other
    /// threads, or the driver inline).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// std::thread::scope(|s| {
    ///     // The driver completes what it holds on another thread.
    ///     s.spawn(|| {
    ///         let held = host.driver().take();
    ///         queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    ///     });
    ///     queue.freeze(); // returns once that request has ended
    /// });
    /// assert!(queue.is_frozen() && queue.usage() == 0);
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_err());
    /// queue.unfreeze();
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_ok());
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn freeze(&self) {
        self.freeze_start();
        while !self.is_drained() {
            self.kick_requeue_list();
            wait_a_little();
        }
    }

    /// Undoes one freeze; the last one lets bios in again.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.freeze();
    /// queue.freeze();
    /// queue.unfreeze();
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_err()); // still frozen once
    /// queue.unfreeze();
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_ok());
    /// ```
    pub fn unfreeze(&self) {
        let mut depth = self.freeze_depth.lock();
        match *depth {
            0 => {}
            1 => {
                *depth = 0;
                self.usage.fetch_and(!FROZEN, Ordering::SeqCst);
            }
            _ => *depth -= 1,
        }
    }

    /// Takes a usage count even while frozen (a timeout check, a drain check: work on
    /// requests already in), unless the tags are being replaced; `None` then.
    fn enter_any(&self) -> Option<Exit<'_, D>> {
        self.usage.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        if self.switching.load(Ordering::SeqCst) {
            self.exit();
            return None;
        }
        Some(Exit(self))
    }

    /// Freezes, waits for the queue to drain and for runners to stop, and marks the tags
    /// as being replaced; the caller holds `change`.
    fn lock_out(&self) {
        self.freeze();
        self.quiesce();
        self.switching.store(true, Ordering::SeqCst);
        seqcst_pair();
        // Readers that counted themselves in before seeing the flag leave again.
        while !self.is_drained() {
            wait_a_little();
        }
    }

    fn let_in(&self) {
        self.switching.store(false, Ordering::SeqCst);
        self.unquiesce();
        self.unfreeze();
    }

    /// Whether the queue is frozen.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(!queue.is_frozen());
    /// queue.freeze_start();
    /// assert!(queue.is_frozen());
    /// queue.unfreeze();
    /// assert!(!queue.is_frozen());
    /// ```
    pub fn is_frozen(&self) -> bool {
        self.usage.load(Ordering::SeqCst) & FROZEN != 0
    }

    // ----- quiesce -----

    /// Stops calls of [`Driver::queue_rq`] on this queue and waits for those under way.
    /// Requests keep queueing. Nests. Not to be called from the driver's `queue_rq`.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap(); // taken, not issued
    /// assert!(host.driver().take().is_empty());
    /// assert!(queue.has_work(0));
    /// queue.unquiesce();
    /// assert_eq!(queue.usage(), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn quiesce(&self) {
        self.quiesced.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        self.wait_runs();
    }

    fn wait_runs(&self) {
        for hctx in self.hctxs.iter() {
            while hctx.run.load(Ordering::SeqCst) & RUNNING != 0 {
                wait_a_little();
            }
        }
    }

    /// Undoes one [`quiesce`](Self::quiesce); the last one runs the queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.unquiesce();
    /// assert!(queue.is_quiesced() && host.driver().take().is_empty());
    /// queue.unquiesce();
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn unquiesce(&self) {
        if self.quiesced.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.run_hw_queues();
        }
    }

    /// Whether the queue (or its host) is quiesced.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// assert!(queue.is_quiesced() && !host.is_quiesced());
    /// queue.unquiesce();
    /// host.quiesce();
    /// assert!(queue.is_quiesced()); // by its host
    /// host.unquiesce();
    /// assert!(!queue.is_quiesced());
    /// ```
    pub fn is_quiesced(&self) -> bool {
        self.quiesced.load(Ordering::SeqCst) != 0 || self.host.is_quiesced()
    }

    /// Whether dispatch must not call the driver on `hctx` now.
    #[inline]
    fn halted(&self, hctx: usize) -> bool {
        self.quiesced.load(Ordering::SeqCst) != 0
            || self.host.quiesced.load(Ordering::SeqCst) != 0
            || self.hctxs[hctx].stopped.load(Ordering::SeqCst)
    }

    /// Stops dispatch on one hardware queue (a driver out of resources for a while).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.stop_hw_queue(0);
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(host.driver().take().is_empty() && queue.has_work(0));
    /// queue.start_hw_queue(0);
    /// assert_eq!(queue.usage(), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn stop_hw_queue(&self, hctx: usize) {
        if let Some(h) = self.hctxs.get(hctx) {
            h.stopped.store(true, Ordering::SeqCst);
        }
    }

    /// Lets a stopped hardware queue dispatch again, and runs it.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.stop_hw_queue(0);
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.start_hw_queue(0); // the queued request goes to the driver
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// assert!(!queue.has_work(0));
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn start_hw_queue(&self, hctx: usize) {
        if let Some(h) = self.hctxs.get(hctx) {
            h.stopped.store(false, Ordering::SeqCst);
            self.run_hw_queue(hctx);
        }
    }

    // ----- hardware queue deactivation -----

    /// The CPUs of `hctx` went away: no request is made for it any more (its CPUs' bios
    /// go to another active hardware queue); what it holds still dispatches and completes.
    /// Returns whether it has drained already (see [`is_hctx_drained`](Self::is_hctx_drained)).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let platform = StdPlatform::with_cpus(2);
    /// platform.pin_current_thread(0); // this thread is CPU 0, served by hardware queue 0
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, platform, Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!queue.deactivate_hctx(0)); // it holds a request
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap(); // goes to hardware queue 1
    /// let held = host.driver().take();
    /// let hctxs: Vec<usize> = held.iter().map(|rq| queue.request(rq).unwrap().hctx()).collect();
    /// assert_eq!(hctxs, [0, 1]);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// assert!(queue.is_hctx_drained(0));
    /// ```
    pub fn deactivate_hctx(&self, hctx: usize) -> bool {
        let Some(h) = self.hctxs.get(hctx) else {
            return true;
        };
        h.inactive.store(true, Ordering::SeqCst);
        self.run_hw_queue(hctx);
        self.is_hctx_drained(hctx)
    }

    /// Whether no request of this queue is allocated on `hctx`.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!queue.is_hctx_drained(0));
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// assert!(queue.is_hctx_drained(0));
    /// assert!(queue.is_hctx_drained(7)); // no such hardware queue
    /// ```
    pub fn is_hctx_drained(&self, hctx: usize) -> bool {
        if hctx >= self.hctxs.len() {
            return true;
        }
        let Some(_inside) = self.enter_any() else {
            // The tags are being replaced: the queue is drained.
            return true;
        };
        let mut busy = false;
        self.tags().for_each_busy(Some(hctx), |_| {
            busy = true;
            false
        });
        !busy && self.hctx_is_empty(hctx)
    }

    /// Its CPUs are back.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let platform = StdPlatform::with_cpus(2);
    /// platform.pin_current_thread(0); // this thread is CPU 0, served by hardware queue 0
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, platform, Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(queue.deactivate_hctx(0));
    /// queue.activate_hctx(0);
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().hctx(), 0);
    /// queue.end_request(rq, Status::Ok);
    /// ```
    pub fn activate_hctx(&self, hctx: usize) {
        if let Some(h) = self.hctxs.get(hctx) {
            h.inactive.store(false, Ordering::SeqCst);
        }
    }

    fn hctx_is_empty(&self, hctx: usize) -> bool {
        let h = &self.hctxs[hctx];
        h.dispatch_len.load(Ordering::SeqCst) == 0
            && h.pending.iter().all(|w| w.load(Ordering::SeqCst) == 0)
    }

    // ----- submission -----

    /// The calling CPU, within the set's.
    #[inline]
    fn cpu(&self) -> usize {
        self.platform()
            .current_cpu()
            .min(self.host.set.nr_cpus() - 1)
    }

    /// The CPU and the hardware queue for a bio.
    #[inline(always)]
    fn place(&self, bio: &Bio) -> Option<(usize, usize, QueueType)> {
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
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
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
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
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
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
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
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn submit_plugged<'q>(&'q self, plug: &mut Plug<'q, D>, bio: Bio) -> Result<(), Bio> {
        self.submit_inner(bio, Some(plug))
    }

    /// Submits a bio, waiting (spinning, with `std` yielding the thread) while it cannot go
    /// in. A bio marked [`BioFlags::NOWAIT`] ends with [`Status::Again`] instead of waiting.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// # use std::sync::Mutex;
    /// static ENDED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());
    /// fn done(bio: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push((bio.sector, status));
    /// }
    /// queue.freeze_start();
    /// queue.submit_wait(Bio::new(Op::Read, 0, 8).flags(BioFlags::NOWAIT).end_io(done));
    /// assert_eq!(*ENDED.lock().unwrap(), [(0, Status::Again)]);
    /// queue.unfreeze();
    /// queue.submit_wait(Bio::new(Op::Read, 8, 8).end_io(done));
    /// assert_eq!(ENDED.lock().unwrap()[1], (8, Status::Ok));
    /// ```
    pub fn submit_wait(&self, mut bio: Bio) {
        loop {
            match self.submit(bio) {
                Ok(()) => return,
                Err(back) if back.flags.contains(BioFlags::NOWAIT) => {
                    self.splits.end(back, Status::Again);
                    return;
                }
                Err(back) => bio = back,
            }
            self.kick_requeue_list();
            wait_a_little();
        }
    }

    fn submit_inner<'q>(&'q self, bio: Bio, mut plug: Option<&mut Plug<'q, D>>) -> Result<(), Bio> {
        // The common bio in a few steps: no piece of a split, valid, one request whole.
        if !bio.flags.contains(BioFlags::SPLIT) && self.limits.fits_whole(&bio) {
            return match plug {
                None if !self.has_elevator.load(Ordering::Relaxed) => self.submit_direct(&bio),
                plug => self.submit_one(&bio, plug),
            };
        }
        let piece = self.splits.is_piece(&bio);
        if !piece {
            if let Some(status) = self.limits.check(&bio) {
                bio.complete(status);
                return Ok(());
            }
        }
        let len = self.split_len(&bio);
        if len >= bio.sectors {
            return self.submit_one(&bio, plug.as_deref_mut());
        }
        let mut rest = if piece { bio } else { self.splits.start(bio)? };
        // Whether part of the parent is in: then only the rest can come back.
        let mut any_in = piece;
        loop {
            let len = self.split_len(&rest);
            if len >= rest.sectors {
                return self.submit_one(&rest, plug.as_deref_mut());
            }
            let (first, tail) = self.splits.cut(rest, len);
            match self.submit_one(&first, plug.as_deref_mut()) {
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

    fn split_len(&self, bio: &Bio) -> u32 {
        let block = self.limits.logical_block_size / crate::bio::SECTOR_SIZE as u32;
        self.limits.split_len(bio).max(block.min(bio.sectors))
    }

    /// [`submit_one`](Self::submit_one) for the common submission: a read or write that
    /// fits one request whole ([`QueueLimits::fits_whole`]), with no plug and no elevator,
    /// the whole way in one frame (with an elevator after all, the general way).
    fn submit_direct(&self, bio: &Bio) -> Result<(), Bio> {
        // The bio is read field by field here and copied only after `enter`'s locked
        // operation: a caller that has just built it has stores in flight, and a wide copy
        // of them would wait for them.
        if !self.enter() {
            return Err(*bio);
        }
        // Again with the usage count held: an elevator switch freezes the queue first, so
        // one that came in since the caller looked shows now.
        if self.has_elevator.load(Ordering::Relaxed) {
            self.exit();
            return self.submit_one(bio, None);
        }
        let Some((cpu, hctx, kind)) = self.place(bio) else {
            self.exit();
            self.splits.end(*bio, Status::IoErr);
            return Ok(());
        };
        if crate::limits::mergeable(bio.op, bio.flags) && self.try_ctx_merge(cpu, kind, bio) {
            self.exit();
            return Ok(());
        }
        // One data segment: `fits_whole` said so.
        debug_assert_eq!(self.limits.segments(bio.op, bio.sector, bio.sectors), 1);
        match self.tags().alloc_with_bio(&Alloc::new(hctx, cpu), *bio, 1) {
            Ok(rq) => {
                self.issue_direct(rq, cpu, hctx, kind);
                Ok(())
            }
            Err((e, bio)) => self.alloc_failed(e, bio),
        }
    }

    /// With the usage count held, no request could be had for `bio`: without one free it
    /// comes back to be submitted again; on any other error it ends with an I/O error.
    #[cold]
    fn alloc_failed(&self, error: TagError, bio: Bio) -> Result<(), Bio> {
        self.exit();
        if error == TagError::WouldBlock {
            return Err(bio);
        }
        self.splits.end(bio, Status::IoErr);
        Ok(())
    }

    /// Submits a bio that fits one request.
    fn submit_one<'q>(&'q self, bio: &Bio, mut plug: Option<&mut Plug<'q, D>>) -> Result<(), Bio> {
        // Copied whole only after `enter`'s locked operation (see `submit_direct`).
        if !self.enter() {
            return Err(*bio);
        }
        let Some((cpu, hctx, kind)) = self.place(bio) else {
            self.exit();
            self.splits.end(*bio, Status::IoErr);
            return Ok(());
        };
        // The elevator's depth limit for this bio, once looked up.
        let mut shallow = None;
        let mut bio = *bio;
        if crate::limits::mergeable(bio.op, bio.flags) {
            if let Some(plug) = plug.as_deref_mut() {
                match plug.try_merge(self, bio) {
                    Ok(()) => {
                        self.exit();
                        return Ok(());
                    }
                    Err(back) => bio = back,
                }
            }
            if self.has_elevator.load(Ordering::Relaxed) {
                if plug.is_none() && bio.op != Op::Flush {
                    return self.merge_or_insert(bio, cpu, hctx, kind);
                }
                match self.try_elevator_merge(bio, &mut shallow) {
                    Ok(()) => {
                        self.exit();
                        return Ok(());
                    }
                    Err(back) => bio = back,
                }
            } else if self.try_ctx_merge(cpu, kind, &bio) {
                self.exit();
                return Ok(());
            }
        }
        self.alloc_and_go(bio, cpu, hctx, kind, plug, shallow)
    }

    /// With the usage count held, no plug, and an elevator: the elevator merges `bio`, or
    /// a request is allocated for it (without waiting), prepared and inserted, all under
    /// one hold of the elevator's lock; then the hardware queue runs. With no scheduler tag
    /// free, the lock is let go and [`alloc_and_go`](Self::alloc_and_go) decides.
    fn merge_or_insert(
        &self,
        bio: Bio,
        cpu: usize,
        hctx: usize,
        kind: QueueType,
    ) -> Result<(), Bio> {
        let tags = self.tags();
        let cx = self.elv_cx();
        let mut guard = self.elevator.lock();
        let Some(e) = guard.as_mut() else {
            drop(guard);
            return self.alloc_and_go(bio, cpu, hctx, kind, None, None);
        };
        let bio = match e.bio_merge(&cx, bio) {
            Ok(()) => {
                drop(guard);
                self.exit();
                return Ok(());
            }
            Err(bio) => bio,
        };
        let shallow = e.limit_depth(bio.op, bio.flags);
        let mut alloc = Alloc::new(hctx, cpu);
        alloc.shallow_depth = shallow;
        // A scheduler tag is a bit taken from a bitmap: nothing here waits or locks.
        let Ok(rq) = tags.alloc(&alloc) else {
            drop(guard);
            return self.alloc_and_go(bio, cpu, hctx, kind, None, Some(shallow));
        };
        let mut rq = rq;
        if let Err(bio) = self.fill(&mut rq, bio) {
            drop(guard);
            self.abandon(rq, bio);
            return Ok(());
        }
        e.prepare_request(&cx, &mut rq);
        e.insert_request(&cx, rq, false);
        let claim = self.claim_and_pick(&mut **e, &cx, hctx);
        drop(guard);
        self.run_after_insert(hctx, claim, &cx);
        Ok(())
    }

    /// Under the elevator's lock `e`, just after an insertion for `hctx`: when nothing is
    /// on `hctx`'s dispatch list and nobody runs it, claims its runner and makes the run's
    /// first pick under the same hold (none, [`Pick::Empty`], on a halted hardware queue).
    /// Returns the epoch read before the pick and the pick, or `None` when the hardware
    /// queue is to be run the ordinary way.
    #[inline(always)]
    fn claim_and_pick(
        &self,
        e: &mut dyn Elevator,
        cx: &ElvCx<'_>,
        hctx: usize,
    ) -> Option<(u64, Pick)> {
        if hctx >= self.hctxs.len() || !self.claim_unqueued(hctx) {
            return None;
        }
        let epoch = self.host.epoch();
        if self.halted(hctx) {
            return Some((epoch, Pick::Empty));
        }
        Some((epoch, self.pick(e, cx, hctx)))
    }

    /// After an insertion for `hctx`, with the elevator's lock let go: the run that
    /// [`claim_and_pick`](Self::claim_and_pick) began, or an ordinary run sharing the
    /// time the insertion read, if it read one.
    #[inline(always)]
    fn run_after_insert(&self, hctx: usize, claim: Option<(u64, Pick)>, cx: &ElvCx<'_>) {
        match claim {
            Some((epoch, pick)) => {
                if self.serve_pick(hctx, epoch, pick) {
                    self.dispatch_elevator(hctx, epoch, None);
                }
                self.finish_run(hctx);
            }
            None => self.run_hw_queue_at(hctx, cx.time_read()),
        }
    }

    /// Puts `bio` in the fresh request `rq`, with its segment count. That cannot fail for
    /// our own request; should it, the bio comes back, for [`abandon`](Self::abandon).
    #[inline]
    fn fill(&self, rq: &mut Rq, bio: Bio) -> Result<(), Bio> {
        let segments = self.limits.segments(bio.op, bio.sector, bio.sectors);
        self.tags()
            .set_bio_segments(rq, bio, segments)
            .map_err(|_| bio)
    }

    /// Gives up a submission whose request could not take its bio: the request freed, the
    /// usage count let go, the bio ended. Nothing is lost.
    fn abandon(&self, rq: Rq, bio: Bio) {
        let _ = self.tags().free(rq);
        self.exit();
        self.splits.end(bio, Status::IoErr);
    }

    /// With the usage count held: a request for `bio`, then plug, insert or issue.
    fn alloc_and_go<'q>(
        &'q self,
        bio: Bio,
        cpu: usize,
        hctx: usize,
        kind: QueueType,
        plug: Option<&mut Plug<'q, D>>,
        shallow: Option<Option<usize>>,
    ) -> Result<(), Bio> {
        let tags = self.tags();
        let flush = bio.op == Op::Flush;
        let elevated = self.has_elevator.load(Ordering::Relaxed) && !flush;
        let mut alloc = Alloc::new(hctx, cpu);
        if elevated {
            alloc.shallow_depth = match shallow {
                Some(depth) => depth,
                None => self
                    .elevator
                    .lock()
                    .as_ref()
                    .and_then(|e| e.limit_depth(bio.op, bio.flags)),
            };
        }
        let segments = self.limits.segments(bio.op, bio.sector, bio.sectors);
        let mut rq = match tags.alloc_with_bio(&alloc, bio, segments) {
            Ok(rq) => rq,
            Err((e, bio)) => return self.alloc_failed(e, bio),
        };
        if elevated {
            let cx = self.elv_cx();
            let mut guard = self.elevator.lock();
            if let Some(e) = guard.as_mut() {
                e.prepare_request(&cx, &mut rq);
                if plug.is_none() {
                    // Prepared, inserted and, on an idle hardware queue, dispatched under
                    // one hold of the lock.
                    e.insert_request(&cx, rq, false);
                    let claim = self.claim_and_pick(&mut **e, &cx, hctx);
                    drop(guard);
                    self.run_after_insert(hctx, claim, &cx);
                    return Ok(());
                }
            }
        }
        if let Some(plug) = plug {
            plug.add(self, rq);
            return Ok(());
        }
        self.insert_and_run(rq, cpu, hctx, kind, elevated, flush);
        Ok(())
    }

    /// Inserts a fresh request (or issues it directly when the hardware queue is idle and
    /// unscheduled) and runs its hardware queue. `flush`: the request is a flush.
    fn insert_and_run(
        &self,
        rq: Rq,
        cpu: usize,
        hctx: usize,
        kind: QueueType,
        elevated: bool,
        flush: bool,
    ) {
        if elevated {
            let cx = self.elv_cx();
            if let Some(e) = self.elevator.lock().as_mut() {
                e.insert_request(&cx, rq, false);
            } else {
                // The elevator went away under us (it cannot: switching freezes first).
                self.push_dispatch(hctx, rq, false);
            }
            self.run_hw_queue(hctx);
            return;
        }
        if flush {
            self.push_dispatch(hctx, rq, false);
            self.run_hw_queue(hctx);
            return;
        }
        self.issue_direct(rq, cpu, hctx, kind);
    }

    /// Without an elevator, a fresh request that is no flush: issued directly when its
    /// hardware queue is idle (nothing queued ahead, the hardware not busy, and nobody
    /// running it), else queued on the CPU's software queue and the hardware queue run.
    #[inline(always)]
    fn issue_direct(&self, rq: Rq, cpu: usize, hctx: usize, kind: QueueType) {
        let h = &self.hctxs[hctx];
        if self.claim_idle(hctx) {
            if self.halted(hctx) {
                self.push_ctx_for(cpu, kind, hctx, rq);
            } else {
                let epoch = self.host.epoch();
                if let Issued::GaveUp(rq, status) = self.issue_one(hctx, hctx, rq, true, None, None)
                {
                    let mut batch = h.scratch.lock();
                    batch.push_back(rq);
                    self.give_up(hctx, &mut batch, epoch, status);
                }
            }
            self.finish_run(hctx);
            return;
        }
        self.push_ctx_for(cpu, kind, hctx, rq);
        self.run_hw_queue(hctx);
    }

    /// Claims `hctx`'s runner for a direct issue when the hardware queue is idle: nothing
    /// on its dispatch list, the hardware not busy, and nobody running it. The claimer
    /// checks [`halted`](Self::halted) next and ends with [`finish_run`](Self::finish_run).
    fn claim_idle(&self, hctx: usize) -> bool {
        !self.hctxs[hctx].busy.load(Ordering::Relaxed) && self.claim_unqueued(hctx)
    }

    /// Claims `hctx`'s runner when nothing is on its dispatch list and nobody runs it or
    /// asked for a run.
    #[inline(always)]
    fn claim_unqueued(&self, hctx: usize) -> bool {
        let h = &self.hctxs[hctx];
        h.dispatch_len.load(Ordering::SeqCst) == 0
            && h.run
                .compare_exchange(0, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    fn push_ctx(&self, cpu: usize, kind: QueueType, rq: Rq) {
        let index = cpu * QueueType::ALL.len() + kind as usize;
        let ctx = &self.ctxs[index];
        ctx.list.lock().push_back(rq);
        let h = &self.hctxs[ctx.hctx];
        h.pending[ctx.pos / 64].fetch_or(1 << (ctx.pos % 64), Ordering::SeqCst);
    }

    fn push_dispatch(&self, hctx: usize, rq: Rq, at_head: bool) {
        let h = &self.hctxs[hctx];
        let mut list = h.dispatch.lock();
        if at_head {
            list.push_front(rq);
        } else {
            list.push_back(rq);
        }
        h.dispatch_len.store(list.len(), Ordering::SeqCst);
    }

    /// Merges `bio` into a queued request through the elevator; a refused merge also looks
    /// up the bio's depth limit (into `shallow`) under the same lock, for the allocation
    /// that follows.
    fn try_elevator_merge(&self, bio: Bio, shallow: &mut Option<Option<usize>>) -> Result<(), Bio> {
        let cx = self.elv_cx();
        let mut guard = self.elevator.lock();
        match guard.as_mut() {
            Some(e) => e.bio_merge(&cx, bio).inspect_err(|bio| {
                *shallow = Some(e.limit_depth(bio.op, bio.flags));
            }),
            None => Err(bio),
        }
    }

    /// Without an elevator: merges `bio` into one of the newest requests of the CPU's
    /// software queue; whether it did (else the bio is still the caller's).
    #[inline(always)]
    fn try_ctx_merge(&self, cpu: usize, kind: QueueType, bio: &Bio) -> bool {
        let index = cpu * QueueType::ALL.len() + kind as usize;
        let ctx = &self.ctxs[index];
        if ctx.pos == usize::MAX {
            return false;
        }
        // Nothing queued here (its bit is set once a request is in): no lock to take. A
        // request whose bit is not set yet only misses a merge.
        let bit = 1u64 << (ctx.pos % 64);
        if self.hctxs[ctx.hctx].pending[ctx.pos / 64].load(Ordering::Relaxed) & bit == 0 {
            return false;
        }
        self.ctx_merge_locked(ctx, bio)
    }

    /// [`try_ctx_merge`](Self::try_ctx_merge) once something is queued: the scan, under the
    /// software queue's lock.
    #[inline(never)]
    fn ctx_merge_locked(&self, ctx: &SwCtx<D>, bio: &Bio) -> bool {
        let mut list = ctx.list.lock();
        let tags = self.tags();
        list.iter_mut()
            .rev()
            .take(CTX_MERGE_SCAN)
            .any(|rq| merge_into(tags, &self.limits, rq, bio))
    }

    // ----- running and dispatch -----

    /// Runs hardware queue `hctx`: dispatches what it holds to the driver, unless someone
    /// else is doing so (who then goes round again).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::atomic::{AtomicBool, Ordering};
    /// # struct Busy(AtomicBool);
    /// # impl Driver for Busy {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         if !self.0.swap(true, Ordering::Relaxed) {
    /// #             return Err(Rejected { rq, status: Status::Resource });
    /// #         }
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// // `Busy` turns down its first request ("not now"), then completes everything.
    /// let platform = StdPlatform::new();
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(queue.usage(), 1); // turned down; nothing in flight, so a kick was asked for
    /// for hctx in platform.take_kicks() {
    ///     queue.run_hw_queue(hctx); // what a platform's kick handler does
    /// }
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn run_hw_queue(&self, hctx: usize) {
        self.run_hw_queue_at(hctx, None);
    }

    /// [`run_hw_queue`](Self::run_hw_queue), the first dispatch taking `now` as the time
    /// when the caller read it a moment ago (a submission through the elevator).
    fn run_hw_queue_at(&self, hctx: usize, now: Option<u64>) {
        let Some(h) = self.hctxs.get(hctx) else {
            return;
        };
        // Nobody running and no run asked for: claim the runner at once (the common case,
        // one operation instead of asking and then claiming).
        let claimed = h
            .run
            .compare_exchange(0, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !claimed && !self.claim_asked(h) {
            return;
        }
        self.dispatch(hctx, now);
        self.finish_run(hctx);
    }

    /// Asks for a run of `h` and claims its runner unless somebody runs it: whether the
    /// caller is now the runner (if not, the runner sees the request and runs again).
    fn claim_asked(&self, h: &HwCtx<D>) -> bool {
        if h.run.fetch_or(PENDING, Ordering::SeqCst) & RUNNING != 0 {
            return false;
        }
        loop {
            let cur = h.run.load(Ordering::SeqCst);
            if cur & RUNNING != 0 || cur & PENDING == 0 {
                return false;
            }
            if h.run
                .compare_exchange(cur, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// As the runner: stop, unless a run was asked for meanwhile — then dispatch again.
    fn finish_run(&self, hctx: usize) {
        let h = &self.hctxs[hctx];
        loop {
            if h.run
                .compare_exchange(RUNNING, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return;
            }
            h.run.fetch_and(!PENDING, Ordering::SeqCst);
            self.dispatch(hctx, None);
        }
    }

    /// Runs every hardware queue with work (after unquiesce, unfreeze, a start).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::atomic::{AtomicBool, Ordering};
    /// # struct Busy(AtomicBool);
    /// # impl Driver for Busy {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         if !self.0.swap(true, Ordering::Relaxed) {
    /// #             return Err(Rejected { rq, status: Status::Resource });
    /// #         }
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// // `Busy` turns down its first request ("not now"), then completes everything.
    /// let platform = StdPlatform::new();
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(queue.has_work(0));
    /// queue.run_hw_queues();
    /// assert!(!queue.has_work(0));
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn run_hw_queues(&self) {
        for hctx in 0..self.hctxs.len() {
            if self.has_work(hctx) {
                self.run_hw_queue(hctx);
            }
        }
    }

    /// Whether `hctx` holds requests to dispatch.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(!queue.has_work(0));
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(queue.has_work(0));
    /// assert!(!queue.has_work(5)); // no such hardware queue
    /// queue.unquiesce();
    /// assert!(!queue.has_work(0));
    /// ```
    pub fn has_work(&self, hctx: usize) -> bool {
        if hctx >= self.hctxs.len() {
            return false;
        }
        if !self.hctx_is_empty(hctx) {
            return true;
        }
        self.has_elevator.load(Ordering::SeqCst)
            && self
                .elevator
                .lock()
                .as_ref()
                .is_some_and(|e| e.has_work(hctx))
    }

    /// Asks the platform to run `hctx` soon, from another context.
    fn kick(&self, hctx: usize) {
        self.kicked.mark(hctx);
        self.host.kicked.mark(self.slot);
        self.platform().kick(hctx);
    }

    /// Asks the platform to run `hctx` after `delay_ns`.
    fn kick_after(&self, hctx: usize, delay_ns: u64) {
        self.kicked.mark(hctx);
        self.host.kicked.mark(self.slot);
        self.platform().kick_after(hctx, delay_ns);
    }

    /// A completion found `hctx` waiting: run it here, or (blocking drivers) kick it.
    fn rerun(&self, hctx: usize) {
        if self.host.set.flags().contains(TagSetFlags::BLOCKING) {
            self.kick(hctx);
        } else {
            self.run_hw_queue(hctx);
        }
    }

    /// The runner's work: the dispatch list, then the elevator or the software queues.
    fn dispatch(&self, hctx: usize, now: Option<u64>) {
        if self.halted(hctx) {
            return;
        }
        let epoch = self.host.epoch();
        let h = &self.hctxs[hctx];
        if h.dispatch_len.load(Ordering::SeqCst) != 0 {
            let mut batch = h.scratch.lock();
            {
                let mut list = h.dispatch.lock();
                batch.extend(list.drain(..));
                h.dispatch_len.store(0, Ordering::SeqCst);
            }
            if !self.issue_batch(hctx, &mut batch, epoch, None, false) {
                return;
            }
        }
        if self.has_elevator.load(Ordering::SeqCst) {
            // The batch is needed only to give requests back: locked then.
            self.dispatch_elevator(hctx, epoch, now);
            return;
        }
        let mut batch = h.scratch.lock();
        if h.busy.load(Ordering::Relaxed) {
            // One at a time, round robin over the CPUs, while the hardware is busy.
            loop {
                if !self.take_one(hctx, &mut batch) {
                    h.busy.store(false, Ordering::Relaxed);
                    return;
                }
                if !self.issue_batch(hctx, &mut batch, epoch, None, false) {
                    return;
                }
            }
        }
        self.take_all(hctx, &mut batch);
        if !batch.is_empty() {
            self.issue_batch(hctx, &mut batch, epoch, None, false);
        }
    }

    /// Moves every request of `hctx`'s software queues into `batch`.
    fn take_all(&self, hctx: usize, batch: &mut VecDeque<Rq>) {
        let h = &self.hctxs[hctx];
        for (w, word) in h.pending.iter().enumerate() {
            let mut bits = word.swap(0, Ordering::SeqCst);
            while bits != 0 {
                let pos = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                batch.extend(self.ctxs[h.ctxs[pos]].list.lock().drain(..));
            }
        }
    }

    /// Moves one request, from the next software queue with work, into `batch`.
    fn take_one(&self, hctx: usize, batch: &mut VecDeque<Rq>) -> bool {
        let h = &self.hctxs[hctx];
        let n = h.ctxs.len();
        let start = h.next_ctx.load(Ordering::Relaxed);
        for i in 0..n {
            let pos = (start + i) % n;
            let bit = 1u64 << (pos % 64);
            if h.pending[pos / 64].load(Ordering::SeqCst) & bit == 0 {
                continue;
            }
            h.pending[pos / 64].fetch_and(!bit, Ordering::SeqCst);
            let mut list = self.ctxs[h.ctxs[pos]].list.lock();
            if let Some(rq) = list.pop_front() {
                if !list.is_empty() {
                    h.pending[pos / 64].fetch_or(bit, Ordering::SeqCst);
                }
                drop(list);
                batch.push_back(rq);
                h.next_ctx.store(pos + 1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// The elevator's part of a run of `hctx`: requests one at a time, each taken under one
    /// hold of the elevator's lock with the budget and the check for more work.
    ///
    /// `now`: the time the caller read, for the first pick.
    fn dispatch_elevator(&self, hctx: usize, epoch: u64, mut now: Option<u64>) {
        loop {
            if self.halted(hctx) {
                return;
            }
            // The first dispatch may take the caller's time; later ones read their own.
            let elv_cx = match now.take() {
                Some(t) => ElvCx::with_backend(self, &self.limits, t),
                None => self.elv_cx(),
            };
            let pick = {
                let mut guard = self.elevator.lock();
                let Some(e) = guard.as_mut() else {
                    return;
                };
                self.pick(&mut **e, &elv_cx, hctx)
            };
            if !self.serve_pick(hctx, epoch, pick) {
                return;
            }
        }
    }

    /// As `hctx`'s runner, with the elevator's lock let go: issues what
    /// [`pick`](Self::pick) gave, or gives up. Returns whether to pick again: the
    /// elevator had work left after the request it gave. With none left the run is done:
    /// work inserted since then asked for a run of its own, which this runner's
    /// [`finish_run`](Self::finish_run) sees.
    #[inline(always)]
    fn serve_pick(&self, hctx: usize, epoch: u64, pick: Pick) -> bool {
        let h = &self.hctxs[hctx];
        let cx = self.cx(hctx);
        let driver = self.driver();
        let (rq, more, time) = match pick {
            Pick::Empty => return false,
            Pick::NoBudget => {
                self.give_up(hctx, &mut h.scratch.lock(), epoch, Status::Resource);
                return false;
            }
            Pick::Held => {
                // Work held back (a higher class in flight, idling): wait for a completion
                // like any give-up, or for the platform when nothing is in flight.
                driver.put_budget(&cx);
                self.budget_returned(hctx);
                let now = self.platform().now_ns();
                let delay = self
                    .next_timer()
                    .map_or(RESOURCE_DELAY_NS, |at| at.saturating_sub(now));
                self.give_up_for(hctx, &mut h.scratch.lock(), epoch, Status::Resource, delay);
                return false;
            }
            Pick::Got { rq, more, time } => (rq, more, time),
        };
        let own = self.rq_hctx(&rq, hctx);
        if own != hctx {
            // Another hardware queue's request: its own runner issues it (and checks
            // whether that queue may dispatch), so `last` and commits stay per queue.
            driver.put_budget(&cx);
            self.budget_returned(hctx);
            self.push_dispatch(own, rq, false);
            self.run_hw_queue(own);
            return more;
        }
        match self.issue_one(hctx, hctx, rq, true, Some(hctx), time) {
            Issued::Queued | Issued::Ended => more,
            Issued::GaveUp(rq, status) => {
                let mut batch = h.scratch.lock();
                batch.push_back(rq);
                self.give_up(hctx, &mut batch, epoch, status);
                false
            }
        }
    }

    /// Under the elevator's lock, as `hctx`'s runner: whether the elevator has work, the
    /// driver's budget for it, the request, and whether work remains after it.
    #[inline(always)]
    fn pick(&self, e: &mut dyn Elevator, elv_cx: &ElvCx<'_>, hctx: usize) -> Pick {
        if !e.has_work(hctx) {
            return Pick::Empty;
        }
        if !self.driver().get_budget(&self.cx(hctx)) {
            return Pick::NoBudget;
        }
        match e.dispatch_request(elv_cx, hctx) {
            Some(rq) => Pick::Got {
                rq,
                more: e.has_work(hctx),
                time: elv_cx.stamp_read(),
            },
            None => Pick::Held,
        }
    }

    /// Issues `batch` in order; on a give-up puts the rest back and arranges the restart.
    /// Returns whether all of it went.
    ///
    /// `now`, when given, is the start of every request of the batch. `all_own`: every
    /// request of the batch is known to be `hctx`'s, so none needs looking up.
    fn issue_batch(
        &self,
        hctx: usize,
        batch: &mut VecDeque<Rq>,
        epoch: u64,
        now: Option<u64>,
        all_own: bool,
    ) -> bool {
        // The hardware queue with a request issued as not `last`, owed a `commit_rqs`. A
        // batch may hold requests of other hardware queues (an elevator hands any runner
        // any request): `last` and the commit follow each request's own.
        let mut owed: Option<usize> = None;
        let commit = |owed: &mut Option<usize>| {
            if let Some(h) = owed.take() {
                self.driver().commit_rqs(&self.cx(h));
            }
        };
        // The hardware queue of the request at the front, when the one before looked.
        let mut front_own: Option<usize> = None;
        while let Some(rq) = batch.pop_front() {
            if self.halted(hctx) {
                batch.push_front(rq);
                self.put_back(hctx, batch);
                commit(&mut owed);
                return false;
            }
            let own = front_own.take().unwrap_or_else(|| {
                if all_own {
                    hctx
                } else {
                    self.rq_hctx(&rq, hctx)
                }
            });
            if owed.is_some_and(|h| h != own) {
                commit(&mut owed);
            }
            front_own = batch.front().map(|next| {
                if all_own {
                    hctx
                } else {
                    self.rq_hctx(next, hctx)
                }
            });
            let last = front_own.is_none_or(|next| next != own);
            match self.issue_one(hctx, own, rq, last, None, now) {
                Issued::Queued => owed = (!last).then_some(own),
                Issued::Ended => {}
                Issued::GaveUp(rq, status) => {
                    batch.push_front(rq);
                    commit(&mut owed);
                    self.give_up(hctx, batch, epoch, status);
                    return false;
                }
            }
        }
        commit(&mut owed);
        true
    }

    /// The hardware queue `rq` was made for (`default` if it cannot be told).
    fn rq_hctx(&self, rq: &Rq, default: usize) -> usize {
        self.tags().request(rq).map_or(default, |r| r.hctx())
    }

    /// Issues one request: budget (unless `budget` says which hardware queue's context
    /// holds one), driver tag, start, `queue_rq` — on `hctx`, the request's own hardware
    /// queue, which need not be the `runner`'s (an elevator may hand any runner any
    /// request).
    fn issue_one(
        &self,
        runner: usize,
        hctx: usize,
        mut rq: Rq,
        last: bool,
        budget: Option<usize>,
        now: Option<u64>,
    ) -> Issued {
        let tags = self.tags();
        let cx = self.cx(hctx);
        let driver = self.driver();
        match budget {
            Some(held) if held == hctx => {}
            Some(held) => {
                // Taken on the runner's context: move it to the request's.
                driver.put_budget(&self.cx(held));
                if !driver.get_budget(&cx) {
                    self.budget_returned(runner);
                    return Issued::GaveUp(rq, Status::Resource);
                }
            }
            None => {
                if !driver.get_budget(&cx) {
                    return Issued::GaveUp(rq, Status::Resource);
                }
            }
        }
        // The start stamp, and so the timeout deadline, needs only the coarse clock; the
        // elevator's dispatch may have read the clock a moment ago, and one read serves.
        let now = now.unwrap_or_else(|| self.platform().coarse_now_ns());
        // Without scheduler tags a request holds its driver tag from its allocation.
        let started = if tags.has_scheduler() {
            tags.tag_and_start(&mut rq, now)
        } else {
            tags.start(&mut rq, now).map(|()| true)
        };
        match started {
            Ok(true) => {}
            Ok(false) => {
                driver.put_budget(&cx);
                self.budget_returned(runner);
                return Issued::GaveUp(rq, Status::Resource);
            }
            Err(_) => {
                driver.put_budget(&cx);
                self.budget_returned(runner);
                self.end_unissued(rq, Status::IoErr);
                return Issued::Ended;
            }
        }
        self.driver_in();
        match driver.queue_rq(&cx, rq, last) {
            Ok(()) => Issued::Queued,
            Err(Rejected { mut rq, status }) => {
                self.driver_out();
                driver.put_budget(&cx);
                if matches!(status, Status::Resource | Status::DevResource) {
                    let _ = tags.requeue(&mut rq);
                    if self.has_elevator.load(Ordering::Relaxed) {
                        // Back to waiting without a driver tag, as Linux's requeue.
                        let _ = tags.put_driver_tag(&mut rq);
                    }
                    self.budget_returned(runner);
                    Issued::GaveUp(rq, status)
                } else {
                    let status = if status.is_ok() {
                        Status::IoErr
                    } else {
                        status
                    };
                    self.end_unissued(rq, status);
                    Issued::Ended
                }
            }
        }
    }

    /// One more request in the driver.
    fn driver_in(&self) {
        self.host.flight.fetch_add(1, Ordering::SeqCst);
    }

    /// One request fewer in the driver.
    fn driver_out(&self) {
        self.host.flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// A runner gave back a budget or a driver tag without a completion: other hardware
    /// queues waiting for one run again (not the runner itself, which is about to give up
    /// and mark itself; marking it here would make it chase its own tail).
    fn budget_returned(&self, runner: usize) {
        if !self.host.restart.is_empty() {
            self.host.rerun_waiting(Some((self.slot, runner)));
        }
    }

    /// Puts `batch` back at the head of `hctx`'s dispatch list, in order.
    fn put_back(&self, hctx: usize, batch: &mut VecDeque<Rq>) {
        let h = &self.hctxs[hctx];
        let mut list = h.dispatch.lock();
        while let Some(rq) = batch.pop_back() {
            list.push_front(rq);
        }
        h.dispatch_len.store(list.len(), Ordering::SeqCst);
    }

    /// The dispatch gives up: requests back, restart marked, and the completion epoch
    /// checked so a completion that came in meanwhile is not missed.
    fn give_up(&self, hctx: usize, batch: &mut VecDeque<Rq>, epoch: u64, status: Status) {
        self.give_up_for(hctx, batch, epoch, status, RESOURCE_DELAY_NS);
    }

    /// [`give_up`](Self::give_up), with the delay of the platform's rerun should nothing be
    /// in flight.
    fn give_up_for(
        &self,
        hctx: usize,
        batch: &mut VecDeque<Rq>,
        epoch: u64,
        status: Status,
        delay_ns: u64,
    ) {
        self.put_back(hctx, batch);
        let h = &self.hctxs[hctx];
        h.busy.store(true, Ordering::Relaxed);
        self.restart.mark(hctx);
        self.host.restart.mark(self.slot);
        seqcst_pair();
        if self.host.epoch() != epoch {
            // A completion came in after we read the epoch; it may have drained before our
            // mark. Go round again ourselves.
            h.run.fetch_or(PENDING, Ordering::SeqCst);
        } else if self.host.driver_idle() {
            // Nothing in flight can complete and restart us: have the platform run us.
            let _ = status;
            self.kick_after(hctx, delay_ns);
        }
    }

    // ----- completion -----

    /// Ends a request the driver took: its bios end with `status` (each piece of a split bio
    /// counting towards its parent), its tags and budget go back, and the hardware queues
    /// waiting for that rerun.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// static ENDED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());
    /// fn done(bio: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push((bio.sector, status));
    /// }
    /// queue.submit(Bio::new(Op::Write, 0, 8).end_io(done)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.end_request(rq, Status::IoErr);
    /// assert_eq!(*ENDED.lock().unwrap(), [(0, Status::IoErr)]);
    /// assert_eq!((host.set().busy(), queue.usage()), (0, 0));
    /// ```
    pub fn end_request(&self, rq: Rq, status: Status) {
        self.end_one(rq, status, true);
        self.host.restart_after(1);
    }

    /// Ends a batch of requests the driver took (Linux's batched completion): as
    /// [`end_request`](Self::end_request) for each, with one restart pass at the end.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(host.in_driver(), 2);
    /// let held = host.driver().take();
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// assert_eq!((host.in_driver(), queue.usage()), (0, 0));
    /// ```
    pub fn end_requests(&self, batch: impl IntoIterator<Item = (Rq, Status)>) {
        let mut ended = 0;
        for (rq, status) in batch {
            self.end_one(rq, status, true);
            ended += 1;
        }
        if ended != 0 {
            self.host.restart_after(ended);
        }
    }

    /// Ends a request that never reached the driver (an error before issue).
    fn end_unissued(&self, rq: Rq, status: Status) {
        self.end_one(rq, status, false);
        self.host.restart();
    }

    /// Ends one request. For an `issued` one the budget goes back here, and the caller
    /// counts it out of the driver with the restart ([`Host::restart_after`]).
    fn end_one(&self, rq: Rq, status: Status, issued: bool) {
        let splits = &self.splits;
        let elevated = self.has_elevator.load(Ordering::Relaxed);
        // The driver's hook, the elevator's, the ending and the free share one look-up of
        // the request (a request not ours has nothing to tell anybody: only the budget
        // goes back).
        let mut hctx = 0;
        let first = |rq: &Rq, request: &Request<D::Payload>, io: &RqIo| {
            hctx = request.hctx();
            self.driver().complete(&self.cx(hctx), request);
            // Flushes bypass the elevator.
            if elevated && io.op() != Op::Flush {
                self.elevator_done(rq, issued);
            }
        };
        if self
            .tags()
            .complete_with(rq, status, first, |bio, status| splits.end(bio, status))
            .is_ok()
        {
            self.exit();
        }
        if issued {
            self.driver().put_budget(&self.cx(hctx));
        }
    }

    /// Tells the elevator that `rq` ended: `issued` ones completed on the device first.
    fn elevator_done(&self, rq: &Rq, issued: bool) {
        let elv_cx = self.elv_cx();
        if let Some(e) = self.elevator.lock().as_mut() {
            if issued {
                e.completed_request(&elv_cx, rq);
            }
            e.finish_request(&elv_cx, rq);
        }
    }

    /// Frees a request whose bios merged into another.
    fn free_merged(&self, rq: Rq) {
        if self.tags().free(rq).is_ok() {
            self.exit();
        }
    }

    /// Polls hardware queue `hctx` for completions ([`Driver::poll`]); returns how many.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Completes requests only when polled.
    /// struct Polled(Mutex<Vec<Rq>>);
    /// impl Driver for Polled {
    ///     type Platform = StdPlatform;
    ///     type Payload = ();
    ///     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.0.lock().unwrap().push(rq);
    ///         Ok(())
    ///     }
    ///     fn poll(&self, cx: &HctxCx<'_, Self>) -> usize {
    ///         let done: Vec<Rq> = self.0.lock().unwrap().drain(..).collect();
    ///         let n = done.len();
    ///         cx.queue().end_requests(done.into_iter().map(|rq| (rq, Status::Ok)));
    ///         n
    ///     }
    /// }
    ///
    /// let driver = Polled(Mutex::new(Vec::new()));
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(queue.poll(0), 2);
    /// assert_eq!(queue.poll(0), 0);
    /// assert_eq!(queue.poll(3), 0); // no such hardware queue
    /// ```
    pub fn poll(&self, hctx: usize) -> usize {
        if hctx >= self.hctxs.len() {
            return 0;
        }
        self.driver().poll(&self.cx(hctx))
    }

    // ----- requeue -----

    /// Hands a request the driver took back, to be issued again (after a device reset, a
    /// path change): it waits on the requeue list until
    /// [`kick_requeue_list`](Self::kick_requeue_list), which `kick` asks for at once.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.requeue_request(rq, false);
    /// assert_eq!((queue.requeued(), host.in_driver()), (1, 0));
    /// queue.kick_requeue_list(); // issued again
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.requeue_request(rq, true); // issued again at once
    /// assert_eq!(queue.requeued(), 0);
    /// let rq = host.driver().take().pop().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().sector(), 0);
    /// queue.end_request(rq, Status::Ok);
    /// ```
    pub fn requeue_request(&self, mut rq: Rq, kick: bool) {
        let tags = self.tags();
        let hctx = tags.request(&rq).map_or(0, |r| r.hctx());
        let _ = tags.requeue(&mut rq);
        if self.has_elevator.load(Ordering::Relaxed) {
            let _ = tags.put_driver_tag(&mut rq);
            // Flushes bypass the elevator: it never saw this one.
            if tags.io(&rq).is_ok_and(|io| io.op() != Op::Flush) {
                let cx = self.elv_cx();
                if let Some(e) = self.elevator.lock().as_mut() {
                    e.requeue_request(&cx, &rq);
                }
            }
        }
        self.driver().put_budget(&self.cx(hctx));
        self.requeue.lock().push_back(rq);
        self.host.restart_after(1);
        if kick {
            self.kick_requeue_list();
        }
    }

    /// Sends every requeued request back to dispatch (ahead of new ones) and runs the
    /// hardware queues.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// for rq in host.driver().take() {
    ///     queue.requeue_request(rq, false);
    /// }
    /// assert!(host.driver().take().is_empty());
    /// queue.kick_requeue_list();
    /// let held = host.driver().take();
    /// let sectors: Vec<u64> = held.iter().map(|rq| queue.io(rq).unwrap().sector()).collect();
    /// assert_eq!(sectors, [0, 64]); // in the order they came back
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn kick_requeue_list(&self) {
        loop {
            let Some(rq) = self.requeue.lock().pop_front() else {
                return;
            };
            let tags = self.tags();
            let hctx = tags.request(&rq).map_or(0, |r| r.hctx());
            let elevated = self.has_elevator.load(Ordering::Relaxed)
                && tags.io(&rq).is_ok_and(|io| io.op() != Op::Flush);
            if elevated {
                let cx = self.elv_cx();
                if let Some(e) = self.elevator.lock().as_mut() {
                    e.insert_request(&cx, rq, true);
                }
            } else {
                self.push_dispatch(hctx, rq, false);
            }
            self.run_hw_queue(hctx);
        }
    }

    /// Requests waiting on the requeue list.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(queue.requeued(), 0);
    /// queue.requeue_request(host.driver().take().pop().unwrap(), false);
    /// assert_eq!(queue.requeued(), 1);
    /// queue.kick_requeue_list();
    /// assert_eq!(queue.requeued(), 0);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn requeued(&self) -> usize {
        self.requeue.lock().len()
    }

    // ----- timeouts -----

    /// Checks every request in flight against its deadline at `now_ns`: an expired one is
    /// claimed (once per dispatch) and the driver decides ([`Driver::timeout`]). Returns
    /// how many timed out. Call it periodically (Linux: each second or so).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let now = queue.platform().now_ns();
    /// assert_eq!(queue.check_timeouts(now), 0);
    /// let late = now + DEFAULT_TIMEOUT_NS;
    /// assert_eq!(queue.check_timeouts(late), 1); // `Hold` resets the timer (the default)
    /// assert_eq!(queue.check_timeouts(late), 0);
    /// assert_eq!(queue.check_timeouts(late + DEFAULT_TIMEOUT_NS), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn check_timeouts(&self, now_ns: u64) -> usize {
        let Some(_inside) = self.enter_any() else {
            return 0;
        };
        if self.usage() <= 1 {
            return 0; // only ourselves
        }
        // Claim the expired ones under the iteration lock; ask the driver outside it (its
        // handler may iterate, or end requests).
        let mut expired: Vec<(usize, u32, u64, u64)> = Vec::new();
        self.tags().for_each_busy(None, |busy| {
            let request = busy.request;
            let (generation, state) = request.snapshot();
            let deadline = request.deadline_ns();
            if state == RqState::InFlight
                && deadline <= now_ns
                && deadline != u64::MAX
                && request.swap_deadline(deadline, u64::MAX)
            {
                expired.push((busy.hctx, busy.tag, generation, deadline));
            }
            true
        });
        let mut fired = 0;
        let timeout = self.host.set.timeout_ns();
        let driver = self.driver();
        for (hctx, tag, generation, deadline) in expired {
            let Some(request) = self.tags().tag_to_rq(hctx, tag) else {
                continue;
            };
            if request.snapshot() != (generation, RqState::InFlight) {
                // Ended or restarted meanwhile; a new start set its own deadline, so this
                // puts ours back only if nobody moved it since.
                request.swap_deadline(u64::MAX, deadline);
                continue;
            }
            fired += 1;
            match driver.timeout(&self.cx(hctx), request) {
                TimeoutAction::Done => {}
                TimeoutAction::ResetTimer => {
                    request.swap_deadline(u64::MAX, now_ns.saturating_add(timeout));
                }
            }
        }
        self.timeouts.fetch_add(fired as u64, Ordering::Relaxed);
        fired
    }

    // ----- run-time changes -----

    /// Changes the number of scheduler tags (within those made), draining the queue first.
    ///
    /// # Errors
    /// Whatever [`QueueTags::set_nr_requests`] refuses ([`ConfigError::NoScheduler`]
    /// without an elevator).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// # use std::collections::VecDeque;
    /// # /// First in, first out.
    /// # #[derive(Default)]
    /// # struct Fifo(VecDeque<Rq>);
    /// # impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// # }
    /// assert_eq!(queue.set_nr_requests(8), Err(ConfigError::NoScheduler));
    /// queue.switch_elevator(Some(Box::new(Fifo::default())), Some(32)).unwrap();
    /// queue.set_nr_requests(8).unwrap();
    /// assert_eq!(queue.queue_tags().nr_requests(), Some(8));
    /// assert!(queue.set_nr_requests(64).is_err()); // more than were made
    /// ```
    pub fn set_nr_requests(&self, nr: usize) -> Result<(), ConfigError> {
        let _change = self.change.lock();
        if !self.has_elevator.load(Ordering::SeqCst) {
            return Err(ConfigError::NoScheduler);
        }
        self.lock_out();
        let result = self.tags().set_nr_requests(nr);
        if result.is_ok() {
            let nr_keys = self.tags().nr_keys();
            if let Some(e) = self.elevator.lock().as_mut() {
                e.depth_updated(nr, nr_keys);
            }
        }
        self.let_in();
        result
    }

    /// Switches the elevator (or to none) at run time: freezes (draining every request),
    /// quiesces, swaps the scheduler tags and the elevator, and lets I/O in again.
    /// Not to be called with requests of this queue in a plug of the calling thread.
    ///
    /// # Errors
    /// [`ConfigError::NoScheduler`] on a `NO_SCHED` set, bad `nr_requests`.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// # use std::collections::VecDeque;
    /// # /// First in, first out.
    /// # #[derive(Default)]
    /// # struct Fifo(VecDeque<Rq>);
    /// # impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// # }
    /// queue.switch_elevator(Some(Box::new(Fifo::default())), Some(16)).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// assert_eq!(queue.queue_tags().nr_requests(), Some(16));
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.switch_elevator(None, None).unwrap();
    /// assert_eq!(queue.elevator_name(), None);
    /// assert_eq!(queue.queue_tags().nr_requests(), None);
    ///
    /// let tags = TagSet::builder(8).flags(TagSetFlags::NO_SCHED);
    /// let host = Host::new(tags, StdPlatform::new(), Null).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let fifo = Box::new(Fifo::default());
    /// assert_eq!(queue.switch_elevator(Some(fifo), None), Err(ConfigError::NoScheduler));
    /// ```
    pub fn switch_elevator(
        &self,
        elevator: Option<Box<dyn Elevator>>,
        nr_requests: Option<usize>,
    ) -> Result<(), ConfigError> {
        let _change = self.change.lock();
        self.lock_out();
        // SAFETY: the change lock makes us the only changer; frozen with no usage left,
        // quiesced with no runner and `switching` set (all waited for in `lock_out`),
        // nothing else reaches the tags until `let_in`.
        let tags = unsafe { &mut *self.tags.get() };
        let result = match &elevator {
            Some(e) => tags
                .attach_scheduler(nr_requests, |init| self.host.driver.init_request(init))
                .and_then(|()| match e.min_shallow_depth() {
                    Some(depth) => tags.set_min_shallow_depth(depth),
                    None => Ok(()),
                }),
            None if tags.has_scheduler() => tags
                .detach_scheduler()
                .map_err(|_| ConfigError::SchedulerBusy),
            None => Ok(()),
        };
        if result.is_ok() {
            let mut elevator = elevator;
            if let (Some(e), Some(nr)) = (elevator.as_mut(), tags.nr_requests()) {
                e.depth_updated(nr, tags.nr_keys());
            }
            self.has_elevator
                .store(elevator.is_some(), Ordering::SeqCst);
            *self.elevator.lock() = elevator;
            // Room for every request the queue may now hold, made here, not per I/O.
            let capacity = self.host.set.depth() + tags.nr_requests().unwrap_or(0);
            self.reserve(capacity);
        }
        self.let_in();
        result
    }

    /// Makes the queue lists hold `capacity` requests without growing.
    fn reserve(&self, capacity: usize) {
        let grow = |list: &mut VecDeque<Rq>| {
            let len = list.len();
            list.reserve(capacity.saturating_sub(len));
        };
        grow(&mut self.requeue.lock());
        for h in self.hctxs.iter() {
            grow(&mut h.dispatch.lock());
            grow(&mut h.scratch.lock());
        }
        for ctx in self.ctxs.iter().filter(|c| c.pos != usize::MAX) {
            grow(&mut ctx.list.lock());
        }
    }
}

impl<D: Driver> ElvBackend for RequestQueue<D> {
    fn io<'a>(&'a self, rq: &'a Rq) -> Result<&'a RqIo, TagError> {
        self.tags().io(rq)
    }
    fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Result<&'a mut RqIo, TagError> {
        self.tags().io_mut(rq)
    }
    fn append(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        self.tags().append_bio(rq, bio)
    }
    fn prepend(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        self.tags().prepend_bio(rq, bio)
    }
    fn absorb(&self, into: &mut Rq, from: &mut Rq) -> Result<bool, TagError> {
        self.tags().merge_requests(into, from)
    }
    fn key(&self, rq: &Rq) -> usize {
        self.tags().key_of(rq)
    }
    fn hctx(&self, rq: &Rq) -> usize {
        self.tags().request(rq).map_or(0, |r| r.hctx())
    }
    fn now_ns(&self) -> u64 {
        self.platform().now_ns()
    }
    fn coarse_now_ns(&self) -> u64 {
        self.platform().coarse_now_ns()
    }
    fn nr_keys(&self) -> usize {
        self.tags().nr_keys()
    }
    fn free_merged(&self, rq: Rq) {
        RequestQueue::free_merged(self, rq);
    }
}

impl<D: Driver> Drop for RequestQueue<D> {
    fn drop(&mut self) {
        // Whatever is still queued here ends with an error; then split parents still
        // waiting for pieces the driver holds.
        let mut orphans: Vec<Rq> = Vec::new();
        orphans.extend(self.requeue.get_mut().drain(..));
        for h in self.hctxs.iter_mut() {
            orphans.extend(h.dispatch.get_mut().drain(..));
            orphans.extend(h.scratch.get_mut().drain(..));
        }
        for ctx in self.ctxs.iter_mut() {
            orphans.extend(ctx.list.get_mut().drain(..));
        }
        if let Some(mut e) = self.elevator.get_mut().take() {
            let cx = ElvCx::with_backend(&*self, &self.limits, 0);
            for hctx in 0..self.hctxs.len() {
                while let Some(rq) = e.dispatch_request(&cx, hctx) {
                    orphans.push(rq);
                }
            }
        }
        for rq in orphans {
            let splits = &self.splits;
            let _ = self.tags().complete_with(
                rq,
                Status::IoErr,
                |_, _, _| {},
                |bio, status| {
                    splits.end(bio, status);
                },
            );
        }
        self.splits.fail_all(Status::IoErr);
        // What the driver still holds will never end through this queue.
        if !self.host.driver_idle() {
            let mut held = 0;
            self.tags().for_each_busy(None, |busy| {
                held += u64::from(busy.request.state() == RqState::InFlight);
                true
            });
            self.host.flight.fetch_sub(held, Ordering::SeqCst);
        }
        if let Some(slot) = self.host.queues.lock().get_mut(self.slot) {
            *slot = None;
        }
    }
}

impl<D: Driver> fmt::Debug for RequestQueue<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestQueue")
            .field("slot", &self.slot)
            .field("nr_hw_queues", &self.hctxs.len())
            .field("usage", &self.usage())
            .field("elevator", &self.elevator_name())
            .finish_non_exhaustive()
    }
}

/// A usage count held; given back on drop.
struct Exit<'a, D: Driver>(&'a RequestQueue<D>);

/// A request queue's tags, kept from being replaced while this lives
/// ([`RequestQueue::queue_tags`]).
///
/// ```
/// # use blkmq_core::*;
/// # struct Null;
/// # impl Driver for Null {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         cx.queue().end_request(rq, Status::Ok);
/// #         Ok(())
/// #     }
/// # }
/// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
/// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// # use std::collections::VecDeque;
/// # /// First in, first out.
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
/// #         self.0.extend(rqs);
/// #     }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
/// #         self.0.pop_front()
/// #     }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// let tags: TagsGuard<'_, Null> = queue.queue_tags();
/// assert!(!tags.has_scheduler());
/// assert_eq!(tags.set().depth(), 8);
/// drop(tags); // before the tags may change
/// queue.switch_elevator(Some(Box::new(Fifo::default())), None).unwrap();
/// assert!(queue.queue_tags().has_scheduler());
/// ```
pub struct TagsGuard<'a, D: Driver>(Exit<'a, D>);

impl<D: Driver> core::ops::Deref for TagsGuard<'_, D> {
    type Target = QueueTags<D::Payload, D::Platform>;

    fn deref(&self) -> &Self::Target {
        self.0.0.tags()
    }
}

impl<D: Driver> fmt::Debug for TagsGuard<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TagsGuard").finish_non_exhaustive()
    }
}

impl<D: Driver> Drop for Exit<'_, D> {
    fn drop(&mut self) {
        self.0.exit();
    }
}

/// Merges `bio` into `rq` if the limits allow; true when it did.
fn merge_into<T, P: Platform>(
    tags: &QueueTags<T, P>,
    limits: &QueueLimits,
    rq: &mut Rq,
    bio: &Bio,
) -> bool {
    // Most attempts fail on position or kind, decided here in a few steps; the elevator's
    // merge, whose back end is a trait object, is the one merge that does it: the same
    // checks, the same segment count.
    if !tags
        .io(rq)
        .is_ok_and(|io| limits.merge_kind(io, bio).is_some())
    {
        return false;
    }
    ElvCx::new(tags, limits, 0).merge_bio(rq, *bio).is_ok()
}

/// Spins briefly (yields the thread under `std`).
fn wait_a_little() {
    #[cfg(all(feature = "std", not(loom)))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(any(feature = "std", loom)))]
    core::hint::spin_loop();
}

/// A submitter's batch of requests (Linux's `blk_plug`): requests gather here, a bio
/// merging into the newest request of its queue, until [`flush`](Self::flush) — when a new
/// request finds [`PLUG_MAX`] there ([`PLUG_MAX_MULTI`] across several queues) or follows
/// one of at least [`PLUG_FLUSH_BYTES`], or when the plug is dropped. A flush hands them
/// over in order: through [`Driver::queue_rqs`] when the driver has it, the queue has no
/// elevator and its tag set serves no other queue; else, with no elevator, straight to
/// each idle hardware queue through [`Driver::queue_rq`]; what is left through the
/// software queues or the elevator.
///
/// ```
/// use blkmq_core::*;
/// use std::sync::Mutex;
///
/// struct Hold(Mutex<Vec<Rq>>);
/// impl Driver for Hold {
///     type Platform = StdPlatform;
///     type Payload = ();
///     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
///         self.0.lock().unwrap().push(rq);
///         Ok(())
///     }
/// }
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold(Mutex::new(Vec::new())))
///     .unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// let mut plug = Plug::new();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 8)).unwrap(); // merges
/// assert_eq!(plug.len(), 1);
/// assert!(host.driver().0.lock().unwrap().is_empty());
/// plug.flush();
/// let held: Vec<Rq> = host.driver().0.lock().unwrap().drain(..).collect();
/// assert_eq!(queue.io(&held[0]).unwrap().sectors(), 16);
/// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
/// ```
pub struct Plug<'q, D: Driver> {
    rqs: Vec<(&'q RequestQueue<D>, Rq)>,
    multiple_queues: bool,
    scratch: VecDeque<Rq>,
}

impl<'q, D: Driver> Default for Plug<'q, D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'q, D: Driver> Plug<'q, D> {
    /// An empty plug (allocates its room once, here).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let plug: Plug<'_, Null> = Plug::new();
    /// assert!(plug.is_empty());
    /// ```
    pub fn new() -> Self {
        Self {
            rqs: Vec::with_capacity(PLUG_MAX_MULTI),
            multiple_queues: false,
            scratch: VecDeque::with_capacity(PLUG_MAX_MULTI),
        }
    }

    /// Requests in the plug.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 0, 8)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 8, 8)).unwrap(); // merges
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 64, 8)).unwrap();
    /// assert_eq!(plug.len(), 2);
    /// # drop(plug);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn len(&self) -> usize {
        self.rqs.len()
    }

    /// Whether the plug is empty.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!plug.is_empty());
    /// plug.flush();
    /// assert!(plug.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.rqs.is_empty()
    }

    /// Merges `bio` into the plug's newest request of its queue, as Linux does: what a
    /// plug holds goes to the device in order, so a bio that can merge almost always
    /// follows the request it merges with, and one try per bio keeps the merge check from
    /// being the dearest step of a submission.
    fn try_merge(&mut self, queue: &RequestQueue<D>, bio: Bio) -> Result<(), Bio> {
        // One queue in the plug: its newest request is the last. Several: the newest of
        // this one.
        let newest = if self.multiple_queues {
            self.rqs
                .iter_mut()
                .rev()
                .find(|(q, _)| core::ptr::eq(*q, queue))
        } else {
            self.rqs
                .last_mut()
                .filter(|(q, _)| core::ptr::eq(*q, queue))
        };
        let Some((_, rq)) = newest else {
            return Err(bio);
        };
        let tags = queue.tags();
        if queue.has_elevator.load(Ordering::Relaxed) {
            if let Some(e) = queue.elevator.lock().as_ref() {
                if !tags.io(rq).is_ok_and(|io| e.allow_merge(io, &bio)) {
                    return Err(bio);
                }
            }
        }
        if merge_into(tags, &queue.limits, rq, &bio) {
            Ok(())
        } else {
            Err(bio)
        }
    }

    /// Adds a fresh request, flushing first when the plug is full or its last request large.
    fn add(&mut self, queue: &'q RequestQueue<D>, rq: Rq) {
        let max = if self.multiple_queues {
            PLUG_MAX_MULTI
        } else {
            PLUG_MAX
        };
        let large = self.rqs.last().is_some_and(|(q, last)| {
            q.io(last)
                .is_some_and(|io| io.sectors() * crate::bio::SECTOR_SIZE >= PLUG_FLUSH_BYTES)
        });
        if self.rqs.len() >= max || large {
            self.flush();
        }
        // As Linux: several queues once a request follows one of another queue.
        if let Some((last, _)) = self.rqs.last() {
            if !core::ptr::eq(*last, queue) {
                self.multiple_queues = true;
            }
        }
        self.rqs.push((queue, rq));
    }

    /// Hands every request to its queue, in the order they were made.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// a.submit_plugged(&mut plug, Bio::new(Op::Read, 64, 8)).unwrap();
    /// b.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 8)).unwrap();
    /// a.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// plug.flush();
    /// let held = host.driver().take();
    /// let sector = |rq: &Rq| a.io(rq).or_else(|| b.io(rq)).unwrap().sector();
    /// assert_eq!(held.iter().map(sector).collect::<Vec<_>>(), [64, 8, 0]);
    /// # for rq in held {
    /// #     let queue = if a.request(&rq).is_some() { &a } else { &b };
    /// #     queue.end_request(rq, Status::Ok);
    /// # }
    /// ```
    pub fn flush(&mut self) {
        while let Some(&(queue, _)) = self.rqs.first() {
            // The run of requests of this queue at the front, in order.
            let run = self
                .rqs
                .iter()
                .position(|(q, _)| !core::ptr::eq(*q, queue))
                .unwrap_or(self.rqs.len());
            for (_, rq) in self.rqs.drain(..run) {
                self.scratch.push_back(rq);
            }
            queue.flush_plugged(&mut self.scratch);
        }
        self.multiple_queues = false;
    }
}

impl<D: Driver> Drop for Plug<'_, D> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl<D: Driver> fmt::Debug for Plug<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plug")
            .field("len", &self.rqs.len())
            .finish_non_exhaustive()
    }
}

impl<D: Driver> RequestQueue<D> {
    /// Takes a flushed plug's requests of this queue (all of `rqs`), in order.
    fn flush_plugged(&self, rqs: &mut VecDeque<Rq>) {
        let elevated = self.has_elevator.load(Ordering::Relaxed);
        if elevated {
            let mut last_hctx = usize::MAX;
            while let Some(rq) = rqs.pop_front() {
                let hctx = self.request(&rq).map_or(0, |r| r.hctx());
                if self.io(&rq).is_some_and(|io| io.op() == Op::Flush) {
                    self.push_dispatch(hctx, rq, false);
                } else {
                    let cx = self.elv_cx();
                    if let Some(e) = self.elevator.lock().as_mut() {
                        e.insert_request(&cx, rq, false);
                    }
                }
                if hctx != last_hctx && last_hctx != usize::MAX {
                    self.run_hw_queue(last_hctx);
                }
                last_hctx = hctx;
            }
            if last_hctx != usize::MAX {
                self.run_hw_queue(last_hctx);
            }
            return;
        }
        if D::QUEUE_RQS && !self.host.set.is_shared() {
            self.issue_list(rqs);
        }
        self.issue_plugged(rqs);
        // What could not go straight to its hardware queue: into the software queues,
        // then run each hardware queue touched once.
        let cpu = self.cpu();
        let mut last_hctx = usize::MAX;
        while let Some(rq) = rqs.pop_front() {
            let hctx = self.request(&rq).map_or(0, |r| r.hctx());
            let kind = self.io(&rq).map_or(QueueType::Default, |io| {
                self.maps.select(cpu, io.op(), io.flags()).0
            });
            if self.io(&rq).is_some_and(|io| io.op() == Op::Flush) {
                self.push_dispatch(hctx, rq, false);
            } else {
                self.push_ctx_for(cpu, kind, hctx, rq);
            }
            if hctx != last_hctx && last_hctx != usize::MAX {
                self.run_hw_queue(last_hctx);
            }
            last_hctx = hctx;
        }
        if last_hctx != usize::MAX {
            self.run_hw_queue(last_hctx);
        }
    }

    /// Queues `rq` on the software queue of `cpu` that feeds `hctx` (the request was made
    /// for `hctx`; if `cpu`'s context maps elsewhere, on the hardware queue's dispatch list).
    fn push_ctx_for(&self, cpu: usize, kind: QueueType, hctx: usize, rq: Rq) {
        let index = cpu * QueueType::ALL.len() + kind as usize;
        if self.ctxs[index].hctx == hctx && self.ctxs[index].pos != usize::MAX {
            self.push_ctx(cpu, kind, rq);
        } else {
            self.push_dispatch(hctx, rq, false);
        }
    }

    /// Issues a plug's requests straight to their hardware queues, one run of requests per
    /// hardware queue through [`Driver::queue_rq`], while the hardware queue is idle (as
    /// [`submit`](Self::submit) issues a lone request); stops at a flush or at the first
    /// hardware queue it cannot take, and what is left stays in `rqs`.
    ///
    /// Unless the driver may block, the requests of one run share one read of the clock
    /// for their start, as the requests of one plug share it in Linux.
    fn issue_plugged(&self, rqs: &mut VecDeque<Rq>) {
        let blocking = self.host.set.flags().contains(TagSetFlags::BLOCKING);
        // A request's hardware queue; `None` for a flush (or a request not ours).
        let data_hctx = |rq: &Rq| {
            self.tags()
                .hctx_and_op(rq)
                .and_then(|(hctx, op)| (op != Op::Flush).then_some(hctx))
        };
        while let Some(first) = rqs.front() {
            let Some(hctx) = data_hctx(first) else {
                return;
            };
            let h = &self.hctxs[hctx];
            if !self.claim_idle(hctx) {
                return;
            }
            if self.halted(hctx) {
                self.finish_run(hctx);
                return;
            }
            let epoch = self.host.epoch();
            let mut batch = h.scratch.lock();
            // The first is known to belong; each later one is looked at once.
            while rqs
                .front()
                .is_some_and(|rq| batch.is_empty() || data_hctx(rq) == Some(hctx))
            {
                if let Some(rq) = rqs.pop_front() {
                    batch.push_back(rq);
                }
            }
            let now = (!blocking).then(|| self.platform().coarse_now_ns());
            // Every request taken above is this hardware queue's.
            self.issue_batch(hctx, &mut batch, epoch, now, true);
            drop(batch);
            self.finish_run(hctx);
        }
    }

    /// Issues a plug's requests through [`Driver::queue_rqs`], hardware queue by hardware
    /// queue, while the hardware queue is idle; what is left stays in `rqs`.
    fn issue_list(&self, rqs: &mut VecDeque<Rq>) {
        let tags = self.tags();
        let driver = self.driver();
        while let Some(first) = rqs.front() {
            let hctx = self.request(first).map_or(0, |r| r.hctx());
            let h = &self.hctxs[hctx];
            if !self.claim_idle(hctx) {
                return;
            }
            if self.halted(hctx) {
                self.finish_run(hctx);
                return;
            }
            let cx = self.cx(hctx);
            let epoch = self.host.epoch();
            let mut batch = h.scratch.lock();
            let mut no_budget = false;
            // Nothing runs between the starts: one read of the clock serves them all.
            let now = self.platform().coarse_now_ns();
            while rqs
                .front()
                .is_some_and(|rq| self.request(rq).is_some_and(|r| r.hctx() == hctx))
            {
                let Some(mut rq) = rqs.pop_front() else { break };
                if !driver.get_budget(&cx) {
                    rqs.push_front(rq);
                    no_budget = true;
                    break;
                }
                if tags.start(&mut rq, now).is_err() {
                    driver.put_budget(&cx);
                    self.end_unissued(rq, Status::IoErr);
                    continue;
                }
                self.driver_in();
                batch.push_back(rq);
            }
            let mut driver_batch = RqBatch {
                rqs: &mut batch,
                rejected: None,
            };
            driver.queue_rqs(&cx, &mut driver_batch);
            let mut why = Status::Resource;
            if let Some(Rejected { rq, status }) = driver_batch.rejected.take() {
                batch.push_front(rq);
                why = status;
            }
            // What the driver left goes back to idle: the first with the driver's verdict.
            for _ in 0..batch.len() {
                let Some(mut rq) = batch.pop_front() else {
                    break;
                };
                self.driver_out();
                driver.put_budget(&cx);
                let _ = tags.requeue(&mut rq);
                if matches!(why, Status::Resource | Status::DevResource) {
                    batch.push_back(rq);
                } else {
                    self.end_unissued(rq, if why.is_ok() { Status::IoErr } else { why });
                    why = Status::Resource;
                }
            }
            if !batch.is_empty() || no_budget {
                // The rest of this hardware queue's share waits at the head, behind them.
                while rqs
                    .front()
                    .is_some_and(|rq| self.request(rq).is_some_and(|r| r.hctx() == hctx))
                {
                    if let Some(rq) = rqs.pop_front() {
                        batch.push_back(rq);
                    }
                }
                self.give_up(hctx, &mut batch, epoch, why);
            }
            drop(batch);
            self.finish_run(hctx);
        }
    }
}
