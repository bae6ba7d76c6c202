//! The core of a `no_std` multi-queue block layer: platform, bios, requests and tag sets.
//!
//! This crate turns block I/O from many CPUs into requests for one or many hardware queues.
//! This part holds the pieces every other layer builds on:
//!
//! * [`Platform`]: what the environment supplies (CPU index, clock, lock type, deferred
//!   queue runs); [`StdPlatform`] for threads under an OS (`std` feature).
//! * [`Bio`]: one block I/O as submitted, with its [`Op`], [`BioFlags`], [`IoPrio`],
//!   issuer and completion callback; [`Status`] is how it ends.
//! * [`Request`]: preallocated per tag when tags are created, carrying a chain of merged bios
//!   without allocating; owned through an [`Rq`] token, observed through `&Request`.
//! * [`TagSet`]: the tags of a host, per hardware queue or shared by all of them
//!   ([`TagSetFlags::SHARED_HOST_TAGS`]: one tag space and one request array, so memory is
//!   O(depth), not O(depth x hardware queues)). Request queues attach through
//!   [`QueueTags`], which allocates (NOWAIT, async, blocking, reserved, batched), shares the
//!   tags fairly between active queues, and adds scheduler tags for queues with an elevator.
//! * [`Elevator`]: the I/O scheduler interface (the request orders and the merge sequence
//!   schedulers share are the `blkmq-sched-index` crate).
//! * [`Tracer`]: trace events at blktrace's points (Q, X, M, F, G, P, U, I, D, C, R);
//!   [`RingTracer`] keeps them in per-CPU rings, a [`TraceEvent`] prints as a `blkparse`
//!   line, and [`TraceSummary`] is `btt`'s latency table.
//!
//! ```
//! use blkmq_core::{Alloc, Bio, Op, StdPlatform, Status, TagSet, TagSetFlags};
//!
//! // A host with 4 hardware queues sharing 128 tags, 2 of them reserved.
//! let set = TagSet::builder(128)
//!     .hw_queues(4)
//!     .reserved(2)
//!     .flags(TagSetFlags::SHARED_HOST_TAGS)
//!     .build(StdPlatform::new(), |init| init.tag) // the driver's per-request data
//!     .unwrap();
//! let queue = set.attach().unwrap();
//!
//! let mut rq = queue.alloc(&Alloc::new(2, 0)).unwrap();
//! queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
//! let request = queue.request(&rq).unwrap();
//! assert!(request.tag() >= 2); // reserved tags are numbered first
//! assert_eq!(*request.payload(), request.tag() as usize);
//! queue.complete(rq, Status::Ok).unwrap();
//! assert_eq!(set.busy(), 0);
//! ```
//!
//! # Features
//! * `std` (default): [`StdPlatform`], [`QueueTags::alloc_blocking`], and submissions that
//!   park the thread: [`RequestQueue::submit_wait`] and [`RequestQueue::submit_and_wait`].
//!   Everything else is `no_std` + `alloc` (waiting there is [`RequestQueue::submit_async`],
//!   a future for any executor); memory is allocated when tags are created, not per I/O.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod bio;
mod completion;
mod driver;
mod elevator;
mod error;
mod limits;
mod merge;
mod percpu;
mod platform;
mod queue;
mod queue_map;
mod queue_tags;
mod request;
mod segment;
mod split;
mod stats;
mod sync;
mod tags;
mod tagset;
pub mod testing;
mod trace;

pub use bio::{Bio, BioFlags, EndIo, IoPrio, IoPrioClass, IssuerId, Op, SECTOR_SIZE, Status};
pub use completion::Completion;
pub use driver::{Driver, HctxCx, Rejected, RqBatch, TimeoutAction};
pub use elevator::{Elevator, ElvCx, ElvShared, TunableError};
pub use error::{ConfigError, Misused, TagError, Unended};
pub use limits::{MAX_CAPACITY, QueueLimits};
pub use merge::MergeKind;
#[cfg(all(feature = "std", not(loom)))]
pub use platform::StdPlatform;
pub use platform::{NoPlatform, Platform, Service};
pub use queue::{
    Due, FLUSH_PENDING_TIMEOUT_NS, HctxDump, Host, HostDump, IDLE_INTERVAL_NS, PLUG_FLUSH_BYTES,
    PLUG_MAX, PLUG_MAX_MULTI, Plug, QueueConfig, QueueDump, RESOURCE_DELAY_NS, RequestDump,
    RequestQueue, RestartSet, Serviced, SubmitFuture, TIMEOUT_CHECK_NS, TagsGuard,
};
pub use queue_map::{QueueMap, QueueMaps, QueueType};
pub use queue_tags::{Alloc, AllocFuture, QueueTags};
pub use request::{
    NO_TAG, Request, Rq, RqIo, RqSegments, RqState, unique_tag, unique_tag_hwq, unique_tag_tag,
};
pub use segment::{BioData, BioSegments, DataPos, Segment, SgTooSmall};
pub use stats::{IO_TICK_NS, IoStats, LATENCY_BUCKETS, Latency, OpGroup, OpStats, Rates};
pub use tags::RequestInit;
pub use tagset::{
    BusyRq, DEFAULT_MAX_QUEUES, DEFAULT_TIMEOUT_NS, MAX_DEPTH, MAX_HW_QUEUES, MAX_SCHED_DEPTH,
    TagSet, TagSetBuilder, TagSetFlags,
};
pub use trace::{
    Action, NO_HCTX, Percentiles, RingTracer, Rwbs, SummaryBuilder, TraceEvent, TraceSummary,
    Tracer,
};
