//! The discrete-event loop: events in (time, sequence) order — interrupts, kicks,
//! elevator timers, workload starts and wake-ups, timeout checks, calls of the host's
//! service entry point ([`Host::service`](blkmq_core::Host::service), at the times the
//! platform was asked for and it returns, while I/O is outstanding: tag idling between
//! LUNs) — each handled by calling
//! into the real library, then everything that call caused (bio completions, new
//! interrupts, kicks) settled at the same virtual time before the next event.
//!
//! The loop decides only when kblockd runs (its latency after a kick, the retry delay,
//! an elevator's timer, its timeout-check interval); what runs then is the host's
//! service entry point, the part of it the event is for
//! ([`Host::service_only`](blkmq_core::Host::service_only)): kicks run the kicked queues
//! ([`Due::Kicked`]), timer events the queues whose elevator timer expired
//! ([`Due::Timers`]), timeout checks every queue's timeouts ([`Due::Timeouts`]), service
//! calls everything due ([`Due::All`]).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blkmq_core::{
    Bio, ConfigError, Due, Elevator, Host, IssuerId, Op, Plug, QueueConfig, RequestQueue,
    SECTOR_SIZE, Status, TagSetBuilder,
};

use crate::data::{Checker, DataCheck, Tracked};
use crate::device::DeviceModel;
use crate::driver::{IrqCx, ModelDriver, SimDriver};
use crate::platform::SimPlatform;
use crate::report::{IssuerReport, LatencyStats, SimReport, SimStats, WorkloadReport};
use crate::workload::{Action, Cx, Done, Io, Workload};

thread_local! {
    /// Bio ends of the simulations running on this thread: (private, status).
    static ENDED: RefCell<Vec<(u64, Status)>> = const { RefCell::new(Vec::new()) };
}

/// The `end_io` of every bio a simulation submits.
fn sim_end_io(bio: Bio, status: Status) {
    ENDED.with(|e| e.borrow_mut().push((bio.private, status)));
}

/// Numbers simulations, so that one never takes another's bio ends.
static NEXT_SIM: AtomicU64 = AtomicU64::new(1);

/// A request queue of a [`Sim`].
///
/// ```
/// use blkmq_sim::{Ideal, IdealParams, Sim};
/// let (sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// assert_eq!(queue.index(), 0);
/// assert_eq!(sim.queue(queue).limits().max_sectors, 2560);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueId(usize);

impl QueueId {
    /// Its position among the simulation's queues.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Sim};
    /// let (mut sim, first) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// let config = blkmq_core::QueueConfig::new(*sim.queue(first).limits());
    /// let second = sim.add_queue(config).unwrap();
    /// assert_eq!((first.index(), second.index()), (0, 1));
    /// ```
    pub fn index(self) -> usize {
        self.0
    }
}

/// A workload of a [`Sim`], typed, to read it back after a run with [`Sim::workload`].
///
/// ```
/// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
/// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// let dd = sim.add_workload(queue, Dd::read(0, 1 << 20));
/// sim.run().unwrap();
/// assert_eq!(sim.workload(dd).result().unwrap().bytes, 1 << 20);
/// assert_eq!(dd.index(), 0);
/// ```
pub struct WorkloadId<W> {
    index: usize,
    marker: PhantomData<fn() -> W>,
}

impl<W> WorkloadId<W> {
    /// Its position among the simulation's workloads (and in [`SimReport::workloads`]).
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096));
    /// let write = sim.add_workload(queue, Dd::write(0, 4096));
    /// assert_eq!(write.index(), 1);
    /// assert_eq!(sim.run().unwrap().workloads[write.index()].name, "dd write");
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<W> Clone for WorkloadId<W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for WorkloadId<W> {}

impl<W> fmt::Debug for WorkloadId<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WorkloadId").field(&self.index).finish()
    }
}

