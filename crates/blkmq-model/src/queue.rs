//! Operation sequences on a [`Host`] and its [`RequestQueue`]s: submission (direct and
//! plugged), completion, requeue, a driver that pushes back, budget, quiesce, stop, freeze,
//! deactivation, timeouts and elevator switches, checked after every op (shared
//! by the corpus replay and the cargo-fuzz target `queue_ops`).
//!
//! A [`Config`] says what to build: a host of 1 to 4 hardware queues, per-queue or shared host
//! tags of depth 1 to 16, one or two request queues with the same [`QueueLimits`] (each with
//! or without a small FIFO elevator, which may merge), and a driver that takes requests one
//! at a time or in batches ([`Driver::queue_rqs`]). The driver is a model: it holds what it
//! takes until an op ends it, answers `queue_rq` by a script of [`Verdict`]s (take it, not now
//! with [`Status::Resource`] or [`Status::DevResource`], fail it, or end it at once), and hands
//! out a budget. The platform is deterministic: the submitting CPU is chosen by each op, the
//! clock moves only when an op says so, and kicks are recorded until [`Op::RunKicked`].
//!
//! [`run`] checks, after every op:
//!
//! * every bio ends exactly once, with the right status: a bio the limits refuse ends during
//!   its submission with the status [`QueueLimits::check`] documents (computed here
//!   independently); a bio that comes back is a tail of what was submitted (all of it, as
//!   it was, when none of it went in), and goes in again later; any other ends only once
//!   every sector of it ended in a request the driver ended (or failed), with the first
//!   error of those pieces in the order they ended, and it does end then (no lost
//!   completion); no sector ends twice;
//! * every request the driver sees is in flight on the hardware queue it is issued on, with
//!   the deadline the set's timeout gives, and holds contiguous bios of one operation and
//!   priority within the limits (sectors, segments, chunk boundaries), each a piece of a bio
//!   that is still outstanding; no request is issued twice;
//! * the host's [`in_driver`](Host::in_driver) count and the budget taken equal the requests
//!   the driver holds; [`Driver::complete`] ran once per request ended; every request queued
//!   with `last == false` was followed by a `last` one or [`Driver::commit_rqs`];
//! * each queue's usage equals the requests allocated to it (its scheduler tags in use with
//!   an elevator, else its driver tags), the queues' usage adds up to the driver tags in use
//!   (with elevators, to no fewer), each requeue list holds exactly the requests requeued
//!   without a kick, and [`RequestQueue::timed_out`] counts what fired;
//! * a timeout check fires exactly for the requests the driver holds whose deadline passed;
//! * nothing is stranded: no hardware queue that may dispatch (not quiesced, not stopped)
//!   has work while the driver holds nothing and no kick is pending; a kick run runs
//!   nothing unless a kick was asked for; no request is issued on a hardware queue that is
//!   stopped or quiesced.
//!
//! At the end everything is undone (unquiesced, unfrozen, started, activated, the driver
//! told to take everything), and the run drains: returned bios are submitted again, the
//! requeue lists kicked, kicks run and held requests ended, until nothing is left. Then the
//! set must be idle (`busy`, bio slots, budget, usage and `in_driver` all 0, no work
//! anywhere), every bio must have ended, and dropping the queues must end nothing more.
//!
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, and the runner only makes calls the documentation allows (it never unquiesces
//! what it did not quiesce, nor waits on a freeze with requests out), so any input is a
//! valid test: a panic or a [`Failure`] is a bug.
//!
//! ```
//! use blkmq_model::queue::{BioSpec, Config, LimitsSpec, Op, Place, run};
//!
//! let config = Config {
//!     hw_queues: 1,
//!     shared_tags: false,
//!     blocking: false,
//!     round_robin: false,
//!     depth: 3,
//!     reserved: 0,
//!     cpus: 1,
//!     queues: 0,
//!     elevators: 0,
//!     fifo_merges: false,
//!     fifo_per_hctx: false,
//!     nr_requests: None,
//!     bio_slots: None,
//!     batch_driver: false,
//!     timeout: 0,
//!     limits: LimitsSpec {
//!         capacity: 0,
//!         large_blocks: false,
//!         max_sectors: 0,
//!         max_segments: 7,
//!         small_segments: false,
//!         chunk: None,
//!         discard: None,
//!         write_zeroes: None,
//!     },
//! };
//! let bio = BioSpec { op: 0, place: Place::At(0), sectors: 8, flags: 0 };
//! let ops = [
//!     Op::Submit { queue: 0, cpu: 0, plugged: false, bio },
//!     Op::Complete { index: 0, count: 0, status: 0, batched: false },
//! ];
//! run(&config, &ops).unwrap();
//! ```

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use arbitrary::Arbitrary;
use spin::mutex::SpinMutex;

use blkmq_core::Platform;
use blkmq_core::RequestInit;
use blkmq_core::{Bio, BioFlags, IoPrio, IoPrioClass, Op as BioOp, Status};
use blkmq_core::{Driver, HctxCx, Rejected, RqBatch, TimeoutAction};
use blkmq_core::{Elevator, ElvCx};
use blkmq_core::{Host, PLUG_MAX_MULTI, Plug, QueueConfig, RequestQueue};
use blkmq_core::{MergeKind, QueueLimits};
use blkmq_core::{Request, Rq, RqState};
use blkmq_core::{TagSet, TagSetFlags};

/// The most hardware queues [`run`] builds.
pub const MAX_HW_QUEUES: usize = 4;

/// The deepest tag set [`run`] builds.
pub const MAX_DEPTH: usize = 16;

/// The most request queues [`run`] adds to the host.
pub const MAX_QUEUES: usize = 2;

/// The most CPUs of the platform [`run`] builds.
pub const MAX_CPUS: usize = 4;

/// The longest script of one-off verdicts the driver keeps ([`Op::Verdict`]).
pub const MAX_SCRIPT: usize = 16;

/// Rounds of the final drain after which it counts as stuck.
const MAX_DRAIN_ROUNDS: usize = 10_000;

/// What [`run`] builds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Hardware queues: `1 + hw_queues % MAX_HW_QUEUES`.
    pub hw_queues: u8,
    /// [`TagSetFlags::SHARED_HOST_TAGS`].
    pub shared_tags: bool,
    /// [`TagSetFlags::BLOCKING`]: a completion kicks the hardware queues it restarts instead
    /// of running them.
    pub blocking: bool,
    /// [`TagSetFlags::ROUND_ROBIN`].
    pub round_robin: bool,
    /// Tags per map, reserved included: `1 + depth % MAX_DEPTH`.
    pub depth: u8,
    /// Reserved tags (which no queue allocates): `reserved % min(depth, 3)`.
    pub reserved: u8,
    /// CPUs of the platform: `1 + cpus % MAX_CPUS`.
    pub cpus: u8,
    /// Request queues on the host: `1 + queues % MAX_QUEUES`.
    pub queues: u8,
    /// Queue `i` starts with the FIFO elevator when bit `i` is set.
    pub elevators: u8,
    /// Whether the FIFO elevator merges bios into the requests it holds, and those
    /// requests with each other.
    pub fifo_merges: bool,
    /// Whether the FIFO elevator hands each hardware queue only its own requests (else any
    /// hardware queue dispatches any request).
    pub fifo_per_hctx: bool,
    /// The queues' scheduler tags: `reserved + 1 + nr % 16`; `None` keeps the default.
    pub nr_requests: Option<u8>,
    /// The set's bio slots: `slots % 17`; `None` keeps the default.
    pub bio_slots: Option<u8>,
    /// A driver with [`Driver::QUEUE_RQS`]: a flushed plug goes to it in batches.
    pub batch_driver: bool,
    /// The set's timeout: `1000 * (1 + timeout % 8)` ns.
    pub timeout: u8,
    /// The queues' limits.
    pub limits: LimitsSpec,
}

/// The [`QueueLimits`] of every queue, each field reduced into a valid range (block size
/// `b`: 1 sector, or 8 with `large_blocks`).
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsSpec {
    /// `capacity`: `512 * (1 + capacity % 4)` sectors.
    pub capacity: u8,
    /// A logical block size of 4096 bytes instead of 512.
    pub large_blocks: bool,
    /// `max_sectors`: `8 * (1 + max_sectors % 8)`.
    pub max_sectors: u8,
    /// `max_segments`: `1 + max_segments % 8`.
    pub max_segments: u8,
    /// Segments of at most 4096 bytes that never cross a 4096-byte boundary (else 65536
    /// bytes and no boundary to speak of).
    pub small_segments: bool,
    /// `chunk_sectors`: `8 << (chunk % 4)`; `None` for no chunks.
    pub chunk: Option<u8>,
    /// `max_discard_sectors`: `8 * (1 + discard % 8)`; `None` for a device that cannot
    /// discard.
    pub discard: Option<u8>,
    /// `max_write_zeroes_sectors`, as `discard`.
    pub write_zeroes: Option<u8>,
}

/// Where a bio starts.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At `sector % (capacity + 64)`, so some bios run past the end.
    At(u16),
    /// Where the last bio submitted ended (a back merge candidate).
    After,
    /// Ending where the last bio submitted started (a front merge candidate).
    Before,
}

/// A bio to submit.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BioSpec {
    /// The operation: `op % 8` picks read, write, read, write, flush, discard,
    /// write-zeroes, write.
    pub op: u8,
    /// Where it starts.
    pub place: Place,
    /// Length in sectors; rounded down to whole blocks (at least one) unless
    /// [`BIO_RAW`], and 0 for a flush unless [`BIO_RAW`].
    pub sectors: u8,
    /// `BIO_*` bits.
    pub flags: u8,
}

