//! Operation sequences on a tag set checked against a reference model: the test support shared
//! by the proptest model tests and the cargo-fuzz target.
//!
//! A [`Config`] says what to build — a [`TagSet`](blkmq_core::TagSet) on the deterministic
//! [`TestPlatform`], per hardware queue or with shared host tags, and up to four request
//! queues ([`QueueTags`](blkmq_core::QueueTags)), some of them with scheduler tags. A sequence of
//! [`Op`]s is then run single-threaded by [`run`] against the real tag set and a reference
//! model — which request holds which tag of which bitmap, which queue counts as active on which
//! map, which bios each request carries — and every documented promise is checked after every
//! step:
//!
//! * no tag is held twice (per driver map, and per map of each queue's scheduler tags); a
//!   reserved allocation gets a tag below the reserved count, a normal one a tag between the
//!   reserved count and the current depth, a shallow one a tag of its per-word shares (the
//!   formula of `Sbitmap::get_shallow`), so the tags in flight never exceed the depth;
//! * a NOWAIT allocation (and every poll of an asynchronous one, and `get_driver_tag`) fails
//!   exactly when the model says no tag may be had: every tag of the allowed region is held,
//!   or — with two or more request queues attached — the queue is active and its counted
//!   driver tags reached `max(ceil(normal depth / active queues), 4)`; bad inputs (an
//!   out-of-range hardware queue, a reserved tag without reserved tags, a shallow limit below
//!   the declared minimum, another queue's token) return the documented error and change
//!   nothing but what the implementation documents (a shared allocation marks its queue
//!   active first);
//! * `busy`, `sched_busy`, `active_queues`, `fair_share`, `is_active`, `in_flight`,
//!   `bio_slots_in_use`, busy iteration and `tag_to_rq` agree with the model, and so does what
//!   each request shows: its tags, hardware queue, state, generation, deadline, payload (as
//!   `init_request` made it) and bio chain;
//! * every bio handed to a request ends exactly once, with the status the documentation says
//!   (the completion's, or [`Status::IoErr`](blkmq_core::Status::IoErr) when a request is freed or
//!   reset with bios on it), front to back; a merge refused for want of bio slots hands the bio
//!   back;
//! * an asynchronous allocation that waits is woken (with a counting waker) within one wake
//!   batch of frees of the bitmap it waits on, and when a queue goes idle;
//! * at the end everything is freed: `busy() == 0`, `sched_busy() == 0`,
//!   `bio_slots_in_use() == 0`, every bio ended once, and dropping the queues leaves nobody
//!   active.
//!
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, so any input a fuzzer makes up is a valid test.
//!
//! ```
//! use blkmq_model::tagset::{run, AllocKind, Config, Op};
//!
//! let config = Config {
//!     depth: 7,
//!     reserved: 1,
//!     hw_queues: 1,
//!     shared_tags: true,
//!     round_robin: false,
//!     queues: 1,
//!     max_queues: None,
//!     cpus: 1,
//!     bio_slots: None,
//!     schedulers: 0,
//!     nr_requests: 0,
//! };
//! let alloc = Op::Alloc { queue: 0, hctx: 0, cpu: 0, kind: AllocKind::Normal };
//! run(&config, &[alloc, alloc, Op::Free { index: 0 }]).unwrap();
//! ```

use alloc::string::String;
use core::fmt;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arbitrary::Arbitrary;

use blkmq_core::Platform;

pub(crate) mod bios;
mod model;
mod runner;
mod verify;

/// The deepest tag set [`run`] builds; [`Config::depth`] is reduced to `1..=MAX_MODEL_DEPTH`.
pub const MAX_MODEL_DEPTH: usize = 64;

/// The most hardware queues [`run`] builds.
pub const MAX_MODEL_HW_QUEUES: usize = 8;

/// The most request queues (queue slots) a run has.
pub const MAX_MODEL_QUEUES: usize = 4;

/// The most CPUs of the [`TestPlatform`] a run builds.
pub const MAX_MODEL_CPUS: usize = 4;