/// How a [`Sim`] runs.
///
/// ```
/// use blkmq_sim::SimConfig;
/// let config = SimConfig { kick_delay_ns: 3_000_000, ..SimConfig::default() };
/// assert_eq!(config.irq_cpu, 0);
/// assert_eq!(config.timeout_check_ns, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// The CPU interrupts, kicks and timers run on (default 0).
    pub irq_cpu: usize,
    /// How long after a kick the queue runs (default 0: at the same virtual time, as an
    /// event after the current one).
    pub kick_delay_ns: u64,
    /// How long after a kicked run that kicked again the queue runs next (default 3 ms,
    /// Linux's `BLK_MQ_RESOURCE_DELAY` and `BLK_MQ_BUDGET_DELAY`), or sooner at an
    /// elevator timer. A queue kicks only with nothing in flight, so a kicked run that
    /// kicks again found nothing it could do at this virtual time: an elevator holding
    /// work back, a driver refusing with nothing to complete. Running it again at once
    /// would spin without end.
    pub kick_retry_ns: u64,
    /// Every how long to check for timed-out requests while I/O is outstanding (default
    /// `None`: never), through the host's service
    /// ([`Due::Timeouts`](blkmq_core::Due::Timeouts)). Service calls made for tag idling
    /// also run its own periodic check; both count in
    /// [`SimStats::timeouts`](crate::SimStats::timeouts).
    pub timeout_check_ns: Option<u64>,
    /// Events to handle at most before giving up with [`SimError::EventLimit`] (default
    /// `u64::MAX`).
    pub max_events: u64,
    /// Events at one virtual time at most, a guard against a driver and a queue pushing
    /// work back and forth forever (default one million).
    pub max_events_per_instant: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            irq_cpu: 0,
            kick_delay_ns: 0,
            kick_retry_ns: 3_000_000,
            timeout_check_ns: None,
            max_events: u64::MAX,
            max_events_per_instant: 1_000_000,
        }
    }
}

/// Why a simulation stopped short.
///
/// ```
/// use blkmq_sim::SimError;
/// let err = SimError::Stalled { at_ns: 5, waiting: 1, outstanding: 2 };
/// assert!(err.to_string().contains("stalled"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// The library refused a configuration.
    Config(ConfigError),
    /// Nothing left to happen, yet bios wait for a request or are not ended.
    Stalled {
        /// The virtual time.
        at_ns: u64,
        /// Bios waiting to be submitted.
        waiting: usize,
        /// Bios submitted and not ended.
        outstanding: u64,
    },
    /// A workload is not finished and nothing is left to wake it.
    Unfinished {
        /// The virtual time.
        at_ns: u64,
        /// The workload's name.
        workload: String,
    },
    /// More events than [`SimConfig::max_events`] in all, or than
    /// [`SimConfig::max_events_per_instant`] at one time.
    EventLimit {
        /// The virtual time.
        at_ns: u64,
        /// Events handled.
        events: u64,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(e) => write!(f, "configuration refused: {e:?}"),
            SimError::Stalled {
                at_ns,
                waiting,
                outstanding,
            } => write!(
                f,
                "stalled at {at_ns} ns: {waiting} bios waiting, {outstanding} not ended"
            ),
            SimError::Unfinished { at_ns, workload } => {
                write!(
                    f,
                    "workload `{workload}` unfinished at {at_ns} ns with nothing left to do"
                )
            }
            SimError::EventLimit { at_ns, events } => {
                write!(f, "event limit reached at {at_ns} ns after {events} events")
            }
        }
    }
}

impl std::error::Error for SimError {}

impl From<ConfigError> for SimError {
    fn from(e: ConfigError) -> Self {
        SimError::Config(e)
    }
}

/// What an event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Irq(u64),
    Kick,
    ElvTimer { queue: usize, at: u64 },
    Start(usize),
    Wake { workload: usize, token: u64 },
    TimeoutCheck,
    Service,
}

/// A bio submitted for a workload.
#[derive(Clone, Copy, Debug)]
struct BioRec {
    workload: usize,
    issuer: IssuerId,
    op: Op,
    sector: u64,
    bytes: u64,
    tag: u64,
    submitted: u64,
    generation: u16,
    live: bool,
    /// Its data, in a checked run.
    tracked: Tracked,
}

/// A bio that could not go in yet.
#[derive(Debug)]
struct Waiting {
    bio: Bio,
    cpu: usize,
}

/// Per-workload accounting.
#[derive(Clone, Copy, Debug, Default)]
struct Acct {
    ios: u64,
    bytes_read: u64,
    bytes_written: u64,
    bytes_other: u64,
    errors: u64,
    issued_bytes: u64,
}

struct Slot {
    workload: Box<dyn Workload>,
    name: String,
    queue: usize,
    cpu: usize,
    start_ns: u64,
    started: bool,
    end_ns: Option<u64>,
    outstanding: u64,
    acct: Acct,
}

/// Per-issuer accounting.
#[derive(Debug, Default)]
struct IssuerAcct {
    ios: u64,
    bytes_read: u64,
    bytes_written: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    latencies: Vec<u64>,
}

