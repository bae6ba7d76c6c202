//! What the embedding environment supplies: CPUs, a clock, a lock, and deferred work.
//!
//! A `no_std` library cannot ask which CPU it runs on, what time it is, or to have something
//! run later. Everything in blkmq-core that needs one of those takes it from a [`Platform`],
//! which a kernel, a hypervisor or a test implements once.
//!
//! # Embedding
//!
//! A kernel implements [`Platform`] and calls [`Host::service`](crate::Host::service):
//!
//! * Contexts: [`current_cpu`](Platform::current_cpu), the clocks, [`kick`](Platform::kick),
//!   [`kick_after`](Platform::kick_after) and [`service_after`](Platform::service_after) may
//!   be called from any context, interrupts included (a completion may kick). They only
//!   queue work: none may run a hardware queue or call the service inline.
//! * Locks: the library takes its own locks ([`Platform::RawMutex`], an IRQ-safe spinlock in
//!   a kernel) for short sections only, never across a call into the driver or the
//!   platform; a driver may take its own locks in `queue_rq` and complete from interrupts.
//! * The service: from a thread or work item (kblockd), call
//!   [`Host::service`](crate::Host::service) soon after a kick, once a `kick_after` or
//!   `service_after` delay is over, and at the time it returns. Early calls are harmless;
//!   calls may overlap. [`attach`](Platform::attach) hands the platform a weak handle to
//!   it when a host is made, [`detach`](Platform::detach) says when one goes.
//! * Never calling it: a queue that ran short with nothing in flight, and an elevator holding
//!   work back (BFQ idling), stay stalled; a quiet queue keeps its share of a shared tag
//!   set; timeouts never fire. Completions still rerun what waits for them. The stall shows:
//!   [`Host::in_driver`](crate::Host::in_driver) is 0 while a queue
//!   [`has_work`](crate::RequestQueue::has_work) (or its bios wait), and one call of the
//!   service ends it.

