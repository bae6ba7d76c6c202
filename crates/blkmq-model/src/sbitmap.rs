//! Operation sequences checked against a reference model: the test support shared by the
//! proptest model tests and the cargo-fuzz target.
//!
//! A [`Config`] says what to build (an [`Sbitmap`], or an [`SbitmapQueue`](blkmq_sbitmap::SbitmapQueue) with waiters); a
//! sequence of [`Op`]s is then run single-threaded by [`run`] against the real bitmap and a
//! reference model — the set of bits the caller holds — and every documented promise is
//! checked after every step:
//!
//! * no bit is handed out twice, every bit handed out lies below the current depth, and
//!   `weight`, `any_bit_set` and `test_bit` agree with the model;
//! * a full-depth get fails only when every bit below the depth is held (in round-robin mode
//!   too), and a shallow get returns only bits of its per-word shares — recomputed here from
//!   [`Sbitmap::get_shallow`]'s documentation — and fails only when all of them are held;
//! * a get searches from the hint's word on and leaves the hint on the word it allocated
//!   from; in round-robin mode it starts at the hint's bit and moves the hint past the bit;
//! * a put of a held bit succeeds and the bit is free again; a bogus put (out of range, never
//!   allocated, double) returns the documented error and changes nothing; resizing to zero or
//!   above the capacity fails, and bits held above a smaller depth can still be put;
//! * for a queue: the wake batch follows its formula, a registration is woken at most once,
//!   `wake_all` (and so `resize`) wakes every waiter, a dropped waiter that was woken passes the
//!   wake-up on, and no waiter sleeps while nobody holds a bit (a lost wake-up).
//!
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, so any input a fuzzer makes up is a valid test.
//!
//! ```
//! use blkmq_model::sbitmap::{run, Config, Op};
//!
//! let config = Config { depth: 8, shift: None, round_robin: false, queue: None };
//! let ops = [Op::Get { hint: 0 }, Op::Get { hint: 1 }, Op::Put { index: 0, hint: 0 }];
//! run(&config, &ops).unwrap();
//! ```

use alloc::format;
use alloc::string::String;

use arbitrary::Arbitrary;

use blkmq_sbitmap::{AllocHint, Sbitmap, SbitmapBuilder, SbitmapError};

use self::runner::Runner;
use self::waiting::Waiting;
pub use self::waiting::WakeCount;

mod model;
mod runner;
mod target;
mod waiting;

/// The largest depth [`run`] builds; [`Config::depth`] is reduced modulo one more than this.
pub const MAX_MODEL_DEPTH: usize = 300;

/// How many caller-owned hints the ops choose from (and as many again for waiters).
pub const NR_HINTS: usize = 4;

/// The most waiters a run keeps at once; further [`Op::Wait`]s do nothing.
pub const MAX_WAITERS: usize = 8;

/// What [`run`] builds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The depth, reduced modulo `MAX_MODEL_DEPTH + 1`; zero checks that building fails with
    /// [`SbitmapError::ZeroDepth`].
    pub depth: u16,
    /// An explicit shift, reduced modulo 8; one above `log2(usize::BITS)` checks that building
    /// fails with [`SbitmapError::BadShift`]. `None` takes the default word size.
    pub shift: Option<u8>,
    /// Strict round-robin allocation.
    pub round_robin: bool,
    /// Build an [`SbitmapQueue`](blkmq_sbitmap::SbitmapQueue) (and allow waiters) instead of a bare [`Sbitmap`].
    pub queue: Option<QueueConfig>,
}

/// The queue-only part of a [`Config`].
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// The declared smallest shallow depth, reduced modulo `depth + 1`; `None` declares none.
    pub min_shallow_depth: Option<u16>,
}

/// How a bogus [`Op::PutBogus`] is wrong.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BogusPut {
    /// A bit at or beyond the capacity.
    OutOfRange,
    /// A free bit, preferably one never allocated.
    NeverAllocated,
    /// A free bit, preferably one put recently (a double put).
    DoublePut,
}

/// How a bogus [`Op::PutBatchBogus`] is wrong.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BogusBatch {
    /// An offset that is not the start of a word.
    Misaligned,
    /// Bits at or beyond the capacity.
    PastCapacity,
    /// A word's held bits plus one bit never allocated.
    NeverAllocated,
    /// A word's held bits plus one bit already put (a double put).
    DoublePut,
}

