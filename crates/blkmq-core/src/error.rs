//! Errors: bad configuration ([`ConfigError`]), refused tag operations ([`TagError`]), and
//! request tokens handed back unused ([`Misused`], [`Unended`]).
//!
//! A call that consumes an [`Rq`] and refuses it gives the token back in its error: the
//! request is untouched and still the caller's, so nothing (tag, count, bio) is lost however
//! the caller got it wrong. Linux's block layer trusts its drivers on this; blkmq reports.

use core::fmt;

use blkmq_sbitmap::SbitmapError;

use crate::bio::Status;
use crate::request::Rq;

/// A configuration the tag layer refuses, found before anything is allocated or changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A queue depth of zero.
    ZeroDepth,
    /// A queue depth above [`MAX_DEPTH`](crate::MAX_DEPTH).
    DepthTooLarge {
        /// The depth asked for.
        depth: usize,
        /// The largest allowed.
        max: usize,
    },
    /// Reserved tags must leave at least one normal tag.
    TooManyReserved {
        /// Reserved tags asked for.
        reserved: usize,
        /// The queue depth.
        depth: usize,
    },
    /// Zero hardware queues.
    ZeroHwQueues,
    /// More hardware queues than a unique tag can number.
    TooManyHwQueues {
        /// Hardware queues asked for.
        nr_hw_queues: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A tag set that no request queue may use.
    ZeroQueues,
    /// A platform that reports no CPU.
    ZeroCpus,
    /// A scheduler depth (`nr_requests`) of zero or above [`MAX_SCHED_DEPTH`](crate::MAX_SCHED_DEPTH).
    BadNrRequests {
        /// The depth asked for.
        nr_requests: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A new depth above the one the tags were created with, or not above the reserved tags.
    BadDepthUpdate {
        /// The depth asked for.
        depth: usize,
        /// The smallest allowed.
        min: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A shallow limit of zero or beyond the depth it limits.
    BadShallowDepth {
        /// The limit asked for.
        shallow_depth: usize,
        /// The depth it limits.
        depth: usize,
    },
    /// Scheduler tags asked of a tag set made with
    /// [`TagSetFlags::NO_SCHED`](crate::TagSetFlags::NO_SCHED).
    NoScheduler,
    /// A queue map that sends a CPU outside its queues, or maps that disagree on the CPUs
    /// or share a hardware queue.
    BadQueueMap {
        /// The CPU concerned (0 for maps that overlap).
        cpu: usize,
        /// The hardware queue concerned.
        hctx: usize,
    },
    /// Scheduler tags asked for while the current ones still have requests out.
    SchedulerBusy,
    /// Every identity for tag sets, scheduler tags or request queues has been handed out
    /// (2^32 of each kind); one is never reused, since tokens name their tags by it.
    IdentitiesExhausted,
    /// Queue limits that do not hang together.
    BadLimits {
        /// The first field found wrong.
        what: &'static str,
    },
    /// The queue has an elevator already, or is in a state the change needs to wait for.
    QueueBusy,
    /// An I/O priority level of 8 or more.
    BadPrioLevel {
        /// The level asked for.
        level: u8,
    },
    /// A bitmap refused its parameters.
    Bitmap(SbitmapError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::ZeroDepth => f.write_str("queue depth must be at least 1"),
            ConfigError::DepthTooLarge { depth, max } => {
                write!(f, "queue depth {depth} is above the maximum of {max}")
            }
            ConfigError::TooManyReserved { reserved, depth } => write!(
                f,
                "{reserved} reserved tags leave no normal tag in a depth of {depth}"
            ),
            ConfigError::ZeroHwQueues => f.write_str("at least one hardware queue is needed"),
            ConfigError::TooManyHwQueues { nr_hw_queues, max } => {
                write!(
                    f,
                    "{nr_hw_queues} hardware queues is above the maximum of {max}"
                )
            }
            ConfigError::ZeroQueues => {
                f.write_str("a tag set must allow at least one request queue")
            }
            ConfigError::ZeroCpus => f.write_str("the platform reports no CPU"),
            ConfigError::BadNrRequests { nr_requests, max } => {
                write!(f, "nr_requests {nr_requests} is not within 1..={max}")
            }
            ConfigError::BadDepthUpdate { depth, min, max } => {
                write!(f, "depth {depth} is not within {min}..={max}")
            }
            ConfigError::BadShallowDepth {
                shallow_depth,
                depth,
            } => write!(f, "shallow depth {shallow_depth} is not within 1..={depth}"),
            ConfigError::NoScheduler => f.write_str("the tag set was made without schedulers"),
            ConfigError::BadQueueMap { cpu, hctx } => {
                write!(f, "bad queue map: CPU {cpu}, hardware queue {hctx}")
            }
            ConfigError::SchedulerBusy => {
                f.write_str("the current scheduler tags still have requests out")
            }
            ConfigError::IdentitiesExhausted => f.write_str("identities exhausted"),
            ConfigError::BadLimits { what } => write!(f, "queue limit {what} is invalid"),
            ConfigError::QueueBusy => f.write_str("the queue is busy"),
            ConfigError::BadPrioLevel { level } => {
                write!(f, "priority level {level} is not within 0..=7")
            }
            ConfigError::Bitmap(e) => write!(f, "bitmap: {e}"),
        }
    }
}

impl core::error::Error for ConfigError {}

impl From<SbitmapError> for ConfigError {
    fn from(e: SbitmapError) -> Self {
        ConfigError::Bitmap(e)
    }
}

/// Why a tag could not be allocated or freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TagError {
    /// No tag is free (or the caller's fair share is used up) and the caller would not wait.
    WouldBlock,
    /// A reserved tag was asked for, but the tag set has none.
    NoReservedTags,
    /// A hardware queue index at or above the number of hardware queues.
    NoSuchHwQueue {
        /// The index given.
        hctx: usize,
        /// The number of hardware queues.
        nr_hw_queues: usize,
    },
    /// The request belongs to another tag set or request queue.
    ForeignRequest,
    /// A driver tag was asked for a request that has one, or freed for one that has none.
    DriverTag,
    /// A request queue asked for scheduler tags, or a shallow limit (which applies to
    /// them), without having scheduler tags.
    NoScheduler,
    /// The scheduler tags still have requests out.
    Busy,
    /// More request queues than the tag set allows.
    TooManyQueues {
        /// The tag set's limit.
        max: usize,
    },
    /// The request is not in the state the call needs (starting a request in flight,
    /// requeueing one a racing completion already ended).
    WrongState {
        /// The state it was in.
        state: crate::RqState,
    },
    /// Every request-queue identity has been handed out (2^32); one is never reused.
    IdentitiesExhausted,
    /// The bitmap refused the operation (for example a shallow limit below its declared
    /// minimum).
    Bitmap(SbitmapError),
}

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TagError::WouldBlock => f.write_str("no tag available without waiting"),
            TagError::NoReservedTags => f.write_str("the tag set has no reserved tags"),
            TagError::NoSuchHwQueue { hctx, nr_hw_queues } => write!(
                f,
                "hardware queue {hctx} does not exist (there are {nr_hw_queues})"
            ),
            TagError::ForeignRequest => {
                f.write_str("the request belongs to another tag set or queue")
            }
            TagError::DriverTag => f.write_str("driver tag already held, or not held"),
            TagError::NoScheduler => f.write_str("scheduler tags missing, or already present"),
            TagError::Busy => f.write_str("scheduler tags still have requests out"),
            TagError::TooManyQueues { max } => {
                write!(f, "the tag set allows at most {max} request queues")
            }
            TagError::WrongState { state } => write!(f, "the request is {state:?}"),
            TagError::IdentitiesExhausted => f.write_str("request-queue identities exhausted"),
            TagError::Bitmap(e) => write!(f, "bitmap: {e}"),
        }
    }
}