/// [`BioSpec::flags`]: [`BioFlags::SYNC`].
pub const BIO_SYNC: u8 = 1 << 0;
/// [`BioSpec::flags`]: [`BioFlags::FUA`].
pub const BIO_FUA: u8 = 1 << 1;
/// [`BioSpec::flags`]: [`BioFlags::PREFLUSH`].
pub const BIO_PREFLUSH: u8 = 1 << 2;
/// [`BioSpec::flags`]: [`BioFlags::NOMERGE`].
pub const BIO_NOMERGE: u8 = 1 << 3;
/// [`BioSpec::flags`]: [`BioFlags::POLLED`].
pub const BIO_POLLED: u8 = 1 << 4;
/// [`BioSpec::flags`]: real-time priority, level 0 (bios of different priorities never
/// merge).
pub const BIO_HIGH_PRIO: u8 = 1 << 5;
/// [`BioSpec::flags`]: keep the sector and length as given, aligned or not, and a flush's
/// length too (so the limits may refuse the bio).
pub const BIO_RAW: u8 = 1 << 6;
/// [`BioSpec::flags`]: [`BioFlags::META`].
pub const BIO_META: u8 = 1 << 7;

/// How the driver answers a request handed to it.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Takes it (until an op ends or requeues it), unless it holds its cap already: then
    /// [`Status::Resource`].
    Accept,
    /// Not now: [`Status::Resource`].
    Resource,
    /// Not now: [`Status::DevResource`].
    DevResource,
    /// Refuses it with status `status % 10` of [`Status::Ok`] (which ends it with
    /// [`Status::IoErr`]), `NotSupported`, `Timeout`, `NoSpace`, `Medium`, `Protection`,
    /// `Offline`, `Invalid`, `IoErr`, `Again`.
    Fail(u8),
    /// Takes it and ends it at once, from inside the call, with status `status % 12`.
    Inline(u8),
}

/// One step of a run. Numbers that pick something are reduced modulo the number of choices:
/// `queue` picks a request queue, `hctx` one of the hardware queues or one beyond them,
/// `cpu` a CPU, `index` a request the driver holds (in the order it took them) or a bio
/// that came back. An op with nothing to act on does nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// [`RequestQueue::submit`] (or [`RequestQueue::submit_plugged`] into the run's plug)
    /// of a fresh bio, from `cpu`. A bio that comes back is kept for [`Op::Resubmit`].
    Submit {
        /// Which queue.
        queue: u8,
        /// Which CPU submits.
        cpu: u8,
        /// Into the plug.
        plugged: bool,
        /// The bio.
        bio: BioSpec,
    },
    /// Submits a bio that came back again, to its queue.
    Resubmit {
        /// Which of the bios that came back.
        index: u8,
        /// Which CPU submits.
        cpu: u8,
        /// Into the plug.
        plugged: bool,
    },
    /// [`Plug::flush`].
    FlushPlug,
    /// The driver ends `1 + count % 4` requests it holds of one queue, from the `index`-th
    /// on, with status `status % 12`: one by one ([`RequestQueue::end_request`]) or in one
    /// batch ([`RequestQueue::end_requests`]).
    Complete {
        /// The first request.
        index: u8,
        /// How many, before reduction.
        count: u8,
        /// The status, before reduction.
        status: u8,
        /// In one batch.
        batched: bool,
    },
    /// The driver hands a request back ([`RequestQueue::requeue_request`]).
    Requeue {
        /// Which request.
        index: u8,
        /// Kick the requeue list at once.
        kick: bool,
    },
    /// [`RequestQueue::kick_requeue_list`].
    KickRequeue {
        /// Which queue.
        queue: u8,
    },
    /// How the driver answers: the next call only (appended to a script of up to
    /// [`MAX_SCRIPT`]), or, `sticky`, every call once the script is used up.
    Verdict {
        /// The verdict.
        verdict: Verdict,
        /// For every call after the script.
        sticky: bool,
    },
    /// The driver's budget: `limit % 5` units in all, or unlimited.
    Budget {
        /// The budget, before reduction.
        limit: Option<u8>,
    },
    /// The most requests the driver holds before it answers [`Status::Resource`]:
    /// `limit % 5`, or no cap.
    Cap {
        /// The cap, before reduction.
        limit: Option<u8>,
    },
    /// [`RequestQueue::quiesce`], or [`Host::quiesce`] without a queue.
    Quiesce {
        /// Which queue, if any.
        queue: Option<u8>,
    },
    /// Undoes one [`Op::Quiesce`] of the same target, if there is one.
    Unquiesce {
        /// Which queue, if any.
        queue: Option<u8>,
    },
    /// [`RequestQueue::stop_hw_queue`].
    Stop {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
    },
    /// [`RequestQueue::start_hw_queue`].
    Start {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
    },
    /// [`RequestQueue::freeze_start`]: new bios come back.
    Freeze {
        /// Which queue.
        queue: u8,
    },
    /// Undoes one [`Op::Freeze`], if there is one.
    Unfreeze {
        /// Which queue.
        queue: u8,
    },
    /// [`RequestQueue::deactivate_hctx`].
    Deactivate {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
    },
    /// [`RequestQueue::activate_hctx`].
    Activate {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
    },
    /// [`Host::run_kicked`], as the platform would after a kick.
    RunKicked,
    /// [`RequestQueue::run_hw_queue`], or [`RequestQueue::run_hw_queues`] without `hctx`.
    Run {
        /// Which queue.
        queue: u8,
        /// Which hardware queue, if one.
        hctx: Option<u8>,
    },
    /// [`RequestQueue::poll`]: the driver ends every request it holds on that hardware queue
    /// with status `status % 12`, from inside [`Driver::poll`].
    Poll {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
        /// The status, before reduction.
        status: u8,
    },
    /// Moves the clock `advance` ns on and runs [`RequestQueue::check_timeouts`]; the driver
    /// answers by `action % 3`: reset the timer, handle it later, or end the request at once
    /// with [`Status::Timeout`] from inside the callback.
    Timeouts {
        /// Which queue.
        queue: u8,
        /// How far the clock moves.
        advance: u16,
        /// The driver's answer, before reduction.
        action: u8,
    },
    /// [`RequestQueue::set_nr_requests`] to `nr % 20`, when the queue has no request out
    /// (the call waits for a freeze to drain).
    SetNrRequests {
        /// Which queue.
        queue: u8,
        /// The number, before reduction.
        nr: u8,
    },
    /// [`RequestQueue::switch_elevator`] to the FIFO elevator or to none, with
    /// `reserved + 1 + nr % 16` scheduler tags or the default, when the queue has no request
    /// out.
    SwitchElevator {
        /// Which queue.
        queue: u8,
        /// To the FIFO elevator (else none).
        fifo: bool,
        /// Scheduler tags, before reduction.
        nr_requests: Option<u8>,
    },
}

impl Op {
    /// The name of every variant, for coverage checks of a corpus.
    pub const KINDS: &'static [&'static str] = &[
        "Submit",
        "Resubmit",
        "FlushPlug",
        "Complete",
        "Requeue",
        "KickRequeue",
        "Verdict",
        "Budget",
        "Cap",
        "Quiesce",
        "Unquiesce",
        "Stop",
        "Start",
        "Freeze",
        "Unfreeze",
        "Deactivate",
        "Activate",
        "RunKicked",
        "Run",
        "Poll",
        "Timeouts",
        "SetNrRequests",
        "SwitchElevator",
    ];

    /// This op's variant name (one of [`KINDS`](Self::KINDS)).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Submit { .. } => "Submit",
            Self::Resubmit { .. } => "Resubmit",
            Self::FlushPlug => "FlushPlug",
            Self::Complete { .. } => "Complete",
            Self::Requeue { .. } => "Requeue",
            Self::KickRequeue { .. } => "KickRequeue",
            Self::Verdict { .. } => "Verdict",
            Self::Budget { .. } => "Budget",
            Self::Cap { .. } => "Cap",
            Self::Quiesce { .. } => "Quiesce",
            Self::Unquiesce { .. } => "Unquiesce",
            Self::Stop { .. } => "Stop",
            Self::Start { .. } => "Start",
            Self::Freeze { .. } => "Freeze",
            Self::Unfreeze { .. } => "Unfreeze",
            Self::Deactivate { .. } => "Deactivate",
            Self::Activate { .. } => "Activate",
            Self::RunKicked => "RunKicked",
            Self::Run { .. } => "Run",
            Self::Poll { .. } => "Poll",
            Self::Timeouts { .. } => "Timeouts",
            Self::SetNrRequests { .. } => "SetNrRequests",
            Self::SwitchElevator { .. } => "SwitchElevator",
        }
    }
}

/// Where [`run`] found a broken promise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// While building the host and adding the queues.
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
    /// While dropping the queues.
    Teardown,
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
            Stage::Teardown => write!(f, "teardown: {}", self.message),
        }
    }
}

impl core::error::Error for Failure {}

/// Runs `ops` against the host and queues `config` describes, checking every promise listed
/// in the module documentation after every op, then drains everything and checks that the
/// set is idle and every bio ended once.
///
/// # Errors
/// The first broken promise: where, what was expected and what happened.
pub fn run(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    if config.batch_driver {
        run_with::<true>(config, ops)
    } else {
        run_with::<false>(config, ops)
    }
}

// ----- the configuration, reduced -----

/// A [`Config`] reduced into range.
#[derive(Clone, Debug)]
struct Setup {
    hw_queues: usize,
    flags: TagSetFlags,
    depth: usize,
    reserved: usize,
    cpus: usize,
    queues: usize,
    elevators: [bool; MAX_QUEUES],
    fifo_merges: bool,
    fifo_per_hctx: bool,
    nr_requests: Option<usize>,
    bio_slots: Option<usize>,
    timeout_ns: u64,
    limits: QueueLimits,
    /// Sectors per logical block.
    block: u64,
}

