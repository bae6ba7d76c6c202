//! Operation sequences on mq-deadline checked against a reference model after every op: the
//! test support shared by the corpus replay of the root package (`tests/fuzz_corpus.rs`) and
//! the cargo-fuzz target `deadline_ops` (feature `test-utils`).
//!
//! A [`Config`] says what to build: a tag set of one or two hardware queues (each with its
//! own tags, or [shared host tags](TagSetFlags::SHARED_HOST_TAGS)) on the deterministic
//! [`TestPlatform`], one request queue's [`QueueTags`] with scheduler tags of 1 to
//! [`MAX_NR_REQUESTS`] requests per map, the queue's [`QueueLimits`], and a [`Deadline`]
//! sized by [`Elevator::depth_updated`]. [`run`] then drives the elevator directly, the way a
//! request queue does, through an [`ElvCx`] over the bare tags and a clock that moves only
//! when an op says so: requests allocated within [`Elevator::limit_depth`] and inserted
//! (alone or several in one call, at the tail or at the head), bios offered to
//! [`Elevator::bio_merge`] (and inserted as requests of their own when refused), dispatches,
//! completions, requeues (inserted again at the head), clock steps, tunable changes (valid
//! and not) and changes of `nr_requests` within the scheduler tags made.
//!
//! After every op it checks:
//!
//! * every bio handed over is dispatched exactly once per insertion (once, and once more
//!   for each requeue of its request), and only while it is queued;
//! * a dispatched request holds exactly the bios the model expects of it, front to back:
//!   each with the operation, priority, start and length it was made with, all of one
//!   operation and priority, each starting where the one before ends; the request's range is
//!   exactly theirs, within the limits (the most sectors its operation may have in one
//!   request, no chunk boundary crossed); a request of two or more bios has none that may
//!   not merge ([`BioFlags::NOMERGE`], [`BioFlags::FUA`], [`BioFlags::PREFLUSH`]);
//! * requests inserted at the head (fresh, or requeued) go before everything else of their
//!   class: each insert before those inserted at the head earlier, the requests of one call
//!   in the order they were handed in; and each comes out exactly as it went in (nothing
//!   merges into it);
//! * strict priority: a request of a lower class is dispatched while a higher class has
//!   requests queued or in flight only when it waited out `prio_aging_expire`; and nothing
//!   is refused unless nothing is queued or a busy higher class holds the queued ones back;
//! * no bio ends but those of a request completed, with its status, front to back, once:
//!   a merge loses no bio;
//! * the counters ([`Deadline::stats`]) agree with the model: per class, `inserted` counts
//!   the requests inserted fresh (a requeue counts none), `dispatched` and `in_flight` what
//!   was dispatched and is out; `completed` less the completions equals `merged` less the
//!   bios merged (a request merged away counts once in each); a class is busy
//!   (`inserted > completed`) exactly when a bio of it has not ended; the requests held,
//!   `inserted - completed - in_flight` over the classes, are [`Deadline::queued`]; the
//!   scheduler tags in use are those plus the requests in flight; and
//!   [`has_work`](Elevator::has_work) holds on every hardware queue exactly when a bio is
//!   queued;
//! * tunables: every setter accepts exactly its documented range; a value refused comes
//!   back as a [`TunableError`] naming the tunable and the value, and changes nothing; a
//!   value accepted changes that tunable alone. A new `nr_requests` is accepted by the tags
//!   exactly within the depth they were made with, and [`Elevator::depth_updated`] resets
//!   `async_depth` to three quarters of it (at least 1) and changes nothing else;
//!   [`Elevator::limit_depth`] is no limit for reads and `async_depth` for everything else.
//!
//! At the end the run drains: it dispatches everything and completes what is in flight
//! until nothing is left. Then no hardware queue may have work, no request may be held or
//! in flight, no scheduler tag in use, every bio must have ended once, and the counters must
//! balance.
//!
//! The requests are built on bare tags, where the request queue's count of data segments
//! is not kept, so the limits leave the segment rules at values no request here reaches.
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, so any input a fuzzer makes up is a valid test: a panic or a [`Failure`] is a
//! bug.
//!
//! ```
//! use blkmq_sched_deadline::ops::{BioSpec, Config, LimitsSpec, Op, Place, run};
//!
//! let config = Config {
//!     hw_queues: 0,
//!     shared_tags: false,
//!     nr_requests: 7,
//!     limits: LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None },
//! };
//! let read = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
//! let next = BioSpec { place: Place::Follow, ..read };
//! let ops = [
//!     Op::Insert { hctx: 0, bio: read, more: 0, at_head: false },
//!     Op::Merge { hctx: 0, bio: next }, // 8..16 joins the request at 0
//!     Op::Dispatch { hctx: 0, count: 0 },
//!     Op::Complete { index: 0, status: 0 },
//! ];
//! run(&config, &ops).unwrap();
//! ```

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use arbitrary::Arbitrary;
use blkmq_core::ops::TestPlatform;
use blkmq_core::{
    Alloc, Bio, BioFlags, Elevator, ElvCx, IoPrio, IoPrioClass, Op as BioOp, QueueLimits,
    QueueTags, Rq, Status, TagError, TagSet, TagSetFlags,
};

use crate::{Deadline, MAX_BATCH, MAX_EXPIRE_NS, TunableError, Tunables};

/// Returns `Err(message)` from the enclosing function unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// The most hardware queues [`run`] builds.
pub const MAX_HW_QUEUES: usize = 2;

/// The most scheduler tags per map [`run`] makes.
pub const MAX_NR_REQUESTS: usize = 32;

/// Sectors a bio placed with [`Place::At`] may start at: `0..SPAN`.
pub const SPAN: u64 = 4096;

/// The most sectors a [`BioSpec`] asks for (before the limits cut it).
pub const MAX_BIO_SECTORS: u32 = 64;

/// The driver tags of the set (the elevator never sees them).
const DRIVER_DEPTH: usize = 8;

/// The device's size in sectors: far beyond every bio.
const CAPACITY: u64 = 1 << 20;