use alloc::sync::Weak;

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

    /// The calling context's CPU, as [`current_cpu`](Self::current_cpu), when the platform
    /// promises that this context is the only one writing with that CPU's id: no other
    /// context runs with it until this one gives it up, and the next to take it sees what
    /// this one wrote before (a release on giving up, an acquire on taking). `None` when
    /// it cannot promise that (the default).
    ///
    /// Per-CPU counters a holder alone writes can then be bumped with a plain load and
    /// store instead of a locked read-modify-write; the I/O accounting does so, and counts
    /// with atomic adds on a part of its own otherwise, so a `None` costs speed, never a
    /// count. A kernel may return `Some` where one CPU's block layer calls never interrupt
    /// each other's (preemption off, completions not in a hard interrupt that may cut into
    /// a submission's count), and `None` elsewhere.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(2);
    /// platform.pin_current_thread(1);
    /// assert_eq!(platform.exclusive_cpu(), Some(1)); // the thread holds CPU 1 now
    /// let other = platform.clone();
    /// let theirs = std::thread::spawn(move || {
    ///     other.pin_current_thread(1);
    ///     other.exclusive_cpu()
    /// });
    /// assert_eq!(theirs.join().unwrap(), None); // shared with this thread: no promise
    /// ```
    #[inline]
    fn exclusive_cpu(&self) -> Option<usize> {
        None
    }

    /// Whether [`fence_all`](Self::fence_all) works on this platform: the same answer for
    /// the platform's whole life. When it does, a CPU's [sole holder](Self::exclusive_cpu)
    /// takes and lets go of a request queue's usage references with a plain load and store
    /// and no fence of its own, and the rare freeze pays for both sides with one
    /// `fence_all` (see `percpu.rs`). The default says no: the references take locked
    /// operations.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// // Linux's `membarrier`, where the kernel lets the process register for it.
    /// let _ = platform.can_fence_all();
    /// ```
    #[inline]
    fn can_fence_all(&self) -> bool {
        false
    }

    /// The heavy side of an asymmetric fence: returns only once every other context of
    /// this platform has passed a full memory barrier since the call began, or ended its
    /// block layer call (Linux user space: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`;
    /// a kernel: `synchronize_rcu()`, the light sides being the sole holder's counts, with
    /// preemption off). Called only where [`can_fence_all`](Self::can_fence_all) says so,
    /// once per freeze and with no lock held: it may take microseconds, or sleep. It must
    /// not fail: a platform that may not manage it says no in `can_fence_all`. The
    /// default does nothing.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// if platform.can_fence_all() {
    ///     platform.fence_all(); // every thread of the process passed a barrier
    /// }
    /// ```
    #[inline]
    fn fence_all(&self) {}

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

    /// The clock of trace events ([`TraceEvent::time_ns`](crate::TraceEvent::time_ns)):
    /// nanoseconds on about the timeline of [`now_ns`](Self::now_ns), never going back on
    /// one CPU, as blktrace's clock promises, and read at most twice per plain I/O (once
    /// for its submission, once for its completion). A platform may serve it from a
    /// cheaper source than `now_ns` (a cycle counter), at the price of a small drift from
    /// it. Only a queue with a tracer reads it. The default reads
    /// [`now_ns`](Self::now_ns).
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// let first = platform.trace_now_ns();
    /// assert!(platform.trace_now_ns() >= first); // never goes back
    /// ```
    #[inline]
    fn trace_now_ns(&self) -> u64 {
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

    /// Asks for the service entry point of every host attached to this platform to be
    /// called again within about `delay_ns` (no kick: no hardware queue waits). A queue
    /// that starts to share a tag set asks this, so the service can give its share back
    /// once it goes quiet. The default does nothing: a platform that never calls the
    /// service after this keeps a quiet queue's share until its next
    /// [`kick`](Self::kick).
    ///
    /// ```
    /// use blkmq_core::{NoPlatform, Platform, StdPlatform};
    /// let platform = StdPlatform::manual_with_cpus(1);
    /// platform.service_after(1_000_000);
    /// assert!(platform.take_kicks().is_empty()); // no hardware queue was kicked
    /// ```
    fn service_after(&self, delay_ns: u64) {
        let _ = delay_ns;
    }

    /// A host made on this platform registers its service entry point here, once, when it
    /// is made: a platform with a runtime of its own keeps `service` and calls it when
    /// kicked and at the times it returns. The handle is weak: the platform never keeps a
    /// host alive. The default keeps nothing (the embedder calls
    /// [`Host::service`](crate::Host::service) itself).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use blkmq_core::testing::Null;
    ///
    /// let platform = StdPlatform::with_cpus(1);
    /// assert!(!platform.has_worker());
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Null::new()).unwrap();
    /// assert!(platform.has_worker()); // the host attached itself: the worker serves it
    /// drop(host); // detaches: the worker stops with the last host
    /// // At once, or once the worker lets go of the host if it was serving it.
    /// while platform.has_worker() {
    ///     std::thread::yield_now();
    /// }
    /// ```
    fn attach(&self, service: Weak<dyn Service>) {
        let _ = service;
    }

    /// A host attached with [`attach`](Self::attach) is going away (its handle no longer
    /// upgrades). The default does nothing.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    /// let platform = StdPlatform::with_cpus(1);
    /// platform.detach(); // nothing attached: nothing to do
    /// assert!(!platform.has_worker());
    /// ```
    fn detach(&self) {}
}

/// What a platform's runtime calls: a host's service entry point (implemented by
/// [`Host`](crate::Host), whose [`Host::service`](crate::Host::service) it forwards to).
///
/// ```
/// use blkmq_core::*;
/// use blkmq_core::testing::Null;
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::manual(), Null::new()).unwrap();
/// let service: &dyn Service = &*host;
/// assert_eq!(service.service(), None); // no queue, nothing kicked: nothing ever due
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// assert!(service.service().is_some()); // the next periodic timeout check
/// # drop(queue);
/// ```
pub trait Service: Send + Sync {
    /// Does what is due now; returns the platform time to be called again at, if any.
    fn service(&self) -> Option<u64>;
}

