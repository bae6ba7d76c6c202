//! Hosts and request queues: software and hardware contexts, submission, plugging,
//! merging, dispatch, restart, completion, requeue, quiesce, freeze and timeouts.
//!
//! The [`RequestQueue`] type is here; each concern of it has a file of its own:
//!
//! | file | what | Linux |
//! |---|---|---|
//! | `host.rs` | [`Host`]: the driver, its tag set, the queues' registry | `blk_mq_tag_set` |
//! | `config.rs` | [`QueueConfig`]: how a queue is made | `blk_mq_init_queue` |
//! | `usage.rs` | the usage reference (counted per CPU, `percpu.rs`), freeze, [`TagsGuard`] | `blk-core.c` (`q_usage_counter`), `lib/percpu-refcount.c` |
//! | `quiesce.rs` | quiesce, stopping one hardware queue | `blk-mq.c` (quiesce) |
//! | `deactivate.rs` | hardware queues whose CPUs went away | `blk-mq.c` (CPU hotplug) |
//! | `submit.rs` | the one way a bio goes in | `blk_mq_submit_bio` |
//! | `plug.rs` | [`Plug`] and how a flushed plug is issued | `blk_plug`, `blk_mq_flush_plug_list` |
//! | `dispatch.rs` | runs, the run claim, issuing to the driver | `blk_mq_run_hw_queue`, `blk_mq_dispatch_rq_list` |
//! | `sched.rs` | every call into the elevator | `blk-mq-sched.c` |
//! | `restart.rs` | [`RestartSet`], giving up and restarting, kicks | `blk-mq-sched.c` (restart) |
//! | `complete.rs` | ending requests, polling | `blk_mq_end_request`, `blk_mq_poll` |
//! | `requeue.rs` | the requeue list | `blk_mq_requeue_request` |
//! | `timeout.rs` | deadlines | `blk-timeout.c` |
//! | `service.rs` | [`Host::service`]: kicked and delayed runs, timers, timeouts, idling | kblockd, `blk_mq_timeout_work` |
//! | `wait.rs` | submitters waiting for room and for their own I/O | `submit_bio_wait`, `blk_queue_enter` |
//! | `runtime.rs` | changes at run time | `blk_mq_update_nr_requests` |
//! | `flush.rs` | the flush sequence | `blk-flush.c` |
//! | `dump.rs` | [`HostDump`], [`QueueDump`], [`HctxDump`], [`RequestDump`]: state in text | `blk-mq-debugfs.c` |
//!
//! Which bios and requests may merge is in `merge.rs`, beside the queue.
//!
//! # Restart
//!
//! A hardware queue that gives up dispatching (the driver said [`Status::Resource`], the
//! budget or the driver tags ran out) keeps its requests at the head of its dispatch list
//! and marks itself in its queue's [`RestartSet`], and the queue in its host's. Every
//! completion gives its resources back (its tag, its budget, its hardware queue's count of
//! requests in the driver) and then drains the host's set, rerunning exactly the hardware
//! queues marked — nothing when none are, in one load, and nothing host-wide written. The
//! dispatcher marks and then looks again: at its own hardware queue's completions since
//! the attempt began, at a driver tag; on a host of several hardware queues a hardware
//! queue that gave up marks before its next attempt, and a first give-up goes round once
//! more, marked; with nothing in the driver on any hardware queue the platform is asked for a
//! rerun (`restart.rs` has the whole protocol). Every access of
//! that pair is `SeqCst`, so one side always sees the other (Dekker's pattern);
//! `tests/loom.rs` and `tests/loom_queue.rs` check the interleavings of insert, give-up and
//! completion.
//!
//! # The engine
//!
//! The locked operations (atomic read-modify-writes) a request pays from
//! [`submit`](RequestQueue::submit) through `queue_rq` to
//! [`end_request`](RequestQueue::end_request), with no elevator and tags not shared
//! between queues (issued directly on an idle hardware queue). `seqcst_pair` is a fence
//! under loom only; everything else on the path is a load or a plain store (the request's
//! start, its hardware queue and queue, the tag hint, the runner's note of its hardware
//! queue's completions), and the restart check at the end is one load of the host's
//! restart root, which only give-ups write.
//!
//! | step | operation | line | written by |
//! |---|---|---|---|
//! | enter | usage `fetch_add`; none, a plain load and store, where the caller is its CPU's sole holder on a platform that fences all ([`Platform::can_fence_all`]: the freeze's `fence_all` stands for the fence) | the calling CPU's part of the queue's `PercpuRef` | that CPU only (a completion elsewhere puts on its own part) |
//! | allocate | driver tag: `fetch_or` of a free bit into an sbitmap word; or, when the word is full and the hint names a bit waiting to be cleared (the common case after a put), `fetch_and` of that bit out of the word's `cleared` | the word the per-CPU hint picked | the CPUs whose hints are in that word: shared, spread by the hint |
//! | claim | run claim compare-exchange `0 -> RUNNING` | the hardware context's | the CPUs of that hardware queue (reruns from completions only when it waits) |
//! | issue | requests in the driver `fetch_add` | the hardware queue's own word in the [`Host`] (its requests in the driver and its completions) | the issuers and completers of that hardware queue's requests |
//! | finish | run claim compare-exchange `RUNNING -> 0` | the hardware context's | as the claim |
//! | end | request state compare-exchange `InFlight -> Complete` | the request's state word | the CPU that started it (a store) and the one that ends it |
//! | free | tag `fetch_or` into the word's `cleared` (deferred clear) | the tag's sbitmap word | the CPUs freeing tags of that word |
//! | let go | usage `fetch_sub`; none for a sole holder, as at enter | the ending CPU's part of the `PercpuRef` | that CPU only |
//! | restart | out of the driver and one completion more, one `fetch_add` (one per run of a hardware queue's requests in [`end_requests`](RequestQueue::end_requests)) | the hardware queue's own word | as the issue |
//!
//! The driver's budget ([`Driver::get_budget`](crate::Driver::get_budget)) is the
//! driver's own; the tag's wake-up check is a load of the wait queue's active count
//! (written only while someone waits for a tag). With tags shared between queues, the
//! driver tag also counts the queue's share (`fetch_add` and `fetch_sub` on the queue's
//! activity line of that tag map).
//!
//! # The flush sequence
//!
//! A device with a volatile write cache ([`QueueLimits::write_cache`]) acknowledges writes
//! that a power cut may still lose; a flush makes everything it acknowledged before stable.
//! A write with [`BioFlags::PREFLUSH`](crate::BioFlags::PREFLUSH) needs a flush before it,
//! one with [`BioFlags::FUA`](crate::BioFlags::FUA) needs to be stable when it ends: the
//! device's own FUA where it honours it ([`QueueLimits::fua`]), else a flush after it. An
//! [`Op::Flush`](crate::Op::Flush) bio is a flush alone. `flush.rs` runs these as Linux's
//! `blk-flush.c` does.
//!
//! * **Policy.** Without a write cache the flags are dropped at submission and an empty
//!   flush ends at once with [`Status::Ok`]: nothing to flush, no driver reached. With one,
//!   a request needs a PREFLUSH step (PREFLUSH, or a flush), a DATA step (sectors to
//!   write), a POSTFLUSH step (FUA the device does not honour). One that needs only its
//!   data is an ordinary request, FUA kept for the driver. The others enter the sequence:
//!   the driver sees neither PREFLUSH nor an emulated FUA on them.
//! * **Steps, in order.** PREFLUSH, DATA, POSTFLUSH, each begun only once the one before
//!   completed, so the data never reaches the driver before its preflush ended. The bios
//!   end when the last step does, with the first error: a failed step ends the request at
//!   once (a failed preflush, without its data ever issued).
//! * **Flush merging.** Each hardware queue has two lists, as Linux's `flush_queue[2]`:
//!   requests waiting for a flush are *pending* together, and one flush serves every
//!   request pending when it was issued; while it is in flight, new arrivals wait for the
//!   next. While data of a sequence is in flight a new flush is held back, up to
//!   [`FLUSH_PENDING_TIMEOUT_NS`] after the oldest waiter came, so that the postflush of
//!   that data serves the waiters too. The hold never strands anyone: the data's
//!   completion (or its timeout's) kicks the sequence again, and every arrival and
//!   completion checks the time.
//! * **Where the flush comes from.** The oldest pending request is itself issued as the
//!   flush: its I/O (bios, sectors, flags) is held aside in the hardware queue's flush
//!   state, one slot, since one flush at a time is in flight per hardware queue, and the
//!   request describes an empty [`Op::Flush`](crate::Op::Flush) meanwhile; when the flush
//!   ends it gets its I/O back and moves on with the others. Linux keeps a spare flush
//!   request that borrows a pending request's tag; borrowing the request whole needs no
//!   request, tag or memory beyond the queue's own, so a flush can always be issued: it
//!   holds the tag of a request that is already allocated, even with every tag taken.
//!   The lists have room for every request of the queue from its creation, so the
//!   sequence allocates nothing per I/O.
//! * **Elevator.** Sequenced requests bypass it, as flushes always did: every step goes to
//!   the dispatch list (Linux's `RQF_FLUSH_SEQ` insert), a flush at its head, data in the
//!   order its steps began; with scheduler tags
//!   each step takes a driver tag at dispatch and gives it back when it ends.
//! * **Requeue, quiesce, freeze, teardown.** A request given back by the driver
//!   ([`Status::Resource`], [`requeue_request`](RequestQueue::requeue_request)) is issued
//!   again as what it was, so it resumes its step. Quiesce only holds the dispatch list.
//!   A sequenced request holds its usage reference to its end, so a freeze waits for its
//!   whole sequence. Teardown ends every request waiting in a sequence with an I/O error,
//!   a flush's held-aside I/O included, once.
//! * **Cost.** A write without PREFLUSH or FUA pays one test of its flags at submission and
//!   one byte of its request (the sequence state, zero outside a sequence, in the line
//!   completion reads anyway) at completion: no lock, no shared atomic, no allocation.
//!
//! # Runs
//!
//! One thread at a time dispatches a hardware queue. [`RequestQueue::run_hw_queue`] marks
//! the queue pending; whoever finds it not running becomes its runner and dispatches until
//! no run was asked for since it last looked, so a run asked for while another is under
//! way is never lost and never waits.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::fmt;

