//! The request queue's side of an elevator, for operation-sequence models of schedulers
//! ([`deadline`](crate::deadline), [`bfq`](crate::bfq)): what a [`Harness`] does around
//! the elevator under test, which the scheduler's own model drives.
//!
//! A [`Config`] says what to build: a tag set of one or two hardware queues (each with its
//! own tags, or [shared host tags](TagSetFlags::SHARED_HOST_TAGS)) on the deterministic
//! [`TestPlatform`], one request queue's [`QueueTags`] with scheduler tags of 1 to
//! [`MAX_NR_REQUESTS`] requests per map, and the queue's [`QueueLimits`]. The harness makes
//! bios from fuzzed [`BioSpec`]s (cut to the limits, as the request queue splits them),
//! allocates their requests, and keeps a record of every bio handed over. Every request
//! the elevator dispatches is checked against that record
//! ([`Harness::dispatched`]):
//!
//! * a bio is dispatched exactly once per insertion (once, and once more for each requeue
//!   of its request), and only while it is queued;
//! * a dispatched request holds exactly the bios the record expects of it, front to back:
//!   each with the operation, priority, issuer, start and length it was made with, all of
//!   one operation and priority, each starting where the one before ends; the request's
//!   range is exactly theirs, within the limits (the most sectors its operation may have in
//!   one request, no chunk boundary crossed); a request of two or more bios has none that
//!   may not merge ([`BioFlags::NOMERGE`], [`BioFlags::FUA`], [`BioFlags::PREFLUSH`]);
//! * no bio ends but those of a request completed ([`Harness::finish`]), with its status,
//!   front to back, once ([`Harness::settle`]): a merge loses no bio;
//! * the scheduler tags in use are the requests the elevator holds and those in flight
//!   ([`Harness::check_tags`]); at the end, none, and every bio ended once
//!   ([`Harness::check_drained`]).
//!
//! The requests are built on bare tags, where the request queue's count of data segments
//! is not kept, so the limits leave the segment rules at values no request here reaches.
//! Every field of a [`Config`] or a [`BioSpec`] is reduced into a meaningful range rather
//! than rejected, so any input a fuzzer makes up is valid.
//!
//! ```
//! use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
//! use blkmq_core::{IssuerId, Status};
//!
//! let config = Config {
//!     hw_queues: 0,
//!     shared_tags: false,
//!     nr_requests: 3,
//!     limits: LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None },
//! };
//! let mut h = Harness::build(&config).unwrap();
//! let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
//! let shape = h.shape(&spec, IssuerId(3));
//! let (bio, seq) = h.make_bio(shape);
//! let rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
//! // An elevator would hold it here; this one dispatches it at once.
//! let f = h.dispatched(rq).unwrap();
//! assert_eq!(f.bios, [seq]);
//! let f = h.take(0);
//! h.finish(f, Status::Ok).unwrap();
//! h.settle().unwrap(); // the bio ended once, with its request's status
//! h.check_drained().unwrap();
//! ```

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use arbitrary::Arbitrary;

use crate::tagset::TestPlatform;
use crate::tagset::bios::EndLog;
use blkmq_core::{
    Alloc, Bio, BioFlags, Elevator, ElvCx, IoPrio, IoPrioClass, IssuerId, Op as BioOp, QueueLimits,
    QueueTags, Rq, Status, TagError, TagSet, TagSetFlags,
};

/// The most hardware queues [`Harness::build`] makes.
pub const MAX_HW_QUEUES: usize = 2;

/// The most scheduler tags per map [`Harness::build`] makes.
pub const MAX_NR_REQUESTS: usize = 32;

/// Sectors a bio placed with [`Place::At`] may start at: `0..SPAN`.
pub const SPAN: u64 = 4096;

/// The most sectors a [`BioSpec`] asks for (before the limits cut it).
pub const MAX_BIO_SECTORS: u32 = 64;

/// The statuses a completion picks from, by `status % 4`.
pub const STATUSES: [Status; 4] = [Status::Ok, Status::IoErr, Status::Timeout, Status::Medium];

/// The driver tags of the set (the elevator never sees them).
const DRIVER_DEPTH: usize = 8;

/// The device's size in sectors: far beyond every bio.
const CAPACITY: u64 = 1 << 20;

/// The classes by index, highest first.
const CLASSES: [IoPrioClass; 3] = [
    IoPrioClass::RealTime,
    IoPrioClass::BestEffort,
    IoPrioClass::Idle,
];

/// What [`Harness::build`] builds.
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
    /// At sector `at % SPAN`, with the operation and priority of the [`BioSpec`] (and the
    /// issuer [`Harness::shape`] is given).
    At(u16),
    /// Where the last bio made ended, with its operation, priority and issuer (a sequential
    /// stream); at sector 0 before any.
    Follow,
    /// Touching a queued bio, with its operation, priority and issuer (a merge candidate):
    /// the `pick`-th of those queued, in the order they were made, just after it, or with
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
    /// Where it starts (and, but for [`Place::At`], its operation, priority and issuer).
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

/// Where a model run found a broken promise; `O` is the model's op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage<O> {
    /// While building the tags and the elevator.
    Setup,
    /// At op `index`.
    Op {
        /// The op's position in the sequence.
        index: usize,
        /// The op.
        op: O,
    },
    /// While draining everything at the end.
    Drain,
}

/// A broken promise: where, and what was expected against what happened.
///
/// ```
/// use blkmq_model::elv::{Failure, Stage};
///
/// let failure = Failure { stage: Stage::Op { index: 3, op: 'x' }, message: "lost".into() };
/// assert_eq!(failure.to_string(), "op #3 'x': lost");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure<O> {
    /// Where.
    pub stage: Stage<O>,
    /// What was expected and what happened.
    pub message: String,
}

impl<O: fmt::Debug> fmt::Display for Failure<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.stage {
            Stage::Setup => write!(f, "setup: {}", self.message),
            Stage::Op { index, op } => write!(f, "op #{index} {op:?}: {}", self.message),
            Stage::Drain => write!(f, "drain: {}", self.message),
        }
    }
}

impl<O: fmt::Debug> core::error::Error for Failure<O> {}