#[cfg(all(feature = "std", not(loom)))]
pub use std_platform::StdPlatform;

#[cfg(all(
    feature = "std",
    not(loom),
    target_os = "linux",
    target_arch = "x86_64"
))]
mod tsc;

#[cfg(all(feature = "std", not(loom)))]
mod std_platform {
    extern crate std;

    use alloc::collections::BTreeSet;
    use alloc::sync::{Arc, Weak};
    use alloc::vec::Vec;
    use core::cell::{Cell, RefCell};
    use core::fmt;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use core::time::Duration;
    use std::sync::{Condvar, Mutex, MutexGuard};
    use std::thread::{JoinHandle, ThreadId};

    use super::{Platform, Service};

    std::thread_local! {
        /// The CPU slot of this thread, given on first use (or by `pin_current_thread`).
        static CPU_SLOT: Cell<Option<usize>> = const { Cell::new(None) };
        /// This thread's mark in the platforms' claim tables (zero: none given yet).
        static TOKEN: Cell<usize> = const { Cell::new(0) };
        /// The CPU ids this thread holds alone, given back when it ends.
        static CLAIMS: RefCell<Claims> = const { RefCell::new(Claims::NONE) };
        /// What this thread last found of its slot on a platform: the platform's id (zero:
        /// nothing found), the CPU, and [`HOLDS`] when it holds it alone, else the count of
        /// claims given back ([`RELEASES`]) when it found another thread holding it. Cleared
        /// when the thread is pinned elsewhere and when it gives its claims back.
        static HELD: Cell<(usize, usize, usize)> = const { Cell::new(NOTHING_HELD) };
        /// Set on a platform's worker: it serves every CPU's queues and holds none alone,
        /// so it never takes a CPU from the threads that submit and complete on it.
        static HOLDS_NONE: Cell<bool> = const { Cell::new(false) };
    }

    /// `HELD` with nothing found.
    const NOTHING_HELD: (usize, usize, usize) = (0, 0, 0);

    /// `HELD`'s mark of a slot held alone.
    const HOLDS: usize = usize::MAX;

    /// Claims given back so far, by threads ending or pinned elsewhere (one per claim: it
    /// never reaches [`HOLDS`]). A thread that found its slot taken asks again only once this
    /// has moved, so the answer "not yours" costs one read of a line written only when a
    /// thread ends.
    static RELEASES: AtomicUsize = AtomicUsize::new(0);

    /// Hands out platform ids, each once (zero is none): clones share one.
    static NEXT_PLATFORM: AtomicUsize = AtomicUsize::new(1);

    /// Hands out CPU slots to threads in turn.
    static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

    /// Hands out thread tokens, each once (zero is none).
    static NEXT_TOKEN: AtomicUsize = AtomicUsize::new(1);

    /// One platform's claim table: per CPU id, the token of the thread holding it alone
    /// (zero: nobody).
    type Owners = Arc<[AtomicUsize]>;

    /// The CPU ids a thread holds: its claim tables (weak: a platform dropped takes its
    /// table with it, and the entry goes at the thread's next claim) and the id in each.
    /// As many as the platforms the thread holds a slot on: a thread that serves many
    /// hosts holds a slot on each, so none of them falls back to locked counts (an entry
    /// is made once per platform, never per I/O).
    struct Claims {
        held: Vec<(Weak<[AtomicUsize]>, usize)>,
    }

    impl Claims {
        const NONE: Claims = Claims { held: Vec::new() };
    }

    impl Drop for Claims {
        fn drop(&mut self) {
            // First: from here on the thread holds nothing, whatever it still counts.
            let _ = HELD.try_with(|held| held.set(NOTHING_HELD));
            for (owners, cpu) in self.held.drain(..) {
                if let Some(owners) = owners.upgrade() {
                    give_back(&owners, cpu);
                }
            }
        }
    }