use crossbeam_utils::CachePadded;

use crate::bio::{Bio, Status};
use crate::driver::{Driver, HctxCx};
use crate::elevator::{Elevator, ElvCx, ElvSlot};
use crate::error::ConfigError;
use crate::limits::QueueLimits;
use crate::platform::Platform;
use crate::queue_map::{QueueMaps, QueueType};
use crate::queue_tags::{KeptSlot, QueueTags};
use crate::request::{Request, Rq, RqIo, RqState};
use crate::split::SplitPool;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

mod account;
mod batch;
mod complete;
mod config;
mod data;
mod deactivate;
mod dispatch;
mod dump;
mod flush;
mod host;
mod plug;
mod quiesce;
mod requeue;
mod restart;
mod runtime;
mod sched;
mod service;
mod submit;
#[cfg(all(test, feature = "std", not(loom)))]
mod tests;
mod timeout;
mod trace;
mod usage;
mod wait;

pub use config::QueueConfig;
pub use dump::{HctxDump, HostDump, QueueDump, RequestDump};
pub use flush::FLUSH_PENDING_TIMEOUT_NS;
pub use host::Host;
pub use plug::{PLUG_FLUSH_BYTES, PLUG_MAX, PLUG_MAX_MULTI, Plug};
pub use restart::{RESOURCE_DELAY_NS, RestartSet};
pub use service::{Due, IDLE_INTERVAL_NS, Serviced, TIMEOUT_CHECK_NS};
pub use usage::TagsGuard;
pub use wait::SubmitFuture;