impl core::error::Error for TagError {}

impl From<SbitmapError> for TagError {
    fn from(e: SbitmapError) -> Self {
        TagError::Bitmap(e)
    }
}

/// A request token a call refused, handed back with the reason.
///
/// With [`TagError::ForeignRequest`] (a token of another request queue or tag set, or of
/// one that is gone) nothing changed: the request is exactly as it was and `rq` is the
/// caller's to end or free where it belongs. Any other error means an internal invariant
/// broke after the request was released: `rq` then names nothing.
///
/// ```
/// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
/// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
/// let misused = b.free(rq).unwrap_err(); // not b's: refused, and back
/// assert_eq!(misused.error, TagError::ForeignRequest);
/// assert_eq!(set.busy(), 1); // nothing freed
/// a.free(misused.rq).unwrap(); // its own queue frees it
/// assert_eq!(set.busy(), 0);
/// ```
#[must_use = "the token is still the caller's: end or free it where it belongs"]
#[derive(Debug, PartialEq, Eq)]
pub struct Misused {
    /// The token, as it was given.
    pub rq: Rq,
    /// Why it was refused.
    pub error: TagError,
}

impl Misused {
    /// A token refused as another queue's.
    #[inline]
    pub(crate) fn foreign(rq: Rq) -> Self {
        Self {
            rq,
            error: TagError::ForeignRequest,
        }
    }
}

impl fmt::Display for Misused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request (tag {}) refused: {}", self.rq.tag(), self.error)
    }
}

impl core::error::Error for Misused {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// What a batched completion left unended: the first request it refused and the rest of
/// the batch, which it did not look at. Everything before them ended.
///
/// Nothing is lost: `misused` holds the refused token (with the status it came with), and
/// `rest` the requests after it, which can go to another call as they are.
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Hold;
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
/// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// a.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// b.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// a.submit(Bio::new(Op::Read, 64, 8)).unwrap();
/// let held = host.driver().take(); // a's, b's, a's
/// let unended = a.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap_err();
/// assert_eq!((unended.misused.error, host.in_driver()), (TagError::ForeignRequest, 2));
/// b.end_request(unended.misused.rq, unended.status).unwrap(); // b's own queue ends it
/// a.end_requests(unended.rest).unwrap(); // and a the rest
/// assert_eq!((host.in_driver(), host.set().busy()), (0, 0));
/// ```
#[must_use = "the refused token and the rest of the batch are still the caller's"]
pub struct Unended<I> {
    /// The request refused, and why.
    pub misused: Misused,
    /// The status it was to end with.
    pub status: Status,
    /// The requests after it, untouched.
    pub rest: I,
}

impl<I> fmt::Debug for Unended<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unended")
            .field("misused", &self.misused)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl<I> fmt::Display for Unended<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch stopped: {}", self.misused)
    }
}

impl<I> core::error::Error for Unended<I> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.misused)
    }
}