/// The most frees an [`Op::AllocAsync`] makes while its allocation waits.
pub const MAX_ASYNC_FREES: usize = 10;

/// What [`run`] builds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Tags per map, reserved included: `1 + depth % MAX_MODEL_DEPTH`.
    pub depth: u8,
    /// Reserved tags: `reserved % min(depth, 4)`, so at least one normal tag is left.
    pub reserved: u8,
    /// Hardware queues: `1 + hw_queues % MAX_MODEL_HW_QUEUES`.
    pub hw_queues: u8,
    /// [`TagSetFlags::SHARED_HOST_TAGS`](blkmq_core::TagSetFlags::SHARED_HOST_TAGS): one map for
    /// every hardware queue.
    pub shared_tags: bool,
    /// [`TagSetFlags::ROUND_ROBIN`](blkmq_core::TagSetFlags::ROUND_ROBIN).
    pub round_robin: bool,
    /// Request queue slots, each attached at the start: `1 + queues % MAX_MODEL_QUEUES`.
    pub queues: u8,
    /// The set's `max_queues`: `1 + max % MAX_MODEL_QUEUES`; `None` keeps the default. Slots
    /// beyond it stay empty (their attach must fail).
    pub max_queues: Option<u8>,
    /// CPUs of the platform: `1 + cpus % MAX_MODEL_CPUS`.
    pub cpus: u8,
    /// The set's `bio_slots`: `slots % 17`; `None` keeps the default (`4 * depth`).
    pub bio_slots: Option<u8>,
    /// Queue slot `i` starts with scheduler tags when bit `i` is set.
    pub schedulers: u8,
    /// Their `nr_requests`: `reserved + 1 + nr_requests % 16`.
    pub nr_requests: u8,
}

/// What an allocation asks for.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// A normal tag.
    Normal,
    /// A reserved tag.
    Reserved,
    /// A normal tag within a shallow limit, reduced modulo the normal capacity of the bitmap
    /// the queue allocates from plus 2 (so zero and no limit at all are tried too).
    Shallow(u8),
}

/// A bio to hand to a request; the runner gives it a `private` value and an `end_io` that
/// records its end.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BioSpec {
    /// The operation, reduced modulo 5 (read, write, flush, discard, write zeroes).
    pub op: u8,
    /// The first sector.
    pub sector: u16,
    /// The length in sectors.
    pub sectors: u8,
}

/// What [`Op::Foreign`] tries with another queue's request token, or a stale one: each must
/// fail with [`TagError::ForeignRequest`](blkmq_core::TagError::ForeignRequest) and change nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForeignCall {
    /// `request`.
    Request,
    /// `io`.
    Io,
    /// `set_bio`.
    SetBio,
    /// `append_bio`.
    AppendBio,
    /// `prepend_bio`.
    PrependBio,
    /// `get_driver_tag`.
    GetDriverTag,
    /// `put_driver_tag`.
    PutDriverTag,
    /// `start`.
    Start,
    /// `requeue`.
    Requeue,
    /// `for_each_bio`.
    ForEachBio,
    /// `merge_requests` into the foreign request, from one of the queue's own.
    MergeInto,
    /// `merge_requests` from the foreign request into one of the queue's own.
    MergeFrom,
    /// `free`: refused, it still consumes the token, so the request stays out until its own
    /// queue is dropped.
    Free,
    /// `complete`: likewise, and no bio ends.
    Complete,
}

/// What [`Op::BadHctx`] tries with a hardware queue index at or above the number of hardware
/// queues.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HctxCall {
    /// `alloc`: [`TagError::NoSuchHwQueue`](blkmq_core::TagError::NoSuchHwQueue).
    Alloc,
    /// `alloc_batch`: the same error, nothing allocated.
    AllocBatch,
    /// `alloc_async`: the first poll is ready with the same error.
    AllocAsync,
    /// `mark_idle`: nothing to idle (with one map, it is that map's).
    MarkIdle,
    /// `tag_to_rq`: `None`.
    TagToRq,
    /// `is_active`, `in_flight`, `active_queues`, `fair_share`: no map (with one map, its
    /// values).
    Queries,
    /// `for_each_busy` of the queue on that hardware queue: nothing.
    ForEachBusy,
}