fn reduce(config: &Config) -> Setup {
    let depth = 1 + usize::from(config.depth) % MAX_DEPTH;
    let reserved = usize::from(config.reserved) % depth.min(3);
    let mut flags = TagSetFlags::empty();
    if config.shared_tags {
        flags |= TagSetFlags::SHARED_HOST_TAGS;
    }
    if config.blocking {
        flags |= TagSetFlags::BLOCKING;
    }
    if config.round_robin {
        flags |= TagSetFlags::ROUND_ROBIN;
    }
    let spec = &config.limits;
    let block: u32 = if spec.large_blocks { 8 } else { 1 };
    let (max_segment_size, seg_boundary_mask) = if spec.small_segments {
        (4096, 4095)
    } else {
        (65536, 0xffff_ffff)
    };
    let limits = QueueLimits {
        capacity: 512 * (1 + u64::from(spec.capacity) % 4),
        logical_block_size: 512 * block,
        max_sectors: 8 * (1 + u32::from(spec.max_sectors) % 8),
        max_segments: 1 + u32::from(spec.max_segments) % 8,
        max_segment_size,
        seg_boundary_mask,
        chunk_sectors: spec.chunk.map_or(0, |c| 8 << (c % 4)),
        max_discard_sectors: spec.discard.map_or(0, |d| 8 * (1 + u32::from(d) % 8)),
        max_write_zeroes_sectors: spec.write_zeroes.map_or(0, |w| 8 * (1 + u32::from(w) % 8)),
        rotational: false,
        write_cache: false,
        fua: false,
    };
    let mut elevators = [false; MAX_QUEUES];
    for (i, e) in elevators.iter_mut().enumerate() {
        *e = config.elevators & (1 << i) != 0;
    }
    Setup {
        hw_queues: 1 + usize::from(config.hw_queues) % MAX_HW_QUEUES,
        flags,
        depth,
        reserved,
        cpus: 1 + usize::from(config.cpus) % MAX_CPUS,
        queues: 1 + usize::from(config.queues) % MAX_QUEUES,
        elevators,
        fifo_merges: config.fifo_merges,
        fifo_per_hctx: config.fifo_per_hctx,
        nr_requests: config
            .nr_requests
            .map(|n| reserved + 1 + usize::from(n) % 16),
        bio_slots: config.bio_slots.map(|s| usize::from(s) % 17),
        timeout_ns: 1000 * (1 + u64::from(config.timeout) % 8),
        limits,
        block: u64::from(block),
    }
}

fn status(raw: u8) -> Status {
    Status::ALL[usize::from(raw) % Status::ALL.len()]
}

/// The status a bio ends with at once, by the rules [`QueueLimits::check`] documents.
fn refused(
    limits: &QueueLimits,
    block: u64,
    op: BioOp,
    sector: u64,
    sectors: u32,
) -> Option<Status> {
    if op == BioOp::Flush {
        // No write cache here: an empty flush has nothing to flush and ends at once.
        return Some(if sectors != 0 {
            Status::Invalid
        } else {
            Status::Ok
        });
    }
    if (op == BioOp::Discard && limits.max_discard_sectors == 0)
        || (op == BioOp::WriteZeroes && limits.max_write_zeroes_sectors == 0)
    {
        return Some(Status::NotSupported);
    }
    if sectors == 0 || sector % block != 0 || u64::from(sectors) % block != 0 {
        return Some(Status::Invalid);
    }
    (sector + u64::from(sectors) > limits.capacity).then_some(Status::IoErr)
}

/// Most sectors one request of `op` may hold.
fn max_for(limits: &QueueLimits, op: BioOp) -> u64 {
    u64::from(match op {
        BioOp::Discard => limits.max_discard_sectors,
        BioOp::WriteZeroes => limits.max_write_zeroes_sectors,
        _ => limits.max_sectors,
    })
}

// ----- the platform -----

/// A deterministic platform: the current CPU is set by the runner, the clock moves only when
/// told, and a kick is recorded until the runner runs the kicked queues.
#[derive(Debug)]
struct ModelPlatform {
    nr_cpus: usize,
    cpu: AtomicUsize,
    clock: AtomicU64,
    kicked: AtomicBool,
}

impl ModelPlatform {
    fn new(nr_cpus: usize) -> Self {
        Self {
            nr_cpus,
            cpu: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            kicked: AtomicBool::new(false),
        }
    }

    /// Whether a kick came since the last call, clearing it.
    fn take_kick(&self) -> bool {
        self.kicked.swap(false, Ordering::SeqCst)
    }

    fn kick_pending(&self) -> bool {
        self.kicked.load(Ordering::SeqCst)
    }
}

impl Platform for ModelPlatform {
    type RawMutex = SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    fn current_cpu(&self) -> usize {
        self.cpu.load(Ordering::Relaxed)
    }

    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    fn kick(&self, _hctx: usize) {
        self.kicked.store(true, Ordering::SeqCst);
    }
}

// ----- bio ends -----

/// Ends recorded by `end_io`: run -> (bio sequence number, status), in the order they came.
/// `end_io` is a plain `fn`, so the log is static, keyed by run (the upper half of a bio's
/// `private`), so that runs on several threads keep apart.
static LOG: SpinMutex<BTreeMap<u32, Vec<(u32, Status)>>> = SpinMutex::new(BTreeMap::new());

/// Hands out run identities.
static NEXT_RUN: AtomicU32 = AtomicU32::new(1);

/// The `end_io` of every bio a run makes.
fn record_end(bio: Bio, status: Status) {
    let run = (bio.private >> 32) as u32;
    if let Some(ends) = LOG.lock().get_mut(&run) {
        ends.push((bio.private as u32, status));
    }
}

/// A run's place in the log, taken out when dropped.
struct EndLog {
    run: u32,
}

impl EndLog {
    fn open() -> Self {
        let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        LOG.lock().insert(run, Vec::new());
        Self { run }
    }

    /// The ends recorded since the last call.
    fn take(&self) -> Vec<(u32, Status)> {
        LOG.lock()
            .get_mut(&self.run)
            .map(core::mem::take)
            .unwrap_or_default()
    }
}

impl Drop for EndLog {
    fn drop(&mut self) {
        LOG.lock().remove(&self.run);
    }
}

// ----- the elevator -----

/// First in, first out; requeued requests first. With `merges`, a bio merges into a held
/// request it touches, and a request that then touches another merges with it; with
/// `per_hctx`, each hardware queue dispatches only its own requests.
struct Fifo {
    /// (key, hardware queue, request), in dispatch order.
    rqs: VecDeque<(usize, usize, Rq)>,
    merges: bool,
    per_hctx: bool,
    /// How many requests of each hardware queue it holds, for the runner to see.
    counts: Counts,
}

/// Requests an elevator holds, per hardware queue.
type Counts = Arc<SpinMutex<[usize; MAX_HW_QUEUES]>>;

impl Fifo {
    fn new(merges: bool, per_hctx: bool, counts: Counts) -> Self {
        Self {
            rqs: VecDeque::new(),
            merges,
            per_hctx,
            counts,
        }
    }

    fn position(&self, key: usize) -> Option<usize> {
        self.rqs.iter().position(|(k, _, _)| *k == key)
    }

    fn remove(&mut self, at: usize) -> Option<Rq> {
        let (_, hctx, rq) = self.rqs.remove(at)?;
        if let Some(n) = self.counts.lock().get_mut(hctx) {
            *n -= 1;
        }
        Some(rq)
    }
}

impl Elevator for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn depth_updated(&mut self, nr_requests: usize, _nr_keys: usize) {
        self.rqs.reserve(nr_requests);
    }

    fn insert_requests(
        &mut self,
        cx: &ElvCx<'_>,
        rqs: &mut dyn Iterator<Item = Rq>,
        at_head: bool,
    ) {
        let mut at = 0;
        for rq in rqs {
            let entry = (cx.key(&rq), cx.hctx(&rq), rq);
            if let Some(n) = self.counts.lock().get_mut(entry.1) {
                *n += 1;
            }
            if at_head {
                self.rqs.insert(at, entry);
                at += 1;
            } else {
                self.rqs.push_back(entry);
            }
        }
    }

    fn dispatch_request(&mut self, _cx: &ElvCx<'_>, hctx: usize) -> Option<Rq> {
        let at = if self.per_hctx {
            self.rqs.iter().position(|(_, h, _)| *h == hctx)?
        } else {
            0
        };
        self.remove(at)
    }

    fn has_work(&self, hctx: usize) -> bool {
        if self.per_hctx {
            self.rqs.iter().any(|(_, h, _)| *h == hctx)
        } else {
            !self.rqs.is_empty()
        }
    }

    fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
        if !self.merges {
            return None;
        }
        self.rqs.iter().rev().find_map(|(key, _, rq)| {
            let io = cx.io(rq).ok()?;
            cx.limits().merge_kind(io, bio).map(|kind| (*key, kind))
        })
    }

    fn bio_merge(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
        // Linux's sequence, as the schedulers run it: a bio merge, then the request with
        // its neighbour.
        let Some((key, kind)) = self.request_merge(cx, &bio) else {
            return Err(bio);
        };
        let allowed = match self.request(key).map(|rq| cx.io(rq)) {
            Some(Ok(io)) => self.allow_merge(io, &bio),
            _ => false,
        };
        if !allowed {
            return Err(bio);
        }
        let Some(rq) = self.request_mut(key) else {
            return Err(bio);
        };
        cx.merge_bio(rq, bio)?;
        self.request_merged(cx, key, kind);
        if let Some(other) = self.next_request(cx, key, kind) {
            let (into, from) = match kind {
                MergeKind::Back => (key, other),
                MergeKind::Front => (other, key),
            };
            self.merge_held(cx, into, from);
        }
        Ok(())
    }
}

