//! What the embedding environment supplies: CPUs, a clock, a lock, and deferred work.
//!
//! A `no_std` library cannot ask which CPU it runs on, what time it is, or to have something
//! run later. Everything in blkmq-core that needs one of those takes it from a [`Platform`],
//! which a kernel, a hypervisor or a test implements once.

/// The services blkmq-core needs from its environment.
///
/// Every structure stays correct under any CPU value a caller passes or the platform
/// returns: the CPU only decides locality (which allocation hint, which software queue).
///
/// # Example
///
/// A single-CPU platform with a fixed clock, as a unit test might write it:
///
/// ```
/// use blkmq_core::Platform;
///
/// struct OneCpu;
/// impl Platform for OneCpu {
///     type RawMutex = spin::mutex::SpinMutex<()>;
///     fn nr_cpus(&self) -> usize { 1 }
///     fn current_cpu(&self) -> usize { 0 }
///     fn now_ns(&self) -> u64 { 0 }
///     fn kick(&self, _hctx: usize) {}
/// }
/// assert_eq!(OneCpu.nr_cpus(), 1);
/// ```
pub trait Platform: Send + Sync + 'static {
    /// The raw lock for every short critical section of every layer (the bitmap's wait
    /// queues included). A kernel plugs in an IRQ-safe spinlock here.
    type RawMutex: lock_api::RawMutex + Send + Sync;

    /// How many CPUs there are; [`current_cpu`](Self::current_cpu) is always below it.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(3);
    /// assert_eq!(platform.nr_cpus(), 3);
    /// assert!(platform.current_cpu() < platform.nr_cpus());
    /// ```
    fn nr_cpus(&self) -> usize;

    /// The calling CPU, a dense index below [`nr_cpus`](Self::nr_cpus).
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(2);
    /// let cpus: Vec<usize> = (0..4)
    ///     .map(|_| {
    ///         let platform = platform.clone();
    ///         std::thread::spawn(move || platform.current_cpu()).join().unwrap()
    ///     })
    ///     .collect();
    /// assert!(cpus.iter().all(|&cpu| cpu < 2));
    /// ```
    fn current_cpu(&self) -> usize;

    /// A monotonic clock in nanoseconds: deadlines, budgets, idling and timeouts use it.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// let before = platform.now_ns();
    /// let after = platform.now_ns();
    /// assert!(after >= before); // never goes back
    /// ```
    fn now_ns(&self) -> u64;

    /// A cheaper reading of the same clock that may lag [`now_ns`](Self::now_ns) by up to
    /// a tick, never more, and is never ahead of it (Linux's jiffies against its
    /// `ktime`). Requests take their start stamp, and so their timeout deadline, from it:
    /// one read per I/O, where a lag of a few milliseconds against a 30 s timeout changes
    /// nothing. A deadline may therefore pass up to one lag early. The default reads
    /// [`now_ns`](Self::now_ns).
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// let coarse = platform.coarse_now_ns();
    /// assert!(platform.now_ns() >= coarse); // never ahead of the precise clock
    /// assert!(platform.coarse_now_ns() >= coarse); // never goes back
    /// ```
    #[inline]
    fn coarse_now_ns(&self) -> u64 {
        self.now_ns()
    }

    /// Asks for the hardware queue `hctx` to be run soon, from another context (Linux's
    /// kblockd work). It must not run the queue from inside this call.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// platform.kick(1);
    /// platform.kick(1);
    /// assert_eq!(platform.take_kicks(), vec![1]); // recorded once, without a handler
    /// ```
    fn kick(&self, hctx: usize);

    /// Like [`kick`](Self::kick), but the run is wanted no sooner than `delay_ns` from now:
    /// a dispatch that ran short of a resource with nothing in flight to give it back
    /// (Linux reruns such a queue after 3 ms), or an elevator holding work back until its
    /// timer. The default kicks at once; a platform with timers should wait.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// platform.kick_after(0, 3_000_000);
    /// assert_eq!(platform.take_kicks(), vec![0]);
    /// ```
    fn kick_after(&self, hctx: usize, delay_ns: u64) {
        let _ = delay_ns;
        self.kick(hctx);
    }
}

#[cfg(all(feature = "std", not(loom)))]
pub use std_platform::StdPlatform;

#[cfg(all(feature = "std", not(loom)))]
mod std_platform {
    extern crate std;

    use alloc::collections::BTreeSet;
    use alloc::sync::Arc;
    use core::cell::Cell;
    use core::fmt;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::Platform;