/// One step of a run. Numbers that pick something are reduced modulo the number of choices:
/// `queue` picks a queue slot, `hctx` a hardware queue, `cpu` one of the platform's CPUs or
/// one of two beyond them, `index` a request held (in allocation order). An op with nothing to
/// act on (an empty slot, no request) does nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A NOWAIT allocation ([`QueueTags::alloc`](blkmq_core::QueueTags::alloc)).
    Alloc {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
        /// Which CPU.
        cpu: u8,
        /// What to allocate.
        kind: AllocKind,
    },
    /// [`QueueTags::alloc_batch`](blkmq_core::QueueTags::alloc_batch) of `nr % 10` requests.
    AllocBatch {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
        /// Which CPU.
        cpu: u8,
        /// What to allocate.
        kind: AllocKind,
        /// How many, before reduction.
        nr: u8,
    },
    /// [`QueueTags::alloc_async`](blkmq_core::QueueTags::alloc_async), polled once; while it is
    /// pending, up to `frees % (MAX_ASYNC_FREES + 1)` held requests (those on the bitmap it
    /// waits on first) are freed, each followed by a poll, then the queue slot `idle` (if
    /// given) is marked idle and it is polled again; still pending, it is dropped.
    AllocAsync {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
        /// Which CPU.
        cpu: u8,
        /// What to allocate.
        kind: AllocKind,
        /// Poll with a counting waker (checking wake-ups) instead of a no-op one.
        counting: bool,
        /// How many frees, before reduction.
        frees: u8,
        /// Picks the requests to free.
        pick: u16,
        /// A queue slot to mark idle after the frees.
        idle: Option<u8>,
    },
    /// [`QueueTags::free`](blkmq_core::QueueTags::free) of the `index`-th request.
    Free {
        /// Which request.
        index: u16,
    },
    /// [`QueueTags::complete`](blkmq_core::QueueTags::complete) of the `index`-th request with
    /// status `status % 12`.
    Complete {
        /// Which request.
        index: u16,
        /// Which status, before reduction.
        status: u8,
    },
    /// [`QueueTags::get_driver_tag`](blkmq_core::QueueTags::get_driver_tag).
    GetDriverTag {
        /// Which request.
        index: u16,
    },
    /// [`QueueTags::put_driver_tag`](blkmq_core::QueueTags::put_driver_tag).
    PutDriverTag {
        /// Which request.
        index: u16,
    },
    /// [`QueueTags::start`](blkmq_core::QueueTags::start) at the run's clock.
    Start {
        /// Which request.
        index: u16,
    },
    /// [`QueueTags::requeue`](blkmq_core::QueueTags::requeue).
    Requeue {
        /// Which request.
        index: u16,
    },
    /// [`Request::try_complete`](blkmq_core::Request::try_complete) with the request's generation,
    /// or with a stale one.
    TryComplete {
        /// Which request.
        index: u16,
        /// Pass the previous generation instead (it must lose).
        stale: bool,
    },
    /// [`QueueTags::set_bio`](blkmq_core::QueueTags::set_bio).
    SetBio {
        /// Which request.
        index: u16,
        /// The bio.
        bio: BioSpec,
    },
    /// [`QueueTags::append_bio`](blkmq_core::QueueTags::append_bio).
    AppendBio {
        /// Which request.
        index: u16,
        /// The bio.
        bio: BioSpec,
    },
    /// [`QueueTags::prepend_bio`](blkmq_core::QueueTags::prepend_bio).
    PrependBio {
        /// Which request.
        index: u16,
        /// The bio.
        bio: BioSpec,
    },
    /// [`QueueTags::merge_requests`](blkmq_core::QueueTags::merge_requests) of two requests of one
    /// queue: `into` picks the first, `from` one of its queue's others.
    MergeRequests {
        /// Which request receives.
        into: u16,
        /// Which of the same queue's other requests gives.
        from: u16,
    },
    /// [`QueueTags::mark_idle`](blkmq_core::QueueTags::mark_idle).
    MarkIdle {
        /// Which queue.
        queue: u8,
        /// Which hardware queue.
        hctx: u8,
    },
    /// [`TagSet::update_depth`](blkmq_core::TagSet::update_depth) to `depth % (depth + 2)` (so 0
    /// and one above the initial depth are tried too).
    UpdateDepth {
        /// The new depth, before reduction.
        depth: u8,
    },
    /// [`QueueTags::attach_scheduler`](blkmq_core::QueueTags::attach_scheduler) with
    /// `nr % (reserved + 20)` requests, or the default.
    AttachScheduler {
        /// Which queue.
        queue: u8,
        /// `nr_requests`, before reduction.
        nr_requests: Option<u8>,
    },
    /// [`QueueTags::detach_scheduler`](blkmq_core::QueueTags::detach_scheduler).
    DetachScheduler {
        /// Which queue.
        queue: u8,
    },
    /// [`QueueTags::set_nr_requests`](blkmq_core::QueueTags::set_nr_requests) to
    /// `nr % (initial nr_requests + 2)` (or anything, without scheduler tags).
    SetNrRequests {
        /// Which queue.
        queue: u8,
        /// The new `nr_requests`, before reduction.
        nr_requests: u8,
    },
    /// [`QueueTags::set_min_shallow_depth`](blkmq_core::QueueTags::set_min_shallow_depth) to
    /// `depth % (normal scheduler depth + 2)`.
    SetMinShallowDepth {
        /// Which queue.
        queue: u8,
        /// The new minimum, before reduction.
        depth: u8,
    },
    /// [`TagSet::attach`](blkmq_core::TagSet::attach) into an empty slot (without scheduler tags).
    Attach {
        /// Which slot.
        queue: u8,
    },
    /// Drops the slot's queue, which frees every request it has out.
    Detach {
        /// Which slot.
        queue: u8,
    },
    /// [`QueueTags::tag_to_rq`](blkmq_core::QueueTags::tag_to_rq) of `hctx % (hw_queues + 1)` and
    /// `tag % (depth + 2)`.
    TagToRq {
        /// Which queue.
        queue: u8,
        /// The hardware queue, before reduction.
        hctx: u8,
        /// The tag, before reduction.
        tag: u8,
    },
    /// Busy iteration: of the set ([`TagSet::for_each_busy`](blkmq_core::TagSet::for_each_busy))
    /// without `queue` (`hctx` is then unused), else of that queue on `hctx % (hw_queues + 1)`
    /// or on all; stopping
    /// after `1 + stop_after % (busy + 2)` requests.
    ForEachBusy {
        /// Which queue, if any.
        queue: Option<u8>,
        /// Which hardware queue, if any, before reduction.
        hctx: Option<u8>,
        /// When the callback says stop, before reduction.
        stop_after: u8,
    },
    /// A call on queue `queue` with the `index`-th of the other queues' request tokens and
    /// the stale tokens (of requests reclaimed when their queue was dropped, which may have
    /// been allocated again since, by this queue too).
    Foreign {
        /// The queue called.
        queue: u8,
        /// Which of the other queues' requests.
        index: u16,
        /// The call.
        call: ForeignCall,
    },
    /// A call on queue `queue` with hardware queue `hw_queues + over`.
    BadHctx {
        /// Which queue.
        queue: u8,
        /// How far beyond the last hardware queue.
        over: u8,
        /// The call.
        call: HctxCall,
    },
}

