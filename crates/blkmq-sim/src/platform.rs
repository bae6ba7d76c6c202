//! The virtual-time [`Platform`]: a clock only the event loop moves, a CPU the loop sets
//! before each call into the library, kicks recorded for the loop to run, and interrupts
//! a driver asks to have raised at a future virtual time.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use blkmq_core::Platform;

use crate::data::SimMemory;

/// A [`Platform`] on virtual time, for [`Sim`](crate::Sim).
///
/// * Clock: nanoseconds of virtual time, starting at 0. Only the event loop moves it,
///   forward, to the time of the event it handles; nothing reads a wall clock.
/// * CPU: whatever the loop last set ([`SimPlatform::set_cpu`]): the issuing workload's CPU
///   while it submits, the interrupt CPU while a device completes.
/// * Kicks: recorded; the loop turns them into one event at the same virtual time (or
///   after its kblockd latency, [`SimConfig`](crate::SimConfig)) that has the host's
///   service run every kicked queue
///   ([`Host::service_only`](blkmq_core::Host::service_only) with
///   [`Due::Kicked`](blkmq_core::Due::Kicked)); delayed ones
///   ([`Platform::kick_after`]) run then too, the loop's latency being the delay.
/// * Interrupts: a driver calls [`SimPlatform::raise_irq`] to be called back (through
///   [`SimDriver::interrupt`](crate::SimDriver::interrupt)) at a later virtual time.
/// * Service: [`Platform::service_after`] is recorded; the loop calls
///   [`Host::service`](blkmq_core::Host::service) at that virtual time, and again at the
///   times it returns while I/O is outstanding (tag idling between LUNs).
///
/// * Memory: the buffers a checked run's bios name ([`SimPlatform::memory`]).
///
/// Clones share everything. The platform is `Sync` because the trait asks for it; the
/// simulation itself is single-threaded.
///
/// ```
/// use blkmq_core::Platform;
/// use blkmq_sim::SimPlatform;
///
/// let platform = SimPlatform::new(4);
/// assert_eq!((platform.nr_cpus(), platform.now_ns()), (4, 0));
/// platform.set_cpu(6);
/// assert_eq!(platform.current_cpu(), 2); // modulo the CPU count
/// platform.kick(1);
/// platform.kick(1);
/// assert_eq!(platform.take_kicks(), vec![1]);
/// ```
#[derive(Clone)]
pub struct SimPlatform {
    inner: Arc<Inner>,
}