/// A simulation: one host (a driver and its tag set) with its request queues, a set of
/// workloads, and the virtual-time event loop that runs them.
///
/// Single-threaded and deterministic: the same configuration gives the same report,
/// byte for byte. Bios end through a per-thread list the loop drains after each call
/// into the library, keyed by the simulation, so simulations on parallel threads (tests)
/// never see each other.
///
/// ```
/// use blkmq_sched_deadline::Deadline;
/// use blkmq_sim::{CardParams, Dd, MmcCard, Sim};
///
/// let card = MmcCard::new(CardParams::default()).unwrap();
/// let (mut sim, queue) = Sim::for_model(card, 1, Some(Box::new(Deadline::new()))).unwrap();
/// let dd = sim.add_workload(queue, Dd::read(0, 16 << 20));
/// let report = sim.run().unwrap();
/// assert_eq!(report.stats.end_io_calls, report.stats.bios_submitted);
/// let result = sim.workload(dd).result().unwrap();
/// assert_eq!(result.bytes, 16 << 20);
/// println!("{result}"); // 16777216 bytes (16.0MB) copied, ... seconds, ...MB/s
/// ```
pub struct Sim<D: SimDriver> {
    id: u64,
    platform: SimPlatform,
    host: Arc<Host<D>>,
    queues: Vec<Arc<RequestQueue<D>>>,
    config: SimConfig,
    now: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    handled: u64,
    instant: (u64, u64),
    slots: Vec<Slot>,
    bios: Vec<BioRec>,
    free_bios: Vec<u32>,
    /// Per queue, bios waiting for a request, in order.
    waiting: Vec<VecDeque<Waiting>>,
    timer_at: Vec<Option<u64>>,
    timer_fired: Vec<Option<u64>>,
    kick_pending: bool,
    /// The last kicked run kicked again.
    rekicked: bool,
    timeout_pending: bool,
    /// The virtual time of the service call scheduled, if one is.
    service_pending: Option<u64>,
    stats: SimStats,
    issuers: BTreeMap<IssuerId, IssuerAcct>,
    actions: Vec<Action>,
    ended: Vec<(u64, Status)>,
    irqs: Vec<(u64, u64)>,
    /// The data check, when on.
    checker: Option<Checker>,
}

impl<D: SimDriver> Sim<D> {
    /// A simulation of a host of `driver` with the tag set `tags` describes, on `platform`
    /// (the one the driver raises its interrupts on).
    ///
    /// # Errors
    /// [`SimError::Config`] when the library refuses the tag set.
    ///
    /// ```
    /// use blkmq_core::TagSet;
    /// use blkmq_sim::{ModelDriver, Sim, SimPlatform, Ssd, SsdParams};
    /// let platform = SimPlatform::new(4);
    /// let driver = ModelDriver::new(platform.clone(), Ssd::new(SsdParams::default()).unwrap());
    /// let sim = Sim::new(platform, TagSet::builder(64).hw_queues(2), driver).unwrap();
    /// assert_eq!(sim.host().set().nr_hw_queues(), 2);
    /// ```
    pub fn new(platform: SimPlatform, tags: TagSetBuilder, driver: D) -> Result<Self, SimError> {
        let host = Host::new(tags, platform.clone(), driver)?;
        Ok(Self {
            id: NEXT_SIM.fetch_add(1, Ordering::Relaxed) & 0xffff,
            platform,
            host,
            queues: Vec::new(),
            config: SimConfig::default(),
            now: 0,
            events: BinaryHeap::new(),
            seq: 0,
            handled: 0,
            instant: (0, 0),
            slots: Vec::new(),
            bios: Vec::new(),
            free_bios: Vec::new(),
            waiting: Vec::new(),
            timer_at: Vec::new(),
            timer_fired: Vec::new(),
            kick_pending: false,
            rekicked: false,
            timeout_pending: false,
            service_pending: None,
            stats: SimStats::default(),
            issuers: BTreeMap::new(),
            actions: Vec::new(),
            ended: Vec::new(),
            irqs: Vec::new(),
            checker: None,
        })
    }

    /// Checks data from now on: each read or write bio submitted names a buffer of its
    /// own in the platform's [`SimMemory`](crate::SimMemory) (see there for what its
    /// addresses are), each write's buffer holds a pattern no other write has, and each
    /// read's bytes are compared at its end with what was last written on its sectors
    /// ([`data_check`](Self::data_check)). The driver must move the bytes: a
    /// [`ModelDriver`] does when it [keeps data](ModelDriver::keep_data).
    ///
    /// Off by default. Merges, splits and timing are the same with it on: bios with
    /// buffers are never contiguous with each other, as bios with none are not.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// // A driver that keeps no data: every read comes back as it went, zeroes.
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.check_data();
    /// sim.add_workload(queue, Dd::write(0, 4096));
    /// sim.run().unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096));
    /// sim.run().unwrap();
    /// assert_eq!(sim.data_check().unwrap().bytes_checked, 4096);
    /// assert!(!sim.data_check().unwrap().is_clean()); // not what was written
    /// ```
    pub fn check_data(&mut self) {
        self.checker.get_or_insert_with(Checker::default);
    }