type Raw<D> = <<D as Driver>::Platform as Platform>::RawMutex;
type Lock<D, X> = lock_api::Mutex<Raw<D>, X>;

/// The hardware queue is being dispatched.
const RUNNING: u32 = 1;
/// A run was asked for since the runner last looked.
const PENDING: u32 = 2;
/// A hardware context's `held_by` when no runner holds the claim across a batch.
const NOT_HELD: usize = usize::MAX;

/// In a hardware context's `look`: the last attempt gave up.
const GAVE_UP: u64 = 1 << 63;
/// In a hardware context's `look`: the restart was marked before this attempt's look.
const ARMED: u64 = 1 << 62;

/// A hardware context: one hardware queue of a request queue, and its dispatch.
///
/// # Invariants
///
/// * The run claim (`run_claim`): at most one thread, the runner, holds [`RUNNING`] and
///   dispatches the hardware queue; only the runner takes from `dispatch`, `run_batch` and
///   the software queues' lists for this hardware queue, or calls the driver's `queue_rq`
///   on it. A run asked for while a runner holds the claim sets [`PENDING`], and the
///   runner dispatches again before it lets the claim go (`finish_run`), so no run asked
///   for is lost. A runner may hold the claim across a batch of its own
///   ([`RequestQueue::run_batch`]), and issue what the batch submits while no run is asked
///   for and nothing is on `dispatch`; `held_by` names its CPU then (see there).
/// * `dispatch_len` is the length of `dispatch`, stored under `dispatch`'s lock after
///   every change.
/// * A software context whose list holds requests has its bit in `ctx_has_work` set, or
///   its pusher is about to set it (after the push) and then runs the hardware queue; a
///   runner clears a bit before it takes from the list, so no request is left unseen.
/// * `run_batch` is empty whenever no runner holds the claim: a runner that gives up puts
///   what it holds back on `dispatch` (`put_back`).
struct HwCtx<D: Driver> {
    /// [`RUNNING`] while a runner holds the claim, [`PENDING`] when a run was asked for
    /// since it last looked.
    run_claim: AtomicU32,
    /// The CPU of the runner that holds the claim across a batch of its own
    /// ([`RequestQueue::run_batch`]) while it is not issuing, else [`NOT_HELD`]: written by
    /// that runner alone, and matched only by the context that holds that CPU alone.
    held_by: AtomicUsize,
    /// The driver tag that runner keeps for the next request it makes here (see
    /// `queue_tags/kept.rs`); touched by that runner alone.
    kept: KeptSlot,
    /// What that runner's batch ended and has not yet counted out of the driver
    /// (`batch.rs`); touched by that runner alone.
    deferred: batch::Deferred,
    /// The coarse clock read when that runner's batch began, its reading for the batch
    /// (`batch.rs`); touched by that runner alone.
    batch_now: AtomicU64,
    /// Stopped by the driver ([`RequestQueue::stop_hw_queue`]).
    stopped: AtomicBool,
    /// Its CPUs are gone: no new requests are made for it.
    inactive: AtomicBool,
    /// Requests to issue before anything else (given back, requeued, flushes).
    dispatch: Lock<D, VecDeque<Rq>>,
    /// `dispatch`'s length, read without its lock.
    dispatch_len: AtomicUsize,
    /// The software contexts mapped here (indices into the queue's).
    ctxs: Box<[usize]>,
    /// A bit per entry of `ctxs`: the software context has requests queued.
    ctx_has_work: Box<[AtomicU64]>,
    /// Where a one-at-a-time pass starts next.
    next_ctx: AtomicUsize,
    /// The driver gave up recently: take one request at a time, round robin over the
    /// software contexts, until they are empty.
    one_at_a_time: AtomicBool,
    /// The runner's restart state (`restart.rs`), written by the runner only: [`GAVE_UP`]
    /// (the last attempt gave up: the next marks the restart before it tries), [`ARMED`]
    /// (this attempt's look came after a mark), and in the low half the hardware queue's
    /// completions seen before this attempt.
    look: AtomicU64,
    /// The runner's batch (room made once, not per run).
    run_batch: Lock<D, VecDeque<Rq>>,
    /// The flush sequence of its requests (`flush.rs`).
    flush: Lock<D, flush::FlushQueue>,
}