struct Inner {
    nr_cpus: usize,
    now: AtomicU64,
    cpu: AtomicUsize,
    kicks: Mutex<BTreeSet<usize>>,
    /// Interrupts asked for: (time, line), in the order asked.
    irqs: Mutex<Vec<(u64, u64)>>,
    /// The earliest virtual time a call of the host's service was asked for
    /// (`u64::MAX`: none).
    service_at: AtomicU64,
    /// The host memory that the bios of a checked run name.
    memory: SimMemory,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimPlatform {
    /// A platform of `nr_cpus` CPUs (at least one), at time 0 on CPU 0.
    ///
    /// ```
    /// use blkmq_core::Platform;
    /// use blkmq_sim::SimPlatform;
    /// assert_eq!(SimPlatform::new(0).nr_cpus(), 1);
    /// assert_eq!(SimPlatform::new(8).current_cpu(), 0);
    /// ```
    pub fn new(nr_cpus: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                nr_cpus: nr_cpus.max(1),
                now: AtomicU64::new(0),
                cpu: AtomicUsize::new(0),
                kicks: Mutex::new(BTreeSet::new()),
                irqs: Mutex::new(Vec::new()),
                service_at: AtomicU64::new(u64::MAX),
                memory: SimMemory::new(),
            }),
        }
    }

    /// Makes `cpu` (modulo the CPU count) the current CPU.
    ///
    /// ```
    /// use blkmq_core::Platform;
    /// use blkmq_sim::SimPlatform;
    /// let platform = SimPlatform::new(2);
    /// platform.set_cpu(1);
    /// assert_eq!(platform.clone().current_cpu(), 1); // clones share it
    /// ```
    pub fn set_cpu(&self, cpu: usize) {
        self.inner
            .cpu
            .store(cpu % self.inner.nr_cpus, Ordering::Relaxed);
    }

    /// Asks for interrupt `line` to be raised at virtual time `at_ns` (or now, if that is
    /// past): the event loop then calls the driver's
    /// [`interrupt`](crate::SimDriver::interrupt) with `line`. A driver calls this when it
    /// starts a command whose completion time it knows.
    ///
    /// ```
    /// use blkmq_sim::SimPlatform;
    /// let platform = SimPlatform::new(1);
    /// platform.raise_irq(5_000, 3);
    /// assert_eq!(platform.pending_irqs(), 1); // the loop takes it on its next step
    /// ```
    pub fn raise_irq(&self, at_ns: u64, line: u64) {
        let at = at_ns.max(self.now_ns());
        lock(&self.inner.irqs).push((at, line));
    }

    /// Interrupts asked for and not yet taken by the event loop.
    ///
    /// ```
    /// use blkmq_sim::SimPlatform;
    /// let platform = SimPlatform::new(1);
    /// assert_eq!(platform.pending_irqs(), 0);
    /// platform.raise_irq(10, 0);
    /// platform.raise_irq(20, 0);
    /// assert_eq!(platform.pending_irqs(), 2);
    /// ```
    pub fn pending_irqs(&self) -> usize {
        lock(&self.inner.irqs).len()
    }

    /// The hardware queues kicked since the last call, each once, in ascending order.
    ///
    /// ```
    /// use blkmq_core::Platform;
    /// use blkmq_sim::SimPlatform;
    /// let platform = SimPlatform::new(1);
    /// platform.kick(3);
    /// platform.kick(0);
    /// assert_eq!(platform.take_kicks(), vec![0, 3]);
    /// assert!(platform.take_kicks().is_empty());
    /// ```
    pub fn take_kicks(&self) -> Vec<usize> {
        std::mem::take(&mut *lock(&self.inner.kicks))
            .into_iter()
            .collect()
    }

    /// The host memory: where the segment addresses of a checked run's bios point
    /// (see [`SimMemory`]); empty unless [`Sim::check_data`](crate::Sim::check_data) is on.
    ///
    /// ```
    /// use blkmq_sim::SimPlatform;
    /// let platform = SimPlatform::new(1);
    /// let at = platform.memory().alloc(1, 512);
    /// assert_eq!(platform.clone().memory().bytes(), 512); // clones share it
    /// # let _ = at;
    /// ```
    pub fn memory(&self) -> &SimMemory {
        &self.inner.memory
    }

    /// Moves the clock to `ns` (never back).
    pub(crate) fn advance_to(&self, ns: u64) {
        self.inner.now.fetch_max(ns, Ordering::Relaxed);
    }

    /// Takes the interrupts asked for, in the order asked.
    pub(crate) fn take_irqs(&self, into: &mut Vec<(u64, u64)>) {
        into.append(&mut lock(&self.inner.irqs));
    }

    /// Takes the earliest virtual time a service call was asked for, if any.
    pub(crate) fn take_service_at(&self) -> Option<u64> {
        let at = self.inner.service_at.swap(u64::MAX, Ordering::Relaxed);
        (at != u64::MAX).then_some(at)
    }

    /// Asks for a service call at virtual time `at_ns`.
    pub(crate) fn want_service_at(&self, at_ns: u64) {
        self.inner.service_at.fetch_min(at_ns, Ordering::Relaxed);
    }

    /// Whether any kick is recorded.
    pub(crate) fn has_kicks(&self) -> bool {
        !lock(&self.inner.kicks).is_empty()
    }
}

impl Platform for SimPlatform {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        self.inner.nr_cpus
    }

    fn current_cpu(&self) -> usize {
        self.inner.cpu.load(Ordering::Relaxed)
    }

    fn now_ns(&self) -> u64 {
        self.inner.now.load(Ordering::Relaxed)
    }

    fn kick(&self, hctx: usize) {
        lock(&self.inner.kicks).insert(hctx);
    }

    fn service_after(&self, delay_ns: u64) {
        self.want_service_at(self.now_ns().saturating_add(delay_ns));
    }
}

impl fmt::Debug for SimPlatform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimPlatform")
            .field("nr_cpus", &self.inner.nr_cpus)
            .field("now_ns", &self.now_ns())
            .field("cpu", &self.current_cpu())
            .finish_non_exhaustive()
    }
}