    std::thread_local! {
        /// The CPU slot of this thread, given on first use (or by `pin_current_thread`).
        static CPU_SLOT: Cell<Option<usize>> = const { Cell::new(None) };
    }

    /// Hands out CPU slots to threads in turn.
    static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

    type KickHandler = Arc<dyn Fn(usize) + Send + Sync>;

    /// A [`Platform`] for threads under an operating system (`std` feature).
    ///
    /// * CPUs: `nr_cpus` slots (by default the machine's available parallelism). A thread
    ///   gets a slot on its first [`current_cpu`](Platform::current_cpu), in turn, and keeps
    ///   it; [`StdPlatform::pin_current_thread`] chooses it instead.
    /// * Clock: nanoseconds since the platform was created, from the monotonic clock
    ///   (`CLOCK_MONOTONIC` on Linux, [`Instant`](std::time::Instant) elsewhere). On Linux
    ///   the coarse reading is `CLOCK_MONOTONIC_COARSE`, which lags by at most a kernel
    ///   tick and costs a fraction of a precise read; elsewhere it is the precise one.
    /// * Lock: a spinlock (`spin::mutex::SpinMutex`).
    /// * Kicks: handed to the handler set with [`StdPlatform::on_kick`]; without one they are
    ///   recorded and returned by [`StdPlatform::take_kicks`].
    ///
    /// Clones share the clock, the handler and the recorded kicks.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    ///
    /// let platform = StdPlatform::with_cpus(4);
    /// platform.pin_current_thread(2);
    /// assert_eq!(platform.current_cpu(), 2);
    /// platform.kick(7);
    /// assert_eq!(platform.take_kicks(), vec![7]);
    /// ```
    #[derive(Clone)]
    pub struct StdPlatform {
        inner: Arc<Inner>,
    }

    struct Inner {
        nr_cpus: usize,
        clock: Clock,
        handler: Mutex<Option<KickHandler>>,
        kicked: Mutex<BTreeSet<usize>>,
    }

    impl StdPlatform {
        /// A platform with one CPU slot per hardware thread of this machine.
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// let platform = StdPlatform::new();
        /// let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        /// assert_eq!(platform.nr_cpus(), threads);
        /// ```
        pub fn new() -> Self {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            Self::with_cpus(cpus)
        }

        /// A platform with `nr_cpus` CPU slots (at least one).
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// assert_eq!(StdPlatform::with_cpus(8).nr_cpus(), 8);
        /// assert_eq!(StdPlatform::with_cpus(0).nr_cpus(), 1);
        /// ```
        pub fn with_cpus(nr_cpus: usize) -> Self {
            Self {
                inner: Arc::new(Inner {
                    nr_cpus: nr_cpus.max(1),
                    clock: Clock::new(),
                    handler: Mutex::new(None),
                    kicked: Mutex::new(BTreeSet::new()),
                }),
            }
        }

        /// Gives the calling thread CPU slot `cpu` (taken modulo `nr_cpus`).
        ///
        /// The slot belongs to the thread, so it holds for every `StdPlatform` the thread
        /// asks.
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// let platform = StdPlatform::with_cpus(4);
        /// platform.pin_current_thread(6);
        /// assert_eq!(platform.current_cpu(), 2);
        /// assert_eq!(StdPlatform::with_cpus(8).current_cpu(), 6);
        /// ```
        pub fn pin_current_thread(&self, cpu: usize) {
            CPU_SLOT.with(|slot| slot.set(Some(cpu)));
        }

        /// Sends every later kick to `handler` (which must not run the queue inline).
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// use std::sync::{Arc, Mutex};
        ///
        /// let platform = StdPlatform::with_cpus(1);
        /// let seen = Arc::new(Mutex::new(Vec::new()));
        /// let sink = Arc::clone(&seen);
        /// platform.on_kick(move |hctx| sink.lock().unwrap().push(hctx));
        /// platform.kick(3);
        /// platform.clone().kick(1); // clones share the handler
        /// assert_eq!(*seen.lock().unwrap(), [3, 1]);
        /// assert!(platform.take_kicks().is_empty()); // handled, not recorded
        /// ```
        pub fn on_kick(&self, handler: impl Fn(usize) + Send + Sync + 'static) {
            *self.inner.handler.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(handler));
        }