/// A software context: one CPU's requests of one queue type, for one hardware queue.
///
/// # Invariants
///
/// * Mapped (`pos != usize::MAX`), every request on `list` was made for hardware queue
///   `hctx`, and `pos` is the context's index in that hardware context's `ctxs` (its bit
///   in `ctx_has_work`). Unmapped contexts (a queue type the maps leave out) hold nothing.
struct SwCtx<D: Driver> {
    /// Requests queued here, oldest first.
    list: Lock<D, VecDeque<Rq>>,
    /// The hardware queue it feeds.
    hctx: usize,
    /// Its bit in the hardware context's `ctx_has_work`; `usize::MAX` when unmapped.
    pos: usize,
}

/// A request queue: one block device (LUN, namespace) on a [`Host`].
///
/// Bios go in through [`submit`](Self::submit) (or a [`Plug`]); the queue checks and splits
/// them to its [`QueueLimits`], merges them, allocates requests, and issues them to the
/// driver from per-CPU software queues or an [`Elevator`] through per-hardware-queue
/// dispatch. The driver ends them with [`end_request`](Self::end_request).
///
/// ```
/// use blkmq_core::testing::Hold; // holds what it is given until the test takes it
/// use blkmq_core::*;
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
/// queue.submit(Bio::new(Op::Read, 2048, 8)).unwrap(); // past the end: fails at once
/// let held = host.driver().take();
/// assert_eq!(held.len(), 1);
/// for rq in held {
///     queue.end_request(rq, Status::Ok).unwrap();
/// }
/// assert_eq!(host.set().busy(), 0);
/// ```
pub struct RequestQueue<D: Driver> {
    host: Arc<Host<D>>,
    slot: usize,
    /// Its tags' identity, which the tags keep for the queue's life.
    id: u32,
    limits: QueueLimits,
    maps: QueueMaps,
    /// Each on lines of its own: neighbours are written from other CPUs on every I/O.
    hctxs: Box<[CachePadded<HwCtx<D>>]>,
    /// Each on lines of its own, as `hctxs`.
    ctxs: Box<[CachePadded<SwCtx<D>>]>,
    /// Changed only frozen (no usage) and quiesced (no runner): see [`Self::tags`].
    tags: UnsafeCell<QueueTags<D::Payload, D::Platform>>,
    elevator: ElvSlot<Lock<D, Option<Box<dyn Elevator>>>>,
    has_elevator: AtomicBool,
    restart: RestartSet,
    kicked: RestartSet,
    /// Holders (requests, submitters, timeout checks), counted per CPU, and the frozen flag.
    usage: crate::percpu::PercpuRef,
    /// The platform fences all ([`Platform::can_fence_all`]): a CPU's sole holder counts
    /// its usage references with plain stores.
    fences_all: bool,
    /// Freeze depth; changing it and the frozen flag together.
    freeze_depth: Lock<D, usize>,
    /// Held across run-time changes (elevator, `nr_requests`).
    change_lock: Lock<D, ()>,
    /// Set while the tags are being replaced: readers that may run frozen back off.
    switching: AtomicBool,