impl Op {
    /// The name of every variant, for coverage checks of a corpus.
    pub const KINDS: &'static [&'static str] = &[
        "Alloc",
        "AllocBatch",
        "AllocAsync",
        "Free",
        "Complete",
        "GetDriverTag",
        "PutDriverTag",
        "Start",
        "Requeue",
        "TryComplete",
        "SetBio",
        "AppendBio",
        "PrependBio",
        "MergeRequests",
        "MarkIdle",
        "UpdateDepth",
        "AttachScheduler",
        "DetachScheduler",
        "SetNrRequests",
        "SetMinShallowDepth",
        "Attach",
        "Detach",
        "TagToRq",
        "ForEachBusy",
        "Foreign",
        "BadHctx",
    ];

    /// This op's variant name (one of [`KINDS`](Self::KINDS)).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Alloc { .. } => "Alloc",
            Self::AllocBatch { .. } => "AllocBatch",
            Self::AllocAsync { .. } => "AllocAsync",
            Self::Free { .. } => "Free",
            Self::Complete { .. } => "Complete",
            Self::GetDriverTag { .. } => "GetDriverTag",
            Self::PutDriverTag { .. } => "PutDriverTag",
            Self::Start { .. } => "Start",
            Self::Requeue { .. } => "Requeue",
            Self::TryComplete { .. } => "TryComplete",
            Self::SetBio { .. } => "SetBio",
            Self::AppendBio { .. } => "AppendBio",
            Self::PrependBio { .. } => "PrependBio",
            Self::MergeRequests { .. } => "MergeRequests",
            Self::MarkIdle { .. } => "MarkIdle",
            Self::UpdateDepth { .. } => "UpdateDepth",
            Self::AttachScheduler { .. } => "AttachScheduler",
            Self::DetachScheduler { .. } => "DetachScheduler",
            Self::SetNrRequests { .. } => "SetNrRequests",
            Self::SetMinShallowDepth { .. } => "SetMinShallowDepth",
            Self::Attach { .. } => "Attach",
            Self::Detach { .. } => "Detach",
            Self::TagToRq { .. } => "TagToRq",
            Self::ForEachBusy { .. } => "ForEachBusy",
            Self::Foreign { .. } => "Foreign",
            Self::BadHctx { .. } => "BadHctx",
        }
    }
}