/// The storage the merge sequence of [`Fifo::bio_merge`] reads.
impl Fifo {
    fn request(&self, key: usize) -> Option<&Rq> {
        self.rqs.get(self.position(key)?).map(|(_, _, rq)| rq)
    }

    fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        let at = self.position(key)?;
        self.rqs.get_mut(at).map(|(_, _, rq)| rq)
    }

    fn next_request(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize> {
        let io = cx.io(self.request(key)?).ok()?;
        let (start, end) = (io.sector(), io.end_sector());
        self.rqs.iter().find_map(|(k, _, rq)| {
            let other = cx.io(rq).ok()?;
            let touches = match kind {
                MergeKind::Back => other.sector() == end,
                MergeKind::Front => other.end_sector() == start,
            };
            (*k != key && touches).then_some(*k)
        })
    }

    fn take_request(&mut self, key: usize) -> Option<Rq> {
        let at = self.position(key)?;
        self.remove(at)
    }

    /// Appends held request `from` to held request `into` when the queue's rules allow;
    /// `from` goes back if the merge fails after all.
    fn merge_held(&mut self, cx: &ElvCx<'_>, into: usize, from: usize) {
        let fits = match (self.request(into), self.request(from)) {
            (Some(a), Some(b)) => cx.can_append(a, b),
            _ => false,
        };
        if !fits {
            return;
        }
        let Some(from_rq) = self.take_request(from) else {
            return;
        };
        let back = match self.request_mut(into) {
            Some(into_rq) => cx.merge_requests(into_rq, from_rq).err(),
            None => Some(from_rq),
        };
        match back {
            None => self.requests_merged(cx, into, from),
            Some(rq) => self.insert_request(cx, rq, false),
        }
    }
}

// ----- the driver -----

/// What the runner knows of a bio it made.
#[derive(Clone, Copy, Debug)]
struct BioInfo {
    op: BioOp,
    sector: u64,
    sectors: u32,
    prio: IoPrio,
}

/// A request the driver holds.
#[derive(Debug)]
struct Held {
    /// The address of its queue.
    queue: usize,
    hctx: usize,
    rq: Rq,
    /// The address of its [`Request`].
    addr: usize,
    /// When it times out, if it still may.
    deadline: Option<u64>,
}

/// A piece of a bio (as a request carried it) that the driver ended, and how.
#[derive(Clone, Copy, Debug)]
struct Piece {
    seq: u32,
    sector: u64,
    sectors: u32,
    status: Status,
}

/// The driver's side of a run.
struct DriverState {
    limits: QueueLimits,
    timeout_ns: u64,
    /// Every bio of the run, by sequence number.
    bios: Vec<BioInfo>,
    held: Vec<Held>,
    script: VecDeque<Verdict>,
    default: Verdict,
    cap: Option<usize>,
    budget: Option<usize>,
    budget_used: usize,
    /// (queue address, hardware queue) with a request queued with `last == false` and no
    /// doorbell since.
    uncommitted: BTreeSet<(usize, usize)>,
    /// Pieces ended, in the order they were ended.
    ledger: Vec<Piece>,
    /// [`Driver::complete`] calls.
    completes: usize,
    /// Requests the driver ended or failed.
    expected_completes: usize,
    /// How [`Driver::timeout`] answers.
    timeout_action: u8,
    /// The requests [`Driver::timeout`] was called for since the runner last looked.
    timed_out: Vec<usize>,
    /// The status [`Driver::poll`] ends requests with.
    poll_status: Status,
    /// (queue address, hardware queue) stopped by the runner.
    stopped: BTreeSet<(usize, usize)>,
    /// Broken promises seen inside driver calls.
    errors: Vec<String>,
}

impl DriverState {
    fn new(limits: QueueLimits, timeout_ns: u64) -> Self {
        Self {
            limits,
            timeout_ns,
            bios: Vec::new(),
            held: Vec::new(),
            script: VecDeque::new(),
            default: Verdict::Accept,
            cap: None,
            budget: None,
            budget_used: 0,
            uncommitted: BTreeSet::new(),
            ledger: Vec::new(),
            completes: 0,
            expected_completes: 0,
            timeout_action: 0,
            timed_out: Vec::new(),
            poll_status: Status::Ok,
            stopped: BTreeSet::new(),
            errors: Vec::new(),
        }
    }

    /// Records that the pieces of one request end with `status`.
    fn record(&mut self, pieces: &[(u32, u64, u32)], status: Status) {
        self.expected_completes += 1;
        self.ledger
            .extend(pieces.iter().map(|&(seq, sector, sectors)| Piece {
                seq,
                sector,
                sectors,
                status,
            }));
    }

    /// Checks what [`inspect`] saw of a request being issued against the bios of the run.
    fn check_issue(&mut self, seen: &Issue, hctx: usize) -> Result<(), String> {
        ensure!(
            seen.state == RqState::InFlight,
            "issued in state {:?}",
            seen.state
        );
        ensure!(
            seen.hctx == hctx,
            "a request of hardware queue {} issued on {hctx}",
            seen.hctx
        );
        ensure!(
            seen.deadline == seen.now.saturating_add(self.timeout_ns),
            "deadline {} for a start at {} with timeout {}",
            seen.deadline,
            seen.now,
            self.timeout_ns
        );
        ensure!(
            !self.held.iter().any(|h| h.addr == seen.addr),
            "a request the driver holds was issued again"
        );
        let Some(first) = seen.bios.first() else {
            return Err(String::from("a request without bios was issued"));
        };
        ensure!(
            seen.nr_bios as usize == seen.bios.len()
                && seen.sector == first.sector
                && seen.sectors == seen.bios.iter().map(|b| u64::from(b.sectors)).sum::<u64>(),
            "the request's I/O ({} bios, sector {}, {} sectors) does not match its bios {:?}",
            seen.nr_bios,
            seen.sector,
            seen.sectors,
            seen.bios
        );
        let limits = self.limits;
        let mut end = first.sector;
        let mut segments = 0;
        for bio in &seen.bios {
            let info = self
                .bios
                .get(bio.seq as usize)
                .ok_or_else(|| format!("a request carries unknown bio {}", bio.seq))?;
            ensure!(
                bio.op == info.op
                    && bio.prio == info.prio
                    && bio.sector >= info.sector
                    && bio.sector + u64::from(bio.sectors) <= info.sector + u64::from(info.sectors),
                "a request carries {bio:?}, which is not a piece of bio {} {info:?}",
                bio.seq
            );
            ensure!(
                bio.sector == end && bio.op == first.op && bio.prio == first.prio,
                "the bios of a request are not one contiguous I/O: {:?}",
                seen.bios
            );
            end += u64::from(bio.sectors);
            segments += limits.segments(bio.op, bio.sector, bio.sectors);
        }
        let unmergeable = seen.bios.iter().any(|b| {
            b.op == BioOp::Flush
                || b.flags
                    .intersects(BioFlags::NOMERGE | BioFlags::FUA | BioFlags::PREFLUSH)
        });
        ensure!(
            !unmergeable || seen.bios.len() == 1,
            "a bio that may not merge shares a request: {:?}",
            seen.bios
        );
        ensure!(
            seen.sectors <= max_for(&limits, first.op),
            "a request of {} sectors of {:?} is over the limit",
            seen.sectors,
            first.op
        );
        ensure!(
            segments == seen.segments && segments <= limits.max_segments,
            "a request of {segments} segments (it counts {}), the limit is {}",
            seen.segments,
            limits.max_segments
        );
        if limits.chunk_sectors != 0 && seen.sectors != 0 {
            let chunk = u64::from(limits.chunk_sectors);
            ensure!(
                seen.sector / chunk == (end - 1) / chunk,
                "a request from sector {} to {end} crosses a chunk boundary ({chunk})",
                seen.sector
            );
        }
        Ok(())
    }
}

/// A bio on a request, as the driver sees it.
#[derive(Clone, Copy, Debug)]
struct SeenBio {
    seq: u32,
    op: BioOp,
    sector: u64,
    sectors: u32,
    prio: IoPrio,
    flags: BioFlags,
}

/// What the driver sees of a request handed to it.
#[derive(Debug)]
struct Issue {
    addr: usize,
    state: RqState,
    hctx: usize,
    deadline: u64,
    now: u64,
    nr_bios: u32,
    sector: u64,
    sectors: u64,
    segments: u32,
    bios: Vec<SeenBio>,
}

type Queue<const RQS: bool> = RequestQueue<ModelDriver<RQS>>;

/// Reads a request handed to the driver (without the driver's lock: this calls the queue).
fn inspect<const RQS: bool>(queue: &Queue<RQS>, rq: &Rq) -> Result<Issue, String> {
    let request = queue
        .request(rq)
        .ok_or_else(|| String::from("the driver was handed a request its queue does not know"))?;
    let io = queue
        .io(rq)
        .ok_or_else(|| String::from("the driver was handed a request without I/O"))?;
    let mut bios = Vec::new();
    queue.for_each_bio(rq, |bio| {
        bios.push(SeenBio {
            seq: bio.payload as u32,
            op: bio.op,
            sector: bio.sector,
            sectors: bio.sectors,
            prio: bio.prio,
            flags: bio.flags,
        });
    });
    Ok(Issue {
        addr: ptr::from_ref(request).addr(),
        state: request.state(),
        hctx: request.hctx(),
        deadline: request.deadline_ns(),
        now: queue.platform().now_ns(),
        nr_bios: io.nr_bios(),
        sector: io.sector(),
        sectors: io.sectors(),
        segments: io.segments(),
        bios,
    })
}

/// The pieces a request carries: (bio sequence number, sector, sectors).
fn pieces<const RQS: bool>(queue: &Queue<RQS>, rq: &Rq) -> Vec<(u32, u64, u32)> {
    let mut pieces = Vec::new();
    queue.for_each_bio(rq, |bio| {
        pieces.push((bio.payload as u32, bio.sector, bio.sectors));
    });
    pieces
}