    quiesced: AtomicUsize,
    requeue: Lock<D, VecDeque<Rq>>,
    splits: SplitPool<Raw<D>>,
    timed_out: AtomicU64,
    /// Submitters waiting for the queue to thaw (see `wait.rs`).
    thaw: wait::Thaw<D>,
    /// Where trace events go (`trace.rs`), set for the queue's life.
    tracer: Option<Arc<dyn crate::trace::Tracer>>,
    /// I/O accounting, when on (`account.rs`).
    acct: Option<crate::stats::Accounting>,
}

// SAFETY: the `UnsafeCell` around the tags is written only while no other thread can reach
// them (see `tags`); everything else is `Sync` on its own.
unsafe impl<D: Driver> Sync for RequestQueue<D> where QueueTags<D::Payload, D::Platform>: Sync {}

impl<D: Driver> RequestQueue<D> {
    fn new(host: &Arc<Host<D>>, config: QueueConfig) -> Result<Arc<Self>, ConfigError> {
        config.limits.validate()?;
        let set = &host.set;
        let nr_hw = set.nr_hw_queues();
        let nr_cpus = set.nr_cpus();
        let maps = match config.maps {
            Some(maps) => maps,
            None => match host.driver.map_queues(nr_cpus, nr_hw) {
                Some(maps) => maps,
                None => QueueMaps::spread(nr_cpus, nr_hw)?,
            },
        };
        if maps.nr_hw_queues() > nr_hw
            || QueueType::ALL
                .iter()
                .filter_map(|k| maps.map(*k))
                .any(|m| m.nr_cpus() != nr_cpus)
        {
            return Err(ConfigError::BadQueueMap {
                cpu: 0,
                hctx: maps.nr_hw_queues(),
            });
        }
        let mut tags = set.attach().map_err(|_| ConfigError::QueueBusy)?;
        if let Some(elevator) = &config.elevator {
            tags.attach_scheduler(config.nr_requests, |init| host.driver.init_request(init))?;
            if let Some(depth) = elevator.min_shallow_depth() {
                tags.set_min_shallow_depth(depth)?;
            }
        }
        let capacity = set.depth() + tags.nr_requests().unwrap_or(0);
        // Only a device with a volatile cache sequences flushes.
        let flush_room = if config.limits.write_cache {
            capacity
        } else {
            0
        };
        // Software contexts, (cpu, type) in order, each mapped to its hardware queue.
        let mut ctx_hctx = Vec::new();
        for cpu in 0..nr_cpus {
            for kind in QueueType::ALL {
                ctx_hctx.push(maps.map(kind).map(|m| m.hctx(cpu)));
            }
        }
        let mut per_hctx: Vec<Vec<usize>> = (0..nr_hw).map(|_| Vec::new()).collect();
        let mut ctxs = Vec::with_capacity(ctx_hctx.len());
        for (index, hctx) in ctx_hctx.iter().enumerate() {
            let (hctx, pos, cap) = match *hctx {
                Some(h) => {
                    per_hctx[h].push(index);
                    (h, per_hctx[h].len() - 1, capacity)
                }
                None => (0, usize::MAX, 0),
            };
            ctxs.push(CachePadded::new(SwCtx {
                list: lock_api::Mutex::new(VecDeque::with_capacity(cap)),
                hctx,
                pos,
            }));
        }
        let hctxs = per_hctx
            .into_iter()
            .map(|ctxs| {
                CachePadded::new(HwCtx {
                    run_claim: AtomicU32::new(0),
                    held_by: AtomicUsize::new(NOT_HELD),
                    kept: KeptSlot::new(),
                    deferred: batch::Deferred::new(),
                    batch_now: AtomicU64::new(0),
                    stopped: AtomicBool::new(false),
                    inactive: AtomicBool::new(false),
                    dispatch: lock_api::Mutex::new(VecDeque::with_capacity(capacity)),
                    dispatch_len: AtomicUsize::new(0),
                    ctx_has_work: (0..ctxs.len().div_ceil(64))
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                    ctxs: ctxs.into_boxed_slice(),
                    next_ctx: AtomicUsize::new(0),
                    one_at_a_time: AtomicBool::new(false),
                    look: AtomicU64::new(0),
                    run_batch: lock_api::Mutex::new(VecDeque::with_capacity(capacity)),
                    flush: lock_api::Mutex::new(flush::FlushQueue::new(flush_room)),
                })
            })
            .collect();
        if config.tracer.is_some() {
            // A trace clock that sets itself up on its first reading (a cycle counter's
            // calibration) does it here, not on the I/O path.
            let _ = set.platform().trace_now_ns();
        }
        let mut elevator = config.elevator;
        let nr_keys = tags.nr_keys();
        if let (Some(e), Some(nr)) = (elevator.as_mut(), tags.nr_requests()) {
            e.depth_updated(nr, nr_keys);
        }
        let restart = RestartSet::new(nr_hw)?;
        let kicked = RestartSet::new(nr_hw)?;
        let usage = crate::percpu::PercpuRef::new(host.set.nr_cpus());
        // The first asks the platform to set its fence up (a `membarrier` registration
        // waits for every CPU): outside the registry's lock, which the worker takes.
        let fences_all = host.set.platform().can_fence_all();
        let splits = SplitPool::new(2 * capacity);
        let acct = config.accounting.then(|| {
            crate::stats::Accounting::new(
                nr_cpus,
                nr_hw,
                set.platform().coarse_now_ns(),
                set.flags().contains(crate::tagset::TagSetFlags::BLOCKING),
            )
        });
        // The registry's lock covers finding the slot and filling it, nothing slower.
        let mut slots = host.queues.lock();
        let slot = slots
            .iter()
            .position(Option::is_none)
            .ok_or(ConfigError::QueueBusy)?;
        let queue = Arc::new(Self {
            host: host.clone(),
            slot,
            id: tags.id(),
            limits: config.limits,
            maps,
            hctxs,
            ctxs: ctxs.into_boxed_slice(),
            has_elevator: AtomicBool::new(elevator.is_some()),
            elevator: ElvSlot::new(elevator),
            tags: UnsafeCell::new(tags),
            restart,
            kicked,
            usage,
            fences_all,
            freeze_depth: lock_api::Mutex::new(0),
            change_lock: lock_api::Mutex::new(()),
            switching: AtomicBool::new(false),
            quiesced: AtomicUsize::new(0),
            requeue: lock_api::Mutex::new(VecDeque::with_capacity(capacity)),
            splits,
            timed_out: AtomicU64::new(0),
            thaw: lock_api::Mutex::new(wait::ThawList::default()),
            tracer: config.tracer,
            acct,
        });
        slots[slot] = Some(Arc::downgrade(&queue));
        Ok(queue)
    }