/// Rounds of the final drain after which it counts as stuck.
const MAX_DRAIN_ROUNDS: usize = 10_000;

const MS: u64 = 1_000_000;

/// How far [`Op::Advance`] moves the clock: `ADVANCE[step % 8]` ns, from nothing to past
/// every expiry.
pub const ADVANCE: [u64; 8] = [
    0,
    1_000,
    MS,
    60 * MS,
    600 * MS,
    6_000 * MS,
    11_000 * MS,
    MAX_EXPIRE_NS + 1,
];

/// The classes by index, highest first.
const CLASSES: [IoPrioClass; 3] = [
    IoPrioClass::RealTime,
    IoPrioClass::BestEffort,
    IoPrioClass::Idle,
];

/// What [`run`] builds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Hardware queues: `1 + hw_queues % MAX_HW_QUEUES`.
    pub hw_queues: u8,
    /// [`TagSetFlags::SHARED_HOST_TAGS`]: one map for every hardware queue.
    pub shared_tags: bool,
    /// Scheduler tags made per map: `1 + nr_requests % MAX_NR_REQUESTS`.
    pub nr_requests: u8,
    /// The queue's limits.
    pub limits: LimitsSpec,
}

/// The queue's [`QueueLimits`], each field reduced into a valid range.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsSpec {
    /// `max_sectors`: `8 * (1 + max_sectors % 8)`.
    pub max_sectors: u8,
    /// `chunk_sectors`: `8 << (chunk % 4)`; `None` for no chunks.
    pub chunk: Option<u8>,
    /// `max_discard_sectors`: `8 * (1 + discard % 16)`; `None` for a device that cannot
    /// discard.
    pub discard: Option<u8>,
    /// `max_write_zeroes_sectors`, as `discard`.
    pub write_zeroes: Option<u8>,
}

/// Where a bio starts, and of what kind it is.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At sector `at % SPAN`, with the operation and priority of the [`BioSpec`].
    At(u16),
    /// Where the last bio made ended, with its operation and priority (a sequential
    /// stream); at sector 0 before any.
    Follow,
    /// Touching a queued bio, with its operation and priority (a merge candidate): the
    /// `pick`-th of those queued, in the order they were made, just after it, or with
    /// `front` just before it when there is room. As [`Place::Follow`] with none queued.
    Touch {
        /// Which queued bio.
        pick: u8,
        /// Before it instead of after it.
        front: bool,
    },
}

/// A bio to make.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BioSpec {
    /// The priority class, `class % 3`: real time, best effort, idle.
    pub class: u8,
    /// The priority level, `level % IoPrio::LEVELS`.
    pub level: u8,
    /// The operation, `op % 6`: read, write, read, write, discard, write zeroes (an
    /// operation the device lacks makes a write).
    pub op: u8,
    /// Where it starts (and, but for [`Place::At`], its operation and priority).
    pub place: Place,
    /// Its length, `1 + sectors % MAX_BIO_SECTORS`, cut to what one request may hold from
    /// its start ([`QueueLimits::split_len`]), as the request queue splits bios.
    pub sectors: u8,
    /// Flags: bits 0 to 4 are [`BioFlags::SYNC`], [`BioFlags::META`], [`BioFlags::IDLE`],
    /// [`BioFlags::RAHEAD`] and [`BioFlags::BACKGROUND`]; bits 5 to 7, as a number, make
    /// the bio unmergeable when 5 ([`BioFlags::NOMERGE`]), 6 ([`BioFlags::FUA`]) or 7
    /// ([`BioFlags::PREFLUSH`]).
    pub flags: u8,
}

/// A tunable of [`Op::Tune`].
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tunable {
    /// [`Deadline::set_read_expire`].
    ReadExpire,
    /// [`Deadline::set_write_expire`].
    WriteExpire,
    /// [`Deadline::set_writes_starved`].
    WritesStarved,
    /// [`Deadline::set_front_merges`].
    FrontMerges,
    /// [`Deadline::set_fifo_batch`].
    FifoBatch,
    /// [`Deadline::set_async_depth`].
    AsyncDepth,
    /// [`Deadline::set_prio_aging_expire`].
    PrioAgingExpire,
}

/// One step of a run. Numbers that pick something are reduced modulo the number of choices:
/// `hctx` picks a hardware queue, `index` a request in flight (in the order they were
/// dispatched). An op with nothing to act on does nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Makes requests of `1 + more % 4` bios — `bio`, then each starting where the one
    /// before ends, of the same operation, priority and flags — each allocated as a request
    /// queue does (within [`Elevator::limit_depth`]) for hardware queue `hctx`, and inserts
    /// them with one [`Elevator::insert_requests`] call. When a scheduler tag is not to be
    /// had, the bios from there on are not made.
    Insert {
        /// The hardware queue.
        hctx: u8,
        /// The first bio.
        bio: BioSpec,
        /// How many more, before reduction.
        more: u8,
        /// Inserted at the head.
        at_head: bool,
    },
    /// Offers a fresh bio to [`Elevator::bio_merge`]; refused, it becomes a request of its
    /// own, inserted as [`Op::Insert`] inserts one.
    Merge {
        /// The hardware queue a request of it would be for.
        hctx: u8,
        /// The bio.
        bio: BioSpec,
    },
    /// `1 + count % 4` calls of [`Elevator::dispatch_request`] for hardware queue `hctx`.
    Dispatch {
        /// The hardware queue.
        hctx: u8,
        /// How many, before reduction.
        count: u8,
    },
    /// Completes the `index`-th request in flight: [`Elevator::completed_request`],
    /// [`Elevator::finish_request`], then [`QueueTags::complete`] with status
    /// `status % 4` of [`Status::Ok`], [`Status::IoErr`], [`Status::Timeout`],
    /// [`Status::Medium`].
    Complete {
        /// Which request.
        index: u8,
        /// The status, before reduction.
        status: u8,
    },
    /// Requeues `1 + count % 3` requests in flight, from the `index`-th on (wrapping):
    /// [`Elevator::requeue_request`] for each, then one [`Elevator::insert_requests`] of
    /// them all at the head.
    Requeue {
        /// The first request.
        index: u8,
        /// How many, before reduction.
        count: u8,
    },
    /// Moves the clock [`ADVANCE`]`[step % 8]` ns on.
    Advance {
        /// The step, before reduction.
        step: u8,
    },
    /// Sets a tunable. `value % 4 != 0` picks an edge of its range from
    /// `(value >> 2) % 8` (in range and just out of it); `value % 4 == 0` gives it
    /// `value >> 2` as it is (for an expiry, in µs). [`Tunable::AsyncDepth`] takes
    /// `(value >> 2) % (nr_requests + 2)`, except that with `value % 4 == 0` a result of 0
    /// gives `value >> 2` itself (0, or a depth out of range); [`Tunable::FrontMerges`] is
    /// on for an even `value`.
    Tune {
        /// Which tunable.
        tunable: Tunable,
        /// The value, before reduction.
        value: u32,
    },
    /// [`QueueTags::set_nr_requests`] to `nr % (made + 2)`, where `made` is the depth the
    /// scheduler tags were made with (so 0 and `made + 1` are refused); accepted,
    /// [`Elevator::depth_updated`] with it (the keys stay: the tags made are kept).
    Depth {
        /// The new `nr_requests`, before reduction.
        nr: u8,
    },
}