    /// What the data check found so far; `None` unless [`check_data`](Self::check_data)
    /// is on.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Sim};
    /// let (sim, _) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// assert!(sim.data_check().is_none());
    /// ```
    pub fn data_check(&self) -> Option<DataCheck> {
        self.checker.as_ref().map(|c| c.result)
    }

    /// Sets how the simulation runs.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Sim, SimConfig};
    /// let (mut sim, _) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.set_config(SimConfig { irq_cpu: 1, ..SimConfig::default() });
    /// assert_eq!(sim.config().irq_cpu, 1);
    /// ```
    pub fn set_config(&mut self, config: SimConfig) {
        self.config = config;
    }

    /// How the simulation runs.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Sim, SimConfig};
    /// let (sim, _) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// assert_eq!(*sim.config(), SimConfig::default());
    /// ```
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Adds a request queue (a LUN, a namespace) to the host.
    ///
    /// # Errors
    /// [`SimError::Config`] when the library refuses the configuration.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, ModelDriver, Sim, SimPlatform};
    /// let platform = SimPlatform::new(1);
    /// let driver = ModelDriver::new(platform.clone(), Ideal::new(IdealParams::default()).unwrap());
    /// let (tags, config) = (driver.tag_set(), driver.queue_config());
    /// let mut sim = Sim::new(platform, tags, driver).unwrap();
    /// let queue = sim.add_queue(config).unwrap();
    /// assert_eq!(sim.queue(queue).elevator_name(), None);
    /// ```
    pub fn add_queue(&mut self, config: QueueConfig) -> Result<QueueId, SimError> {
        let queue = self.host.add_queue(config)?;
        self.queues.push(queue);
        self.timer_at.push(None);
        self.timer_fired.push(None);
        self.waiting.push(VecDeque::new());
        Ok(QueueId(self.queues.len() - 1))
    }

    /// The queue `id`.
    ///
    /// # Panics
    /// When `id` is a queue of another simulation that has more queues.
    ///
    /// ```
    /// use blkmq_sched_deadline::Deadline;
    /// use blkmq_sim::{Ideal, IdealParams, Sim};
    /// let ideal = Ideal::new(IdealParams::default()).unwrap();
    /// let (sim, queue) = Sim::for_model(ideal, 1, Some(Box::new(Deadline::new()))).unwrap();
    /// assert_eq!(sim.queue(queue).elevator_name(), Some("mq-deadline"));
    /// ```
    pub fn queue(&self, id: QueueId) -> &Arc<RequestQueue<D>> {
        &self.queues[id.0]
    }

    /// The host.
    ///
    /// ```
    /// use blkmq_sim::{Dd, DeviceModel, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 1 << 20));
    /// sim.run().unwrap();
    /// assert_eq!(sim.host().in_driver(), 0);
    /// assert_eq!(sim.host().driver().with_model(|m| m.stats().bytes_read), 1 << 20);
    /// ```
    pub fn host(&self) -> &Arc<Host<D>> {
        &self.host
    }

    /// The platform.
    ///
    /// ```
    /// use blkmq_core::Platform;
    /// use blkmq_sim::{Ideal, IdealParams, Sim};
    /// let (sim, _) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 3, None).unwrap();
    /// assert_eq!(sim.platform().nr_cpus(), 3);
    /// ```
    pub fn platform(&self) -> &SimPlatform {
        &self.platform
    }

    /// The virtual time.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Sim};
    /// let (mut sim, _) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// assert_eq!(sim.now_ns(), 0);
    /// sim.run().unwrap(); // nothing to do
    /// assert_eq!(sim.now_ns(), 0);
    /// ```
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Adds `workload` on `queue`, on CPU 0, starting now.
    ///
    /// ```
    /// use blkmq_sim::{Find, FindParams, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// let find = sim.add_workload(queue, Find::new(FindParams { reads: 10, ..Default::default() }));
    /// sim.run().unwrap();
    /// assert!(sim.workload(find).elapsed_ns().is_some());
    /// ```
    pub fn add_workload<W: Workload>(&mut self, queue: QueueId, workload: W) -> WorkloadId<W> {
        self.add_workload_on(queue, 0, self.now, workload)
    }