/// A scheduler's model: it steps through ops, checking after each, and drains at the end.
///
/// ```
/// use blkmq_model::elv::{Model, Stage, run_model};
///
/// /// Counts up; an op of 0 breaks it.
/// struct Count(u32);
/// impl Model for Count {
///     type Op = u32;
///     fn step(&mut self, op: &u32) -> Result<(), String> {
///         self.0 += op;
///         if *op == 0 { Err("zero".into()) } else { Ok(()) }
///     }
///     fn drain(&mut self) -> Result<(), String> {
///         Ok(())
///     }
/// }
/// assert!(run_model(Ok(Count(0)), &[1, 2]).is_ok());
/// let failure = run_model(Ok(Count(0)), &[1, 0, 2]).unwrap_err();
/// assert_eq!(failure.stage, Stage::Op { index: 1, op: 0 });
/// ```
pub trait Model {
    /// One step of a run.
    type Op: Copy;
    /// Runs `op` and checks everything after it.
    ///
    /// # Errors
    /// What broke.
    fn step(&mut self, op: &Self::Op) -> Result<(), String>;
    /// Finishes everything that is left and checks that nothing is.
    ///
    /// # Errors
    /// What broke.
    fn drain(&mut self) -> Result<(), String>;
}

/// Runs `ops` through the model `built` (or the message of why it could not be built),
/// then drains it.
///
/// # Errors
/// The first broken promise, and where.
///
/// ```
/// use blkmq_model::elv::{Model, Stage, run_model};
///
/// struct Never;
/// impl Model for Never {
///     type Op = ();
///     fn step(&mut self, _: &()) -> Result<(), String> { Ok(()) }
///     fn drain(&mut self) -> Result<(), String> { Err("stuck".into()) }
/// }
/// assert_eq!(run_model(Ok(Never), &[(), ()]).unwrap_err().stage, Stage::Drain);
/// assert_eq!(run_model::<Never>(Err("no".into()), &[]).unwrap_err().stage, Stage::Setup);
/// ```
pub fn run_model<M: Model>(built: Result<M, String>, ops: &[M::Op]) -> Result<(), Failure<M::Op>> {
    let mut model = built.map_err(|message| Failure {
        stage: Stage::Setup,
        message,
    })?;
    for (index, op) in ops.iter().enumerate() {
        model.step(op).map_err(|message| Failure {
            stage: Stage::Op { index, op: *op },
            message,
        })?;
    }
    model.drain().map_err(|message| Failure {
        stage: Stage::Drain,
        message,
    })
}

/// Where a bio handed over is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BioState {
    /// Held by the elevator (in a request it holds).
    Queued,
    /// In a request dispatched and not completed.
    InFlight,
    /// Ended.
    Done,
}

/// What the harness knows of one bio handed over.
///
/// ```
/// # use blkmq_model::elv::{BioSpec, BioState, Config, Harness, LimitsSpec, Place};
/// # use blkmq_core::IssuerId;
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
/// let mut h = Harness::build(&config).unwrap();
/// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
/// let _rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
/// let rec = h.records()[&seq];
/// assert_eq!((rec.issuer, rec.sector, rec.state, rec.owed), (IssuerId(3), 8, BioState::Queued, 1));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct BioRec {
    /// Its operation.
    pub op: BioOp,
    /// Its priority.
    pub prio: IoPrio,
    /// Its flags.
    pub flags: BioFlags,
    /// Who issued it.
    pub issuer: IssuerId,
    /// Its first sector.
    pub sector: u64,
    /// Its length.
    pub sectors: u32,
    /// When it was handed over.
    pub since: u64,
    /// Where it is.
    pub state: BioState,
    /// How many times it was dispatched.
    pub dispatched: u32,
    /// Dispatches it is owed: one, and one more per requeue.
    pub owed: u32,
}

/// A bio about to be made: everything but its identity.
///
/// ```
/// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
/// # use blkmq_core::{IssuerId, Op};
/// # let limits = LimitsSpec { max_sectors: 1, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// let h = Harness::build(&config).unwrap();
/// let spec = BioSpec { class: 1, level: 0, op: 1, place: Place::At(4100), sectors: 63, flags: 0 };
/// let shape = h.shape(&spec, IssuerId(2));
/// // At 4100 % 4096, cut from 64 sectors to the 16 of `max_sectors`.
/// assert_eq!((shape.op, shape.sector, shape.sectors), (Op::Write, 4, 16));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The operation.
    pub op: BioOp,
    /// The priority.
    pub prio: IoPrio,
    /// The flags.
    pub flags: BioFlags,
    /// Who issues it.
    pub issuer: IssuerId,
    /// The first sector.
    pub sector: u64,
    /// The length.
    pub sectors: u32,
}

/// A request dispatched and not yet completed or requeued.
///
/// ```
/// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
/// # use blkmq_core::IssuerId;
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
/// let mut h = Harness::build(&config).unwrap();
/// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
/// let rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
/// let f = h.dispatched(rq).unwrap();
/// assert_eq!((f.bios.len(), f.sectors, f.issuer, f.sync), (1, 8, IssuerId(3), true));
/// ```
#[derive(Debug)]
pub struct InFlight {
    /// The request.
    pub rq: Rq,
    /// Its bios, front to back.
    pub bios: Vec<u32>,
    /// Its priority.
    pub prio: IoPrio,
    /// Its first bio's issuer.
    pub issuer: IssuerId,
    /// Whether its first bio is sync ([`Bio::is_sync`]).
    pub sync: bool,
    /// Its length.
    pub sectors: u64,
    /// When the longest waiting of its bios was handed over.
    pub oldest: u64,
}

/// The last bio made: where a [`Place::Follow`] goes.
#[derive(Clone, Copy)]
struct Last {
    op: BioOp,
    prio: IoPrio,
    issuer: IssuerId,
    end: u64,
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

/// The request queue around an elevator under test: bare scheduler tags, a clock, and the
/// record of every bio handed over (see the [module documentation](self)).
///
/// The elevator is the caller's: it makes an [`ElvCx`] with [`cx`](Self::cx) for each call
/// and tells the harness what happened (a request made, dispatched, completed, requeued).
pub struct Harness {
    /// The queue's tags, with scheduler tags.
    pub tags: QueueTags<(), TestPlatform>,
    /// The queue's limits (a model may change what the elevator reads, such as
    /// `rotational`).
    pub limits: QueueLimits,
    /// Hardware queues.
    pub hw_queues: usize,
    /// The depth the scheduler tags were made with.
    pub made: usize,
    /// The current `nr_requests`.
    pub nr_requests: usize,
    /// The clock, in ns: it moves only when the model moves it.
    pub now: u64,
    log: EndLog,
    next_seq: u32,
    bios: BTreeMap<u32, BioRec>,
    last: Option<Last>,
    in_flight: Vec<InFlight>,
    /// Ends the ops since the last settle should have caused, in order.
    expected: Vec<(u32, Status)>,
}

impl Harness {
    /// The tags and limits `config` describes, nothing held, the clock at 0.
    ///
    /// # Errors
    /// A message when the tags cannot be built (a bug: every config is valid).
    ///
    /// ```
    /// use blkmq_model::elv::{Config, Harness, LimitsSpec};
    ///
    /// let limits = LimitsSpec { max_sectors: 0, chunk: Some(1), discard: Some(0), write_zeroes: None };
    /// let config = Config { hw_queues: 1, shared_tags: true, nr_requests: 33, limits };
    /// let h = Harness::build(&config).unwrap();
    /// assert_eq!((h.hw_queues, h.made, h.nr_requests), (2, 2, 2));
    /// assert_eq!((h.limits.max_sectors, h.limits.chunk_sectors), (8, 16));
    /// assert_eq!(h.tags.nr_requests(), Some(2));
    /// ```
    pub fn build(config: &Config) -> Result<Self, String> {
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
        Ok(Self {
            tags,
            limits,
            hw_queues,
            made,
            nr_requests: made,
            now: 0,
            log: EndLog::new(),
            next_seq: 0,
            bios: BTreeMap::new(),
            last: None,
            in_flight: Vec::new(),
            expected: Vec::new(),
        })
    }