/// One step of a run. Numbers that pick something (`hint`, `index`, `pick`) are reduced
/// modulo the number of choices; an op with nothing to act on does nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// [`Sbitmap::get`] through hint `hint`.
    Get {
        /// Which hint.
        hint: u8,
    },
    /// [`Sbitmap::get_shallow`] with a cap of `depth` reduced modulo `capacity + 2`.
    GetShallow {
        /// Which hint.
        hint: u8,
        /// The shallow depth, before reduction.
        depth: u16,
    },
    /// [`Sbitmap::get_batch`] of `nr` bits, reduced modulo `bits_per_word + 2`.
    GetBatch {
        /// Which hint.
        hint: u8,
        /// How many bits, before reduction.
        nr: u8,
    },
    /// Puts the `index`-th held bit.
    Put {
        /// Which held bit.
        index: u16,
        /// Which hint.
        hint: u8,
    },
    /// Puts, as one batch, the held bits of the `pick`-th word that has any, masked by
    /// `select` (all of them when the mask leaves none).
    PutBatch {
        /// Which word.
        pick: u16,
        /// Which of its held bits.
        select: u64,
        /// Which hint.
        hint: u8,
    },
    /// A put that must fail and change nothing.
    PutBogus {
        /// Picks the bit.
        bit: u16,
        /// How it is wrong.
        kind: BogusPut,
    },
    /// A batch put that must fail, changing nothing.
    PutBatchBogus {
        /// Picks the word and bit.
        pick: u16,
        /// How it is wrong.
        kind: BogusBatch,
    },
    /// [`Sbitmap::resize`] to `depth` reduced modulo `capacity + 2` (so zero and one above
    /// the capacity are tried too).
    Resize {
        /// The new depth, before reduction.
        depth: u16,
    },
    /// Replaces hint `hint` with [`AllocHint::at`]`(bit)` (the bit may lie beyond the depth).
    Rehint {
        /// Which hint.
        hint: u8,
        /// Where it points.
        bit: u16,
    },
    /// [`Sbitmap::test_bit`] of `bit` reduced modulo `capacity + 8` (beyond the capacity it
    /// must fail). Every bit below the capacity is also tested after every op.
    TestBit {
        /// The bit, before reduction.
        bit: u16,
    },
    /// [`Sbitmap::for_each_set`] from `start` (reduced modulo `capacity + 4`), stopping after
    /// `stop_after` bits (reduced modulo `held + 2`, plus one).
    ForEachSet {
        /// Where the walk starts, before reduction.
        start: u16,
        /// When the callback says stop, before reduction.
        stop_after: u16,
    },
    /// [`Sbitmap::dump`] must render and agree with the model.
    Dump,
    /// A queue's [`Waiter`](blkmq_sbitmap::Waiter) (shallow when `shallow` is set, reduced to `1..=capacity + 1`),
    /// polled once; kept while pending. On a bare map: a get (or shallow get).
    Wait {
        /// Which waiter hint.
        hint: u8,
        /// The shallow depth, before reduction.
        shallow: Option<u16>,
    },
    /// Polls the `index`-th waiter, woken or not.
    PollWaiter {
        /// Which waiter.
        index: u8,
    },
    /// Polls every woken waiter, as an executor would.
    PollWoken,
    /// Drops the `index`-th waiter.
    DropWaiter {
        /// Which waiter.
        index: u8,
    },
    /// [`SbitmapQueue::wake_all`](blkmq_sbitmap::SbitmapQueue::wake_all).
    WakeAll,
    /// [`SbitmapQueue::recalculate_wake_batch`](blkmq_sbitmap::SbitmapQueue::recalculate_wake_batch).
    RecalculateWakeBatch {
        /// The number of users.
        users: u8,
    },
}