impl Op {
    /// The name of every variant, for coverage checks of a corpus.
    pub const KINDS: &'static [&'static str] = &[
        "Insert", "Merge", "Dispatch", "Complete", "Requeue", "Advance", "Tune", "Depth",
    ];

    /// This op's variant name (one of [`KINDS`](Self::KINDS)).
    ///
    /// ```
    /// use blkmq_sched_deadline::ops::Op;
    /// assert_eq!(Op::Advance { step: 3 }.kind(), "Advance");
    /// assert!(Op::KINDS.contains(&Op::Depth { nr: 1 }.kind()));
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Insert { .. } => "Insert",
            Self::Merge { .. } => "Merge",
            Self::Dispatch { .. } => "Dispatch",
            Self::Complete { .. } => "Complete",
            Self::Requeue { .. } => "Requeue",
            Self::Advance { .. } => "Advance",
            Self::Tune { .. } => "Tune",
            Self::Depth { .. } => "Depth",
        }
    }
}

/// Where [`run`] found a broken promise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// While building the tags and the elevator.
    Setup,
    /// At op `index`.
    Op {
        /// The op's position in the sequence.
        index: usize,
        /// The op.
        op: Op,
    },
    /// While draining everything at the end.
    Drain,
}

/// A broken promise: where, and what was expected against what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Where.
    pub stage: Stage,
    /// What was expected and what happened.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stage {
            Stage::Setup => write!(f, "setup: {}", self.message),
            Stage::Op { index, op } => write!(f, "op #{index} {op:?}: {}", self.message),
            Stage::Drain => write!(f, "drain: {}", self.message),
        }
    }
}

impl core::error::Error for Failure {}

/// Runs `ops` against the tags and the elevator `config` describes, checking every promise
/// listed in the module documentation after every op, then drains everything and checks
/// that nothing is left.
///
/// # Errors
/// The first broken promise: where, what was expected and what happened.
///
/// ```
/// use blkmq_sched_deadline::ops::{BioSpec, Config, LimitsSpec, Op, Place, Tunable, run};
///
/// let config = Config {
///     hw_queues: 1,
///     shared_tags: true,
///     nr_requests: 3,
///     limits: LimitsSpec { max_sectors: 0, chunk: Some(0), discard: Some(0), write_zeroes: None },
/// };
/// let write = BioSpec { class: 0, level: 0, op: 1, place: Place::At(64), sectors: 7, flags: 0 };
/// let ops = [
///     Op::Tune { tunable: Tunable::FifoBatch, value: 1 }, // 0: refused
///     Op::Insert { hctx: 1, bio: write, more: 3, at_head: false },
///     Op::Dispatch { hctx: 0, count: 1 },
///     Op::Requeue { index: 0, count: 0 },
///     Op::Depth { nr: 2 },
///     Op::Advance { step: 7 },
/// ];
/// run(&config, &ops).unwrap(); // the drain at the end dispatches and completes the rest
/// ```
pub fn run(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    let mut runner = Runner::build(config).map_err(|message| Failure {
        stage: Stage::Setup,
        message,
    })?;
    for (index, op) in ops.iter().enumerate() {
        runner.step(op).map_err(|message| Failure {
            stage: Stage::Op { index, op: *op },
            message,
        })?;
    }
    runner.drain().map_err(|message| Failure {
        stage: Stage::Drain,
        message,
    })
}

// ----- bio ends -----

/// Ends recorded by `end_io`: run -> (bio sequence number, status), in the order they came.
/// `end_io` is a plain `fn`, so the ends go here, keyed by the run that made the bio (the
/// upper half of its `private` value), so that runs on several threads keep apart.
static ENDS: Mutex<BTreeMap<u32, Vec<(u32, Status)>>> = Mutex::new(BTreeMap::new());

/// Hands out run identities.
static NEXT_RUN: AtomicU32 = AtomicU32::new(1);

fn ends() -> MutexGuard<'static, BTreeMap<u32, Vec<(u32, Status)>>> {
    // A failed run elsewhere leaves the map as it was: nothing to repair.
    ENDS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `end_io` of every bio the model makes.
fn record_end(bio: Bio, status: Status) {
    let run = (bio.private >> 32) as u32;
    // A run that is over no longer listens.
    if let Some(log) = ends().get_mut(&run) {
        log.push((bio.private as u32, status));
    }
}

/// A run's place in [`ENDS`], removed when the run is over.
struct EndLog(u32);

impl EndLog {
    fn new() -> Self {
        let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        ends().insert(run, Vec::new());
        Self(run)
    }

    /// The ends recorded since the last call.
    fn take(&self) -> Vec<(u32, Status)> {
        ends()
            .get_mut(&self.0)
            .map(core::mem::take)
            .unwrap_or_default()
    }
}