        /// The hardware queues kicked since the last call, each once, in ascending order.
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// let platform = StdPlatform::with_cpus(1);
        /// platform.kick(5);
        /// platform.kick(1);
        /// platform.clone().kick(5);
        /// assert_eq!(platform.take_kicks(), vec![1, 5]);
        /// assert!(platform.take_kicks().is_empty());
        /// ```
        pub fn take_kicks(&self) -> alloc::vec::Vec<usize> {
            let mut kicked = self.inner.kicked.lock().unwrap_or_else(|e| e.into_inner());
            core::mem::take(&mut *kicked).into_iter().collect()
        }
    }

    impl Default for StdPlatform {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Platform for StdPlatform {
        type RawMutex = spin::mutex::SpinMutex<()>;

        fn nr_cpus(&self) -> usize {
            self.inner.nr_cpus
        }

        #[inline]
        fn current_cpu(&self) -> usize {
            let slot = CPU_SLOT.with(|slot| match slot.get() {
                Some(cpu) => cpu,
                None => {
                    let cpu = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
                    slot.set(Some(cpu));
                    cpu
                }
            });
            // Most threads' slots are below the count already: no division for them.
            if slot < self.inner.nr_cpus {
                slot
            } else {
                slot % self.inner.nr_cpus
            }
        }

        #[inline]
        fn now_ns(&self) -> u64 {
            self.inner.clock.now_ns()
        }

        #[inline]
        fn coarse_now_ns(&self) -> u64 {
            self.inner.clock.coarse_now_ns()
        }

        fn kick(&self, hctx: usize) {
            let handler = self
                .inner
                .handler
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            match handler {
                Some(handler) => handler(hctx),
                None => {
                    self.inner
                        .kicked
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(hctx);
                }
            }
        }
    }

    /// Nanoseconds since the platform was made, on Linux straight from the kernel's
    /// monotonic clocks: the precise one and its coarse reading share one timeline, so a
    /// coarse reading is never ahead of a precise one read after it.
    #[cfg(target_os = "linux")]
    struct Clock {
        /// `CLOCK_MONOTONIC` when the platform was made.
        epoch: u64,
    }

    #[cfg(target_os = "linux")]
    impl Clock {
        fn new() -> Self {
            Self {
                epoch: Self::read(libc::CLOCK_MONOTONIC).unwrap_or(0),
            }
        }

        /// The clock `id` in nanoseconds; `None` should the kernel refuse (it does not for
        /// the monotonic clocks).
        #[inline]
        fn read(id: libc::clockid_t) -> Option<u64> {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a live, writable `timespec`, the only memory the call writes.
            // (A vDSO call: 4 ns for the coarse clock against 24 ns for `Instant` here.)
            if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
                return None;
            }
            // A monotonic clock counts up from boot: both fields are small and non-negative
            // (nanoseconds below 10^9), so the casts and the arithmetic are exact.
            Some((ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64)
        }

        #[inline]
        fn now_ns(&self) -> u64 {
            Self::read(libc::CLOCK_MONOTONIC).map_or(0, |t| t.saturating_sub(self.epoch))
        }

        #[inline]
        fn coarse_now_ns(&self) -> u64 {
            match Self::read(libc::CLOCK_MONOTONIC_COARSE) {
                Some(t) => t.saturating_sub(self.epoch),
                None => self.now_ns(),
            }
        }
    }

    /// Nanoseconds since the platform was made, from [`Instant`](std::time::Instant).
    #[cfg(not(target_os = "linux"))]
    struct Clock {
        epoch: std::time::Instant,
    }

    #[cfg(not(target_os = "linux"))]
    impl Clock {
        fn new() -> Self {
            Self {
                epoch: std::time::Instant::now(),
            }
        }

        fn now_ns(&self) -> u64 {
            u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }

        fn coarse_now_ns(&self) -> u64 {
            self.now_ns()
        }
    }

    impl fmt::Debug for StdPlatform {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("StdPlatform")
                .field("nr_cpus", &self.inner.nr_cpus)
                .finish_non_exhaustive()
        }
    }
}

/// A platform that cannot exist; it only lets [`TagSet::builder`](crate::TagSet::builder) be
/// called before the real platform is given to
/// [`TagSetBuilder::build`](crate::TagSetBuilder::build).
///
/// ```
/// use blkmq_core::{StdPlatform, TagSet};
///
/// let builder = TagSet::builder(8); // an associated function of `TagSet<(), NoPlatform>`
/// let set = builder.build(StdPlatform::with_cpus(2), |_| ()).unwrap();
/// assert_eq!(set.nr_cpus(), 2);
/// ```
#[derive(Debug)]
pub enum NoPlatform {}

impl Platform for NoPlatform {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        match *self {}
    }

    fn current_cpu(&self) -> usize {
        match *self {}
    }

    fn now_ns(&self) -> u64 {
        match *self {}
    }

    fn kick(&self, _hctx: usize) {
        match *self {}
    }
}
