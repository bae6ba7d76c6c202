//! Drivers that move no data, and a platform for loom models: for doc examples, tests and
//! benches, the project's and those of crates that embed it.
//!
//! Linux has `null_blk` for the same purpose: a block device whose driver ends every request
//! without touching a medium, so what is measured or checked is the block layer alone. Two
//! drivers are here:
//!
//! * [`Null`] ends every request inside [`Driver::queue_rq`], with [`Status::Ok`].
//! * [`Hold`] keeps every request it is given until the caller takes them
//!   ([`Hold::take`]) and ends, requeues or inspects them, so a test controls exactly what
//!   is in the driver at each step.
//!
//! Both work on any [`Platform`]: the platform is a type parameter, inferred from the one
//! the [`Host`](crate::Host) is made with.
//!
//! Under `RUSTFLAGS="--cfg loom"` this module also has `LoomPlatform` (and its lock,
//! `LoomRawMutex`), a platform whose lock and kicks are points loom interleaves at, so a
//! crate that embeds blkmq can model its own driver against the real engine with
//! [loom](https://docs.rs/loom). ([`StdPlatform`](crate::StdPlatform) does not exist under
//! loom: its spin lock would spin where loom cannot see it.) Its examples run under loom
//! only: `RUSTFLAGS="--cfg loom" RUSTDOCFLAGS="--cfg loom" cargo test -p blkmq-core
//! --release --doc -- loom_platform`.
//!
//! ```
//! use blkmq_core::testing::{Hold, Null};
//! use blkmq_core::*;
//!
//! let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
//! let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
//! queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
//! assert_eq!(host.in_driver(), 0); // ended inside `queue_rq`
//!
//! let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
//! let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
//! queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
//! assert_eq!(host.in_driver(), 1);
//! for rq in host.driver().take() {
//!     queue.end_request(rq, Status::Ok).unwrap();
//! }
//! assert_eq!(host.in_driver(), 0);
//! ```

use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use crate::bio::Status;
use crate::driver::{Driver, HctxCx, Rejected};
use crate::platform::Platform;
use crate::request::Rq;
use crate::tags::RequestInit;

/// A driver that ends every request as soon as it is issued, with [`Status::Ok`].
///
/// ```
/// use blkmq_core::testing::Null;
/// use blkmq_core::*;
///
/// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Null::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// for i in 0..16 {
///     queue.submit(Bio::new(Op::Write, i * 8, 8)).unwrap();
/// }
/// assert_eq!(queue.usage(), 0);
/// ```
pub struct Null<P> {
    platform: PhantomData<fn() -> P>,
}

impl<P> Null<P> {
    /// A null driver.
    ///
    /// ```
    /// # use blkmq_core::testing::Null;
    /// # use blkmq_core::StdPlatform;
    /// let driver: Null<StdPlatform> = Null::new();
    /// # let _ = driver;
    /// ```
    pub const fn new() -> Self {
        Null {
            platform: PhantomData,
        }
    }
}

impl<P> Default for Null<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> fmt::Debug for Null<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Null")
    }
}

impl<P: Platform> Driver for Null<P> {
    type Platform = P;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        // `queue_rq` is handed the queue's own requests: none is refused.
        cx.queue()
            .end_request(rq, Status::Ok)
            .map_err(|misused| Rejected {
                rq: misused.rq,
                status: Status::IoErr,
            })
    }
}

/// A driver that keeps every request it is given until [`take`](Hold::take)n.
///
/// The requests stay in flight (started, counted by [`Host::in_driver`](crate::Host::in_driver))
/// until the caller ends or requeues them through their queue.
///
/// ```
/// use blkmq_core::testing::Hold;
/// use blkmq_core::*;
///
/// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.submit(Bio::new(Op::Read, 32, 8)).unwrap();
/// assert_eq!(host.driver().len(), 2);
/// let held = host.driver().take();
/// assert!(host.driver().is_empty());
/// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
/// assert_eq!(host.in_driver(), 0);
/// ```
pub struct Hold<P: Platform> {
    held: lock_api::Mutex<P::RawMutex, Vec<Rq>>,
}

impl<P: Platform> Hold<P> {
    /// A driver holding nothing yet.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::StdPlatform;
    /// let driver: Hold<StdPlatform> = Hold::new();
    /// assert!(driver.is_empty());
    /// ```
    pub fn new() -> Self {
        Hold {
            held: lock_api::Mutex::new(Vec::new()),
        }
    }