    /// A context for an elevator call, at the harness's clock.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// let mut h = Harness::build(&config).unwrap();
    /// h.now = 7;
    /// assert_eq!(h.cx().now_ns(), 7);
    /// ```
    pub fn cx(&self) -> ElvCx<'_> {
        ElvCx::new(&self.tags, &self.limits, self.now)
    }

    /// Every bio handed over, by sequence number.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// assert!(Harness::build(&config).unwrap().records().is_empty());
    /// ```
    pub fn records(&self) -> &BTreeMap<u32, BioRec> {
        &self.bios
    }

    /// The requests in flight, in the order they were dispatched.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// assert!(Harness::build(&config).unwrap().in_flight().is_empty());
    /// ```
    pub fn in_flight(&self) -> &[InFlight] {
        &self.in_flight
    }

    /// Whether some bio handed over is queued in the elevator.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// assert!(!Harness::build(&config).unwrap().any_queued());
    /// ```
    pub fn any_queued(&self) -> bool {
        self.bios.values().any(|r| r.state == BioState::Queued)
    }

    // ----- making bios -----

    /// `shape` with its length cut as the request queue splits (to what one request may
    /// hold from its start), and moved to sector 0 should it run past the device's end.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec, Shape};
    /// # use blkmq_core::{IoPrio, IssuerId, Op};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: Some(0), discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// let h = Harness::build(&config).unwrap(); // 8-sector chunks
    /// let shape = Shape {
    ///     op: Op::Read, prio: IoPrio::default(), flags: Default::default(),
    ///     issuer: IssuerId(0), sector: 6, sectors: 8,
    /// };
    /// assert_eq!(h.fit(shape).sectors, 2); // up to the chunk boundary at 8
    /// ```
    pub fn fit(&self, mut shape: Shape) -> Shape {
        if shape.sector + u64::from(shape.sectors) > CAPACITY {
            shape.sector = 0;
        }
        let bio = Bio::new(shape.op, shape.sector, shape.sectors);
        shape.sectors = self.limits.split_len(&bio).max(1);
        shape
    }