impl Drop for EndLog {
    fn drop(&mut self) {
        ends().remove(&self.0);
    }
}

// ----- the model -----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    InFlight,
    Done,
}

/// What the model knows of one bio handed over.
#[derive(Clone, Copy, Debug)]
struct Rec {
    op: BioOp,
    prio: IoPrio,
    sector: u64,
    sectors: u32,
    /// When it was handed over.
    since: u64,
    state: State,
    dispatched: u32,
    /// Dispatches it is owed: one, and one more per requeue.
    owed: u32,
}

/// A request dispatched and not yet completed or requeued.
struct InFlight {
    rq: Rq,
    class: usize,
    /// Its bios, front to back.
    bios: Vec<u32>,
}

/// The model's counters of one class.
#[derive(Clone, Copy, Default)]
struct Counts {
    /// Requests inserted fresh.
    inserted: u64,
    /// Bios taken by `bio_merge`.
    bio_merges: u64,
    dispatched: u64,
    /// Requests completed.
    completed: u64,
}

/// The last bio made: where a [`Place::Follow`] goes.
#[derive(Clone, Copy)]
struct Last {
    op: BioOp,
    prio: IoPrio,
    end: u64,
}

/// A bio about to be made: everything but its identity.
#[derive(Clone, Copy, Debug)]
struct Shape {
    op: BioOp,
    prio: IoPrio,
    flags: BioFlags,
    sector: u64,
    sectors: u32,
}

fn class_of(prio: IoPrio) -> usize {
    match prio.class() {
        IoPrioClass::RealTime => 0,
        IoPrioClass::BestEffort => 1,
        IoPrioClass::Idle => 2,
    }
}

fn flags_of(raw: u8) -> BioFlags {
    let mut flags = BioFlags::empty();
    for (bit, flag) in [
        BioFlags::SYNC,
        BioFlags::META,
        BioFlags::IDLE,
        BioFlags::RAHEAD,
        BioFlags::BACKGROUND,
    ]
    .into_iter()
    .enumerate()
    {
        if raw & (1 << bit) != 0 {
            flags |= flag;
        }
    }
    match raw >> 5 {
        5 => flags | BioFlags::NOMERGE,
        6 => flags | BioFlags::FUA,
        7 => flags | BioFlags::PREFLUSH,
        _ => flags,
    }
}

/// Whether a bio with `flags` may ever merge (the rule of [`QueueLimits`]).
fn mergeable(flags: BioFlags) -> bool {
    !flags.intersects(BioFlags::NOMERGE | BioFlags::FUA | BioFlags::PREFLUSH)
}

const STATUSES: [Status; 4] = [Status::Ok, Status::IoErr, Status::Timeout, Status::Medium];

/// An expiry for [`Op::Tune`].
fn expiry(value: u32) -> u64 {
    const EDGES: [u64; 8] = [
        0,
        1,
        MS,
        50 * MS,
        500 * MS,
        10_000 * MS,
        MAX_EXPIRE_NS,
        MAX_EXPIRE_NS + 1,
    ];
    if value % 4 != 0 {
        EDGES[(value >> 2) as usize % EDGES.len()]
    } else {
        u64::from(value >> 2) * 1_000
    }
}

/// A count (`fifo_batch`, `writes_starved`) for [`Op::Tune`].
fn count(value: u32) -> u32 {
    const EDGES: [u32; 8] = [0, 1, 2, 4, 16, MAX_BATCH, MAX_BATCH + 1, u32::MAX];
    if value % 4 != 0 {
        EDGES[(value >> 2) as usize % EDGES.len()]
    } else {
        value >> 2
    }
}

struct Runner {
    tags: QueueTags<(), TestPlatform>,
    limits: QueueLimits,
    dd: Deadline,
    hw_queues: usize,
    /// The depth the scheduler tags were made with.
    made: usize,
    /// The current `nr_requests`.
    nr_requests: usize,
    now: u64,
    log: EndLog,
    next_seq: u32,
    bios: BTreeMap<u32, Rec>,
    /// Per class, the requests inserted at the head and not yet dispatched (their bios),
    /// in the order they must come out.
    heads: [VecDeque<Vec<u32>>; 3],
    last: Option<Last>,
    in_flight: Vec<InFlight>,
    counts: [Counts; 3],
    /// Ends the ops since the last check should have caused, in order.
    expected: Vec<(u32, Status)>,
}