/// The model driver; with `RQS`, it takes a flushed plug's requests in batches.
struct ModelDriver<const RQS: bool> {
    state: SpinMutex<DriverState>,
}

impl<const RQS: bool> ModelDriver<RQS> {
    /// Answers one request: `last` is `None` inside a batch.
    fn take(&self, cx: &HctxCx<'_, Self>, rq: Rq, last: Option<bool>) -> Result<(), Rejected> {
        let queue = cx.queue();
        let key = (ptr::from_ref(queue).addr(), cx.hctx());
        let seen = inspect(queue, &rq);
        let quiesced = queue.is_quiesced();
        let mut st = self.state.lock();
        if quiesced || st.stopped.contains(&key) {
            st.errors.push(format!(
                "a request was issued on hardware queue {} while it {}",
                key.1,
                if quiesced {
                    "is quiesced"
                } else {
                    "is stopped"
                }
            ));
        }
        let seen = match seen.and_then(|seen| st.check_issue(&seen, cx.hctx()).map(|()| seen)) {
            Ok(seen) => seen,
            Err(e) => {
                st.errors.push(e);
                return Err(Rejected {
                    rq,
                    status: Status::Resource,
                });
            }
        };
        let verdict = st.script.pop_front().unwrap_or(st.default);
        let full = st.cap.is_some_and(|cap| st.held.len() >= cap);
        let pieces: Vec<(u32, u64, u32)> = seen
            .bios
            .iter()
            .map(|b| (b.seq, b.sector, b.sectors))
            .collect();
        let inline = match verdict {
            Verdict::Accept if full => {
                return Err(Rejected {
                    rq,
                    status: Status::Resource,
                });
            }
            Verdict::Accept => None,
            Verdict::Resource => {
                return Err(Rejected {
                    rq,
                    status: Status::Resource,
                });
            }
            Verdict::DevResource => {
                return Err(Rejected {
                    rq,
                    status: Status::DevResource,
                });
            }
            Verdict::Fail(raw) => {
                let status = status(raw % 10);
                st.record(
                    &pieces,
                    if status.is_ok() {
                        Status::IoErr
                    } else {
                        status
                    },
                );
                return Err(Rejected { rq, status });
            }
            Verdict::Inline(raw) => Some(status(raw)),
        };
        match last {
            Some(false) => {
                st.uncommitted.insert(key);
            }
            Some(true) => {
                st.uncommitted.remove(&key);
            }
            None => {}
        }
        match inline {
            None => {
                st.held.push(Held {
                    queue: key.0,
                    hctx: cx.hctx(),
                    rq,
                    addr: seen.addr,
                    deadline: Some(seen.deadline),
                });
            }
            Some(status) => {
                st.record(&pieces, status);
                drop(st);
                queue.end_request(rq, status).unwrap();
            }
        }
        Ok(())
    }
}

impl<const RQS: bool> Driver for ModelDriver<RQS> {
    type Platform = ModelPlatform;
    type Payload = ();

    const QUEUE_RQS: bool = RQS;

    fn init_request(&self, _init: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, last: bool) -> Result<(), Rejected> {
        self.take(cx, rq, Some(last))
    }

    fn commit_rqs(&self, cx: &HctxCx<'_, Self>) {
        let key = (ptr::from_ref(cx.queue()).addr(), cx.hctx());
        self.state.lock().uncommitted.remove(&key);
    }

    fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
        while let Some(rq) = batch.next() {
            if let Err(rejected) = self.take(cx, rq, None) {
                batch.reject(rejected);
                break;
            }
        }
    }

    fn get_budget(&self, _cx: &HctxCx<'_, Self>) -> bool {
        let mut st = self.state.lock();
        if st.budget.is_some_and(|budget| st.budget_used >= budget) {
            return false;
        }
        st.budget_used += 1;
        true
    }

    fn put_budget(&self, _cx: &HctxCx<'_, Self>) {
        let mut st = self.state.lock();
        if st.budget_used == 0 {
            st.errors
                .push(String::from("put_budget without a unit taken"));
        } else {
            st.budget_used -= 1;
        }
    }

    fn timeout(&self, cx: &HctxCx<'_, Self>, request: &Request<()>) -> TimeoutAction {
        let addr = ptr::from_ref(request).addr();
        let queue = cx.queue();
        let now = queue.platform().now_ns();
        let mut st = self.state.lock();
        st.timed_out.push(addr);
        let Some(at) = st.held.iter().position(|h| h.addr == addr) else {
            st.errors.push(String::from(
                "timeout of a request the driver does not hold",
            ));
            return TimeoutAction::ResetTimer;
        };
        match st.timeout_action % 3 {
            0 => {
                st.held[at].deadline = Some(now.saturating_add(st.timeout_ns));
                TimeoutAction::ResetTimer
            }
            1 => {
                st.held[at].deadline = None;
                TimeoutAction::Done
            }
            _ => {
                let held = st.held.remove(at);
                drop(st);
                let pieces = pieces(queue, &held.rq);
                self.state.lock().record(&pieces, Status::Timeout);
                queue.end_request(held.rq, Status::Timeout).unwrap();
                TimeoutAction::Done
            }
        }
    }

    fn poll(&self, cx: &HctxCx<'_, Self>) -> usize {
        let queue = cx.queue();
        let key = ptr::from_ref(queue).addr();
        let (taken, status) = {
            let mut st = self.state.lock();
            let mut taken = Vec::new();
            let mut at = 0;
            while at < st.held.len() {
                if st.held[at].queue == key && st.held[at].hctx == cx.hctx() {
                    taken.push(st.held.remove(at).rq);
                } else {
                    at += 1;
                }
            }
            (taken, st.poll_status)
        };
        let all: Vec<_> = taken.iter().map(|rq| pieces(queue, rq)).collect();
        {
            let mut st = self.state.lock();
            for p in &all {
                st.record(p, status);
            }
        }
        let n = taken.len();
        queue
            .end_requests(taken.into_iter().map(|rq| (rq, status)))
            .unwrap();
        n
    }

    fn complete(&self, _cx: &HctxCx<'_, Self>, _request: &Request<()>) {
        self.state.lock().completes += 1;
    }
}

// ----- the runner -----

/// What the runner knows of a bio and how it ended so far.
#[derive(Debug)]
struct BioRecord {
    info: BioInfo,
    /// The status it must end with at once (the limits refuse it).
    refused: Option<Status>,
    /// The pieces ended so far: (sector, sectors).
    pieces: Vec<(u64, u32)>,
    covered: u64,
    /// The first error of its pieces, in the order they ended.
    status: Status,
    ended: bool,
}

impl BioRecord {
    fn complete(&self) -> bool {
        !self.pieces.is_empty() && self.covered == u64::from(self.info.sectors)
    }
}

/// What the runner did to one queue, to undo and to check.
#[derive(Debug)]
struct QueueModel {
    quiesced: usize,
    frozen: usize,
    stopped: Vec<bool>,
    inactive: Vec<bool>,
    /// Requests on the requeue list.
    requeued: usize,
    timeouts: u64,
}

struct Runner<'q, const RQS: bool> {
    host: &'q Arc<Host<ModelDriver<RQS>>>,
    queues: &'q [Arc<Queue<RQS>>],
    plug: Plug<'q, ModelDriver<RQS>>,
    /// What each queue's FIFO elevator holds, if it has one.
    fifos: Vec<Option<Counts>>,
    setup: Setup,
    log: &'q EndLog,
    bios: Vec<BioRecord>,
    /// Bios not yet ended, by sequence number.
    open: BTreeSet<u32>,
    /// Bios that came back: (queue, bio).
    returned: Vec<(usize, Bio)>,
    /// The last bio submitted: (sector, sectors).
    last: (u64, u32),
    host_quiesced: usize,
    models: Vec<QueueModel>,
}

fn run_with<const RQS: bool>(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    let setup = reduce(config);
    let fail = |stage: Stage| move |message: String| Failure { stage, message };
    let log = EndLog::open();
    let mut builder = TagSet::builder(setup.depth)
        .hw_queues(setup.hw_queues)
        .reserved(setup.reserved)
        .flags(setup.flags)
        .timeout_ns(setup.timeout_ns);
    if let Some(slots) = setup.bio_slots {
        builder = builder.bio_slots(slots);
    }
    let driver = ModelDriver::<RQS> {
        state: SpinMutex::new(DriverState::new(setup.limits, setup.timeout_ns)),
    };
    let host = Host::new(builder, ModelPlatform::new(setup.cpus), driver)
        .map_err(|e| fail(Stage::Setup)(format!("Host::new: {e:?}")))?;
    let mut queues = Vec::new();
    let mut fifos = Vec::new();
    for i in 0..setup.queues {
        let mut queue_config = QueueConfig::new(setup.limits);
        if setup.elevators[i] {
            let counts = Counts::default();
            queue_config = queue_config.elevator(Box::new(Fifo::new(
                setup.fifo_merges,
                setup.fifo_per_hctx,
                counts.clone(),
            )));
            fifos.push(Some(counts));
            if let Some(nr) = setup.nr_requests {
                queue_config = queue_config.nr_requests(nr);
            }
        } else {
            fifos.push(None);
        }
        let queue = host
            .add_queue(queue_config)
            .map_err(|e| fail(Stage::Setup)(format!("add_queue {i}: {e:?}")))?;
        queues.push(queue);
    }
    let mut runner = Runner {
        host: &host,
        queues: &queues,
        plug: Plug::new(),
        fifos,
        models: (0..setup.queues)
            .map(|_| QueueModel {
                quiesced: 0,
                frozen: 0,
                stopped: alloc::vec![false; setup.hw_queues],
                inactive: alloc::vec![false; setup.hw_queues],
                requeued: 0,
                timeouts: 0,
            })
            .collect(),
        setup,
        log: &log,
        bios: Vec::new(),
        open: BTreeSet::new(),
        returned: Vec::new(),
        last: (0, 0),
        host_quiesced: 0,
    };
    for (index, op) in ops.iter().enumerate() {
        runner
            .step(op)
            .and_then(|()| runner.check())
            .map_err(fail(Stage::Op { index, op: *op }))?;
    }
    runner.drain().map_err(fail(Stage::Drain))?;
    drop(runner);
    drop(queues);
    let late = log.take();
    if !late.is_empty() {
        return Err(fail(Stage::Teardown)(format!(
            "bios ended when the queues were dropped: {late:?}"
        )));
    }
    Ok(())
}