    /// The bio `spec` describes, issued by `issuer` (unless its place takes another bio's).
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// let mut h = Harness::build(&config).unwrap();
    /// let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let (bio, _) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// let next = BioSpec { place: Place::Follow, op: 1, ..spec };
    /// let shape = h.shape(&next, IssuerId(9));
    /// assert_eq!((shape.op, shape.issuer, shape.sector), (bio.op, IssuerId(3), 16));
    /// ```
    pub fn shape(&self, spec: &BioSpec, issuer: IssuerId) -> Shape {
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
                issuer: last.issuer,
                sector: last.end,
                sectors,
            },
            None => Shape {
                op,
                prio,
                flags,
                issuer,
                sector: 0,
                sectors,
            },
        };
        match spec.place {
            Place::At(at) => self.fit(Shape {
                op,
                prio,
                flags,
                issuer,
                sector: u64::from(at) % SPAN,
                sectors,
            }),
            Place::Follow => self.fit(follow(self.last)),
            Place::Touch { pick, front } => {
                let queued: Vec<&BioRec> = self
                    .bios
                    .values()
                    .filter(|r| r.state == BioState::Queued)
                    .collect();
                if queued.is_empty() {
                    return self.fit(follow(self.last));
                }
                let r = queued[usize::from(pick) % queued.len()];
                let back = Shape {
                    op: r.op,
                    prio: r.prio,
                    flags,
                    issuer: r.issuer,
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

    /// A fresh bio of `shape`, not yet handed over, and its sequence number; its `end_io`
    /// records its end for [`settle`](Self::settle).
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// assert_eq!((seq, bio.issuer, bio.sector, bio.sectors), (0, IssuerId(3), 8, 8));
    /// ```
    pub fn make_bio(&mut self, shape: Shape) -> (Bio, u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.last = Some(Last {
            op: shape.op,
            prio: shape.prio,
            issuer: shape.issuer,
            end: shape.sector + u64::from(shape.sectors),
        });
        let bio = Bio::new(shape.op, shape.sector, shape.sectors)
            .prio(shape.prio)
            .flags(shape.flags)
            .issuer(shape.issuer);
        (self.log.mark(bio, seq), seq)
    }

    /// The elevator now holds `bio` (`seq`), queued.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, BioState, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// h.hand_over(seq, &bio); // as before offering it to `bio_merge`
    /// assert_eq!(h.records()[&seq].state, BioState::Queued);
    /// # h.take_back(seq, &bio, &bio).unwrap();
    /// ```
    pub fn hand_over(&mut self, seq: u32, bio: &Bio) {
        self.bios.insert(
            seq,
            BioRec {
                op: bio.op,
                prio: bio.prio,
                flags: bio.flags,
                issuer: bio.issuer,
                sector: bio.sector,
                sectors: bio.sectors,
                since: self.now,
                state: BioState::Queued,
                dispatched: 0,
                owed: 1,
            },
        );
    }

    /// The elevator gave `back` (`seq`) back instead of taking `sent`: it must be the bio
    /// as it was sent; the record forgets it.
    ///
    /// # Errors
    /// When `back` differs from `sent`.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// h.hand_over(seq, &bio);
    /// let cut = blkmq_core::Bio { sectors: 4, ..bio };
    /// assert!(h.take_back(seq, &bio, &cut).is_err()); // not the bio sent
    /// h.hand_over(seq, &bio);
    /// h.take_back(seq, &bio, &bio).unwrap();
    /// assert!(h.records().is_empty());
    /// ```
    pub fn take_back(&mut self, seq: u32, sent: &Bio, back: &Bio) -> Result<(), String> {
        self.bios.remove(&seq);
        let key = |b: &Bio| {
            (
                b.op, b.sector, b.sectors, b.prio, b.flags, b.issuer, b.private,
            )
        };
        ensure!(
            key(back) == key(sent),
            "bio_merge gave back {back:?} for {sent:?}"
        );
        Ok(())
    }

    /// A request of `bio` for `hctx`, allocated as a request queue does, within `shallow`
    /// (what the elevator's `limit_depth` said): `None` when no scheduler tag is to be had
    /// (the bio is then not handed over). Else the elevator holds `bio` from now on; the
    /// caller prepares and inserts the request.
    ///
    /// # Errors
    /// When the allocation fails for another reason than a full map.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 0, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap(); // one scheduler tag
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// assert!(h.alloc_request(0, bio, seq, None).unwrap().is_some());
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// assert!(h.alloc_request(0, bio, seq, None).unwrap().is_none());
    /// assert_eq!(h.records().len(), 1);
    /// ```
    pub fn alloc_request(
        &mut self,
        hctx: usize,
        bio: Bio,
        seq: u32,
        shallow: Option<usize>,
    ) -> Result<Option<Rq>, String> {
        let mut alloc = Alloc::new(hctx, 0);
        alloc.shallow_depth = shallow;
        let mut rq = match self.tags.alloc(&alloc) {
            Ok(rq) => rq,
            Err(TagError::WouldBlock) => return Ok(None),
            Err(e) => return Err(format!("allocating {alloc:?}: {e:?}")),
        };
        self.tags
            .set_bio(&mut rq, bio)
            .map_err(|e| format!("set_bio: {e:?}"))?;
        self.hand_over(seq, &bio);
        Ok(Some(rq))
    }

    // ----- dispatch, completion, requeue -----

    /// The elevator dispatched `rq`: checks it against the record (see the
    /// [module documentation](self)) and puts it in flight.
    ///
    /// # Errors
    /// The first thing about the request that the record contradicts.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, _) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// // A request of a bio never handed over to the elevator.
    /// let mut rq = h.tags.alloc(&blkmq_core::Alloc::new(0, 0)).unwrap();
    /// h.tags.set_bio(&mut rq, bio).unwrap();
    /// assert!(h.dispatched(rq).is_err());
    /// ```
    pub fn dispatched(&mut self, rq: Rq) -> Result<&InFlight, String> {
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
                self.log.seq_of(b).is_some(),
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
                (rec.op, rec.prio, rec.issuer, rec.sector, rec.sectors)
                    == (b.op, b.prio, b.issuer, b.sector, b.sectors),
                "bio {id} dispatched as {b:?}, made as {rec:?}"
            );
            ensure!(
                rec.state == BioState::Queued,
                "bio {id} dispatched while {:?}",
                rec.state
            );
            rec.state = BioState::InFlight;
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
        self.in_flight.push(InFlight {
            rq,
            bios: ids,
            prio,
            issuer: bios[0].issuer,
            sync: bios[0].is_sync(),
            sectors,
            oldest,
        });
        Ok(&self.in_flight[self.in_flight.len() - 1])
    }

    /// Takes the `index`-th request in flight out, to complete it (the caller tells the
    /// elevator, then [`finish`](Self::finish)es it).
    ///
    /// # Panics
    /// When `index` is not below the number in flight.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// let rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
    /// h.dispatched(rq).unwrap();
    /// let f = h.take(0);
    /// assert!(h.in_flight().is_empty());
    /// # h.finish(f, blkmq_core::Status::Ok).unwrap();
    /// ```
    pub fn take(&mut self, index: usize) -> InFlight {
        self.in_flight.remove(index)
    }

    /// Completes `f` with `status` ([`QueueTags::complete`]): its bios are to end, front to
    /// back, with `status`.
    ///
    /// # Errors
    /// When the tags refuse the completion.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, BioState, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::{IssuerId, Status};
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// let rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
    /// h.dispatched(rq).unwrap();
    /// let f = h.take(0);
    /// h.finish(f, Status::Medium).unwrap();
    /// assert_eq!(h.records()[&seq].state, BioState::Done);
    /// h.settle().unwrap();
    /// ```
    pub fn finish(&mut self, f: InFlight, status: Status) -> Result<(), String> {
        self.tags
            .complete(f.rq, status)
            .map_err(|e| format!("completing a request: {e:?}"))?;
        for id in f.bios {
            if let Some(rec) = self.bios.get_mut(&id) {
                rec.state = BioState::Done;
            }
            self.expected.push((id, status));
        }
        Ok(())
    }

    /// Takes `1 + count % 3` requests in flight out, from the `index`-th on (wrapping), to
    /// requeue them: their bios are queued again and owed one more dispatch. The caller
    /// tells the elevator (`requeue_request` for each, then one `insert_requests` of them
    /// all at the head). None when nothing is in flight.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, BioState, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// assert!(h.requeue(0, 0).is_empty());
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// let rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
    /// h.dispatched(rq).unwrap();
    /// let back = h.requeue(5, 2); // one in flight: that one
    /// assert_eq!(back.len(), 1);
    /// assert_eq!((h.records()[&seq].state, h.records()[&seq].owed), (BioState::Queued, 2));
    /// # for f in back { h.tags.free(f.rq).unwrap(); }
    /// ```
    pub fn requeue(&mut self, index: u8, count: u8) -> Vec<InFlight> {
        if self.in_flight.is_empty() {
            return Vec::new();
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
        for f in &batch {
            for id in &f.bios {
                if let Some(rec) = self.bios.get_mut(id) {
                    rec.state = BioState::Queued;
                    rec.owed += 1;
                }
            }
        }
        batch
    }

    /// [`QueueTags::set_nr_requests`] to `nr % (made + 2)`, where `made` is the depth the
    /// scheduler tags were made with (so 0 and `made + 1` are refused): the new depth when
    /// accepted (the caller then tells the elevator, `depth_updated`), `None` when refused.
    ///
    /// # Errors
    /// When the tags accept a depth out of range or refuse one within it.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// let mut h = Harness::build(&config).unwrap(); // 4 made
    /// assert_eq!(h.set_nr_requests(2).unwrap(), Some(2));
    /// assert_eq!(h.set_nr_requests(5).unwrap(), None); // 5 % 6: more than made
    /// assert_eq!(h.nr_requests, 2);
    /// ```
    pub fn set_nr_requests(&mut self, nr: u8) -> Result<Option<usize>, String> {
        let nr = usize::from(nr) % (self.made + 2);
        let result = self.tags.set_nr_requests(nr);
        let valid = (1..=self.made).contains(&nr);
        ensure!(
            result.is_ok() == valid,
            "set_nr_requests({nr}) with {} made: {result:?}",
            self.made
        );
        if !valid {
            return Ok(None);
        }
        ensure!(
            self.tags.nr_requests() == Some(nr),
            "nr_requests {:?} after set_nr_requests({nr})",
            self.tags.nr_requests()
        );
        self.nr_requests = nr;
        Ok(Some(nr))
    }

    // ----- checks -----

    /// The ends since the last call against those expected: every bio of a completed
    /// request once, with its status, front to back, and nothing else.
    ///
    /// # Errors
    /// When they differ.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// Harness::build(&config).unwrap().settle().unwrap(); // nothing ended, nothing expected
    /// ```
    pub fn settle(&mut self) -> Result<(), String> {
        let got = self.log.take();
        let expected = core::mem::take(&mut self.expected);
        ensure!(
            got == expected,
            "bio ends (sequence number, status): got {got:?}, expected {expected:?}"
        );
        Ok(())
    }

    /// The scheduler tags in use against `held` requests in the elevator and those in
    /// flight.
    ///
    /// # Errors
    /// When they differ.
    ///
    /// ```
    /// # use blkmq_model::elv::{Config, Harness, LimitsSpec};
    /// # let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// let h = Harness::build(&config).unwrap();
    /// h.check_tags(0).unwrap();
    /// assert!(h.check_tags(1).is_err());
    /// ```
    pub fn check_tags(&self, held: usize) -> Result<(), String> {
        ensure!(
            self.tags.sched_busy() == held + self.in_flight.len(),
            "{} scheduler tags in use, {held} requests held and {} in flight",
            self.tags.sched_busy(),
            self.in_flight.len()
        );
        Ok(())
    }

    /// At the end of a run: no scheduler tag in use, and every bio ended, dispatched as
    /// many times as it was owed.
    ///
    /// # Errors
    /// The first thing left behind.
    ///
    /// ```
    /// # use blkmq_model::elv::{BioSpec, Config, Harness, LimitsSpec, Place};
    /// # use blkmq_core::IssuerId;
    /// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
    /// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
    /// # let spec = BioSpec { class: 1, level: 4, op: 0, place: Place::At(8), sectors: 7, flags: 0 };
    /// let mut h = Harness::build(&config).unwrap();
    /// let (bio, seq) = h.make_bio(h.shape(&spec, IssuerId(3)));
    /// let rq = h.alloc_request(0, bio, seq, None).unwrap().unwrap();
    /// assert!(h.check_drained().is_err()); // a request held, a bio not ended
    /// # h.tags.free(rq).unwrap();
    /// ```
    pub fn check_drained(&self) -> Result<(), String> {
        ensure!(
            self.tags.sched_busy() == 0,
            "{} scheduler tags in use at the end",
            self.tags.sched_busy()
        );
        for (id, rec) in &self.bios {
            ensure!(rec.state == BioState::Done, "bio {id} left behind: {rec:?}");
            ensure!(
                rec.dispatched == rec.owed,
                "bio {id} dispatched {} times, owed {}",
                rec.dispatched,
                rec.owed
            );
        }
        Ok(())
    }
}

// ----- the ops every scheduler model has -----

/// Rounds of the final drain after which it counts as stuck.
const MAX_DRAIN_ROUNDS: usize = 10_000;

/// A scheduler's model over a [`Harness`]: what [`insert`], [`dispatch`], [`drain`] and the
/// like need of it, so the
/// ops every scheduler has run the same way for all (the scheduler's own ops and promises
/// stay in its model).
///
/// ```
/// use std::collections::VecDeque;
/// use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
///
/// /// Dispatches in insertion order.
/// #[derive(Default)]
/// struct Fifo(VecDeque<Rq>);
/// impl Elevator for Fifo {
///     fn name(&self) -> &'static str { "fifo" }
///     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
///         self.0.extend(rqs);
///     }
///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
///     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// }
///
/// struct Runner { h: Harness, fifo: Fifo }
/// impl ElvModel for Runner {
///     type Elv = Fifo;
///     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
///     fn held(&self) -> usize { self.fifo.0.len() }
///     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
///         self.h.alloc_request(hctx, bio, seq, None)
///     }
///     fn went_in_at_head(&mut self, _: Vec<(IoPrio, Vec<u32>)>) {}
///     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
///         let cx = self.h.cx();
///         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
///         self.h.dispatched(rq)?;
///         Ok(true)
///     }
///     fn check(&mut self) -> Result<(), String> {
///         elv::check_has_work(&self.h, &self.fifo)?;
///         self.h.check_tags(self.fifo.0.len())
///     }
/// }
///
/// let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default() };
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::insert(&mut m, 0, IssuerId(1), &bio, 1, false).unwrap(); // 2 requests
/// elv::dispatch(&mut m, 0, 0).unwrap();
/// assert_eq!((m.h.in_flight().len(), m.held()), (1, 1));
/// elv::drain(&mut m).unwrap(); // dispatches and completes the rest, and checks
/// ```
pub trait ElvModel {
    /// The elevator under test.
    type Elv: Elevator;
    /// The harness and the elevator, to use together.
    fn parts(&mut self) -> (&mut Harness, &mut Self::Elv);
    /// Requests the elevator says it holds (queued, not dispatched).
    fn held(&self) -> usize;
    /// A request of `bio` (`seq`) for `hctx`, allocated and prepared as a request queue
    /// does, with the scheduler's checks of its depth limits: `None` when no scheduler
    /// tag is to be had (see [`Harness::alloc_request`]).
    ///
    /// # Errors
    /// What broke.
    fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String>;
    /// Requests were inserted at the head by one call (fresh, or requeued), each as its
    /// priority and bios, in the order handed in.
    fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>);
    /// One dispatch for `hctx`, checked; false when the elevator gave nothing.
    ///
    /// # Errors
    /// What broke.
    fn dispatch(&mut self, hctx: usize) -> Result<bool, String>;
    /// Everything the model checks after an op.
    ///
    /// # Errors
    /// What broke.
    fn check(&mut self) -> Result<(), String>;
    /// The elevator took `bio` into a request it holds.
    fn bio_merged(&mut self, bio: &Bio) {
        let _ = bio;
    }
    /// A request of `prio` was completed.
    fn completed(&mut self, prio: IoPrio) {
        let _ = prio;
    }
    /// What the scheduler checks at the end of [`drain`], beyond what it checks of all.
    ///
    /// # Errors
    /// What broke.
    fn drained(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Makes requests of `1 + more % 4` bios of `issuer` — `spec`, then each starting where
/// the one before ends, of the same operation, priority and flags — each allocated
/// ([`ElvModel::make_request`]) for hardware queue `hctx % hw_queues`, and inserts them
/// with one [`Elevator::insert_requests`] call (telling the model of those put at the
/// head). When a scheduler tag is not to be had, the bios from there on are not made.
///
/// # Errors
/// The first broken promise.
///
/// ```
/// # use std::collections::VecDeque;
/// # use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// # use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) { self.0.extend(rqs); }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// # struct Runner { h: Harness, fifo: Fifo, at_head: usize }
/// # impl ElvModel for Runner {
/// #     type Elv = Fifo;
/// #     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
/// #     fn held(&self) -> usize { self.fifo.0.len() }
/// #     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
/// #         self.h.alloc_request(hctx, bio, seq, None)
/// #     }
/// #     fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) { self.at_head += batch.len(); }
/// #     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
/// #         let cx = self.h.cx();
/// #         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
/// #         self.h.dispatched(rq)?;
/// #         Ok(true)
/// #     }
/// #     fn check(&mut self) -> Result<(), String> { self.h.check_tags(self.fifo.0.len()) }
/// # }
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default(), at_head: 0 };
/// // `m` models a FIFO elevator, as in `ElvModel`'s example, counting requests put at the head.
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::insert(&mut m, 0, IssuerId(1), &bio, 2, true).unwrap();
/// assert_eq!((m.held(), m.at_head), (3, 3));
/// # elv::drain(&mut m).unwrap();
/// ```
pub fn insert<M: ElvModel>(
    m: &mut M,
    hctx: u8,
    issuer: IssuerId,
    spec: &BioSpec,
    more: u8,
    at_head: bool,
) -> Result<(), String> {
    let h = m.parts().0;
    let hctx = usize::from(hctx) % h.hw_queues;
    let mut shape = h.shape(spec, issuer);
    let mut rqs = Vec::new();
    let mut made = Vec::new();
    for _ in 0..=more % 4 {
        let (bio, seq) = m.parts().0.make_bio(shape);
        let Some(rq) = m.make_request(hctx, bio, seq)? else {
            break;
        };
        made.push((bio.prio, alloc::vec![seq]));
        rqs.push(rq);
        shape = m.parts().0.fit(Shape {
            sector: shape.sector + u64::from(shape.sectors),
            sectors: 1 + u32::from(spec.sectors) % MAX_BIO_SECTORS,
            ..shape
        });
    }
    if at_head {
        m.went_in_at_head(made);
    }
    if !rqs.is_empty() {
        let (h, elv) = m.parts();
        elv.insert_requests(&h.cx(), &mut rqs.into_iter(), at_head);
    }
    Ok(())
}

/// Offers a fresh bio of `issuer` that `spec` describes to [`Elevator::bio_merge`];
/// taken, the model hears of it ([`ElvModel::bio_merged`]); refused, it becomes a request
/// of its own for hardware queue `hctx % hw_queues`, inserted as [`insert`] inserts one.
///
/// # Errors
/// The first broken promise.
///
/// ```
/// # use std::collections::VecDeque;
/// # use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// # use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) { self.0.extend(rqs); }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// # struct Runner { h: Harness, fifo: Fifo, at_head: usize }
/// # impl ElvModel for Runner {
/// #     type Elv = Fifo;
/// #     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
/// #     fn held(&self) -> usize { self.fifo.0.len() }
/// #     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
/// #         self.h.alloc_request(hctx, bio, seq, None)
/// #     }
/// #     fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) { self.at_head += batch.len(); }
/// #     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
/// #         let cx = self.h.cx();
/// #         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
/// #         self.h.dispatched(rq)?;
/// #         Ok(true)
/// #     }
/// #     fn check(&mut self) -> Result<(), String> { self.h.check_tags(self.fifo.0.len()) }
/// # }
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default(), at_head: 0 };
/// // `m` models a FIFO elevator, as in `ElvModel`'s example, counting requests put at the head.
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::merge(&mut m, 0, IssuerId(1), &bio).unwrap(); // a FIFO merges nothing
/// assert_eq!(m.held(), 1);
/// # elv::drain(&mut m).unwrap();
/// ```
pub fn merge<M: ElvModel>(
    m: &mut M,
    hctx: u8,
    issuer: IssuerId,
    spec: &BioSpec,
) -> Result<(), String> {
    let (h, elv) = m.parts();
    let hctx = usize::from(hctx) % h.hw_queues;
    let shape = h.shape(spec, issuer);
    let (bio, seq) = h.make_bio(shape);
    // Recorded first: a bug that ends it at once must find it known.
    h.hand_over(seq, &bio);
    match elv.bio_merge(&h.cx(), bio) {
        Ok(()) => m.bio_merged(&bio),
        Err(back) => {
            h.take_back(seq, &bio, &back)?;
            if let Some(rq) = m.make_request(hctx, back, seq)? {
                let (h, elv) = m.parts();
                elv.insert_requests(&h.cx(), &mut core::iter::once(rq), false);
            }
        }
    }
    Ok(())
}

/// `1 + count % 4` dispatches ([`ElvModel::dispatch`]) for hardware queue
/// `hctx % hw_queues`.
///
/// # Errors
/// The first broken promise.
///
/// ```
/// # use std::collections::VecDeque;
/// # use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// # use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) { self.0.extend(rqs); }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// # struct Runner { h: Harness, fifo: Fifo, at_head: usize }
/// # impl ElvModel for Runner {
/// #     type Elv = Fifo;
/// #     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
/// #     fn held(&self) -> usize { self.fifo.0.len() }
/// #     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
/// #         self.h.alloc_request(hctx, bio, seq, None)
/// #     }
/// #     fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) { self.at_head += batch.len(); }
/// #     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
/// #         let cx = self.h.cx();
/// #         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
/// #         self.h.dispatched(rq)?;
/// #         Ok(true)
/// #     }
/// #     fn check(&mut self) -> Result<(), String> { self.h.check_tags(self.fifo.0.len()) }
/// # }
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default(), at_head: 0 };
/// // `m` models a FIFO elevator, as in `ElvModel`'s example, counting requests put at the head.
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::insert(&mut m, 0, IssuerId(1), &bio, 2, false).unwrap();
/// elv::dispatch(&mut m, 0, 1).unwrap(); // 2 dispatches
/// assert_eq!((m.held(), m.h.in_flight().len()), (1, 2));
/// # elv::drain(&mut m).unwrap();
/// ```
pub fn dispatch<M: ElvModel>(m: &mut M, hctx: u8, count: u8) -> Result<(), String> {
    let hctx = usize::from(hctx) % m.parts().0.hw_queues;
    for _ in 0..=count % 4 {
        m.dispatch(hctx)?;
    }
    Ok(())
}