    /// The queue's identity, unique while the process runs: its tags'
    /// [`QueueTags::id`], which busy iteration reports as [`BusyRq::queue`](crate::BusyRq::queue).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert_ne!(a.id(), b.id());
    /// assert_eq!(a.id(), a.queue_tags().id());
    /// b.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let mut owners = Vec::new();
    /// host.set().for_each_busy(|busy| {
    ///     owners.push(busy.queue);
    ///     true
    /// });
    /// assert_eq!(owners, [b.id()]);
    /// # b.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The tags.
    #[inline(always)]
    fn tags(&self) -> &QueueTags<D::Payload, D::Platform> {
        // SAFETY: the tags are replaced (`switch_elevator`) only while the queue is frozen
        // with no usage left, so no request, submitter or timeout check is inside, and
        // quiesced with no runner, so no dispatch is; every path here reaches the tags
        // holding a usage count or as a runner of an unquiesced queue.
        unsafe { &*self.tags.get() }
    }

    /// The host.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(std::sync::Arc::ptr_eq(queue.host(), &host));
    /// ```
    pub fn host(&self) -> &Arc<Host<D>> {
        &self.host
    }

    /// The driver.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// let held = queue.driver().take(); // what `Hold` was given
    /// assert_eq!(held.len(), 1);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn driver(&self) -> &D {
        &self.host.driver
    }

    /// The platform.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::with_cpus(3), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert_eq!(queue.platform().nr_cpus(), 3);
    /// ```
    pub fn platform(&self) -> &D::Platform {
        self.host.set.platform()
    }

    /// The queue's limits.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let limits = QueueLimits { max_sectors: 64, ..QueueLimits::new(1024) };
    /// let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    /// assert_eq!((queue.limits().capacity, queue.limits().max_sectors), (1024, 64));
    /// ```
    pub fn limits(&self) -> &QueueLimits {
        &self.limits
    }

    /// The queue's maps.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::with_cpus(4), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// // No maps given, none from the driver: an even spread.
    /// assert_eq!(queue.maps(), &QueueMaps::spread(4, 2).unwrap());
    /// ```
    pub fn maps(&self) -> &QueueMaps {
        &self.maps
    }

    /// Its hardware queues.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let tags = TagSet::builder(8).hw_queues(3);
    /// let host = Host::new(tags, StdPlatform::new(), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert_eq!(queue.nr_hw_queues(), 3);
    /// ```
    pub fn nr_hw_queues(&self) -> usize {
        self.hctxs.len()
    }

    /// The shared side of one of this queue's requests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let other = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// assert_eq!((request.state(), request.tag()), (RqState::InFlight, rq.tag()));
    /// assert!(other.request(&rq).is_none()); // not a request of `other`
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn request(&self, rq: &Rq) -> Option<&Request<D::Payload>> {
        self.tags().request(rq).ok()
    }

    /// The shared side of one of this queue's requests and the I/O it carries, found with
    /// one look-up: [`request`](Self::request) and [`io`](Self::io) at once.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let other = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 16, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let (request, io) = queue.request_and_io(&rq).unwrap();
    /// assert_eq!((request.tag(), io.sector()), (rq.tag(), 16));
    /// assert!(other.request_and_io(&rq).is_none()); // not a request of `other`
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    #[inline]
    pub fn request_and_io<'a>(&'a self, rq: &'a Rq) -> Option<(&'a Request<D::Payload>, &'a RqIo)> {
        self.tags().request_and_io(rq).ok()
    }

    /// The I/O of one of this queue's requests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 16, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let io = queue.io(&rq).unwrap();
    /// assert_eq!((io.op(), io.sector(), io.sectors(), io.nr_bios()), (Op::Write, 16, 8, 1));
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn io<'a>(&'a self, rq: &'a Rq) -> Option<&'a RqIo> {
        self.tags().io(rq).ok()
    }

    /// Calls `f` with every bio of a request, in order.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 8)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap(); // merges in front
    /// plug.flush();
    /// let rq = host.driver().take().pop().unwrap();
    /// let mut starts = Vec::new();
    /// queue.for_each_bio(&rq, |bio| starts.push(bio.sector));
    /// assert_eq!(starts, [0, 8]);
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn for_each_bio(&self, rq: &Rq, f: impl FnMut(&Bio)) {
        let _ = self.tags().for_each_bio(rq, f);
    }

    fn cx(&self, hctx: usize) -> HctxCx<'_, D> {
        HctxCx { queue: self, hctx }
    }
}