impl<'q, const RQS: bool> Runner<'q, RQS> {
    fn queue(&self, raw: u8) -> usize {
        usize::from(raw) % self.queues.len()
    }

    /// A hardware queue index: one of them, or one beyond.
    fn hctx(&self, raw: u8) -> usize {
        usize::from(raw) % (self.setup.hw_queues + 1)
    }

    fn platform(&self) -> &ModelPlatform {
        self.host.set().platform()
    }

    fn driver(&self) -> &ModelDriver<RQS> {
        self.host.driver()
    }

    fn queue_index(&self, addr: usize) -> Option<usize> {
        self.queues
            .iter()
            .position(|q| Arc::as_ptr(q).addr() == addr)
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Submit {
                queue,
                cpu,
                plugged,
                bio,
            } => {
                let q = self.queue(queue);
                self.submit_new(q, cpu, plugged, bio)
            }
            Op::Resubmit {
                index,
                cpu,
                plugged,
            } => {
                if self.returned.is_empty() {
                    return Ok(());
                }
                let (q, bio) = self
                    .returned
                    .remove(usize::from(index) % self.returned.len());
                self.set_cpu(cpu);
                self.submit(q, bio, plugged, None)
            }
            Op::FlushPlug => {
                self.plug.flush();
                ensure!(
                    self.plug.is_empty(),
                    "a flushed plug holds {}",
                    self.plug.len()
                );
                Ok(())
            }
            Op::Complete {
                index,
                count,
                status: raw,
                batched,
            } => self.complete(index, 1 + usize::from(count) % 4, status(raw), batched),
            Op::Requeue { index, kick } => self.requeue(index, kick),
            Op::KickRequeue { queue } => {
                let q = self.queue(queue);
                self.queues[q].kick_requeue_list();
                self.models[q].requeued = 0;
                Ok(())
            }
            Op::Verdict { verdict, sticky } => {
                let mut st = self.driver().state.lock();
                if sticky {
                    st.default = verdict;
                } else if st.script.len() < MAX_SCRIPT {
                    st.script.push_back(verdict);
                }
                Ok(())
            }
            Op::Budget { limit } => {
                self.driver().state.lock().budget = limit.map(|l| usize::from(l) % 5);
                Ok(())
            }
            Op::Cap { limit } => {
                self.driver().state.lock().cap = limit.map(|l| usize::from(l) % 5);
                Ok(())
            }
            Op::Quiesce { queue: None } => {
                self.host.quiesce();
                self.host_quiesced += 1;
                ensure!(self.host.is_quiesced(), "the host is not quiesced");
                Ok(())
            }
            Op::Quiesce { queue: Some(raw) } => {
                let q = self.queue(raw);
                self.queues[q].quiesce();
                self.models[q].quiesced += 1;
                ensure!(self.queues[q].is_quiesced(), "queue {q} is not quiesced");
                Ok(())
            }
            Op::Unquiesce { queue: None } => {
                if self.host_quiesced > 0 {
                    self.host.unquiesce();
                    self.host_quiesced -= 1;
                }
                ensure!(
                    self.host.is_quiesced() == (self.host_quiesced > 0),
                    "the host's quiesce is off its count {}",
                    self.host_quiesced
                );
                Ok(())
            }
            Op::Unquiesce { queue: Some(raw) } => {
                let q = self.queue(raw);
                if self.models[q].quiesced > 0 {
                    self.queues[q].unquiesce();
                    self.models[q].quiesced -= 1;
                }
                Ok(())
            }
            Op::Stop { queue, hctx } => {
                let (q, h) = (self.queue(queue), self.hctx(hctx));
                self.queues[q].stop_hw_queue(h);
                if let Some(stopped) = self.models[q].stopped.get_mut(h) {
                    *stopped = true;
                    let addr = Arc::as_ptr(&self.queues[q]).addr();
                    self.driver().state.lock().stopped.insert((addr, h));
                }
                Ok(())
            }
            Op::Start { queue, hctx } => {
                let (q, h) = (self.queue(queue), self.hctx(hctx));
                if let Some(stopped) = self.models[q].stopped.get_mut(h) {
                    *stopped = false;
                    let addr = Arc::as_ptr(&self.queues[q]).addr();
                    self.driver().state.lock().stopped.remove(&(addr, h));
                }
                self.queues[q].start_hw_queue(h);
                Ok(())
            }
            Op::Freeze { queue } => {
                let q = self.queue(queue);
                self.queues[q].freeze_start();
                self.models[q].frozen += 1;
                ensure!(self.queues[q].is_frozen(), "queue {q} is not frozen");
                Ok(())
            }
            Op::Unfreeze { queue } => {
                let q = self.queue(queue);
                if self.models[q].frozen > 0 {
                    self.queues[q].unfreeze();
                    self.models[q].frozen -= 1;
                }
                ensure!(
                    self.queues[q].is_frozen() == (self.models[q].frozen > 0),
                    "queue {q}'s freeze is off its count {}",
                    self.models[q].frozen
                );
                Ok(())
            }
            Op::Deactivate { queue, hctx } => self.deactivate(queue, hctx),
            Op::Activate { queue, hctx } => {
                let (q, h) = (self.queue(queue), self.hctx(hctx));
                self.queues[q].activate_hctx(h);
                if let Some(inactive) = self.models[q].inactive.get_mut(h) {
                    *inactive = false;
                }
                Ok(())
            }
            Op::RunKicked => self.run_kicked(),
            Op::Run { queue, hctx } => {
                let q = self.queue(queue);
                match hctx {
                    Some(raw) => self.queues[q].run_hw_queue(self.hctx(raw)),
                    None => self.queues[q].run_hw_queues(),
                }
                Ok(())
            }
            Op::Poll {
                queue,
                hctx,
                status: raw,
            } => {
                let (q, h) = (self.queue(queue), self.hctx(hctx));
                let addr = Arc::as_ptr(&self.queues[q]).addr();
                let expected = {
                    let mut st = self.driver().state.lock();
                    st.poll_status = status(raw);
                    st.held
                        .iter()
                        .filter(|held| held.queue == addr && held.hctx == h)
                        .count()
                };
                let got = self.queues[q].poll(h);
                ensure!(
                    got == expected,
                    "poll of hardware queue {h} reaped {got}, the driver held {expected} there"
                );
                Ok(())
            }
            Op::Timeouts {
                queue,
                advance,
                action,
            } => self.timeouts(queue, advance, action),
            Op::SetNrRequests { queue, nr } => {
                let q = self.queue(queue);
                if self.queues[q].usage() != 0 {
                    return Ok(());
                }
                let nr = usize::from(nr) % 20;
                let elevator = self.queues[q].elevator_name();
                let had = self.queues[q].queue_tags().nr_requests();
                let result = self.queues[q].set_nr_requests(nr);
                ensure!(
                    elevator.is_some() || result.is_err(),
                    "set_nr_requests({nr}) without an elevator succeeded"
                );
                let now = self.queues[q].queue_tags().nr_requests();
                ensure!(
                    now == if result.is_ok() { Some(nr) } else { had },
                    "set_nr_requests({nr}) answered {result:?}; nr_requests went from {had:?} \
                     to {now:?}"
                );
                ensure!(
                    self.queues[q].elevator_name() == elevator,
                    "set_nr_requests({nr}) changed the elevator from {elevator:?} to {:?}",
                    self.queues[q].elevator_name()
                );
                self.check_settled(q)
            }
            Op::SwitchElevator {
                queue,
                fifo,
                nr_requests,
            } => {
                let q = self.queue(queue);
                if self.queues[q].usage() != 0 {
                    return Ok(());
                }
                let counts = Counts::default();
                let elevator: Option<Box<dyn Elevator>> = fifo.then(|| {
                    Box::new(Fifo::new(
                        self.setup.fifo_merges,
                        self.setup.fifo_per_hctx,
                        counts.clone(),
                    )) as Box<dyn Elevator>
                });
                let nr = nr_requests.map(|n| self.setup.reserved + 1 + usize::from(n) % 16);
                let before = self.queues[q].elevator_name();
                let result = self.queues[q].switch_elevator(elevator, nr);
                if result.is_ok() {
                    self.fifos[q] = fifo.then_some(counts);
                }
                match result {
                    Ok(()) => ensure!(
                        self.queues[q].elevator_name() == fifo.then_some("fifo"),
                        "after a switch to {:?} the elevator is {:?}",
                        fifo.then_some("fifo"),
                        self.queues[q].elevator_name()
                    ),
                    Err(e) => ensure!(
                        self.queues[q].elevator_name() == before,
                        "a refused switch ({e:?}) changed the elevator from {before:?} to {:?}",
                        self.queues[q].elevator_name()
                    ),
                }
                self.check_settled(q)
            }
        }
    }

    /// After a call that freezes and quiesces inside: both undone.
    fn check_settled(&self, q: usize) -> Result<(), String> {
        let queue = &self.queues[q];
        ensure!(
            queue.is_frozen() == (self.models[q].frozen > 0)
                && queue.is_quiesced() == (self.models[q].quiesced + self.host_quiesced > 0),
            "queue {q} left frozen {} / quiesced {} (counts {} / {})",
            queue.is_frozen(),
            queue.is_quiesced(),
            self.models[q].frozen,
            self.models[q].quiesced + self.host_quiesced
        );
        Ok(())
    }

    fn set_cpu(&self, raw: u8) {
        self.platform()
            .cpu
            .store(usize::from(raw) % self.setup.cpus, Ordering::Relaxed);
    }

    /// Makes and submits a fresh bio.
    fn submit_new(
        &mut self,
        q: usize,
        cpu: u8,
        plugged: bool,
        spec: BioSpec,
    ) -> Result<(), String> {
        const OPS: [BioOp; 8] = [
            BioOp::Read,
            BioOp::Write,
            BioOp::Read,
            BioOp::Write,
            BioOp::Flush,
            BioOp::Discard,
            BioOp::WriteZeroes,
            BioOp::Write,
        ];
        let op = OPS[usize::from(spec.op) % OPS.len()];
        let raw = spec.flags & BIO_RAW != 0;
        let block = self.setup.block;
        let mut sectors = u32::from(spec.sectors);
        if !raw {
            sectors = if op == BioOp::Flush {
                0
            } else {
                (sectors - sectors % block as u32).max(block as u32)
            };
        }
        let mut sector = match spec.place {
            Place::At(at) => u64::from(at) % (self.setup.limits.capacity + 64),
            Place::After => self.last.0 + u64::from(self.last.1),
            Place::Before => self.last.0.saturating_sub(u64::from(sectors)),
        };
        if !raw {
            sector -= sector % block;
        }
        let mut flags = BioFlags::empty();
        for (bit, flag) in [
            (BIO_SYNC, BioFlags::SYNC),
            (BIO_FUA, BioFlags::FUA),
            (BIO_PREFLUSH, BioFlags::PREFLUSH),
            (BIO_NOMERGE, BioFlags::NOMERGE),
            (BIO_POLLED, BioFlags::POLLED),
            (BIO_META, BioFlags::META),
        ] {
            if spec.flags & bit != 0 {
                flags |= flag;
            }
        }
        let prio = if spec.flags & BIO_HIGH_PRIO != 0 {
            IoPrio::new(IoPrioClass::RealTime, 0).unwrap_or_default()
        } else {
            IoPrio::default()
        };
        let seq = self.bios.len() as u32;
        let info = BioInfo {
            op,
            sector,
            sectors,
            prio,
        };
        let bio = Bio::new(op, sector, sectors)
            .flags(flags)
            .prio(prio)
            .payload(u64::from(seq))
            .private((u64::from(self.log.run) << 32) | u64::from(seq))
            .end_io(record_end);
        self.bios.push(BioRecord {
            info,
            refused: refused(&self.setup.limits, block, op, sector, sectors),
            pieces: Vec::new(),
            covered: 0,
            status: Status::Ok,
            ended: false,
        });
        self.open.insert(seq);
        self.driver().state.lock().bios.push(info);
        self.last = (sector, sectors);
        self.set_cpu(cpu);
        self.submit(q, bio, plugged, Some(seq))
    }

    /// Submits `bio` to queue `q`; `fresh` is the sequence number of a bio never submitted.
    fn submit(
        &mut self,
        q: usize,
        bio: Bio,
        plugged: bool,
        fresh: Option<u32>,
    ) -> Result<(), String> {
        let queues: &'q [Arc<Queue<RQS>>] = self.queues;
        let queue: &'q Queue<RQS> = &queues[q];
        let seq = bio.payload as u32;
        let refused = fresh.and_then(|seq| self.bios[seq as usize].refused);
        let frozen = self.models[q].frozen > 0;
        let dead = self.models[q].inactive.iter().all(|&i| i);
        let result = if plugged {
            queue.submit_plugged(&mut self.plug, bio)
        } else {
            queue.submit(bio)
        };
        if let Some(status) = refused {
            ensure!(
                result.is_ok(),
                "a bio the limits refuse ({status:?}) came back instead of ending"
            );
            return Ok(());
        }
        match result {
            Ok(()) => {
                ensure!(!frozen, "a frozen queue took a bio");
                if dead {
                    // No active hardware queue: every piece ends with an I/O error.
                    let mut st = self.driver().state.lock();
                    st.ledger.push(Piece {
                        seq,
                        sector: bio.sector,
                        sectors: bio.sectors,
                        status: Status::IoErr,
                    });
                }
                Ok(())
            }
            Err(back) => {
                ensure!(
                    back.payload == bio.payload
                        && back.op == bio.op
                        && back.sector >= bio.sector
                        && back.end_sector() == bio.end_sector()
                        && (back.sectors > 0 || bio.sectors == 0),
                    "{back:?} came back from a submission of {bio:?}: not a tail of it"
                );
                ensure!(
                    !frozen || back.sector == bio.sector,
                    "a frozen queue took part of {bio:?}"
                );
                if fresh.is_some() && back.sector == bio.sector {
                    // Nothing went in: the bio comes back as it was.
                    ensure!(
                        back.private == bio.private
                            && back.flags == bio.flags
                            && back.sectors == bio.sectors
                            && back.data.pos() == bio.data.pos()
                            && back.end_io.is_some(),
                        "{back:?} came back from {bio:?}, changed"
                    );
                }
                self.returned.push((q, back));
                Ok(())
            }
        }
    }

    /// The driver ends `count` held requests of one queue, from the `index`-th on.
    fn complete(
        &mut self,
        index: u8,
        count: usize,
        status: Status,
        batched: bool,
    ) -> Result<(), String> {
        let taken = {
            let mut st = self.driver().state.lock();
            if st.held.is_empty() {
                return Ok(());
            }
            let mut at = usize::from(index) % st.held.len();
            let queue = st.held[at].queue;
            let mut taken = Vec::new();
            while taken.len() < count && at < st.held.len() {
                if st.held[at].queue == queue {
                    taken.push(st.held.remove(at));
                } else {
                    at += 1;
                }
            }
            taken
        };
        let Some(q) = taken.first().and_then(|h| self.queue_index(h.queue)) else {
            return Err(String::from(
                "the driver holds a request of an unknown queue",
            ));
        };
        let queue = &self.queues[q];
        if batched {
            let all: Vec<_> = taken.iter().map(|h| pieces(queue, &h.rq)).collect();
            {
                let mut st = self.driver().state.lock();
                for p in &all {
                    st.record(p, status);
                }
            }
            queue
                .end_requests(taken.into_iter().map(|h| (h.rq, status)))
                .map_err(|e| format!("its own queue refused a request: {e}"))?;
        } else {
            for held in taken {
                let p = pieces(queue, &held.rq);
                self.driver().state.lock().record(&p, status);
                queue
                    .end_request(held.rq, status)
                    .map_err(|e| format!("its own queue refused a request: {e}"))?;
            }
        }
        Ok(())
    }

    fn requeue(&mut self, index: u8, kick: bool) -> Result<(), String> {
        let held = {
            let mut st = self.driver().state.lock();
            if st.held.is_empty() {
                return Ok(());
            }
            let at = usize::from(index) % st.held.len();
            st.held.remove(at)
        };
        let q = self
            .queue_index(held.queue)
            .ok_or_else(|| String::from("the driver holds a request of an unknown queue"))?;
        self.queues[q]
            .requeue_request(held.rq, kick)
            .map_err(|e| format!("its own queue refused a request: {e}"))?;
        self.models[q].requeued = if kick { 0 } else { self.models[q].requeued + 1 };
        Ok(())
    }

    fn deactivate(&mut self, queue: u8, hctx: u8) -> Result<(), String> {
        let (q, h) = (self.queue(queue), self.hctx(hctx));
        let drained = self.queues[q].deactivate_hctx(h);
        if let Some(inactive) = self.models[q].inactive.get_mut(h) {
            *inactive = true;
        }
        let addr = Arc::as_ptr(&self.queues[q]).addr();
        let held = self
            .driver()
            .state
            .lock()
            .held
            .iter()
            .filter(|held| held.queue == addr && held.hctx == h)
            .count();
        ensure!(
            !drained || held == 0,
            "hardware queue {h} reported drained while the driver holds {held} of its requests"
        );
        Ok(())
    }

    fn run_kicked(&mut self) -> Result<(), String> {
        let pending = self.platform().take_kick();
        let ran = self.host.run_kicked();
        // A kick asked for during a kick run may be served by that run already, so a
        // pending kick may find nothing left; but nothing runs without one.
        ensure!(
            pending || ran == 0,
            "run_kicked ran {ran} hardware queues, and no kick was asked for"
        );
        Ok(())
    }

    fn timeouts(&mut self, queue: u8, advance: u16, action: u8) -> Result<(), String> {
        let q = self.queue(queue);
        self.platform()
            .clock
            .fetch_add(u64::from(advance), Ordering::Relaxed);
        let now = self.platform().now_ns();
        let addr = Arc::as_ptr(&self.queues[q]).addr();
        let mut expected: Vec<usize> = {
            let mut st = self.driver().state.lock();
            st.timeout_action = action;
            st.timed_out.clear();
            st.held
                .iter()
                .filter(|h| h.queue == addr && h.deadline.is_some_and(|d| d <= now))
                .map(|h| h.addr)
                .collect()
        };
        let fired = self.queues[q].check_timeouts(now);
        self.models[q].timeouts += fired as u64;
        let mut got = core::mem::take(&mut self.driver().state.lock().timed_out);
        expected.sort_unstable();
        got.sort_unstable();
        ensure!(
            fired == expected.len() && got == expected,
            "check_timeouts({now}) fired {fired} for {} requests, expected {}: {} of those the \
             driver holds past their deadline",
            got.len(),
            expected.len(),
            expected.len()
        );
        Ok(())
    }

    /// Takes the pieces the driver ended and the bio ends since the last call, and checks them.
    fn settle(&mut self) -> Result<(), String> {
        let ledger = core::mem::take(&mut self.driver().state.lock().ledger);
        for piece in ledger {
            let record = self
                .bios
                .get_mut(piece.seq as usize)
                .ok_or_else(|| format!("a piece of unknown bio {} ended", piece.seq))?;
            let info = record.info;
            ensure!(
                !record.ended && record.refused.is_none(),
                "a piece {piece:?} of bio {} ended after the bio did",
                piece.seq
            );
            ensure!(
                piece.sector >= info.sector
                    && piece.sector + u64::from(piece.sectors)
                        <= info.sector + u64::from(info.sectors),
                "a piece {piece:?} outside its bio {info:?}"
            );
            let overlaps = record.pieces.iter().any(|&(sector, sectors)| {
                if info.sectors == 0 {
                    return true;
                }
                sector < piece.sector + u64::from(piece.sectors)
                    && piece.sector < sector + u64::from(sectors)
            });
            ensure!(
                !overlaps,
                "bio {} {info:?}: piece {piece:?} ended again (ended before: {:?})",
                piece.seq,
                record.pieces
            );
            record.pieces.push((piece.sector, piece.sectors));
            record.covered += u64::from(piece.sectors);
            if record.status.is_ok() {
                record.status = piece.status;
            }
        }
        for (seq, status) in self.log.take() {
            let record = self
                .bios
                .get_mut(seq as usize)
                .ok_or_else(|| format!("unknown bio {seq} ended"))?;
            ensure!(!record.ended, "bio {seq} {:?} ended twice", record.info);
            let expected = match record.refused {
                Some(refused) => refused,
                None => {
                    ensure!(
                        record.complete(),
                        "bio {seq} {:?} ended ({status:?}) with only {:?} of it ended by the \
                         driver",
                        record.info,
                        record.pieces
                    );
                    record.status
                }
            };
            ensure!(
                status == expected,
                "bio {seq} {:?} ended with {status:?}, expected {expected:?} (pieces {:?})",
                record.info,
                record.pieces
            );
            record.ended = true;
            self.open.remove(&seq);
        }
        for &seq in &self.open {
            let record = &self.bios[seq as usize];
            ensure!(
                record.refused.is_none(),
                "bio {seq} {:?} refused by the limits did not end at once",
                record.info
            );
            ensure!(
                !record.complete(),
                "bio {seq} {:?}: every piece ended ({:?}), the bio did not",
                record.info,
                record.pieces
            );
        }
        Ok(())
    }

    /// Everything checked after every op.
    fn check(&mut self) -> Result<(), String> {
        self.settle()?;
        let in_driver = self.host.in_driver();
        let kick_pending = self.platform().kick_pending();
        {
            let st = self.driver().state.lock();
            if let Some(e) = st.errors.first() {
                return Err(e.clone());
            }
            ensure!(
                st.held.len() == in_driver && st.budget_used == in_driver,
                "the driver holds {} requests and {} budget units, in_driver says {in_driver}",
                st.held.len(),
                st.budget_used
            );
            ensure!(
                st.completes == st.expected_completes,
                "Driver::complete ran {} times for {} requests ended",
                st.completes,
                st.expected_completes
            );
            ensure!(
                st.uncommitted.is_empty(),
                "requests queued with last == false and no commit_rqs after them, on (queue, \
                 hctx) {:?}",
                st.uncommitted
            );
            for held in &st.held {
                let q = self.queue_index(held.queue).ok_or_else(|| {
                    String::from("the driver holds a request of an unknown queue")
                })?;
                let request = self.queues[q].request(&held.rq).ok_or_else(|| {
                    format!("queue {q} no longer knows a request the driver holds")
                })?;
                ensure!(
                    request.state() == RqState::InFlight && request.hctx() == held.hctx,
                    "a request the driver holds is {:?} on hardware queue {} (issued on {})",
                    request.state(),
                    request.hctx(),
                    held.hctx
                );
            }
        }
        // Every request holds its queue's usage; without elevators every request holds a
        // driver tag from its allocation on, with them some wait for one.
        let usage: usize = self.queues.iter().map(|q| q.usage()).sum();
        let busy = self.host.set().busy();
        let elevators = self.queues.iter().any(|q| q.elevator_name().is_some());
        ensure!(
            busy == usage || (elevators && busy < usage),
            "the queues' usage adds up to {usage}, {busy} driver tags are busy"
        );
        ensure!(
            self.plug.len() <= PLUG_MAX_MULTI,
            "the plug holds {} requests",
            self.plug.len()
        );
        for (q, queue) in self.queues.iter().enumerate() {
            let model = &self.models[q];
            ensure!(
                queue.requeued() == model.requeued,
                "queue {q}'s requeue list holds {}, {} were requeued without a kick",
                queue.requeued(),
                model.requeued
            );
            ensure!(
                queue.timed_out() == model.timeouts,
                "queue {q} counts {} timeouts, {} fired",
                queue.timed_out(),
                model.timeouts
            );
            let allocated = {
                let tags = queue.queue_tags();
                if tags.has_scheduler() {
                    tags.sched_busy()
                } else {
                    let mut n = 0;
                    tags.for_each_busy(None, |_| {
                        n += 1;
                        true
                    });
                    n
                }
            };
            ensure!(
                queue.usage() == allocated,
                "queue {q}'s usage is {}, it has {allocated} requests allocated",
                queue.usage()
            );
            ensure!(
                queue.queue_tags().has_scheduler() == queue.elevator_name().is_some(),
                "queue {q} has the elevator {:?}, and scheduler tags: {}",
                queue.elevator_name(),
                queue.queue_tags().has_scheduler()
            );
            if queue.is_quiesced() || in_driver > 0 || kick_pending {
                continue;
            }
            // An elevator that lets any hardware queue dispatch any request has work on
            // every one while it holds something: then only its own requests count.
            let fifo = self.fifos[q].as_ref().map(|counts| *counts.lock());
            for h in 0..self.setup.hw_queues {
                let work = match fifo {
                    Some(counts) if !self.setup.fifo_per_hctx && counts.iter().any(|&n| n > 0) => {
                        counts[h] > 0
                    }
                    _ => queue.has_work(h),
                };
                ensure!(
                    model.stopped[h] || !work,
                    "queue {q} hardware queue {h} has work, and nothing will run it: the \
                     driver holds nothing and no kick is pending"
                );
            }
        }
        Ok(())
    }

    /// Undoes everything, then ends what is out, the way a platform and a driver would,
    /// until nothing is left; then checks that the set is idle.
    fn drain(&mut self) -> Result<(), String> {
        self.plug.flush();
        while self.host_quiesced > 0 {
            self.host.unquiesce();
            self.host_quiesced -= 1;
        }
        for (q, queue) in self.queues.iter().enumerate() {
            let model = &mut self.models[q];
            while model.quiesced > 0 {
                queue.unquiesce();
                model.quiesced -= 1;
            }
            while model.frozen > 0 {
                queue.unfreeze();
                model.frozen -= 1;
            }
            for h in 0..self.setup.hw_queues {
                if model.inactive[h] {
                    queue.activate_hctx(h);
                    model.inactive[h] = false;
                }
                if model.stopped[h] {
                    model.stopped[h] = false;
                    let addr = Arc::as_ptr(queue).addr();
                    self.host.driver().state.lock().stopped.remove(&(addr, h));
                    queue.start_hw_queue(h);
                }
            }
        }
        {
            let mut st = self.driver().state.lock();
            st.script.clear();
            st.default = Verdict::Accept;
            st.cap = None;
            st.budget = None;
        }
        self.check()?;
        let mut rounds = 0;
        loop {
            let mut progress = false;
            for (q, bio) in core::mem::take(&mut self.returned) {
                self.submit(q, bio, false, None)?;
                progress = true;
            }
            for (q, queue) in self.queues.iter().enumerate() {
                if queue.requeued() > 0 {
                    queue.kick_requeue_list();
                    progress = true;
                }
                self.models[q].requeued = 0;
            }
            if self.platform().kick_pending() {
                self.run_kicked()?;
                progress = true;
            }
            let held = self.driver().state.lock().held.len();
            if held > 0 {
                self.complete(0, held, Status::Ok, true)?;
                progress = true;
            }
            self.check()?;
            if !progress {
                break;
            }
            rounds += 1;
            ensure!(
                rounds < MAX_DRAIN_ROUNDS,
                "still not drained after {rounds} rounds: {} bios came back, the driver holds \
                 {held}",
                self.returned.len()
            );
        }
        ensure!(
            self.open.is_empty(),
            "bios never ended: {:?}",
            self.open
                .iter()
                .map(|&seq| (seq, self.bios[seq as usize].info))
                .collect::<Vec<_>>()
        );
        let set = self.host.set();
        ensure!(
            set.busy() == 0 && set.bio_slots_in_use() == 0 && self.host.in_driver() == 0,
            "drained, yet {} tags busy, {} bio slots in use, {} requests in the driver",
            set.busy(),
            set.bio_slots_in_use(),
            self.host.in_driver()
        );
        for (q, queue) in self.queues.iter().enumerate() {
            ensure!(
                queue.usage() == 0,
                "drained, yet queue {q} has usage {}",
                queue.usage()
            );
            for h in 0..self.setup.hw_queues {
                ensure!(
                    !queue.has_work(h),
                    "drained, yet queue {q} hardware queue {h} has work"
                );
            }
        }
        ensure!(
            self.driver().state.lock().budget_used == 0,
            "drained, yet budget is taken"
        );
        Ok(())
    }
}