/// Completes the `index % in_flight`-th request in flight with status `status % 4` of
/// [`STATUSES`]: [`Elevator::completed_request`], [`Elevator::finish_request`], then
/// [`Harness::finish`] (and [`ElvModel::completed`]). Nothing when none is in flight.
///
/// # Errors
/// The first broken promise.
///
/// ```
/// # use std::collections::VecDeque;
/// # use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// # use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) { self.0.extend(rqs); }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// # struct Runner { h: Harness, fifo: Fifo, at_head: usize }
/// # impl ElvModel for Runner {
/// #     type Elv = Fifo;
/// #     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
/// #     fn held(&self) -> usize { self.fifo.0.len() }
/// #     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
/// #         self.h.alloc_request(hctx, bio, seq, None)
/// #     }
/// #     fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) { self.at_head += batch.len(); }
/// #     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
/// #         let cx = self.h.cx();
/// #         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
/// #         self.h.dispatched(rq)?;
/// #         Ok(true)
/// #     }
/// #     fn check(&mut self) -> Result<(), String> { self.h.check_tags(self.fifo.0.len()) }
/// # }
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default(), at_head: 0 };
/// // `m` models a FIFO elevator, as in `ElvModel`'s example, counting requests put at the head.
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::complete(&mut m, 0, 0).unwrap(); // none in flight: nothing
/// elv::insert(&mut m, 0, IssuerId(1), &bio, 1, false).unwrap();
/// elv::dispatch(&mut m, 0, 1).unwrap();
/// elv::complete(&mut m, 3, 1).unwrap(); // the second of the two, with an I/O error
/// assert_eq!(m.h.in_flight().len(), 1);
/// # elv::drain(&mut m).unwrap();
/// ```
pub fn complete<M: ElvModel>(m: &mut M, index: u8, status: u8) -> Result<(), String> {
    let nr = m.parts().0.in_flight().len();
    if nr == 0 {
        return Ok(());
    }
    let status = STATUSES[usize::from(status) % STATUSES.len()];
    complete_at(m, usize::from(index) % nr, status)
}