    /// Every request held, in the order they were issued; the driver holds none after.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::*;
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let held = host.driver().take();
    /// assert_eq!(queue.io(&held[0]).unwrap().sector(), 0);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn take(&self) -> Vec<Rq> {
        core::mem::take(&mut *self.held.lock())
    }

    /// How many requests are held.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::StdPlatform;
    /// assert_eq!(Hold::<StdPlatform>::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    /// Whether no request is held.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::StdPlatform;
    /// assert!(Hold::<StdPlatform>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.held.lock().is_empty()
    }
}

impl<P: Platform> Default for Hold<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Platform> fmt::Debug for Hold<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold").field("held", &self.len()).finish()
    }
}

impl<P: Platform> Driver for Hold<P> {
    type Platform = P;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        self.held.lock().push(rq);
        Ok(())
    }
}

#[cfg(loom)]
pub use loom_platform::{LoomPlatform, LoomRawMutex};

#[cfg(loom)]
mod loom_platform {
    extern crate std;

    use alloc::collections::BTreeSet;
    use alloc::vec::Vec;
    use core::cell::Cell;
    use core::fmt;
    use core::sync::atomic::AtomicU64;
    use std::sync::OnceLock;

    use loom::sync::Mutex;
    use loom::sync::atomic::{AtomicBool, Ordering};

    use crate::platform::Platform;

    /// A raw lock loom can see: a loom `AtomicBool`, spun on with loom's `yield_now`.
    ///
    /// `lock_api::RawMutex::INIT` must be a constant, and loom's atomics cannot be made in
    /// a constant (they register with the running model), so the flag is made on first
    /// use, behind a `OnceLock`. Loom runs every model thread on one OS thread and
    /// switches only at its own operations; making a loom atomic is not one, so the lazy
    /// making is never interleaved. A lock must be made inside the model (as everything a
    /// model uses is), and its first use should not race another thread's: lock it once
    /// before spawning the threads that share it. (The engine's own locks are first used
    /// when the host and its queues are made, except an elevator's, which a call like
    /// [`RequestQueue::elevator_name`](crate::RequestQueue::elevator_name) makes.)
    ///
    /// ```
    /// use blkmq_core::testing::LoomRawMutex;
    ///
    /// loom::model(|| {
    ///     let lock = lock_api::Mutex::<LoomRawMutex, u32>::new(0);
    ///     *lock.lock() += 1;
    ///     assert_eq!(*lock.lock(), 1);
    /// });
    /// ```
    pub struct LoomRawMutex {
        locked: OnceLock<AtomicBool>,
    }

    impl LoomRawMutex {
        fn flag(&self) -> &AtomicBool {
            self.locked.get_or_init(|| AtomicBool::new(false))
        }
    }

    // SAFETY: `lock` returns only after this thread changed the flag from false to true
    // with acquire ordering, and `unlock` (called by the holder only) stores false with
    // release ordering, so at most one holder exists at a time and each sees the previous
    // one's writes.
    unsafe impl lock_api::RawMutex for LoomRawMutex {
        const INIT: Self = Self {
            locked: OnceLock::new(),
        };

        type GuardMarker = lock_api::GuardSend;

        fn lock(&self) {
            while !self.try_lock() {
                loom::thread::yield_now();
            }
        }

        fn try_lock(&self) -> bool {
            self.flag()
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        unsafe fn unlock(&self) {
            self.flag().store(false, Ordering::Release);
        }
    }

    impl fmt::Debug for LoomRawMutex {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("LoomRawMutex")
        }
    }

    loom::thread_local! {
        /// The CPU the calling model thread runs on (0 unless it was pinned).
        static CPU: Cell<usize> = Cell::new(0);
    }