impl Runner {
    fn build(config: &Config) -> Result<Self, String> {
        let hw_queues = 1 + usize::from(config.hw_queues) % MAX_HW_QUEUES;
        let made = 1 + usize::from(config.nr_requests) % MAX_NR_REQUESTS;
        let spec = &config.limits;
        let limits = QueueLimits {
            max_sectors: 8 * (1 + u32::from(spec.max_sectors) % 8),
            chunk_sectors: spec.chunk.map_or(0, |c| 8 << (c % 4)),
            max_discard_sectors: spec.discard.map_or(0, |d| 8 * (1 + u32::from(d) % 16)),
            max_write_zeroes_sectors: spec.write_zeroes.map_or(0, |w| 8 * (1 + u32::from(w) % 16)),
            ..QueueLimits::new(CAPACITY)
        };
        limits
            .validate()
            .map_err(|e| format!("limits {limits:?}: {e:?}"))?;
        let mut builder = TagSet::builder(DRIVER_DEPTH).hw_queues(hw_queues);
        if config.shared_tags {
            builder = builder.flags(TagSetFlags::SHARED_HOST_TAGS);
        }
        let set = builder
            .build(TestPlatform::new(1), |_| ())
            .map_err(|e| format!("building the tag set: {e:?}"))?;
        let mut tags = set
            .attach()
            .map_err(|e| format!("attaching a queue: {e:?}"))?;
        tags.attach_scheduler(Some(made), |_| ())
            .map_err(|e| format!("scheduler tags of {made}: {e:?}"))?;
        let mut dd = Deadline::new();
        dd.depth_updated(made, tags.nr_keys());
        let min = dd.min_shallow_depth();
        ensure!(
            min == Some(1),
            "min_shallow_depth {min:?}, expected Some(1)"
        );
        tags.set_min_shallow_depth(1)
            .map_err(|e| format!("min_shallow_depth 1: {e:?}"))?;
        let want = Tunables {
            async_depth: (3 * made / 4).max(1),
            ..Tunables::default()
        };
        ensure!(
            *dd.tunables() == want,
            "tunables {:?} after depth_updated({made}), expected {want:?}",
            dd.tunables()
        );
        let runner = Self {
            tags,
            limits,
            dd,
            hw_queues,
            made,
            nr_requests: made,
            now: 0,
            log: EndLog::new(),
            next_seq: 0,
            bios: BTreeMap::new(),
            heads: Default::default(),
            last: None,
            in_flight: Vec::new(),
            counts: [Counts::default(); 3],
            expected: Vec::new(),
        };
        runner.check()?;
        Ok(runner)
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Insert {
                hctx,
                bio,
                more,
                at_head,
            } => self.insert(hctx, &bio, more, at_head)?,
            Op::Merge { hctx, bio } => self.merge(hctx, &bio)?,
            Op::Dispatch { hctx, count } => {
                let hctx = usize::from(hctx) % self.hw_queues;
                for _ in 0..=count % 4 {
                    self.dispatch(hctx)?;
                }
            }
            Op::Complete { index, status } => {
                if !self.in_flight.is_empty() {
                    let index = usize::from(index) % self.in_flight.len();
                    self.complete(index, STATUSES[usize::from(status) % STATUSES.len()])?;
                }
            }
            Op::Requeue { index, count } => self.requeue(index, count),
            Op::Advance { step } => self.now += ADVANCE[usize::from(step) % ADVANCE.len()],
            Op::Tune { tunable, value } => self.tune(tunable, value)?,
            Op::Depth { nr } => self.depth(nr)?,
        }
        self.settle()?;
        self.check()
    }

    // ----- making bios -----

    /// `shape` with its length cut as the request queue splits (to what one request may
    /// hold from its start), and moved to sector 0 should it run past the device's end.
    fn fit(&self, mut shape: Shape) -> Shape {
        if shape.sector + u64::from(shape.sectors) > CAPACITY {
            shape.sector = 0;
        }
        let bio = Bio::new(shape.op, shape.sector, shape.sectors);
        shape.sectors = self.limits.split_len(&bio).max(1);
        shape
    }

    /// The bio `spec` describes.
    fn shape(&self, spec: &BioSpec) -> Shape {
        const OPS: [BioOp; 6] = [
            BioOp::Read,
            BioOp::Write,
            BioOp::Read,
            BioOp::Write,
            BioOp::Discard,
            BioOp::WriteZeroes,
        ];
        let mut op = OPS[usize::from(spec.op) % OPS.len()];
        if (op == BioOp::Discard && self.limits.max_discard_sectors == 0)
            || (op == BioOp::WriteZeroes && self.limits.max_write_zeroes_sectors == 0)
        {
            op = BioOp::Write;
        }
        let class = CLASSES[usize::from(spec.class) % CLASSES.len()];
        let prio = IoPrio::new(class, spec.level % IoPrio::LEVELS).unwrap_or_default();
        let sectors = 1 + u32::from(spec.sectors) % MAX_BIO_SECTORS;
        let flags = flags_of(spec.flags);
        let follow = |last: Option<Last>| match last {
            Some(last) => Shape {
                op: last.op,
                prio: last.prio,
                flags,
                sector: last.end,
                sectors,
            },
            None => Shape {
                op,
                prio,
                flags,
                sector: 0,
                sectors,
            },
        };
        match spec.place {
            Place::At(at) => self.fit(Shape {
                op,
                prio,
                flags,
                sector: u64::from(at) % SPAN,
                sectors,
            }),
            Place::Follow => self.fit(follow(self.last)),
            Place::Touch { pick, front } => {
                let queued: Vec<&Rec> = self
                    .bios
                    .values()
                    .filter(|r| r.state == State::Queued)
                    .collect();
                if queued.is_empty() {
                    return self.fit(follow(self.last));
                }
                let r = queued[usize::from(pick) % queued.len()];
                let back = Shape {
                    op: r.op,
                    prio: r.prio,
                    flags,
                    sector: r.sector + u64::from(r.sectors),
                    sectors,
                };
                if !front || r.sector == 0 {
                    return self.fit(back);
                }
                // Ending where `r` starts: shorten until the cut no longer moves the end.
                let mut len = sectors.min(r.sector as u32);
                for _ in 0..8 {
                    let shape = self.fit(Shape {
                        sector: r.sector - u64::from(len),
                        sectors: len,
                        ..back
                    });
                    if shape.sectors == len {
                        return shape;
                    }
                    len = shape.sectors;
                }
                self.fit(back)
            }
        }
    }

    /// A fresh bio of `shape`, not yet handed over, and its sequence number.
    fn make_bio(&mut self, shape: Shape) -> (Bio, u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.last = Some(Last {
            op: shape.op,
            prio: shape.prio,
            end: shape.sector + u64::from(shape.sectors),
        });
        let bio = Bio::new(shape.op, shape.sector, shape.sectors)
            .prio(shape.prio)
            .flags(shape.flags)
            .private((u64::from(self.log.0) << 32) | u64::from(seq))
            .end_io(record_end);
        (bio, seq)
    }

    /// The scheduler now holds `bio` (`seq`), queued.
    fn hand_over(&mut self, seq: u32, bio: &Bio) {
        self.bios.insert(
            seq,
            Rec {
                op: bio.op,
                prio: bio.prio,
                sector: bio.sector,
                sectors: bio.sectors,
                since: self.now,
                state: State::Queued,
                dispatched: 0,
                owed: 1,
            },
        );
    }

    /// A request of `bio` for `hctx`, allocated as a request queue does: `None` when no
    /// scheduler tag is to be had (the bio is then not handed over).
    fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
        let mut alloc = Alloc::new(hctx, 0);
        alloc.shallow_depth = self.dd.limit_depth(bio.op, bio.flags);
        let want = (bio.op != BioOp::Read).then_some(self.dd.tunables().async_depth);
        ensure!(
            alloc.shallow_depth == want,
            "limit_depth({:?}) = {:?}, expected {want:?}",
            bio.op,
            alloc.shallow_depth
        );
        let mut rq = match self.tags.alloc(&alloc) {
            Ok(rq) => rq,
            Err(TagError::WouldBlock) => return Ok(None),
            Err(e) => return Err(format!("allocating {alloc:?}: {e:?}")),
        };
        self.tags
            .set_bio(&mut rq, bio)
            .map_err(|e| format!("set_bio: {e:?}"))?;
        self.hand_over(seq, &bio);
        self.counts[class_of(bio.prio)].inserted += 1;
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.prepare_request(&cx, &mut rq);
        Ok(Some(rq))
    }

    // ----- ops -----

    fn insert(&mut self, hctx: u8, spec: &BioSpec, more: u8, at_head: bool) -> Result<(), String> {
        let hctx = usize::from(hctx) % self.hw_queues;
        let mut shape = self.shape(spec);
        let mut rqs = Vec::new();
        let mut made = Vec::new();
        for _ in 0..=more % 4 {
            let (bio, seq) = self.make_bio(shape);
            let Some(rq) = self.make_request(hctx, bio, seq)? else {
                break;
            };
            made.push((class_of(bio.prio), alloc::vec![seq]));
            rqs.push(rq);
            shape = self.fit(Shape {
                sector: shape.sector + u64::from(shape.sectors),
                sectors: 1 + u32::from(spec.sectors) % MAX_BIO_SECTORS,
                ..shape
            });
        }
        if at_head {
            self.went_in_at_head(made);
        }
        if !rqs.is_empty() {
            let cx = ElvCx::new(&self.tags, &self.limits, self.now);
            self.dd.insert_requests(&cx, &mut rqs.into_iter(), at_head);
        }
        Ok(())
    }

    /// Requests (class, bios) inserted at the head by one call, in the order handed in: in
    /// each class they go before those there, in this order.
    fn went_in_at_head(&mut self, batch: Vec<(usize, Vec<u32>)>) {
        for (class, bios) in batch.into_iter().rev() {
            self.heads[class].push_front(bios);
        }
    }

    fn merge(&mut self, hctx: u8, spec: &BioSpec) -> Result<(), String> {
        let hctx = usize::from(hctx) % self.hw_queues;
        let shape = self.shape(spec);
        let (bio, seq) = self.make_bio(shape);
        // Recorded first: a bug that ends it at once must find it known.
        self.hand_over(seq, &bio);
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        match self.dd.bio_merge(&cx, bio) {
            Ok(()) => {
                self.counts[class_of(bio.prio)].bio_merges += 1;
                Ok(())
            }
            Err(back) => {
                self.bios.remove(&seq);
                ensure!(
                    (
                        back.op,
                        back.sector,
                        back.sectors,
                        back.prio,
                        back.flags,
                        back.private
                    ) == (
                        bio.op,
                        bio.sector,
                        bio.sectors,
                        bio.prio,
                        bio.flags,
                        bio.private
                    ),
                    "bio_merge gave back {back:?} for {bio:?}"
                );
                if let Some(rq) = self.make_request(hctx, back, seq)? {
                    let cx = ElvCx::new(&self.tags, &self.limits, self.now);
                    self.dd
                        .insert_requests(&cx, &mut core::iter::once(rq), false);
                }
                Ok(())
            }
        }
    }

    fn busy(&self, class: usize) -> bool {
        self.bios
            .values()
            .any(|r| class_of(r.prio) == class && r.state != State::Done)
    }

    fn queued_in(&self, class: usize) -> bool {
        self.bios
            .values()
            .any(|r| class_of(r.prio) == class && r.state == State::Queued)
    }

    /// One dispatch, checked; false when the scheduler gave nothing.
    fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        let Some(rq) = self.dd.dispatch_request(&cx, hctx) else {
            if let Some(top) = (0..CLASSES.len()).find(|&c| self.queued_in(c)) {
                ensure!(
                    (0..top).any(|c| self.busy(c)),
                    "nothing dispatched with class {top} queued and no class above it busy"
                );
            }
            return Ok(false);
        };
        let io = self
            .tags
            .io(&rq)
            .map_err(|e| format!("a dispatched request: {e:?}"))?;
        let (op, prio, flags) = (io.op(), io.prio(), io.flags());
        let (start, end, sectors, nr_bios) =
            (io.sector(), io.end_sector(), io.sectors(), io.nr_bios());
        let mut bios = Vec::new();
        self.tags
            .for_each_bio(&rq, |b| bios.push(*b))
            .map_err(|e| format!("for_each_bio: {e:?}"))?;
        let ids: Vec<u32> = bios.iter().map(|b| b.private as u32).collect();
        ensure!(
            !bios.is_empty() && bios.len() == nr_bios as usize,
            "request {start}..{end} shows {nr_bios} bios and has {ids:?}"
        );
        ensure!(
            end == start + sectors,
            "request {start}..{end} of {sectors} sectors"
        );
        let max = u64::from(match op {
            BioOp::Discard => self.limits.max_discard_sectors,
            BioOp::WriteZeroes => self.limits.max_write_zeroes_sectors,
            _ => self.limits.max_sectors,
        });
        ensure!(
            sectors <= max,
            "request {start}..{end} of {op:?} holds more than {max} sectors"
        );
        if self.limits.chunk_sectors != 0 {
            let chunk = u64::from(self.limits.chunk_sectors);
            ensure!(
                start / chunk == (end - 1) / chunk,
                "request {start}..{end} crosses a boundary of {chunk}-sector chunks"
            );
        }
        ensure!(
            bios.len() == 1 || bios.iter().all(|b| mergeable(b.flags)),
            "request {start}..{end} merged an unmergeable bio: {bios:?}"
        );
        let mut at = start;
        let mut oldest = u64::MAX;
        for b in &bios {
            let id = b.private as u32;
            ensure!(
                b.private >> 32 == u64::from(self.log.0),
                "request {start}..{end} holds a bio of no run of this model: {b:?}"
            );
            ensure!(
                (b.op, b.prio) == (op, prio),
                "bio {id} ({:?}, {:?}) in a request of {op:?}, {prio:?}",
                b.op,
                b.prio
            );
            ensure!(
                b.sector == at,
                "bio {id} at {} in request {start}..{end}, expected at {at} ({ids:?})",
                b.sector
            );
            at += u64::from(b.sectors);
            let rec = self
                .bios
                .get_mut(&id)
                .ok_or_else(|| format!("bio {id} was never handed over"))?;
            ensure!(
                (rec.op, rec.prio, rec.sector, rec.sectors) == (b.op, b.prio, b.sector, b.sectors),
                "bio {id} dispatched as {b:?}, made as {rec:?}"
            );
            ensure!(
                rec.state == State::Queued,
                "bio {id} dispatched while {:?}",
                rec.state
            );
            rec.state = State::InFlight;
            rec.dispatched += 1;
            oldest = oldest.min(rec.since);
        }
        ensure!(
            at == end,
            "bios of request {start}..{end} end at {at} ({ids:?})"
        );
        ensure!(
            flags == bios[0].flags,
            "request flags {flags:?}, its first bio's {:?}",
            bios[0].flags
        );
        let class = class_of(prio);
        if let Some(want) = self.heads[class].pop_front() {
            ensure!(
                want == ids,
                "class {class} has requests inserted at the head, the first with bios {want:?}; \
                 {ids:?} came out (at the head: {:?})",
                self.heads[class]
            );
        }
        let aging = self.dd.tunables().prio_aging_expire_ns;
        for higher in 0..class {
            ensure!(
                !self.busy(higher) || oldest.saturating_add(aging) <= self.now,
                "class {class} dispatched at {} (waiting since {oldest}) while class {higher} \
                 is busy, prio_aging_expire {aging}",
                self.now
            );
        }
        self.counts[class].dispatched += 1;
        self.in_flight.push(InFlight {
            rq,
            class,
            bios: ids,
        });
        Ok(true)
    }

    fn complete(&mut self, index: usize, status: Status) -> Result<(), String> {
        let f = self.in_flight.remove(index);
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.completed_request(&cx, &f.rq);
        self.dd.finish_request(&cx, &f.rq);
        self.tags
            .complete(f.rq, status)
            .map_err(|e| format!("completing a request: {e:?}"))?;
        for id in f.bios {
            if let Some(rec) = self.bios.get_mut(&id) {
                rec.state = State::Done;
            }
            self.expected.push((id, status));
        }
        self.counts[f.class].completed += 1;
        Ok(())
    }

    fn requeue(&mut self, index: u8, count: u8) {
        if self.in_flight.is_empty() {
            return;
        }
        let n = (1 + usize::from(count) % 3).min(self.in_flight.len());
        let first = usize::from(index) % self.in_flight.len();
        // Takes them from the back of the window first, so the indices stay put.
        let mut picked: Vec<usize> = (0..n).map(|i| (first + i) % self.in_flight.len()).collect();
        let order = picked.clone();
        picked.sort_unstable_by(|a, b| b.cmp(a));
        let mut taken: BTreeMap<usize, InFlight> = BTreeMap::new();
        for i in picked {
            taken.insert(i, self.in_flight.remove(i));
        }
        let batch: Vec<InFlight> = order.iter().filter_map(|i| taken.remove(i)).collect();
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        let mut rqs = Vec::with_capacity(batch.len());
        let mut requeued = Vec::with_capacity(batch.len());
        for f in batch {
            self.dd.requeue_request(&cx, &f.rq);
            for &id in &f.bios {
                if let Some(rec) = self.bios.get_mut(&id) {
                    rec.state = State::Queued;
                    rec.owed += 1;
                }
            }
            requeued.push((f.class, f.bios));
            rqs.push(f.rq);
        }
        self.went_in_at_head(requeued);
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.insert_requests(&cx, &mut rqs.into_iter(), true);
    }

    fn tune(&mut self, tunable: Tunable, value: u32) -> Result<(), String> {
        let before = *self.dd.tunables();
        let mut want = before;
        let (result, name, raw, valid) = match tunable {
            Tunable::ReadExpire => {
                let ns = expiry(value);
                want.read_expire_ns = ns;
                let r = self.dd.set_read_expire(ns);
                (r, "read_expire", ns, ns <= MAX_EXPIRE_NS)
            }
            Tunable::WriteExpire => {
                let ns = expiry(value);
                want.write_expire_ns = ns;
                let r = self.dd.set_write_expire(ns);
                (r, "write_expire", ns, ns <= MAX_EXPIRE_NS)
            }
            Tunable::PrioAgingExpire => {
                let ns = expiry(value);
                want.prio_aging_expire_ns = ns;
                let r = self.dd.set_prio_aging_expire(ns);
                (r, "prio_aging_expire", ns, ns <= MAX_EXPIRE_NS)
            }
            Tunable::WritesStarved => {
                let n = count(value);
                want.writes_starved = n;
                let r = self.dd.set_writes_starved(n);
                (r, "writes_starved", u64::from(n), n <= MAX_BATCH)
            }
            Tunable::FifoBatch => {
                let n = count(value);
                want.fifo_batch = n;
                let r = self.dd.set_fifo_batch(n);
                (r, "fifo_batch", u64::from(n), (1..=MAX_BATCH).contains(&n))
            }
            Tunable::AsyncDepth => {
                let mut depth = (value >> 2) as usize % (self.nr_requests + 2);
                if value % 4 == 0 && depth == 0 {
                    depth = (value >> 2) as usize;
                }
                want.async_depth = depth;
                let r = self.dd.set_async_depth(depth);
                let valid = (1..=self.nr_requests).contains(&depth);
                (r, "async_depth", depth as u64, valid)
            }
            Tunable::FrontMerges => {
                let on = value % 2 == 0;
                want.front_merges = on;
                self.dd.set_front_merges(on);
                (Ok(()), "front_merges", u64::from(on), true)
            }
        };
        let now = *self.dd.tunables();
        match (result, valid) {
            (Ok(()), true) => ensure!(
                now == want,
                "{name} = {raw} accepted: tunables {now:?}, expected {want:?}"
            ),
            (Err(e), false) => {
                let expected = TunableError { name, value: raw };
                ensure!(
                    e == expected,
                    "{name} = {raw} refused as {e:?}, expected {expected:?}"
                );
                ensure!(
                    now == before,
                    "{name} = {raw} refused, yet tunables went from {before:?} to {now:?}"
                );
            }
            (Ok(()), false) => return Err(format!("{name} = {raw} accepted, out of range")),
            (Err(e), true) => return Err(format!("{name} = {raw} refused ({e}), in range")),
        }
        Ok(())
    }

    fn depth(&mut self, nr: u8) -> Result<(), String> {
        let nr = usize::from(nr) % (self.made + 2);
        let result = self.tags.set_nr_requests(nr);
        let valid = (1..=self.made).contains(&nr);
        ensure!(
            result.is_ok() == valid,
            "set_nr_requests({nr}) with {} made: {result:?}",
            self.made
        );
        if !valid {
            return Ok(());
        }
        let before = *self.dd.tunables();
        self.dd.depth_updated(nr, self.tags.nr_keys());
        self.nr_requests = nr;
        let want = Tunables {
            async_depth: (3 * nr / 4).max(1),
            ..before
        };
        let now = *self.dd.tunables();
        ensure!(
            now == want,
            "tunables {now:?} after depth_updated({nr}), expected {want:?}"
        );
        ensure!(
            self.tags.nr_requests() == Some(nr),
            "nr_requests {:?} after set_nr_requests({nr})",
            self.tags.nr_requests()
        );
        let min = self.dd.min_shallow_depth();
        ensure!(
            min == Some(1),
            "min_shallow_depth {min:?}, expected Some(1)"
        );
        self.tags
            .set_min_shallow_depth(1)
            .map_err(|e| format!("min_shallow_depth 1 at nr_requests {nr}: {e:?}"))
    }

    // ----- checks -----

    /// The ends since the last call against those expected.
    fn settle(&mut self) -> Result<(), String> {
        let got = self.log.take();
        let expected = core::mem::take(&mut self.expected);
        ensure!(
            got == expected,
            "bio ends (sequence number, status): got {got:?}, expected {expected:?}"
        );
        Ok(())
    }

    /// The counters, the work and the tags against the model.
    fn check(&self) -> Result<(), String> {
        let queued = self.bios.values().any(|r| r.state == State::Queued);
        for hctx in 0..self.hw_queues {
            ensure!(
                self.dd.has_work(hctx) == queued,
                "has_work({hctx}) = {}, a bio queued: {queued}",
                self.dd.has_work(hctx)
            );
        }
        let mut held = 0;
        for (c, &class) in CLASSES.iter().enumerate() {
            let s = self.dd.stats(class);
            let m = &self.counts[c];
            let in_flight = self.in_flight.iter().filter(|f| f.class == c).count() as u64;
            ensure!(
                (s.inserted, s.dispatched, s.in_flight) == (m.inserted, m.dispatched, in_flight),
                "class {c}: {s:?}; expected inserted {}, dispatched {}, in flight {in_flight}",
                m.inserted,
                m.dispatched
            );
            ensure!(
                s.completed >= m.completed
                    && s.merged >= m.bio_merges
                    && s.completed - m.completed == s.merged - m.bio_merges,
                "class {c}: {s:?}; {} requests completed and {} bios merged",
                m.completed,
                m.bio_merges
            );
            ensure!(
                (s.inserted > s.completed) == self.busy(c),
                "class {c}: {s:?}, a bio of it not ended: {}",
                self.busy(c)
            );
            ensure!(s.inserted >= s.completed + s.in_flight, "class {c}: {s:?}");
            held += s.inserted - s.completed - s.in_flight;
        }
        let queued_rqs = self.dd.queued();
        ensure!(
            held == queued_rqs as u64,
            "the counters say {held} requests held, queued() {queued_rqs}"
        );
        ensure!(
            self.tags.sched_busy() == queued_rqs + self.in_flight.len(),
            "{} scheduler tags in use, {queued_rqs} requests held and {} in flight",
            self.tags.sched_busy(),
            self.in_flight.len()
        );
        Ok(())
    }

    /// Dispatches and completes everything, then checks that nothing is left.
    fn drain(&mut self) -> Result<(), String> {
        let mut rounds = 0;
        loop {
            ensure!(
                rounds < MAX_DRAIN_ROUNDS,
                "still not drained after {rounds} rounds"
            );
            rounds += 1;
            if self.dispatch(0)? {
                self.settle()?;
                self.check()?;
                continue;
            }
            if self.in_flight.is_empty() {
                break;
            }
            while !self.in_flight.is_empty() {
                self.complete(0, Status::Ok)?;
            }
            self.settle()?;
            self.check()?;
        }
        for hctx in 0..self.hw_queues {
            ensure!(
                !self.dd.has_work(hctx),
                "hardware queue {hctx} has work left"
            );
        }
        ensure!(
            self.dd.queued() == 0,
            "{} requests held at the end",
            self.dd.queued()
        );
        ensure!(
            self.tags.sched_busy() == 0,
            "{} scheduler tags in use at the end",
            self.tags.sched_busy()
        );
        for (id, rec) in &self.bios {
            ensure!(rec.state == State::Done, "bio {id} left behind: {rec:?}");
            ensure!(
                rec.dispatched == rec.owed,
                "bio {id} dispatched {} times, owed {}",
                rec.dispatched,
                rec.owed
            );
        }
        for (c, &class) in CLASSES.iter().enumerate() {
            let s = self.dd.stats(class);
            ensure!(
                s.inserted == s.completed && s.in_flight == 0,
                "class {c} does not balance at the end: {s:?}"
            );
        }
        Ok(())
    }
}