fn complete_at<M: ElvModel>(m: &mut M, index: usize, status: Status) -> Result<(), String> {
    let (h, elv) = m.parts();
    let f = h.take(index);
    let cx = h.cx();
    elv.completed_request(&cx, &f.rq);
    elv.finish_request(&cx, &f.rq);
    let prio = f.prio;
    h.finish(f, status)?;
    m.completed(prio);
    Ok(())
}

/// Requeues `1 + count % 3` requests in flight, from the `index`-th on (wrapping):
/// [`Elevator::requeue_request`] for each, then one [`Elevator::insert_requests`] of them
/// all at the head (telling the model of them). Nothing when none is in flight.
///
/// ```
/// # use std::collections::VecDeque;
/// # use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// # use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) { self.0.extend(rqs); }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// # struct Runner { h: Harness, fifo: Fifo, at_head: usize }
/// # impl ElvModel for Runner {
/// #     type Elv = Fifo;
/// #     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
/// #     fn held(&self) -> usize { self.fifo.0.len() }
/// #     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
/// #         self.h.alloc_request(hctx, bio, seq, None)
/// #     }
/// #     fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) { self.at_head += batch.len(); }
/// #     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
/// #         let cx = self.h.cx();
/// #         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
/// #         self.h.dispatched(rq)?;
/// #         Ok(true)
/// #     }
/// #     fn check(&mut self) -> Result<(), String> { self.h.check_tags(self.fifo.0.len()) }
/// # }
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default(), at_head: 0 };
/// // `m` models a FIFO elevator, as in `ElvModel`'s example, counting requests put at the head.
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::insert(&mut m, 0, IssuerId(1), &bio, 2, false).unwrap();
/// elv::dispatch(&mut m, 0, 1).unwrap();
/// elv::requeue(&mut m, 0, 2); // both back, at the head
/// assert_eq!((m.held(), m.at_head), (3, 2));
/// # elv::drain(&mut m).unwrap();
/// ```
pub fn requeue<M: ElvModel>(m: &mut M, index: u8, count: u8) {
    let (h, elv) = m.parts();
    let batch = h.requeue(index, count);
    if batch.is_empty() {
        return;
    }
    let cx = h.cx();
    let mut rqs = Vec::with_capacity(batch.len());
    let mut requeued = Vec::with_capacity(batch.len());
    for f in batch {
        elv.requeue_request(&cx, &f.rq);
        requeued.push((f.prio, f.bios));
        rqs.push(f.rq);
    }
    m.went_in_at_head(requeued);
    let (h, elv) = m.parts();
    elv.insert_requests(&h.cx(), &mut rqs.into_iter(), true);
}