impl<D: Driver> Drop for RequestQueue<D> {
    fn drop(&mut self) {
        // Whatever is still queued here ends with an error; then split parents still
        // waiting for pieces the driver holds.
        let mut orphans: Vec<Rq> = Vec::new();
        orphans.extend(self.requeue.get_mut().drain(..));
        for h in self.hctxs.iter_mut() {
            orphans.extend(h.dispatch.get_mut().drain(..));
            orphans.extend(h.run_batch.get_mut().drain(..));
        }
        for ctx in self.ctxs.iter_mut() {
            orphans.extend(ctx.list.get_mut().drain(..));
        }
        self.flush_orphans(&mut orphans);
        if let Some(mut e) = self.elevator.get_mut().take() {
            let cx = ElvCx::with_backend(&*self, &self.limits, 0);
            for hctx in 0..self.hctxs.len() {
                while let Some(rq) = e.dispatch_request(&cx, hctx) {
                    orphans.push(rq);
                }
            }
        }
        for mut rq in orphans {
            self.flush_orphan(&mut rq);
            let splits = &self.splits;
            let _ = self.tags().complete_with(
                rq,
                Status::IoErr,
                |_, _, _| true,
                |bio, status| {
                    splits.end(bio, status);
                },
            );
        }
        self.flush_abandon(Status::IoErr);
        self.splits.fail_all(Status::IoErr);
        // What the driver still holds will never end through this queue.
        if !self.host.driver_idle() {
            let host = &self.host;
            self.tags().for_each_busy(None, |busy| {
                if busy.request.state() == RqState::InFlight {
                    host.driver_out(busy.request.hctx(), 1);
                }
                true
            });
        }
        if let Some(slot) = self.host.queues.lock().get_mut(self.slot) {
            *slot = None;
        }
    }
}

impl<D: Driver> fmt::Debug for RequestQueue<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestQueue")
            .field("slot", &self.slot)
            .field("nr_hw_queues", &self.hctxs.len())
            .field("usage", &self.usage())
            .field("elevator", &self.elevator_name())
            .finish_non_exhaustive()
    }
}

/// Spins briefly (yields the thread under `std`).
fn wait_a_little() {
    #[cfg(all(feature = "std", not(loom)))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(any(feature = "std", loom)))]
    core::hint::spin_loop();
}
