//! Errors: bad configuration ([`ConfigError`]) and refused tag operations ([`TagError`]).

use core::fmt;

use blkmq_sbitmap::SbitmapError;

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