/// At the end of a run: dispatches everything, completes what is in flight and moves the
/// clock to the elevator's [`next_timer`](Elevator::next_timer) while requests are held
/// and none in flight, settling and checking after each round, until nothing is left;
/// then checks that no hardware queue has work, no request is held, the harness is
/// drained ([`Harness::check_drained`]) and what the scheduler adds
/// ([`ElvModel::drained`]).
///
/// # Errors
/// The first broken promise, or a drain that does not end.
///
/// ```
/// # use std::collections::VecDeque;
/// # use blkmq_model::elv::{self, BioSpec, Config, ElvModel, Harness, LimitsSpec, Place};
/// # use blkmq_core::{Bio, ElvCx, Elevator, IoPrio, IssuerId, Rq};
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) { self.0.extend(rqs); }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { self.0.pop_front() }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// # struct Runner { h: Harness, fifo: Fifo }
/// # impl ElvModel for Runner {
/// #     type Elv = Fifo;
/// #     fn parts(&mut self) -> (&mut Harness, &mut Fifo) { (&mut self.h, &mut self.fifo) }
/// #     fn held(&self) -> usize { self.fifo.0.len() }
/// #     fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
/// #         self.h.alloc_request(hctx, bio, seq, None)
/// #     }
/// #     fn went_in_at_head(&mut self, _: Vec<(IoPrio, Vec<u32>)>) {}
/// #     fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
/// #         let cx = self.h.cx();
/// #         let Some(rq) = self.fifo.dispatch_request(&cx, hctx) else { return Ok(false) };
/// #         self.h.dispatched(rq)?;
/// #         Ok(true)
/// #     }
/// #     fn check(&mut self) -> Result<(), String> { self.h.check_tags(self.fifo.0.len()) }
/// # }
/// # let limits = LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None };
/// # let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// # let mut m = Runner { h: Harness::build(&config).unwrap(), fifo: Fifo::default() };
/// // `m` models a FIFO elevator, as in `ElvModel`'s example.
/// let bio = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
/// elv::insert(&mut m, 0, IssuerId(1), &bio, 3, false).unwrap();
/// elv::drain(&mut m).unwrap();
/// assert_eq!((m.held(), m.h.in_flight().len()), (0, 0));
/// ```
pub fn drain<M: ElvModel>(m: &mut M) -> Result<(), String> {
    let mut rounds = 0;
    loop {
        if rounds >= MAX_DRAIN_ROUNDS {
            let held = m.held();
            let (h, elv) = m.parts();
            return Err(format!(
                "still not drained after {rounds} rounds (now {}, next_timer {:?}, {held} queued)",
                h.now,
                elv.next_timer(),
            ));
        }
        rounds += 1;
        if m.dispatch(0)? {
            m.parts().0.settle()?;
            m.check()?;
            continue;
        }
        let held = m.held();
        let (h, elv) = m.parts();
        if !h.in_flight().is_empty() {
            while !m.parts().0.in_flight().is_empty() {
                complete_at(m, 0, Status::Ok)?;
            }
        } else if held == 0 {
            break;
        } else if let Some(at) = elv.next_timer() {
            h.now = h.now.max(at);
        } else {
            // Held, nothing in flight and no timer: nothing will move them.
            break;
        }
        m.parts().0.settle()?;
        m.check()?;
    }
    let (h, elv) = m.parts();
    check_has_work(h, elv)?;
    let held = m.held();
    ensure!(held == 0, "{held} requests held at the end");
    m.parts().0.check_drained()?;
    m.drained()
}