impl Op {
    /// The name of every variant, for coverage checks of a corpus.
    pub const KINDS: &'static [&'static str] = &[
        "Get",
        "GetShallow",
        "GetBatch",
        "Put",
        "PutBatch",
        "PutBogus",
        "PutBatchBogus",
        "Resize",
        "Rehint",
        "TestBit",
        "ForEachSet",
        "Dump",
        "Wait",
        "PollWaiter",
        "PollWoken",
        "DropWaiter",
        "WakeAll",
        "RecalculateWakeBatch",
    ];

    /// This op's variant name (one of [`KINDS`](Self::KINDS)).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Get { .. } => "Get",
            Self::GetShallow { .. } => "GetShallow",
            Self::GetBatch { .. } => "GetBatch",
            Self::Put { .. } => "Put",
            Self::PutBatch { .. } => "PutBatch",
            Self::PutBogus { .. } => "PutBogus",
            Self::PutBatchBogus { .. } => "PutBatchBogus",
            Self::Resize { .. } => "Resize",
            Self::Rehint { .. } => "Rehint",
            Self::TestBit { .. } => "TestBit",
            Self::ForEachSet { .. } => "ForEachSet",
            Self::Dump => "Dump",
            Self::Wait { .. } => "Wait",
            Self::PollWaiter { .. } => "PollWaiter",
            Self::PollWoken => "PollWoken",
            Self::DropWaiter { .. } => "DropWaiter",
            Self::WakeAll => "WakeAll",
            Self::RecalculateWakeBatch { .. } => "RecalculateWakeBatch",
        }
    }
}

/// Runs `ops` against the bitmap `config` describes and the reference model, checking every
/// documented promise after every op.
///
/// # Errors
/// A description of the first broken promise: the op's position, the op, what was expected
/// and what happened, and a dump of the bitmap.
pub fn run(config: &Config, ops: &[Op]) -> Result<(), String> {
    let depth = usize::from(config.depth) % (MAX_MODEL_DEPTH + 1);
    let shift = config.shift.map(|s| u32::from(s) % 8);
    let mut builder = builder(config);
    let max_shift = usize::BITS.trailing_zeros();
    let expected_error = if depth == 0 {
        Some(SbitmapError::ZeroDepth)
    } else {
        match shift {
            Some(shift) if shift > max_shift => Some(SbitmapError::BadShift {
                shift,
                max: max_shift,
            }),
            _ => None,
        }
    };
    let min_shallow_depth = config
        .queue
        .and_then(|q| q.min_shallow_depth)
        .map(|m| usize::from(m) % (depth + 1));
    match config.queue {
        None => {
            let map = match (builder.build(), expected_error) {
                (Ok(map), None) => map,
                (result, expected) => return check_build(result.map(|_| ()), expected),
            };
            Runner::new(&map, None, config, depth, shift)?.run(ops)
        }
        Some(_) => {
            if let Some(m) = min_shallow_depth {
                builder = builder.min_shallow_depth(m);
            }
            let queue = match (builder.build_queue(), expected_error) {
                (Ok(queue), None) => queue,
                (result, expected) => return check_build(result.map(|_| ()), expected),
            };
            let waiter_hints: [AllocHint; NR_HINTS] =
                core::array::from_fn(|i| AllocHint::new(1000 + i as u64));
            let min_shallow_depth = min_shallow_depth.unwrap_or(usize::MAX);
            let waiting = Waiting::new(&queue, &waiter_hints, min_shallow_depth);
            Runner::new(&queue, Some(waiting), config, depth, shift)?.run(ops)
        }
    }
}

/// A build that was expected to fail, or failed unexpectedly.
fn check_build(
    result: Result<(), SbitmapError>,
    expected: Option<SbitmapError>,
) -> Result<(), String> {
    match (result, expected) {
        (Err(e), Some(x)) if e == x => Ok(()),
        (result, expected) => Err(format!("build: expected {expected:?}, got {result:?}")),
    }
}

/// Builds a map the same way [`run`] does, for callers that want to poke at one directly.
///
/// ```
/// use blkmq_model::sbitmap::{builder, Config};
///
/// let config = Config { depth: 40, shift: Some(3), round_robin: true, queue: None };
/// let map = builder(&config).build().unwrap();
/// assert_eq!((map.depth(), map.bits_per_word(), map.is_round_robin()), (40, 8, true));
/// ```
pub fn builder(config: &Config) -> SbitmapBuilder {
    let depth = usize::from(config.depth) % (MAX_MODEL_DEPTH + 1);
    let mut builder = Sbitmap::builder(depth).round_robin(config.round_robin);
    if let Some(shift) = config.shift {
        builder = builder.shift(u32::from(shift) % 8);
    }
    builder
}