/// Where [`run`] found a broken promise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// While building the set and attaching the queues.
    Setup,
    /// At op `index`.
    Op {
        /// The op's position in the sequence.
        index: usize,
        /// The op.
        op: Op,
    },
    /// While freeing everything and detaching the queues at the end.
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
            Stage::Teardown => write!(f, "teardown: {}", self.message),
        }
    }
}

impl core::error::Error for Failure {}

/// A deterministic [`Platform`] for the model: `nr_cpus` CPUs, always running on CPU 0, a
/// clock that moves only when told to, kicks counted. It uses nothing of `std`.
///
/// ```
/// use blkmq_model::tagset::TestPlatform;
/// use blkmq_core::Platform;
///
/// let platform = TestPlatform::new(2);
/// assert_eq!((platform.nr_cpus(), platform.current_cpu(), platform.now_ns()), (2, 0, 0));
/// platform.advance(5);
/// assert_eq!(platform.now_ns(), 5);
/// platform.kick(1);
/// assert_eq!(platform.kicks(), 1);
/// ```
#[derive(Debug)]
pub struct TestPlatform {
    nr_cpus: usize,
    clock: AtomicU64,
    kicks: AtomicUsize,
}

impl TestPlatform {
    /// A platform of `nr_cpus` CPUs (zero is allowed, so that building refuses it), its
    /// clock at 0.
    pub const fn new(nr_cpus: usize) -> Self {
        Self {
            nr_cpus,
            clock: AtomicU64::new(0),
            kicks: AtomicUsize::new(0),
        }
    }

    /// Moves the clock `ns` nanoseconds on.
    pub fn advance(&self, ns: u64) {
        self.clock.fetch_add(ns, Ordering::Relaxed);
    }

    /// How many kicks there were.
    pub fn kicks(&self) -> usize {
        self.kicks.load(Ordering::Relaxed)
    }
}

impl Platform for TestPlatform {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    fn kick(&self, _hctx: usize) {
        self.kicks.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `ops` against the tag set `config` describes and the reference model, checking every
/// documented promise after every op, then frees everything and checks that every tag, bio
/// slot and bio came back.
///
/// # Errors
/// The first broken promise: where, what was expected and what happened.
pub fn run(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    runner::Runner::build(config)?.run(ops)
}