    /// A [`Platform`] for loom models.
    ///
    /// * CPUs: `nr_cpus` of them; a model thread runs on CPU 0 until
    ///   [`pin_current_thread`](Self::pin_current_thread) says otherwise.
    /// * Clock: stands still until [`advance_ns`](Self::advance_ns) moves it. It is not a
    ///   point loom interleaves at: move it between the phases of a model, not as a race.
    /// * Lock: [`LoomRawMutex`].
    /// * Kicks: recorded (under a loom lock) and returned by
    ///   [`take_kicks`](Self::take_kicks); the model serves them, as a platform's deferred
    ///   work would, with [`Host::run_kicked`](crate::Host::run_kicked).
    ///
    /// Make it, and the host over it, inside the model.
    ///
    /// ```
    /// use blkmq_core::testing::{LoomPlatform, Null};
    /// use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, TagSet};
    ///
    /// // Making a host takes more stack than a model thread has by default.
    /// fn spawn(f: impl FnOnce() + Send + 'static) -> loom::thread::JoinHandle<()> {
    ///     loom::thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap()
    /// }
    ///
    /// loom::model(|| {
    ///     spawn(|| {
    ///         let host = Host::new(TagSet::builder(2), LoomPlatform::new(1), Null::new()).unwrap();
    ///         let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    ///         let submitter = {
    ///             let queue = queue.clone();
    ///             spawn(move || queue.submit(Bio::new(Op::Read, 0, 8)).unwrap())
    ///         };
    ///         queue.submit(Bio::new(Op::Read, 8, 8)).unwrap();
    ///         submitter.join().unwrap();
    ///         assert_eq!(queue.usage(), 0);
    ///     })
    ///     .join()
    ///     .unwrap();
    /// });
    /// ```
    pub struct LoomPlatform {
        nr_cpus: usize,
        now_ns: AtomicU64,
        kicked: Mutex<BTreeSet<usize>>,
    }

    impl LoomPlatform {
        /// A platform of `nr_cpus` CPUs (at least one), its clock at 0, nothing kicked.
        ///
        /// ```
        /// use blkmq_core::Platform;
        /// use blkmq_core::testing::LoomPlatform;
        ///
        /// loom::model(|| {
        ///     let platform = LoomPlatform::new(2);
        ///     assert_eq!((platform.nr_cpus(), platform.current_cpu()), (2, 0));
        /// });
        /// ```
        pub fn new(nr_cpus: usize) -> Self {
            Self {
                nr_cpus: nr_cpus.max(1),
                now_ns: AtomicU64::new(0),
                kicked: Mutex::new(BTreeSet::new()),
            }
        }

        /// Runs the calling model thread on CPU `cpu` (taken modulo `nr_cpus`) from now on,
        /// for every `LoomPlatform` it asks.
        ///
        /// ```
        /// use blkmq_core::Platform;
        /// use blkmq_core::testing::LoomPlatform;
        ///
        /// loom::model(|| {
        ///     let platform = LoomPlatform::new(4);
        ///     platform.pin_current_thread(6);
        ///     assert_eq!(platform.current_cpu(), 2);
        /// });
        /// ```
        pub fn pin_current_thread(&self, cpu: usize) {
            CPU.with(|c| c.set(cpu));
        }

        /// Moves the clock `ns` forward.
        ///
        /// ```
        /// use blkmq_core::Platform;
        /// use blkmq_core::testing::LoomPlatform;
        ///
        /// loom::model(|| {
        ///     let platform = LoomPlatform::new(1);
        ///     platform.advance_ns(1_000);
        ///     assert_eq!((platform.now_ns(), platform.coarse_now_ns()), (1_000, 1_000));
        /// });
        /// ```
        pub fn advance_ns(&self, ns: u64) {
            // Not a loom operation: see the type's docs.
            self.now_ns
                .fetch_add(ns, core::sync::atomic::Ordering::Relaxed);
        }

        /// The hardware queues kicked since the last call, each once, in ascending order.
        ///
        /// ```
        /// use blkmq_core::Platform;
        /// use blkmq_core::testing::LoomPlatform;
        ///
        /// loom::model(|| {
        ///     let platform = LoomPlatform::new(1);
        ///     platform.kick(3);
        ///     platform.kick(1);
        ///     platform.kick(3);
        ///     assert_eq!(platform.take_kicks(), [1, 3]);
        ///     assert!(platform.take_kicks().is_empty());
        /// });
        /// ```
        pub fn take_kicks(&self) -> Vec<usize> {
            let mut kicked = self.kicked.lock().unwrap_or_else(|e| e.into_inner());
            core::mem::take(&mut *kicked).into_iter().collect()
        }
    }

    impl Platform for LoomPlatform {
        type RawMutex = LoomRawMutex;

        fn nr_cpus(&self) -> usize {
            self.nr_cpus
        }

        fn current_cpu(&self) -> usize {
            CPU.with(Cell::get) % self.nr_cpus
        }

        fn now_ns(&self) -> u64 {
            self.now_ns.load(core::sync::atomic::Ordering::Relaxed)
        }

        fn kick(&self, hctx: usize) {
            self.kicked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(hctx);
        }
    }

    impl fmt::Debug for LoomPlatform {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("LoomPlatform")
                .field("nr_cpus", &self.nr_cpus)
                .finish_non_exhaustive()
        }
    }
}