    /// Gives CPU `cpu` of the claim table `owners` back: the calling thread held it.
    fn give_back(owners: &[AtomicUsize], cpu: usize) {
        // Release: the next holder's acquire sees every count this one wrote.
        owners[cpu].store(0, Ordering::Release);
        // After the slot is free: a thread that read the count before it looked at the
        // slot and found it taken sees the count move (see `look_up_claim`).
        RELEASES.fetch_add(1, Ordering::Release);
    }

    /// The calling thread's token.
    #[inline]
    fn token() -> usize {
        TOKEN.with(|token| match token.get() {
            0 => {
                let fresh = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
                token.set(fresh);
                fresh
            }
            held => held,
        })
    }

    type KickHandler = Arc<dyn Fn(usize) + Send + Sync>;

    /// A [`Platform`] for threads under an operating system (`std` feature), with a runtime
    /// of its own (Linux's kblockd).
    ///
    /// * CPUs: `nr_cpus` slots (by default the machine's available parallelism). A thread
    ///   gets a slot on its first [`current_cpu`](Platform::current_cpu), in turn, and keeps
    ///   it; [`StdPlatform::pin_current_thread`] chooses it instead. Threads may share a
    ///   slot; the first to ask [`exclusive_cpu`](Platform::exclusive_cpu) on a slot nobody
    ///   holds holds it alone until it ends.
    /// * Clock: nanoseconds since the platform was created, from the monotonic clock
    ///   (`CLOCK_MONOTONIC` on Linux, [`Instant`](std::time::Instant) elsewhere). On Linux
    ///   the coarse reading is `CLOCK_MONOTONIC_COARSE`, which lags by at most a kernel
    ///   tick and costs a fraction of a precise read; elsewhere it is the precise one.
    /// * Lock: `parking_lot`'s raw mutex, which spins a little, then parks the thread. Threads
    ///   share their CPUs with others, and a holder may be preempted: under a pure spin lock
    ///   a waiter spun through the holder's whole time slice (at two threads, one to three
    ///   microseconds of CPU per I/O through an elevator on a 2-CPU machine).
    /// * Runtime ([`new`](Self::new), [`with_cpus`](Self::with_cpus)): the first host made
    ///   on the platform starts a worker thread. It calls every attached host's
    ///   [`Host::service`](crate::Host::service) when kicked, when a
    ///   [`kick_after`](Platform::kick_after) delay is over (a condition variable's timed
    ///   wait) and at the times the service returns; it stops, and is joined, when the last
    ///   host is dropped. Nothing has to be run by hand.
    /// * Manual mode ([`manual`](Self::manual), [`manual_with_cpus`](Self::manual_with_cpus)),
    ///   and the runtime while no host is attached: kicks are handed to the handler set
    ///   with [`StdPlatform::on_kick`], or recorded and returned by
    ///   [`StdPlatform::take_kicks`], for a test that steps by hand.
    ///
    /// Clones share the clock, the worker, the handler and the recorded kicks.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform};
    ///
    /// let platform = StdPlatform::manual_with_cpus(4);
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
        /// This platform's id, for `HELD`.
        id: usize,
        /// Who holds each CPU id alone ([`Platform::exclusive_cpu`]).
        owners: Owners,
        clock: Clock,
        handler: Mutex<Option<KickHandler>>,
        kicked: Mutex<BTreeSet<usize>>,
        /// The worker's side, in runtime mode; `None` in manual mode.
        runtime: Option<Arc<Runtime>>,
    }

    /// What the platform and its worker share.
    struct Runtime {
        state: Mutex<RuntimeState>,
        wake: Condvar,
    }

    struct RuntimeState {
        /// The attached hosts (dead ones pruned on every detach).
        hosts: Vec<Weak<dyn Service>>,
        /// A kick came since the worker last served.
        kicked: bool,
        /// The earliest platform time a service call is wanted at (`u64::MAX`: none).
        due: u64,
        /// Bumped whenever the worker is told to stop; a worker serves its generation only.
        generation: u64,
        worker: Option<(JoinHandle<()>, ThreadId)>,
    }

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    impl Runtime {
        fn new() -> Self {
            Self {
                state: Mutex::new(RuntimeState {
                    hosts: Vec::new(),
                    kicked: false,
                    due: u64::MAX,
                    generation: 0,
                    worker: None,
                }),
                wake: Condvar::new(),
            }
        }

        /// Whether a worker serves hosts now (kicks go to it, not to the record).
        fn serving(&self) -> bool {
            lock(&self.state).worker.is_some()
        }

        /// Wants a service call at `at` (platform time); `false` when no worker serves.
        fn want(&self, at: u64, kick: bool) -> bool {
            let mut state = lock(&self.state);
            if state.worker.is_none() {
                return false;
            }
            state.kicked |= kick;
            state.due = state.due.min(at);
            drop(state);
            self.wake.notify_one();
            true
        }
    }

    /// The worker (kblockd): serves every attached host when kicked or due, sleeps until
    /// the earliest time wanted otherwise.
    fn worker(inner: Arc<Inner>, generation: u64) {
        let Some(runtime) = inner.runtime.clone() else {
            return;
        };
        HOLDS_NONE.with(|none| none.set(true));
        let mut hosts: Vec<Weak<dyn Service>> = Vec::new();
        let mut state = lock(&runtime.state);
        loop {
            if state.generation != generation {
                return;
            }
            let now = inner.clock.now_ns();
            if state.kicked || state.due <= now {
                state.kicked = false;
                state.due = u64::MAX;
                hosts.clone_from(&state.hosts);
                drop(state);
                let mut next = u64::MAX;
                for host in hosts.drain(..) {
                    // The last reference may be this one: the host's drop detaches, and
                    // takes the lock, which is not held here.
                    if let Some(host) = host.upgrade() {
                        if let Some(at) = host.service() {
                            next = next.min(at);
                        }
                    }
                }
                state = lock(&runtime.state);
                state.due = state.due.min(next);
                continue;
            }
            state = if state.due == u64::MAX {
                runtime.wake.wait(state).unwrap_or_else(|e| e.into_inner())
            } else {
                let wait = Duration::from_nanos(state.due - now);
                runtime
                    .wake
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            };
        }
    }

    impl StdPlatform {
        /// A platform with one CPU slot per hardware thread of this machine, with its
        /// runtime: the first host made on it starts the worker that runs kicked and
        /// delayed hardware queues and the hosts' periodic work (see [`StdPlatform`]).
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

        /// A platform with `nr_cpus` CPU slots (at least one), with its runtime (see
        /// [`new`](Self::new)).
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// assert_eq!(StdPlatform::with_cpus(8).nr_cpus(), 8);
        /// assert_eq!(StdPlatform::with_cpus(0).nr_cpus(), 1);
        /// ```
        pub fn with_cpus(nr_cpus: usize) -> Self {
            Self::make(nr_cpus, Some(Arc::new(Runtime::new())))
        }

        /// A platform in manual mode, one CPU slot per hardware thread: no worker, kicks
        /// recorded (or handed to [`on_kick`](Self::on_kick)) for the caller to run,
        /// [`Host::service`](crate::Host::service) called by hand.
        ///
        /// ```
        /// use blkmq_core::*;
        /// use blkmq_core::testing::Null;
        /// let platform = StdPlatform::manual();
        /// let host = Host::new(TagSet::builder(8), platform.clone(), Null::new()).unwrap();
        /// assert!(!platform.has_worker());
        /// platform.kick(0);
        /// assert_eq!(platform.take_kicks(), vec![0]);
        /// # drop(host);
        /// ```
        pub fn manual() -> Self {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            Self::manual_with_cpus(cpus)
        }

        /// A platform in manual mode (see [`manual`](Self::manual)) with `nr_cpus` CPU
        /// slots (at least one).
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// let platform = StdPlatform::manual_with_cpus(3);
        /// assert_eq!(platform.nr_cpus(), 3);
        /// platform.kick_after(2, 1_000);
        /// assert_eq!(platform.take_kicks(), vec![2]); // recorded, the delay left to the caller
        /// ```
        pub fn manual_with_cpus(nr_cpus: usize) -> Self {
            Self::make(nr_cpus, None)
        }

        fn make(nr_cpus: usize, runtime: Option<Arc<Runtime>>) -> Self {
            Self {
                inner: Arc::new(Inner {
                    nr_cpus: nr_cpus.max(1),
                    id: NEXT_PLATFORM.fetch_add(1, Ordering::Relaxed),
                    owners: (0..nr_cpus.max(1)).map(|_| AtomicUsize::new(0)).collect(),
                    clock: Clock::new(),
                    handler: Mutex::new(None),
                    kicked: Mutex::new(BTreeSet::new()),
                    runtime,
                }),
            }
        }

        /// Whether a worker thread serves this platform's hosts now: in runtime mode from
        /// the first host made on it until the last is dropped; never in manual mode. A
        /// host the worker is serving when its last handle goes is dropped by the worker,
        /// as soon as that service ends, and the worker stops then.
        ///
        /// ```
        /// use blkmq_core::*;
        /// use blkmq_core::testing::Null;
        /// let platform = StdPlatform::with_cpus(2);
        /// let a = Host::new(TagSet::builder(8), platform.clone(), Null::new()).unwrap();
        /// let b = Host::new(TagSet::builder(8), platform.clone(), Null::new()).unwrap();
        /// drop(a);
        /// assert!(platform.has_worker()); // `b` still uses it
        /// drop(b);
        /// // Gone at once, or once the worker lets go of `b` if it was serving it.
        /// while platform.has_worker() {
        ///     std::thread::yield_now();
        /// }
        /// assert!(!platform.has_worker());
        /// ```
        pub fn has_worker(&self) -> bool {
            self.inner.runtime.as_ref().is_some_and(|r| r.serving())
        }

        /// Records `hctx`'s kick, or hands it to the handler.
        fn record(&self, hctx: usize) {
            let handler = lock(&self.inner.handler).clone();
            match handler {
                Some(handler) => handler(hctx),
                None => {
                    lock(&self.inner.kicked).insert(hctx);
                }
            }
        }

        /// Whether the calling thread holds its slot on this platform, taking it if nobody
        /// does; remembered in `HELD` either way.
        #[cold]
        fn look_up_claim(&self) -> Option<usize> {
            // Read before the slot: a claim given back after this read moves the count
            // (its holder frees the slot first), so a "taken" remembered with this count
            // is asked again once the slot may be free.
            let releases = RELEASES.load(Ordering::Acquire);
            let cpu = self.current_cpu();
            let token = token();
            let held = match self.inner.owners[cpu].load(Ordering::Relaxed) {
                held if held == token => Some(cpu),
                0 => self.claim(cpu, token),
                _ => None,
            };
            let found = if held.is_some() { HOLDS } else { releases };
            HELD.with(|last| last.set((self.inner.id, cpu, found)));
            held
        }

        /// Takes CPU slot `cpu`, nobody's a moment ago, for the thread of `token`; `None`
        /// when another thread took it first, the thread is ending, or it is a worker.
        #[cold]
        fn claim(&self, cpu: usize, token: usize) -> Option<usize> {
            if HOLDS_NONE.with(Cell::get) {
                return None;
            }
            // A thread ending has given its claims back already: it takes no more.
            CLAIMS
                .try_with(|claims| {
                    let mut claims = claims.try_borrow_mut().ok()?;
                    // Acquire: sees every count the last holder wrote before it let go.
                    self.inner.owners[cpu]
                        .compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed)
                        .ok()?;
                    // The entries of platforms dropped since go.
                    claims.held.retain(|(owners, _)| owners.strong_count() > 0);
                    claims.held.push((Arc::downgrade(&self.inner.owners), cpu));
                    Some(cpu)
                })
                .ok()
                .flatten()
        }

        /// Gives the calling thread CPU slot `cpu` (taken modulo `nr_cpus`).
        ///
        /// The slot belongs to the thread, so it holds for every `StdPlatform` the thread
        /// asks. A CPU the thread held alone ([`exclusive_cpu`](Platform::exclusive_cpu))
        /// and no longer runs as, on any platform, is given back: another thread may take
        /// it.
        ///
        /// ```
        /// use blkmq_core::{Platform, StdPlatform};
        /// let platform = StdPlatform::with_cpus(4);
        /// platform.pin_current_thread(6);
        /// assert_eq!(platform.current_cpu(), 2);
        /// assert_eq!(StdPlatform::with_cpus(8).current_cpu(), 6);
        ///
        /// assert_eq!(platform.exclusive_cpu(), Some(2));
        /// platform.pin_current_thread(1); // CPU 2 is free again
        /// let other = platform.clone();
        /// let theirs = std::thread::spawn(move || {
        ///     other.pin_current_thread(2);
        ///     other.exclusive_cpu()
        /// });
        /// assert_eq!(theirs.join().unwrap(), Some(2));
        /// ```
        pub fn pin_current_thread(&self, cpu: usize) {
            CPU_SLOT.with(|slot| slot.set(Some(cpu)));
            HELD.with(|held| held.set(NOTHING_HELD));
            // The CPUs held as another slot go back (each platform takes the slot modulo
            // its CPUs, which its table's length is).
            let _ = CLAIMS.try_with(|claims| {
                if let Ok(mut claims) = claims.try_borrow_mut() {
                    claims.held.retain(|(owners, held)| match owners.upgrade() {
                        Some(owners) if *held != cpu % owners.len() => {
                            give_back(&owners, *held);
                            false
                        }
                        Some(_) => true,
                        None => false,
                    });
                }
            });
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
        type RawMutex = parking_lot::RawMutex;

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

        /// The thread's CPU slot, when the thread holds it alone on this platform (and its
        /// clones): the first thread to ask for a slot nobody holds takes it, and keeps it
        /// until it ends or is pinned to another slot. Another thread with the same slot
        /// meanwhile gets `None`.
        #[inline]
        fn exclusive_cpu(&self) -> Option<usize> {
            // A claim is given back only when its thread ends or is pinned elsewhere, and
            // both clear `HELD`: the CPU found last time holds until then.
            match HELD.with(Cell::get) {
                (platform, cpu, HOLDS) if platform == self.inner.id => Some(cpu),
                // Taken by another thread when last asked, and no claim given back since.
                (platform, _, releases)
                    if platform == self.inner.id
                        && releases == RELEASES.load(Ordering::Relaxed) =>
                {
                    None
                }
                _ => self.look_up_claim(),
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

        /// On Linux, whether the process could register for `membarrier`'s private
        /// expedited fence (asked once per process); elsewhere no.
        #[inline]
        fn can_fence_all(&self) -> bool {
            membarrier::registered()
        }

        /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: every running thread of the
        /// process passes a full barrier (the kernel interrupts the CPUs running them; a
        /// thread switched out passed one when it was).
        fn fence_all(&self) {
            membarrier::fence();
        }

        #[inline]
        fn trace_now_ns(&self) -> u64 {
            self.inner.clock.trace_now_ns()
        }

        fn kick(&self, hctx: usize) {
            let now = self.now_ns();
            if let Some(runtime) = &self.inner.runtime {
                if runtime.want(now, true) {
                    return;
                }
            }
            self.record(hctx);
        }

        fn kick_after(&self, hctx: usize, delay_ns: u64) {
            if let Some(runtime) = &self.inner.runtime {
                if runtime.want(self.now_ns().saturating_add(delay_ns), false) {
                    return;
                }
            }
            self.record(hctx);
        }

        fn service_after(&self, delay_ns: u64) {
            if let Some(runtime) = &self.inner.runtime {
                runtime.want(self.now_ns().saturating_add(delay_ns), false);
            }
        }

        fn attach(&self, service: Weak<dyn Service>) {
            let Some(runtime) = &self.inner.runtime else {
                return;
            };
            let mut state = lock(&runtime.state);
            state.hosts.push(service);
            state.kicked = true; // a first look: the new host's periodic checks
            if state.worker.is_none() {
                let inner = Arc::clone(&self.inner);
                let generation = state.generation;
                let handle = std::thread::Builder::new()
                    .name("blkmq-kblockd".into())
                    .spawn(move || worker(inner, generation))
                    .expect("the runtime's worker thread could not be started");
                let id = handle.thread().id();
                state.worker = Some((handle, id));
            }
            drop(state);
            runtime.wake.notify_one();
        }

        fn detach(&self) {
            let Some(runtime) = &self.inner.runtime else {
                return;
            };
            let mut state = lock(&runtime.state);
            state.hosts.retain(|host| host.strong_count() > 0);
            if !state.hosts.is_empty() {
                return;
            }
            let Some((handle, id)) = state.worker.take() else {
                return;
            };
            state.generation += 1;
            state.kicked = false;
            state.due = u64::MAX;
            drop(state);
            runtime.wake.notify_all();
            // On the worker itself (it held the last reference) it returns by itself.
            if id != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// The process-wide memory barrier of [`Platform::fence_all`].
    #[cfg(target_os = "linux")]
    mod membarrier {
        extern crate std;

        use std::sync::OnceLock;

        /// `membarrier` commands (Linux's `include/uapi/linux/membarrier.h`).
        const CMD_QUERY: libc::c_int = 0;
        const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        fn call(cmd: libc::c_int) -> libc::c_long {
            // SAFETY: `membarrier` takes three integers and touches no memory of ours.
            unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    cmd,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                )
            }
        }

        /// Whether the process is registered for the private expedited fence: asked the
        /// kernel once (a kernel before 4.14, or a sandbox that filters the call, says no).
        #[inline]
        pub(super) fn registered() -> bool {
            static REGISTERED: OnceLock<bool> = OnceLock::new();
            *REGISTERED.get_or_init(|| {
                let supported = call(CMD_QUERY);
                supported >= 0
                    && supported & libc::c_long::from(CMD_PRIVATE_EXPEDITED) != 0
                    && supported & libc::c_long::from(CMD_REGISTER_PRIVATE_EXPEDITED) != 0
                    && call(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
            })
        }

        /// The fence; only after [`registered`] said yes.
        pub(super) fn fence() {
            assert!(registered(), "fence_all without membarrier");
            // Registered, the call has nothing left to refuse; were it to fail all the
            // same, counts that rely on it could be missed: stop rather than go on.
            let done = call(CMD_PRIVATE_EXPEDITED);
            assert_eq!(done, 0, "membarrier failed after registering");
        }
    }

    /// Not Linux: no process-wide fence.
    #[cfg(not(target_os = "linux"))]
    mod membarrier {
        pub(super) fn registered() -> bool {
            false
        }

        pub(super) fn fence() {}
    }

    /// Nanoseconds since the platform was made, on Linux straight from the kernel's
    /// monotonic clocks: the precise one and its coarse reading share one timeline, so a
    /// coarse reading is never ahead of a precise one read after it.
    #[cfg(target_os = "linux")]
    struct Clock {
        /// `CLOCK_MONOTONIC` when the platform was made.
        epoch: u64,
        /// The cycle counter then, for the trace clock.
        #[cfg(target_arch = "x86_64")]
        tsc_epoch: u64,
    }

    #[cfg(target_os = "linux")]
    impl Clock {
        fn new() -> Self {
            Self {
                #[cfg(target_arch = "x86_64")]
                tsc_epoch: super::tsc::ticks(),
                epoch: Self::read(libc::CLOCK_MONOTONIC).unwrap_or(0),
            }
        }

        /// The trace clock: on x86-64, the time-stamp counter when the kernel keeps time
        /// with it (see `tsc`), scaled to nanoseconds since the epoch; the precise clock
        /// otherwise.
        #[inline]
        fn trace_now_ns(&self) -> u64 {
            #[cfg(target_arch = "x86_64")]
            if let Some(scale) = super::tsc::scale(|| Self::read(libc::CLOCK_MONOTONIC)) {
                return scale.ns(super::tsc::ticks().saturating_sub(self.tsc_epoch));
            }
            self.now_ns()
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

        fn trace_now_ns(&self) -> u64 {
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