    /// Adds `workload` on `queue`, submitting from `cpu`, starting at `start_ns` (or now,
    /// if that is past).
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 2, None).unwrap();
    /// sim.add_workload_on(queue, 1, 5_000_000, Dd::read(0, 4096));
    /// let report = sim.run().unwrap();
    /// assert_eq!(report.workloads[0].start_ns, 5_000_000);
    /// assert_eq!(report.workloads[0].cpu, 1);
    /// ```
    pub fn add_workload_on<W: Workload>(
        &mut self,
        queue: QueueId,
        cpu: usize,
        start_ns: u64,
        workload: W,
    ) -> WorkloadId<W> {
        let index = self.slots.len();
        let start_ns = start_ns.max(self.now);
        self.slots.push(Slot {
            name: workload.name(),
            workload: Box::new(workload),
            queue: queue.0,
            cpu,
            start_ns,
            started: false,
            end_ns: None,
            outstanding: 0,
            acct: Acct::default(),
        });
        self.schedule(start_ns, Event::Start(index));
        WorkloadId {
            index,
            marker: PhantomData,
        }
    }

    /// The workload `id`, to read its results.
    ///
    /// # Panics
    /// When `id` is a workload of another simulation.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Iozone, IozoneParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// let sweep = IozoneParams { file_bytes: 64 << 10, max_record: 8 << 10, ..Default::default() };
    /// let iozone = sim.add_workload(queue, Iozone::new(sweep));
    /// sim.run().unwrap();
    /// assert_eq!(sim.workload(iozone).grid().rows.len(), 2);
    /// ```
    pub fn workload<W: Workload>(&self, id: WorkloadId<W>) -> &W {
        let any: &dyn std::any::Any = &*self.slots[id.index].workload;
        any.downcast_ref::<W>().unwrap_or_else(|| {
            panic!(
                "workload {} is not of the type its id names: an id of another simulation",
                id.index
            )
        })
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.events.push(Reverse((at, self.seq, event)));
        self.seq += 1;
    }

    /// Runs until nothing is left to happen; returns the report of everything so far.
    /// More workloads may be added and the simulation run again; time goes on.
    ///
    /// # Errors
    /// [`SimError::Stalled`] when bios are left waiting or not ended,
    /// [`SimError::Unfinished`] when a workload is left with nothing to wake it,
    /// [`SimError::EventLimit`] when a limit of [`SimConfig`] is reached.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let params = IdealParams { latency_ns: 1_000, bandwidth: 0, ..Default::default() };
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096));
    /// let first = sim.run().unwrap();
    /// assert_eq!(first.now_ns, 1_000);
    /// sim.add_workload(queue, Dd::write(0, 4096)); // and again, from where time stopped
    /// let second = sim.run().unwrap();
    /// assert_eq!((second.now_ns, second.workloads.len()), (2_000, 2));
    /// ```
    pub fn run(&mut self) -> Result<SimReport, SimError> {
        self.settle();
        while let Some(&Reverse((at, _, event))) = self.events.peek() {
            if event == Event::TimeoutCheck && self.slots.iter().all(|s| s.outstanding == 0) {
                // Nothing left to time out: the check would only move the clock.
                self.events.pop();
                self.timeout_pending = false;
                continue;
            }
            let at_instant = if at == self.instant.0 {
                self.instant.1 + 1
            } else {
                1
            };
            if self.handled >= self.config.max_events
                || at_instant > self.config.max_events_per_instant
            {
                // The event stays queued: a run with higher limits goes on from it.
                return Err(SimError::EventLimit {
                    at_ns: at,
                    events: self.handled,
                });
            }
            self.events.pop();
            self.handled += 1;
            self.instant = (at, at_instant);
            self.now = at;
            self.platform.advance_to(at);
            self.handle(event);
            self.settle();
        }
        let outstanding: u64 = self.slots.iter().map(|s| s.outstanding).sum();
        let waiting: usize = self.waiting.iter().map(VecDeque::len).sum();
        if waiting > 0 || outstanding > 0 {
            return Err(SimError::Stalled {
                at_ns: self.now,
                waiting,
                outstanding,
            });
        }
        if let Some(slot) = self.slots.iter().find(|s| s.end_ns.is_none()) {
            return Err(SimError::Unfinished {
                at_ns: self.now,
                workload: slot.name.clone(),
            });
        }
        Ok(self.report())
    }

    /// The report of everything so far (also after a failed run).
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, Sim};
    /// let (sim, _) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// assert_eq!(sim.report().stats.bios_submitted, 0);
    /// ```
    pub fn report(&self) -> SimReport {
        let workloads = self
            .slots
            .iter()
            .map(|s| WorkloadReport {
                name: s.name.clone(),
                queue: s.queue,
                cpu: s.cpu,
                start_ns: s.start_ns,
                end_ns: s.end_ns.unwrap_or(self.now),
                finished: s.end_ns.is_some(),
                ios: s.acct.ios,
                bytes_read: s.acct.bytes_read,
                bytes_written: s.acct.bytes_written,
                bytes_other: s.acct.bytes_other,
                issued_bytes: s.acct.issued_bytes,
                claimed_bytes: s.workload.claimed_bytes(),
                errors: s.acct.errors,
            })
            .collect();
        let issuers = self
            .issuers
            .iter()
            .map(|(&issuer, a)| IssuerReport {
                issuer,
                ios: a.ios,
                bytes_read: a.bytes_read,
                bytes_written: a.bytes_written,
                first_ns: a.first_ns.unwrap_or(0),
                last_ns: a.last_ns,
                latency: LatencyStats::from_samples(&a.latencies),
            })
            .collect();
        SimReport {
            now_ns: self.now,
            events: self.handled,
            stats: self.stats,
            workloads,
            issuers,
            queues: self.queues.iter().map(|q| q.stats()).collect(),
        }
    }

    // ----- events -----

    fn handle(&mut self, event: Event) {
        match event {
            Event::Irq(line) => {
                self.stats.irqs += 1;
                self.platform.set_cpu(self.config.irq_cpu);
                let cx = IrqCx {
                    queues: &self.queues,
                    now: self.now,
                };
                self.host.driver().interrupt(&cx, line);
            }
            Event::Kick => {
                self.kick_pending = false;
                self.stats.kick_runs += 1;
                self.platform.set_cpu(self.config.irq_cpu);
                // The loop's kblockd latency decided that now is the kicked queues' time,
                // delayed reruns included.
                self.host.service_only(Due::Kicked);
                self.rekicked = self.platform.has_kicks();
            }
            Event::ElvTimer { queue, at } => {
                if self.timer_at[queue] == Some(at) {
                    self.timer_at[queue] = None;
                }
                self.timer_fired[queue] = Some(at);
                self.stats.timer_runs += 1;
                self.platform.set_cpu(self.config.irq_cpu);
                self.host.service_only(Due::Timers);
            }
            Event::Start(i) => {
                self.slots[i].started = true;
                self.slots[i].start_ns = self.now;
                let mut cx = Cx {
                    now: self.now,
                    actions: &mut self.actions,
                };
                self.slots[i].workload.start(&mut cx);
                self.apply(i);
            }
            Event::Wake { workload, token } => {
                let mut cx = Cx {
                    now: self.now,
                    actions: &mut self.actions,
                };
                self.slots[workload].workload.woken(&mut cx, token);
                self.apply(workload);
            }
            Event::Service => {
                self.service_pending = None;
                self.platform.set_cpu(self.config.irq_cpu);
                let done = self.host.service_only(Due::All);
                self.stats.timeouts += done.timed_out as u64;
                if let Some(next) = done.next {
                    // The periodic work matters only while I/O is outstanding: the loop
                    // ends when nothing is.
                    if self.slots.iter().any(|s| s.outstanding > 0) {
                        self.platform.want_service_at(next);
                    }
                }
            }
            Event::TimeoutCheck => {
                self.timeout_pending = false;
                self.platform.set_cpu(self.config.irq_cpu);
                let done = self.host.service_only(Due::Timeouts);
                self.stats.timeouts += done.timed_out as u64;
            }
        }
    }

    /// Settles what the last call caused: bio ends (and what workloads do about them),
    /// interrupts asked for, kicks, elevator timers, timeout checks.
    fn settle(&mut self) {
        loop {
            let mut ended = std::mem::take(&mut self.ended);
            ENDED.with(|e| ended.append(&mut e.borrow_mut()));
            for &(private, status) in &ended {
                self.bio_ended(private, status);
            }
            ended.clear();
            self.ended = ended;
            // Requests free up without any bio ending (a piece of a split bio), so waiting
            // bios try again after every event, not only after bio ends.
            self.retry_waiting();
            let still = ENDED.with(|e| !e.borrow().is_empty());
            if !still {
                break;
            }
        }
        let mut irqs = std::mem::take(&mut self.irqs);
        self.platform.take_irqs(&mut irqs);
        for &(at, line) in &irqs {
            self.schedule(at, Event::Irq(line));
        }
        irqs.clear();
        self.irqs = irqs;
        if self.platform.has_kicks() {
            self.platform.take_kicks();
            if !self.kick_pending {
                self.kick_pending = true;
                let at = if self.rekicked {
                    self.stats.kick_retries += 1;
                    let retry = self.now + self.config.kick_retry_ns.max(1);
                    self.queues
                        .iter()
                        .filter_map(|q| q.next_timer())
                        .filter(|&t| t > self.now)
                        .fold(retry, u64::min)
                } else {
                    self.now + self.config.kick_delay_ns
                };
                self.schedule(at, Event::Kick);
            }
        }
        self.rekicked = false;
        for q in 0..self.queues.len() {
            let Some(t) = self.queues[q].next_timer() else {
                continue;
            };
            if self.timer_at[q] == Some(t) || (t <= self.now && self.timer_fired[q] == Some(t)) {
                continue;
            }
            self.timer_at[q] = Some(t);
            self.schedule(t.max(self.now), Event::ElvTimer { queue: q, at: t });
        }
        if let Some(at) = self.platform.take_service_at() {
            let at = at.max(self.now);
            if self.service_pending.is_none_or(|pending| at < pending) {
                self.service_pending = Some(at);
                self.schedule(at, Event::Service);
            }
        }
        if let Some(every) = self.config.timeout_check_ns {
            let busy = self.slots.iter().any(|s| s.outstanding > 0);
            if busy && !self.timeout_pending && every > 0 {
                self.timeout_pending = true;
                self.schedule(self.now + every, Event::TimeoutCheck);
            }
        }
    }

    /// Applies what workload `w` asked for in its last call.
    fn apply(&mut self, w: usize) {
        let mut actions = std::mem::take(&mut self.actions);
        for action in actions.drain(..) {
            match action {
                Action::Submit { ios, plugged } => self.submit(w, &ios, plugged),
                Action::Wake { at, token } => {
                    self.schedule(at.max(self.now), Event::Wake { workload: w, token });
                }
            }
        }
        self.actions = actions;
        self.check_finished(w);
    }

    fn check_finished(&mut self, w: usize) {
        let slot = &mut self.slots[w];
        if slot.end_ns.is_none()
            && slot.started
            && slot.outstanding == 0
            && slot.workload.is_finished()
        {
            slot.end_ns = Some(self.now);
        }
    }

    /// Makes the bio of `io` for workload `w`, recorded.
    fn make_bio(&mut self, w: usize, io: &Io) -> Bio {
        let index = match self.free_bios.pop() {
            Some(i) => i,
            None => {
                self.bios.push(BioRec {
                    workload: 0,
                    issuer: IssuerId(0),
                    op: Op::Read,
                    sector: 0,
                    bytes: 0,
                    tag: 0,
                    submitted: 0,
                    generation: 0,
                    live: false,
                    tracked: Tracked::default(),
                });
                (self.bios.len() - 1) as u32
            }
        };
        let rec = &mut self.bios[index as usize];
        let generation = rec.generation.wrapping_add(1);
        *rec = BioRec {
            workload: w,
            issuer: io.issuer,
            op: io.op,
            sector: io.sector,
            bytes: io.bytes(),
            tag: io.tag,
            submitted: self.now,
            generation,
            live: true,
            tracked: Tracked::default(),
        };
        let key = (self.id << 48) | (u64::from(generation) << 32) | u64::from(index);
        let slot = &mut self.slots[w];
        slot.outstanding += 1;
        slot.acct.issued_bytes += io.bytes();
        self.stats.bios_submitted += 1;
        let bio = Bio::new(io.op, io.sector, io.sectors)
            .flags(io.flags)
            .prio(io.prio)
            .issuer(io.issuer)
            .private(key)
            .end_io(sim_end_io);
        match self.checker.as_mut() {
            Some(checker) => {
                let (bio, tracked) = checker.submit(self.platform.memory(), index + 1, bio);
                self.bios[index as usize].tracked = tracked;
                bio
            }
            None => bio,
        }
    }

    /// Submits `ios` for workload `w`, under a plug when `plugged`; what cannot go in
    /// waits, in order, behind anything already waiting for the same queue.
    fn submit(&mut self, w: usize, ios: &[Io], plugged: bool) {
        let q = self.slots[w].queue;
        let cpu = self.slots[w].cpu;
        let queue = Arc::clone(&self.queues[q]);
        self.platform.set_cpu(cpu);
        let mut plug = Plug::new();
        for io in ios {
            let bio = self.make_bio(w, io);
            if !self.waiting[q].is_empty() {
                self.wait(bio, q, cpu);
                continue;
            }
            let back = if plugged {
                match queue.submit_plugged(&mut plug, bio) {
                    Ok(()) => None,
                    Err(bio) => {
                        // Out of requests: what the plug holds goes first, then one retry.
                        plug.flush();
                        queue.submit(bio).err()
                    }
                }
            } else {
                queue.submit(bio).err()
            };
            if let Some(bio) = back {
                self.wait(bio, q, cpu);
            }
        }
        drop(plug);
    }

    fn wait(&mut self, bio: Bio, queue: usize, cpu: usize) {
        self.stats.bios_waited += 1;
        self.waiting[queue].push_back(Waiting { bio, cpu });
    }

    /// Submits each queue's waiting bios, in order, while they go in.
    fn retry_waiting(&mut self) {
        for q in 0..self.waiting.len() {
            while let Some(w) = self.waiting[q].pop_front() {
                self.platform.set_cpu(w.cpu);
                if let Err(bio) = self.queues[q].submit(w.bio) {
                    self.waiting[q].push_front(Waiting { bio, ..w });
                    break;
                }
            }
        }
    }

    /// A bio ended with `status`.
    fn bio_ended(&mut self, private: u64, status: Status) {
        if private >> 48 != self.id {
            self.stats.foreign_end_io += 1;
            return;
        }
        let index = (private & 0xffff_ffff) as usize;
        let generation = ((private >> 32) & 0xffff) as u16;
        let Some(rec) = self.bios.get_mut(index) else {
            self.stats.stale_end_io += 1;
            return;
        };
        if !rec.live || rec.generation != generation {
            self.stats.stale_end_io += 1;
            return;
        }
        rec.live = false;
        let rec = *rec;
        self.free_bios.push(index as u32);
        self.stats.end_io_calls += 1;
        if let Some(checker) = self.checker.as_mut() {
            let memory = self.platform.memory();
            checker.end(
                memory,
                rec.op,
                rec.sector,
                rec.bytes,
                status.is_ok(),
                rec.tracked,
            );
        }
        let now = self.now;
        let latency = now - rec.submitted;
        let w = rec.workload;
        let slot = &mut self.slots[w];
        slot.outstanding -= 1;
        slot.acct.ios += 1;
        if status.is_ok() {
            match rec.op {
                Op::Read => slot.acct.bytes_read += rec.bytes,
                Op::Write => slot.acct.bytes_written += rec.bytes,
                _ => slot.acct.bytes_other += rec.bytes,
            }
        } else {
            slot.acct.errors += 1;
            self.stats.errors += 1;
        }
        let issuer = self.issuers.entry(rec.issuer).or_default();
        issuer.ios += 1;
        if status.is_ok() {
            match rec.op {
                Op::Read => issuer.bytes_read += rec.bytes,
                Op::Write => issuer.bytes_written += rec.bytes,
                _ => {}
            }
        }
        issuer.first_ns = Some(
            issuer
                .first_ns
                .map_or(rec.submitted, |f| f.min(rec.submitted)),
        );
        issuer.last_ns = issuer.last_ns.max(now);
        issuer.latencies.push(latency);
        let done = Done {
            tag: rec.tag,
            op: rec.op,
            sector: rec.sector,
            bytes: rec.bytes,
            status,
            submitted_ns: rec.submitted,
            completed_ns: now,
        };
        let mut cx = Cx {
            now,
            actions: &mut self.actions,
        };
        self.slots[w].workload.completed(&mut cx, &done);
        self.apply(w);
    }
}