/// Whether [`has_work`](Elevator::has_work) holds on every hardware queue exactly when a
/// bio is queued ([`Harness::any_queued`]).
///
/// # Errors
/// The first hardware queue where it does not.
///
/// ```
/// use blkmq_model::elv::{self, Config, Harness, LimitsSpec};
/// use blkmq_core::{ElvCx, Elevator, Rq};
///
/// /// Claims work it does not have.
/// struct Busy;
/// impl Elevator for Busy {
///     fn name(&self) -> &'static str { "busy" }
///     fn insert_requests(&mut self, _: &ElvCx<'_>, _: &mut dyn Iterator<Item = Rq>, _: bool) {}
///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { None }
///     fn has_work(&self, _: usize) -> bool { true }
/// }
/// let limits = LimitsSpec { max_sectors: 0, chunk: None, discard: None, write_zeroes: None };
/// let config = Config { hw_queues: 0, shared_tags: false, nr_requests: 3, limits };
/// assert!(elv::check_has_work(&Harness::build(&config).unwrap(), &Busy).is_err());
/// ```
pub fn check_has_work<E: Elevator + ?Sized>(h: &Harness, elv: &E) -> Result<(), String> {
    let queued = h.any_queued();
    for hctx in 0..h.hw_queues {
        let work = elv.has_work(hctx);
        ensure!(
            work == queued,
            "has_work({hctx}) = {work}, a bio queued: {queued}"
        );
    }
    Ok(())
}

/// A tunable set by a model: which, the value given, whether that is in the tunable's
/// documented range, and all the tunables before and as they should be after.
///
/// ```
/// use blkmq_model::elv::Tuned;
///
/// let (before, want) = ([1u32, 2], [1, 9]);
/// let tuned = Tuned { name: "second", value: 9, valid: true, before: &before, want: &want };
/// assert!(tuned.check(&want, Ok::<(), &str>(()), "refused").is_ok());
/// assert!(tuned.check(&before, Ok::<(), &str>(()), "refused").is_err()); // accepted, unchanged
/// assert!(tuned.check(&before, Err("refused"), "refused").is_err()); // in range, refused
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Tuned<'a, T> {
    /// The tunable's name, as its error names it.
    pub name: &'static str,
    /// The value given.
    pub value: u64,
    /// Whether the value is in range.
    pub valid: bool,
    /// The tunables before.
    pub before: &'a T,
    /// The tunables as they should be when the value is accepted.
    pub want: &'a T,
}

impl<T: PartialEq + fmt::Debug> Tuned<'_, T> {
    /// Checks what the setter said (`result`) and the tunables after (`now`): a value in
    /// range accepted, changing that tunable alone (to `want`); one out of range refused
    /// as `refused_as`, changing nothing.
    ///
    /// # Errors
    /// What broke.
    ///
    /// ```
    /// use blkmq_model::elv::Tuned;
    ///
    /// let (before, want) = (4u64, 0);
    /// let tuned = Tuned { name: "depth", value: 0, valid: false, before: &before, want: &want };
    /// assert!(tuned.check(&before, Err(("depth", 0)), ("depth", 0)).is_ok());
    /// assert!(tuned.check(&before, Err(("other", 0)), ("depth", 0)).is_err()); // refused as another
    /// assert!(tuned.check(&want, Ok(()), ("depth", 0)).is_err()); // out of range, accepted
    /// ```
    pub fn check<E: PartialEq + fmt::Debug>(
        &self,
        now: &T,
        result: Result<(), E>,
        refused_as: E,
    ) -> Result<(), String> {
        let Tuned {
            name,
            value,
            before,
            want,
            ..
        } = *self;
        match (result, self.valid) {
            (Ok(()), true) => ensure!(
                now == want,
                "{name} = {value} accepted: tunables {now:?}, expected {want:?}"
            ),
            (Err(e), false) => {
                ensure!(
                    e == refused_as,
                    "{name} = {value} refused as {e:?}, expected {refused_as:?}"
                );
                ensure!(
                    now == before,
                    "{name} = {value} refused, yet tunables went from {before:?} to {now:?}"
                );
            }
            (Ok(()), false) => return Err(format!("{name} = {value} accepted, out of range")),
            (Err(e), true) => return Err(format!("{name} = {value} refused ({e:?}), in range")),
        }
        Ok(())
    }
}