impl<M: DeviceModel> Sim<ModelDriver<M>> {
    /// A simulation of `model` behind a [`ModelDriver`] on `nr_cpus` CPUs, with one queue
    /// with the device's limits and `elevator` (none when `None`).
    ///
    /// # Errors
    /// [`SimError::Config`] when the library refuses the tag set or the queue.
    ///
    /// ```
    /// use blkmq_sched_deadline::Deadline;
    /// use blkmq_sim::{Disk, DiskParams, Sim};
    /// let disk = Disk::new(DiskParams::ncq()).unwrap();
    /// let (sim, queue) = Sim::for_model(disk, 4, Some(Box::new(Deadline::new()))).unwrap();
    /// assert_eq!(sim.queue(queue).elevator_name(), Some("mq-deadline"));
    /// assert_eq!(sim.host().set().depth(), 32);
    /// ```
    pub fn for_model(
        model: M,
        nr_cpus: usize,
        elevator: Option<Box<dyn Elevator>>,
    ) -> Result<(Self, QueueId), SimError> {
        let platform = SimPlatform::new(nr_cpus);
        let driver = ModelDriver::new(platform.clone(), model);
        let tags = driver.tag_set();
        let mut config = driver.queue_config();
        if let Some(e) = elevator {
            config = config.elevator(e);
        }
        let mut sim = Self::new(platform, tags, driver)?;
        let queue = sim.add_queue(config)?;
        Ok((sim, queue))
    }
}

impl<D: SimDriver> fmt::Debug for Sim<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("now_ns", &self.now)
            .field("queues", &self.queues.len())
            .field("workloads", &self.slots.len())
            .field("events_pending", &self.events.len())
            .field(
                "waiting",
                &self.waiting.iter().map(VecDeque::len).sum::<usize>(),
            )
            .finish_non_exhaustive()
    }
}

impl<D: SimDriver> Drop for Sim<D> {
    fn drop(&mut self) {
        // Dropping a queue ends what it still holds; those ends are this simulation's and
        // must not be left for the next one on this thread.
        self.queues.clear();
        let id = self.id;
        ENDED.with(|e| e.borrow_mut().retain(|(private, _)| private >> 48 != id));
    }
}

/// Bytes as a whole number of sectors, for workloads (rounded up).
pub(crate) fn sectors_of(bytes: u64) -> u64 {
    bytes.div_ceil(SECTOR_SIZE)
}
