//! The data path, byte for byte: random reads, writes, discards, write-zeroes and flushes
//! with random segment layouts, through a queue with no elevator, mq-deadline or BFQ, to a
//! RAM disk that moves every byte through the request's segments (shared by the model test
//! `tests/data_model.rs`, the corpus replay and the cargo-fuzz target `data_ops`).
//!
//! A [`Config`] says what to build: a host of one hardware queue with 1 to 8 tags, one
//! request queue with random [`QueueLimits`] (logical block size, request size, segment
//! count, size and boundary, chunks, discard and write-zeroes, a write cache and FUA) and an
//! elevator, and how the driver reaches a request's bytes: by walking
//! [`RequestQueue::segments`], or through [`RequestQueue::map_sg`] into a scatter-gather
//! table that may be too small at first.
//!
//! Every bio's data lives in an arena of memory the model owns: its segments are real
//! addresses into it, aligned to the logical block size, of random lengths, contiguous with
//! each other or not, crossing segment boundaries or not, and sometimes starting where the
//! previous bio's data ended (a physically contiguous neighbour). A bio's buffer and its
//! segment table stay the model's until its `end_io` ran. The driver holds what it takes until
//! an op ends it (with a status), ends its first bytes and keeps the rest
//! ([`RequestQueue::update_request`]), hands it back ([`RequestQueue::requeue_request`]) or
//! turns requests down with [`Status::Resource`] or [`Status::DevResource`]. Ending a request
//! (or its first bytes) with [`Status::Ok`] moves those bytes: a read copies the disk into the
//! segments, a write the segments onto the disk, a discard or write-zeroes zeroes the range;
//! any other status moves nothing. The platform is deterministic: one CPU, and a clock that
//! moves only when an op (or a barrier waiting on an elevator's timer) moves it.
//!
//! Overlapping I/O is never in flight at once (ordering between overlapping requests is not
//! the block layer's to define): an op that overlaps one in flight waits for everything in
//! flight to end first, as a barrier. [`run`] checks:
//!
//! * every segment the driver is handed is where the bio holding the sectors it carries
//!   keeps their bytes, the segments of a request add up to its bytes, and a scatter-gather
//!   mapping keeps within the segment size and boundary, needs no more entries than the
//!   segments cut to those, and, for a table too small, says how many it needs
//!   ([`SgTooSmall`]) and loses nothing;
//! * every bio ends exactly once, after every sector of it ended in a request, with the
//!   first error the driver gave a request (or the part of one) holding a piece of it (or
//!   [`Status::Ok`]); a discard or write-zeroes the device lacks ends at once with
//!   [`Status::NotSupported`];
//! * a partial end ends the whole logical blocks asked for, and no more (short of them only
//!   where an error stops at the first sector of a bio it would cut), and leaves the rest
//!   of the request where it was, or nothing and no bio;
//! * every read that ends with [`Status::Ok`] returns the model disk's bytes (where a failed
//!   write has not left them undefined), every write that ends with [`Status::Ok`] lands,
//!   and a discard or write-zeroes reads back as zeroes: after every barrier the RAM disk
//!   equals the model disk;
//! * flushes ([`BioOp::Flush`] bios, and the writes with [`BioFlags::PREFLUSH`] or
//!   [`BioFlags::FUA`] the flush sequence serves) reach the driver only on a device with a
//!   write cache, as empty requests; no request keeps FUA on a device without it; every
//!   flush bio and every such write ends once, with its status;
//! * at the end, once everything drained, nothing is left in flight, no bio is outstanding
//!   and every tag is free.
//!
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, so any input is a valid test: a panic or a failure is a bug.
//!
//! ```
//! use blkmq_model::data::{Config, IoSpec, Layout, LimitsSpec, Op, Place, run};
//!
//! let limits = LimitsSpec {
//!     capacity: 0,
//!     block_shift: 0,
//!     max_sectors: 1,
//!     max_segments: 3,
//!     segment_shift: 0,
//!     boundary_shift: 0,
//!     chunk: None,
//!     discard: Some(0),
//!     write_zeroes: None,
//!     rotational: false,
//!     write_cache: true,
//!     fua: false,
//! };
//! let config = Config { elevator: 0, depth: 3, map_sg: true, sg_entries: 1, limits };
//! let layout =
//!     Layout { segments: 3, sizes: 7, gaps: 0b01, start: 2, follow: false, buffer: false };
//! let io = |kind, place| {
//!     let (plugged, issuer, sync, flush) = (false, 0, false, 0);
//!     Op::Io(IoSpec { kind, place, blocks: 24, layout, plugged, issuer, sync, flush })
//! };
//! let ops = [
//!     io(4, Place::At(0)), // a write of 12 KiB in three segments, split in two requests
//!     Op::End { index: 0, status: 0 },
//!     io(0, Place::At(0)), // the barrier ends the rest of the write first
//!     Op::Barrier,
//! ];
//! run(&config, &ops).unwrap();
//! ```

// The segment tables are the model's, lent to the queue with `Bio::segments_raw`.
#![allow(unsafe_code)]

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use arbitrary::Arbitrary;
use spin::mutex::SpinMutex;

use blkmq_core::Platform;
use blkmq_core::{Bio, BioFlags, IssuerId, Op as BioOp, SECTOR_SIZE, Status};
use blkmq_core::{Driver, HctxCx, Rejected, RequestInit, Rq};
use blkmq_core::{Elevator, Host, Plug, QueueConfig, QueueLimits, RequestQueue, TagSet};
use blkmq_core::{Segment, SgTooSmall};
use blkmq_sched_bfq::Bfq;
use blkmq_sched_deadline::Deadline;

use crate::tagset::TestPlatform;

/// The deepest tag set [`run`] builds.
pub const MAX_DEPTH: usize = 8;

/// The elevators [`Config::elevator`] chooses from, by name (`None` for none).
pub const ELEVATORS: [Option<&str>; 3] = [None, Some("mq-deadline"), Some("bfq")];

/// Bytes of the arena the bios' buffers are carved from.
const ARENA: usize = 1 << 20;

/// The arena's start is aligned to this, so that every segment boundary window of the
/// limits [`run`] builds (4 to 64 KiB) starts at an arena offset that is a multiple of it.
const ARENA_ALIGN: usize = 1 << 16;

/// The unit of buffer ownership and of segment addresses and lengths.
const GRANULE: usize = 512;

/// Entries of the driver's full scatter-gather table: more than any request can need.
const SG_FULL: usize = 1024;

/// Rounds of a drain after which it counts as stuck.
const MAX_DRAIN_ROUNDS: usize = 10_000;

/// The statuses the driver ends requests with.
const END_STATUSES: [Status; 5] = [
    Status::Ok,
    Status::IoErr,
    Status::Medium,
    Status::NoSpace,
    Status::Protection,
];

/// What [`run`] builds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The elevator: [`ELEVATORS`]`[elevator % 3]`.
    pub elevator: u8,
    /// Tags: `1 + depth % MAX_DEPTH`.
    pub depth: u8,
    /// The driver maps each request with [`RequestQueue::map_sg`] (else it walks
    /// [`RequestQueue::segments`]).
    pub map_sg: bool,
    /// The driver's first scatter-gather table: `1 + sg_entries % 16` entries; when that is
    /// too small it maps again into a table large enough.
    pub sg_entries: u8,
    /// The queue's limits.
    pub limits: LimitsSpec,
}

/// The [`QueueLimits`] of the queue, each field reduced into a valid range (`b`: the
/// logical block size in sectors, `u`: the larger of `b` and 8).
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsSpec {
    /// `capacity`: `512 * (1 + capacity % 4)` sectors.
    pub capacity: u8,
    /// `logical_block_size`: `512 << (block_shift % 4)` bytes.
    pub block_shift: u8,
    /// `max_sectors`: `u * (1 + max_sectors % 16)`.
    pub max_sectors: u8,
    /// `max_segments`: `1 + max_segments % 16`.
    pub max_segments: u8,
    /// `max_segment_size`: `max(4096, block) << (segment_shift % 4)` bytes.
    pub segment_shift: u8,
    /// `seg_boundary_mask`: `(max(4096, block) << (boundary_shift % 5)) - 1`, capped at
    /// 64 KiB - 1; `boundary_shift % 6 == 5` keeps the default (no boundary to speak of).
    pub boundary_shift: u8,
    /// `chunk_sectors`: `u << (chunk % 5)`; `None` for no chunks.
    pub chunk: Option<u8>,
    /// `max_discard_sectors`: `b * (1 + discard % 32)`; `None` for a device that cannot
    /// discard.
    pub discard: Option<u8>,
    /// `max_write_zeroes_sectors`, as `discard`.
    pub write_zeroes: Option<u8>,
    /// `rotational`.
    pub rotational: bool,
    /// `write_cache`: the device has a volatile cache, so flushes reach the driver.
    pub write_cache: bool,
    /// `fua`: the device honours [`BioFlags::FUA`] (else the queue emulates it).
    pub fua: bool,
}

impl LimitsSpec {
    /// The limits this describes (valid, as [`run`] checks).
    pub fn limits(&self) -> QueueLimits {
        let block = 512u32 << (self.block_shift % 4);
        let b = block / 512;
        let u = b.max(8);
        let seg_unit = block.max(4096);
        let boundary = match self.boundary_shift % 6 {
            5 => QueueLimits::new(0).seg_boundary_mask,
            shift => (u64::from(seg_unit) << shift).min(1 << 16) - 1,
        };
        QueueLimits {
            logical_block_size: block,
            max_sectors: u * (1 + u32::from(self.max_sectors % 16)),
            max_segments: 1 + u32::from(self.max_segments % 16),
            max_segment_size: seg_unit << (self.segment_shift % 4),
            seg_boundary_mask: boundary,
            chunk_sectors: self.chunk.map_or(0, |c| u << (c % 5)),
            max_discard_sectors: self.discard.map_or(0, |d| b * (1 + u32::from(d % 32))),
            max_write_zeroes_sectors: self.write_zeroes.map_or(0, |d| b * (1 + u32::from(d % 32))),
            rotational: self.rotational,
            write_cache: self.write_cache,
            fua: self.fua,
            ..QueueLimits::new(512 * (1 + u64::from(self.capacity % 4)))
        }
    }
}

/// Where an I/O starts.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At logical block `block % blocks on the device`.
    At(u16),
    /// Where the last I/O ended (a back merge candidate).
    After,
    /// Ending where the last I/O started (a front merge candidate).
    Before,
}

/// How a bio's data is laid out in memory, in units of the logical block size (every
/// segment's address and length a multiple of it, so that every device segment holds whole
/// blocks).
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Segments: `1 + segments % 8` (at most one per block).
    pub segments: u8,
    /// Seeds where the segments are cut.
    pub sizes: u16,
    /// Bit `i` set: a gap of 1 to 8 blocks before segment `i + 1` (not physically
    /// contiguous with segment `i`).
    pub gaps: u8,
    /// Where the first segment starts: `start % 8` blocks past a 4 KiB boundary, or
    /// `1 + start % 8` blocks before a 64 KiB one when `start & 8` (so that it crosses
    /// boundaries).
    pub start: u8,
    /// The first segment starts right where the previous bio's data ended in memory, when
    /// nothing was placed since (physically contiguous with it).
    pub follow: bool,
    /// One contiguous buffer ([`Bio::buffer`]) instead of a segment table.
    pub buffer: bool,
}

/// One data I/O.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoSpec {
    /// The operation, `kind % 8`: 0 to 3 a read, 4 and 5 a write, 6 a discard, 7 a
    /// write-zeroes.
    pub kind: u8,
    /// Where it starts.
    pub place: Place,
    /// Length: `1 + blocks % (256 / b)` logical blocks, cut at the device's end.
    pub blocks: u8,
    /// Where its data is (reads and writes).
    pub layout: Layout,
    /// Into the plug (flushed by [`Op::Unplug`], a barrier or an unplugged I/O).
    pub plugged: bool,
    /// The issuer an elevator sees: `1 + issuer % 3`.
    pub issuer: u8,
    /// [`BioFlags::SYNC`] on a write.
    pub sync: bool,
    /// On a write, `flush & 1`: [`BioFlags::PREFLUSH`]; `flush & 2`: [`BioFlags::FUA`].
    pub flush: u8,
}

/// One step of a run.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Submits a data I/O (after a barrier, if it overlaps one in flight).
    Io(IoSpec),
    /// Submits an empty [`BioOp::Flush`].
    Flush {
        /// Into the plug.
        plugged: bool,
    },
    /// Flushes the plug.
    Unplug,
    /// The driver ends held request `index % held` with `END_STATUSES[status % 5]`
    /// (`Ok`, `IoErr`, `Medium`, `NoSpace`, `Protection`), moving its bytes on `Ok`; a flush
    /// request always with `Ok`.
    End {
        /// Which held request.
        index: u8,
        /// Which status.
        status: u8,
    },
    /// The driver ends the first `512 * blocks` bytes of held request `index % held` (and
    /// 100 more when `blocks` is odd, which no device ends) with `END_STATUSES[status % 5]`
    /// ([`RequestQueue::update_request`]), moving them on `Ok`, and keeps the rest; with
    /// nothing left, it frees the request.
    Partial {
        /// Which held request.
        index: u8,
        /// How much of it, in 512-byte units.
        blocks: u8,
        /// Which status.
        status: u8,
    },
    /// The driver hands held request `index % held` back with
    /// [`RequestQueue::requeue_request`], kicking the requeue list or not (a barrier kicks
    /// it).
    Requeue {
        /// Which held request.
        index: u8,
        /// Whether to kick the requeue list.
        kick: bool,
    },
    /// The driver turns down the next `1 + count % 4` requests it is offered, with
    /// [`Status::DevResource`] when `dev`, else [`Status::Resource`].
    Busy {
        /// How many.
        count: u8,
        /// Which status.
        dev: bool,
    },
    /// Moves the clock `1 + ms % 16` milliseconds on and runs the host's service: due
    /// elevator timers (BFQ's idling, mq-deadline's aging) and kicked queues.
    Service {
        /// How far, in milliseconds.
        ms: u8,
    },
    /// Waits for everything in flight: the driver ends what it holds with `Ok`, the clock
    /// moves to the elevator's timers, until nothing is left.
    Barrier,
}

impl Op {
    /// Every kind [`Op::kind`] names.
    pub const KINDS: &'static [&'static str] = &[
        "read",
        "write",
        "discard",
        "write-zeroes",
        "flush",
        "unplug",
        "end",
        "requeue",
        "busy",
        "barrier",
    ];

    /// The op's kind, for coverage reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Io(io) => match io.kind % 8 {
                0..=3 => "read",
                4 | 5 => "write",
                6 => "discard",
                _ => "write-zeroes",
            },
            Op::Flush { .. } => "flush",
            Op::Unplug => "unplug",
            Op::End { .. } => "end",
            Op::Partial { .. } => "partial",
            Op::Requeue { .. } => "requeue",
            Op::Busy { .. } => "busy",
            Op::Service { .. } => "service",
            Op::Barrier => "barrier",
        }
    }
}

/// What a run went through, for coverage checks: [`run_counted`] returns it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests the driver ended, by status: with `Ok` and with an error.
    pub ended_ok: u64,
    /// Requests the driver ended with an error.
    pub ended_err: u64,
    /// Requests of more than one bio (merged).
    pub merged: u64,
    /// Requests holding a piece of a split bio.
    pub split: u64,
    /// Data requests of more than one segment.
    pub multi_segment: u64,
    /// Requests whose scatter-gather mapping joined physically contiguous segments.
    pub joined: u64,
    /// First scatter-gather tables that were too small.
    pub sg_too_small: u64,
    /// Partial ends ([`RequestQueue::update_request`]).
    pub partial: u64,
    /// Flush requests the driver ended.
    pub flushes: u64,
    /// Requests the driver handed back.
    pub requeued: u64,
    /// Requests the driver turned down.
    pub turned_down: u64,
    /// Barriers: waits for everything in flight, asked for or forced by an overlap.
    pub barriers: u64,
    /// Bytes of reads checked against the model disk.
    pub bytes_read: u64,
    /// Bytes of writes, discards and write-zeroes that landed.
    pub bytes_written: u64,
    /// Bios that ended.
    pub bios: u64,
}

impl Stats {
    /// Adds `other` in.
    pub fn add(&mut self, other: &Stats) {
        self.ended_ok += other.ended_ok;
        self.ended_err += other.ended_err;
        self.merged += other.merged;
        self.split += other.split;
        self.multi_segment += other.multi_segment;
        self.joined += other.joined;
        self.sg_too_small += other.sg_too_small;
        self.partial += other.partial;
        self.flushes += other.flushes;
        self.requeued += other.requeued;
        self.turned_down += other.turned_down;
        self.barriers += other.barriers;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.bios += other.bios;
    }
}

/// A broken promise: the op it broke at and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The index of the op (the number of ops for the final drain).
    pub step: usize,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {}: {}", self.step, self.message)
    }
}

/// Runs `ops` on the queue `config` describes, checking every byte and every end against
/// the model after every op, then drains everything and checks nothing is left.
///
/// # Errors
/// The first broken promise.
pub fn run(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    run_counted(config, ops).map(|_| ())
}

/// [`run`], returning what the run went through.
///
/// # Errors
/// As [`run`].
pub fn run_counted(config: &Config, ops: &[Op]) -> Result<Stats, Failure> {
    let mut runner = Runner::build(config).map_err(|message| Failure { step: 0, message })?;
    for (step, op) in ops.iter().enumerate() {
        runner
            .step(op)
            .map_err(|message| Failure { step, message })?;
    }
    runner.finish().map_err(|message| Failure {
        step: ops.len(),
        message,
    })
}

std::thread_local! {
    /// Bios ended on this thread: `(private, status)`.
    static ENDED: RefCell<Vec<(u64, Status)>> = const { RefCell::new(Vec::new()) };
}

fn end_io(bio: Bio, status: Status) {
    ENDED.with(|e| e.borrow_mut().push((bio.private, status)));
}

/// The RAM disk's driver: holds what it takes (the model moves the bytes when an op ends a
/// request), or turns it down while `busy`.
struct RamDriver {
    held: SpinMutex<VecDeque<Rq>>,
    busy: AtomicU32,
    dev: AtomicBool,
    /// Requests turned down so far.
    turned: AtomicU32,
}

impl Driver for RamDriver {
    type Platform = TestPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let busy = self.busy.load(Ordering::Relaxed);
        if busy > 0 {
            self.busy.store(busy - 1, Ordering::Relaxed);
            self.turned.fetch_add(1, Ordering::Relaxed);
            let status = if self.dev.load(Ordering::Relaxed) {
                Status::DevResource
            } else {
                Status::Resource
            };
            return Err(Rejected { rq, status });
        }
        self.held.lock().push_back(rq);
        Ok(())
    }
}

/// A bio the model submitted and that has not ended.
struct Live {
    op: BioOp,
    sector: u64,
    sectors: u32,
    /// Where its bytes are in the arena: `(offset, len)`, front to back.
    pieces: Vec<(usize, usize)>,
    /// The table lent to the bio (empty for a contiguous buffer or no data). Freed only
    /// once the bio ended.
    _table: Box<[Segment]>,
    /// The status it must end with.
    expected: Status,
    /// Sectors of it ended in requests so far.
    ended_sectors: u64,
    /// Ends at submission, never reaching a request.
    refused: bool,
}

impl Live {
    /// The arena offset of byte `byte` of the bio's data.
    fn offset_of(&self, byte: usize) -> usize {
        let mut left = byte;
        for &(off, len) in &self.pieces {
            if left < len {
                return off + left;
            }
            left -= len;
        }
        usize::MAX
    }
}

struct Runner {
    // The queue and host first: they drop before the tables they may read.
    queue: Arc<RequestQueue<RamDriver>>,
    host: Arc<Host<RamDriver>>,
    limits: QueueLimits,
    map_sg: bool,
    sg_small: usize,
    /// The RAM disk the driver moves bytes to and from.
    disk: Vec<u8>,
    /// What the disk must hold, and per sector whether it is defined.
    model: Vec<u8>,
    known: Vec<bool>,
    /// Buffer memory; `base` is the arena's aligned start, as an offset in `memory`.
    memory: Vec<u8>,
    base: usize,
    /// Per granule of the arena, the bio owning it (`id + 1`, 0 for none).
    owner: Vec<u64>,
    /// The next free arena offset.
    next: usize,
    live: BTreeMap<u64, Live>,
    /// Data bios in flight by first sector.
    by_sector: BTreeMap<u64, u64>,
    /// Bios waiting to go into the plug.
    plugged: Vec<Bio>,
    /// Bios the queue handed back, to submit again.
    back: Vec<Bio>,
    next_id: u64,
    /// The last data I/O's sectors.
    last: (u64, u64),
    stats: Stats,
}

impl Runner {
    fn build(config: &Config) -> Result<Self, String> {
        let limits = config.limits.limits();
        limits
            .validate()
            .map_err(|e| format!("{limits:?} are invalid: {e:?}"))?;
        let driver = RamDriver {
            held: SpinMutex::new(VecDeque::new()),
            busy: AtomicU32::new(0),
            dev: AtomicBool::new(false),
            turned: AtomicU32::new(0),
        };
        let depth = 1 + usize::from(config.depth) % MAX_DEPTH;
        let host = Host::new(TagSet::builder(depth), TestPlatform::new(1), driver)
            .map_err(|e| format!("host: {e:?}"))?;
        let elevator: Option<Box<dyn Elevator>> = match config.elevator % 3 {
            0 => None,
            1 => Some(Box::new(Deadline::new())),
            _ => Some(Box::new(Bfq::new())),
        };
        let mut queue_config = QueueConfig::new(limits);
        if let Some(elevator) = elevator {
            queue_config = queue_config.elevator(elevator);
        }
        let queue = host
            .add_queue(queue_config)
            .map_err(|e| format!("queue: {e:?}"))?;
        let bytes = (limits.capacity * SECTOR_SIZE) as usize;
        let memory = vec![0u8; ARENA + ARENA_ALIGN];
        let addr = memory.as_ptr() as usize;
        let base = addr.next_multiple_of(ARENA_ALIGN) - addr;
        ENDED.with(|e| e.borrow_mut().clear());
        Ok(Self {
            queue,
            host,
            limits,
            map_sg: config.map_sg,
            sg_small: 1 + usize::from(config.sg_entries % 16),
            disk: vec![0; bytes],
            model: vec![0; bytes],
            known: vec![true; limits.capacity as usize],
            memory,
            base,
            owner: vec![0; ARENA / GRANULE],
            next: 0,
            live: BTreeMap::new(),
            by_sector: BTreeMap::new(),
            plugged: Vec::new(),
            back: Vec::new(),
            next_id: 0,
            last: (0, 0),
            stats: Stats::default(),
        })
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Io(io) => self.io(&io)?,
            Op::Flush { plugged } => {
                let id = self.add_live(BioOp::Flush, 0, 0, Vec::new(), Box::new([]), false);
                let bio = Bio::new(BioOp::Flush, 0, 0).private(id).end_io(end_io);
                self.submit(bio, plugged);
            }
            Op::Unplug => self.unplug(),
            Op::End { index, status } => {
                let held = self.take_held(index);
                if let Some(rq) = held {
                    let status = END_STATUSES[usize::from(status) % END_STATUSES.len()];
                    self.end(rq, None, status)?;
                }
            }
            Op::Partial {
                index,
                blocks,
                status,
            } => {
                let held = self.host.driver().held.lock().len();
                if let Some(rq) = self.take_held(index) {
                    let status = END_STATUSES[usize::from(status) % END_STATUSES.len()];
                    let bytes = u64::from(blocks) * 512 + u64::from(blocks & 1) * 100;
                    self.end(rq, Some((bytes, usize::from(index) % held)), status)?;
                }
            }
            Op::Requeue { index, kick } => {
                if let Some(rq) = self.take_held(index) {
                    self.stats.requeued += 1;
                    self.queue
                        .requeue_request(rq, kick)
                        .map_err(|e| format!("requeue_request refused our request: {e:?}"))?;
                }
            }
            Op::Busy { count, dev } => {
                let driver = self.host.driver();
                driver.dev.store(dev, Ordering::Relaxed);
                driver
                    .busy
                    .store(1 + u32::from(count % 4), Ordering::Relaxed);
            }
            Op::Service { ms } => {
                self.queue
                    .platform()
                    .advance((1 + u64::from(ms % 16)) * 1_000_000);
                self.host.service();
            }
            Op::Barrier => self.drain()?,
        }
        self.collect()?;
        if self.live.is_empty() {
            self.next = 0;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Stats, String> {
        self.host.driver().busy.store(0, Ordering::Relaxed);
        self.drain()?;
        ensure!(
            self.live.is_empty(),
            "{} bios never ended after the drain",
            self.live.len()
        );
        ensure!(
            (
                self.host.set().busy(),
                self.host.in_driver(),
                self.queue.usage()
            ) == (0, 0, 0),
            "after the drain: {} tags busy, {} requests in the driver, usage {}",
            self.host.set().busy(),
            self.host.in_driver(),
            self.queue.usage()
        );
        ensure!(
            self.host.set().bio_slots_in_use() == 0,
            "{} bio slots still in use",
            self.host.set().bio_slots_in_use()
        );
        self.stats.turned_down = u64::from(self.host.driver().turned.load(Ordering::Relaxed));
        Ok(self.stats)
    }

    /// Takes held request `index % held` from the driver.
    fn take_held(&self, index: u8) -> Option<Rq> {
        let mut held = self.host.driver().held.lock();
        if held.is_empty() {
            return None;
        }
        let at = usize::from(index) % held.len();
        held.remove(at)
    }

    fn add_live(
        &mut self,
        op: BioOp,
        sector: u64,
        sectors: u32,
        pieces: Vec<(usize, usize)>,
        table: Box<[Segment]>,
        refused: bool,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        for &(off, len) in &pieces {
            for g in off / GRANULE..(off + len) / GRANULE {
                self.owner[g] = id + 1;
            }
        }
        if op != BioOp::Flush && !refused {
            self.by_sector.insert(sector, id);
        }
        let expected = if refused {
            Status::NotSupported
        } else {
            Status::Ok
        };
        self.live.insert(
            id,
            Live {
                op,
                sector,
                sectors,
                pieces,
                _table: table,
                expected,
                ended_sectors: 0,
                refused,
            },
        );
        id
    }

    /// Whether a data bio in flight (or waiting in the plug) overlaps `[start, end)`.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        let in_flight = self
            .by_sector
            .range(..end)
            .next_back()
            .is_some_and(|(_, id)| {
                let live = &self.live[id];
                live.sector + u64::from(live.sectors) > start
            });
        in_flight
            || self
                .back
                .iter()
                .chain(&self.plugged)
                .any(|b| b.sectors > 0 && b.sector < end && b.end_sector() > start)
    }

    fn io(&mut self, io: &IoSpec) -> Result<(), String> {
        let limits = self.limits;
        let b = u64::from(limits.logical_block_size) / SECTOR_SIZE;
        let device_blocks = limits.capacity / b;
        let blocks = 1 + u64::from(io.blocks) % (256 / b);
        let start_block = match io.place {
            Place::At(at) => u64::from(at) % device_blocks,
            Place::After => (self.last.1 / b) % device_blocks,
            Place::Before => (self.last.0 / b).saturating_sub(blocks),
        };
        let blocks = blocks.min(device_blocks - start_block);
        let (sector, sectors) = (start_block * b, (blocks * b) as u32);
        let end = sector + u64::from(sectors);
        self.last = (sector, end);
        let op = match io.kind % 8 {
            0..=3 => BioOp::Read,
            4 | 5 => BioOp::Write,
            6 => BioOp::Discard,
            _ => BioOp::WriteZeroes,
        };
        let refused = match op {
            BioOp::Discard => limits.max_discard_sectors == 0,
            BioOp::WriteZeroes => limits.max_write_zeroes_sectors == 0,
            _ => false,
        };
        if !refused && self.overlaps(sector, end) {
            self.drain()?;
        }
        let bytes = sectors as usize * SECTOR_SIZE as usize;
        let (pieces, table) = if op.has_data() {
            let mut layout = self.layout(&io.layout, bytes);
            if layout.is_none() {
                // The arena is full: wait for what holds it.
                self.drain()?;
                layout = self.layout(&io.layout, bytes);
            }
            layout.ok_or_else(|| format!("no room in the arena for {bytes} bytes"))?
        } else {
            (Vec::new(), Vec::new())
        };
        let mut bio = Bio::new(op, sector, sectors)
            .issuer(IssuerId(1 + u32::from(io.issuer % 3)))
            .end_io(end_io);
        if op == BioOp::Write {
            let mut flags = BioFlags::empty();
            flags.set(BioFlags::SYNC, io.sync);
            flags.set(BioFlags::PREFLUSH, io.flush & 1 != 0);
            flags.set(BioFlags::FUA, io.flush & 2 != 0);
            bio = bio.flags(flags);
        }
        if op == BioOp::Write {
            // What the write carries: every sector of every write different.
            let seed = self.next_id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut device = 0u64;
            for &(off, len) in &pieces {
                let at = self.base + off;
                for (i, byte) in self.memory[at..at + len].iter_mut().enumerate() {
                    let o = device + i as u64;
                    let salt = seed ^ (o / 512).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    *byte = (salt >> ((o % 8) * 8)) as u8 ^ ((o % 512) / 8) as u8;
                }
                device += len as u64;
            }
        } else if op == BioOp::Read {
            for &(off, len) in &pieces {
                let at = self.base + off;
                self.memory[at..at + len].fill(0xa5);
            }
        }
        let table: Box<[Segment]> = table.into_boxed_slice();
        if op.has_data() {
            if io.layout.buffer {
                bio = bio.buffer(self.addr(pieces[0].0));
            } else {
                // SAFETY: the table is a heap allocation the model keeps, unmoved and
                // unchanged, in the bio's `Live` entry, which goes only once the bio's
                // `end_io` ran (`collect`), or after the queue and host are dropped.
                bio = unsafe { bio.segments_raw(&table) };
            }
        }
        let id = self.add_live(op, sector, sectors, pieces, table, refused);
        self.submit(bio.private(id), io.plugged);
        Ok(())
    }

    /// The address of arena offset `off`.
    fn addr(&self, off: usize) -> u64 {
        (self.memory.as_ptr() as usize + self.base + off) as u64
    }

    /// Lays `bytes` out in the arena as `layout` says: the pieces (arena offsets) and the
    /// segment table. `None` when the arena has no room.
    #[allow(clippy::type_complexity)]
    fn layout(
        &mut self,
        layout: &Layout,
        bytes: usize,
    ) -> Option<(Vec<(usize, usize)>, Vec<Segment>)> {
        // Every address and length a multiple of the logical block size, so that every
        // device segment holds whole blocks.
        let unit = (self.limits.logical_block_size as usize).max(GRANULE);
        let units = bytes / unit;
        let wanted = if layout.buffer {
            1
        } else {
            1 + usize::from(layout.segments % 8)
        };
        let mut rng = u32::from(layout.sizes) | 1 << 16;
        let mut random = move || {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng as usize
        };
        let mut cuts: Vec<usize> = (1..wanted.min(units))
            .map(|_| 1 + random() % (units - 1))
            .collect();
        cuts.push(units);
        cuts.sort_unstable();
        cuts.dedup();
        let mut at = if layout.follow {
            self.next
        } else if layout.start & 8 != 0 {
            (self.next + unit * 8).next_multiple_of(ARENA_ALIGN)
                - unit * usize::from(1 + layout.start % 8)
        } else {
            self.next.next_multiple_of(4096) + unit * usize::from(layout.start % 8)
        };
        let mut pieces = Vec::with_capacity(cuts.len());
        let mut table = Vec::with_capacity(cuts.len());
        let mut from = 0;
        for (i, &cut) in cuts.iter().enumerate() {
            if i > 0 && layout.gaps & (1 << ((i - 1) % 8)) != 0 {
                at += unit * (1 + random() % 8);
            }
            let len = (cut - from) * unit;
            if at + len > ARENA {
                return None;
            }
            pieces.push((at, len));
            table.push(Segment::new(self.addr(at), len as u32));
            at += len;
            from = cut;
        }
        self.next = at;
        Some((pieces, table))
    }

    fn submit(&mut self, bio: Bio, plugged: bool) {
        if plugged {
            self.plugged.push(bio);
            return;
        }
        self.unplug();
        if let Err(back) = self.queue.submit(bio) {
            self.back.push(back);
        }
    }

    fn unplug(&mut self) {
        if self.plugged.is_empty() {
            return;
        }
        let bios = core::mem::take(&mut self.plugged);
        let mut plug = Plug::new();
        for bio in bios {
            if let Err(back) = self.queue.submit_plugged(&mut plug, bio) {
                self.back.push(back);
            }
        }
    }

    /// The bio in flight holding sector range `[sector, sector + sectors)` of a request.
    fn owner_of(&self, sector: u64, sectors: u64) -> Result<u64, String> {
        let found = self.by_sector.range(..=sector).next_back();
        match found {
            Some((_, &id))
                if self.live[&id].sector + u64::from(self.live[&id].sectors)
                    >= sector + sectors =>
            {
                Ok(id)
            }
            _ => Err(format!(
                "a request holds sectors {sector}+{sectors}, in no bio in flight"
            )),
        }
    }

    /// The driver ends `rq` with `status`, moving its bytes when `Ok`: all of it, or with
    /// `part`, its first `part` bytes ([`RequestQueue::update_request`]), keeping the rest
    /// (at `index` of what it holds) if any remains.
    fn end(
        &mut self,
        mut rq: Rq,
        part: Option<(u64, usize)>,
        status: Status,
    ) -> Result<(), String> {
        let io = self.queue.io(&rq).ok_or("a held request has no I/O")?;
        let (op, sector, sectors) = (io.op(), io.sector(), io.sectors());
        let data_bytes = io.data_bytes();
        ensure!(
            data_bytes
                == if op.has_data() {
                    sectors * SECTOR_SIZE
                } else {
                    0
                },
            "a {op:?} request of {sectors} sectors carries {data_bytes} bytes"
        );
        ensure!(
            !io.flags().contains(BioFlags::FUA) || self.limits.fua,
            "a {op:?} request at {sector} keeps FUA on a device without it"
        );
        if op == BioOp::Flush {
            return self.end_flush(rq, sectors);
        }
        // Which bios it holds.
        let mut pieces = Vec::new();
        self.queue.for_each_bio(&rq, |bio| {
            pieces.push((bio.op, bio.sector, bio.sectors, bio.private, bio.flags))
        });
        let mut at = sector;
        let mut ids = Vec::with_capacity(pieces.len());
        for &(piece_op, piece_sector, piece_sectors, _, _) in &pieces {
            ensure!(piece_op == op, "a {op:?} request holds a {piece_op:?} bio");
            ensure!(
                piece_sector == at,
                "request at {sector}: a bio at {piece_sector}, expected {at}"
            );
            at += u64::from(piece_sectors);
            let id = self.owner_of(piece_sector, u64::from(piece_sectors))?;
            ids.push((id, piece_sector, u64::from(piece_sectors)));
        }
        if status.is_ok() {
            self.stats.ended_ok += 1;
        } else {
            self.stats.ended_err += 1;
        }
        self.stats.merged += u64::from(pieces.len() > 1);
        self.stats.split += u64::from(pieces.iter().any(|p| p.4.contains(BioFlags::SPLIT)));
        ensure!(
            at == sector + sectors,
            "request {sector}+{sectors}: its bios end at {at}"
        );
        // The sectors the driver ends: whole logical blocks, at most the request.
        let block = u64::from(self.limits.logical_block_size);
        let want = match part {
            None => sectors,
            Some((bytes, _)) => bytes.min(sectors * SECTOR_SIZE) / block * (block / SECTOR_SIZE),
        };
        let moved = if status.is_ok() {
            want * SECTOR_SIZE
        } else {
            0
        };
        if op.has_data() {
            self.check_and_move(&rq, sector, data_bytes, moved, op == BioOp::Write)?;
        } else {
            let range = (sector * SECTOR_SIZE) as usize..(sector * SECTOR_SIZE + moved) as usize;
            self.disk[range].fill(0);
        }
        let ended = match part {
            None => {
                self.queue
                    .end_request(rq, status)
                    .map_err(|e| format!("end_request refused our request: {e:?}"))?;
                sectors
            }
            Some((bytes, index)) => {
                self.stats.partial += 1;
                let more = self
                    .queue
                    .update_request(&mut rq, bytes, status)
                    .map_err(|e| format!("update_request refused our request: {e:?}"))?;
                let io = self.queue.io(&rq).ok_or("a request has no I/O")?;
                let (rest, rest_sectors) = (io.sector(), io.sectors());
                let ended = if more {
                    rest - sector
                } else {
                    // Nothing left: no bio, but in a flush sequence, whose one bio waits
                    // on the request, with no sector, for the sequence to end it.
                    let mut lengths = Vec::new();
                    self.queue
                        .for_each_bio(&rq, |bio| lengths.push(bio.sectors));
                    ensure!(
                        io.sectors() == 0 && lengths.len() <= 1 && lengths.iter().all(|&n| n == 0),
                        "update_request left nothing, and bios of {:?} sectors",
                        lengths
                    );
                    sectors
                };
                // Short of what was asked only where an error would have cut a bio whole
                // that no split slot could park: at that bio's first sector.
                let cut_whole = ids.iter().any(|&(_, first, _)| first == sector + ended)
                    && pieces
                        .iter()
                        .any(|p| p.1 == sector + ended && !p.4.contains(BioFlags::SPLIT));
                ensure!(
                    ended == want || (!status.is_ok() && ended < want && cut_whole),
                    "update_request of {bytes} bytes of {sector}+{sectors} with {status:?}: \
                     the rest is {rest}+{rest_sectors} ({more}), {want} sectors should have \
                     ended"
                );
                ensure!(
                    !more || rest + rest_sectors == sector + sectors,
                    "after update_request the rest {rest}+{rest_sectors} does not end where \
                     {sector}+{sectors} did"
                );
                if more {
                    let mut held = self.host.driver().held.lock();
                    let at = index.min(held.len());
                    held.insert(at, rq);
                } else {
                    // Nothing left: freed, ending nothing more.
                    self.queue
                        .end_request(rq, status)
                        .map_err(|e| format!("end_request refused our request: {e:?}"))?;
                }
                ended
            }
        };
        for (id, first, len) in ids {
            let covered = (first + len).min(sector + ended).saturating_sub(first);
            if covered == 0 {
                continue;
            }
            let live = self
                .live
                .get_mut(&id)
                .ok_or_else(|| format!("a request holds a piece of bio {id}, which ended"))?;
            live.ended_sectors += covered;
            if live.expected.is_ok() {
                live.expected = status;
            }
        }
        Ok(())
    }

    /// The driver ends a flush request: empty, and always `Ok` (the RAM disk has no cache
    /// to lose). Which bios a flush serves is the flush sequence's business; a flush bio's
    /// end is checked for its status alone.
    fn end_flush(&mut self, rq: Rq, sectors: u64) -> Result<(), String> {
        ensure!(
            self.limits.write_cache,
            "a flush reached the driver of a device without a write cache"
        );
        let segments = self.queue.segments(&rq).map_or(0, Iterator::count);
        ensure!(
            sectors == 0 && segments == 0,
            "a flush request of {sectors} sectors and {segments} segments"
        );
        self.stats.flushes += 1;
        self.queue
            .end_request(rq, Status::Ok)
            .map_err(|e| format!("end_request refused our flush: {e:?}"))
    }

    /// Checks the segments of data request `rq` (at `sector`, `bytes` long) and copies its
    /// first `moves` bytes: onto the disk for a write, into the buffers for a read.
    fn check_and_move(
        &mut self,
        rq: &Rq,
        sector: u64,
        bytes: u64,
        moves: u64,
        write: bool,
    ) -> Result<(), String> {
        let walked: Vec<Segment> = self
            .queue
            .segments(rq)
            .ok_or("a held request has no segments")?
            .collect();
        let total: u64 = walked.iter().map(|s| u64::from(s.len)).sum();
        self.stats.multi_segment += u64::from(walked.len() > 1);
        ensure!(
            total == bytes,
            "request at {sector}: segments of {total} bytes, {bytes} expected: {walked:x?}"
        );
        let segs = if self.map_sg {
            let mut small = vec![Segment::default(); self.sg_small];
            let mut full = vec![Segment::default(); SG_FULL];
            let used = self
                .queue
                .map_sg(rq, &mut full)
                .map_err(|e| format!("map_sg into {SG_FULL} entries: {e}"))?;
            match self.queue.map_sg(rq, &mut small) {
                Ok(n) => {
                    ensure!(
                        n == used && small[..n] == full[..n],
                        "map_sg into {} entries: {:x?}, into {SG_FULL}: {:x?}",
                        self.sg_small,
                        &small[..n],
                        &full[..used]
                    );
                }
                Err(SgTooSmall { needed }) => {
                    self.stats.sg_too_small += 1;
                    ensure!(
                        needed == used && needed > self.sg_small,
                        "map_sg into {} entries needs {needed}; into {SG_FULL} it used {used}",
                        self.sg_small
                    );
                }
            }
            let sg = &full[..used];
            let joined = sg.iter().any(|e| {
                !walked
                    .iter()
                    .any(|w| w.addr <= e.addr && e.end() <= w.end())
            });
            self.stats.joined += u64::from(joined);
            let mapped: u64 = sg.iter().map(|s| u64::from(s.len)).sum();
            // Each segment cut at the boundaries and to the segment size, nothing joined.
            let cut: usize = walked.iter().map(|s| self.pieces_of(s)).sum();
            ensure!(
                mapped == bytes && used <= cut,
                "request at {sector}: map_sg gave {used} entries of {mapped} bytes for \
                 {} segments of {bytes} ({cut} once cut to the limits): {sg:x?}",
                walked.len()
            );
            // The request's segment count bounds its mapping, and the limit bounds the count
            // (a table of `max_segments` entries always holds a request).
            let counted = self.queue.io(rq).map_or(0, |io| io.segments()) as usize;
            ensure!(
                used <= counted && counted <= self.limits.max_segments as usize,
                "request at {sector}: map_sg used {used} entries, the request counts {counted} \
                 segments, the limit is {}",
                self.limits.max_segments
            );
            let mask = self.limits.seg_boundary_mask;
            for s in sg {
                ensure!(
                    s.len <= self.limits.max_segment_size
                        && (s.addr | mask) == ((s.end() - 1) | mask),
                    "map_sg entry {s:x?} breaks the segment size or boundary"
                );
            }
            sg.to_vec()
        } else {
            walked
        };
        let start = self.addr(0);
        let mut device = sector * SECTOR_SIZE;
        for seg in segs {
            let off = seg.addr.wrapping_sub(start) as usize;
            let len = seg.len as usize;
            ensure!(
                seg.addr >= start && off + len <= ARENA,
                "segment {seg:x?} is outside the buffers"
            );
            ensure!(
                off % GRANULE == 0 && len % GRANULE == 0,
                "segment {seg:x?} is not where any bio's data starts"
            );
            // Each granule is where the bio holding the device sector it carries keeps that
            // sector's bytes.
            for (i, g) in (off / GRANULE..(off + len) / GRANULE).enumerate() {
                let dev_sector = device / SECTOR_SIZE + i as u64;
                let id = self.owner_of(dev_sector, 1)?;
                let live = &self.live[&id];
                let expected = live.offset_of((dev_sector - live.sector) as usize * GRANULE);
                ensure!(
                    g * GRANULE == expected,
                    "segment {seg:x?} carries sector {dev_sector} of bio {id} from arena \
                     offset {:#x} (of bio {}), where the bio keeps it at {expected:#x}",
                    g * GRANULE,
                    self.owner[g] as i64 - 1
                );
            }
            let first = sector * SECTOR_SIZE;
            let len = len.min((first + moves).saturating_sub(device) as usize);
            if len > 0 {
                let mem = self.base + off..self.base + off + len;
                let disk = device as usize..device as usize + len;
                if write {
                    self.disk[disk].copy_from_slice(&self.memory[mem]);
                } else {
                    self.memory[mem].copy_from_slice(&self.disk[disk]);
                }
            }
            device += u64::from(seg.len);
        }
        Ok(())
    }

    /// Device segments `seg` makes on its own: cut at every boundary and to the segment
    /// size.
    fn pieces_of(&self, seg: &Segment) -> usize {
        let mask = self.limits.seg_boundary_mask;
        let (mut at, end) = (seg.addr, seg.end());
        let mut pieces = 0;
        while at < end {
            let window_end = (at | mask).saturating_add(1);
            at = end
                .min(window_end)
                .min(at + u64::from(self.limits.max_segment_size));
            pieces += 1;
        }
        pieces
    }

    /// Takes the bios that ended and checks each against the model.
    fn collect(&mut self) -> Result<(), String> {
        let ended = ENDED.with(|e| core::mem::take(&mut *e.borrow_mut()));
        for (id, status) in ended {
            let live = self
                .live
                .remove(&id)
                .ok_or_else(|| format!("bio {id} ended twice (now with {status:?})"))?;
            for &(off, len) in &live.pieces {
                for g in off / GRANULE..(off + len) / GRANULE {
                    self.owner[g] = 0;
                }
            }
            if live.op != BioOp::Flush && !live.refused {
                self.by_sector.remove(&live.sector);
            }
            self.stats.bios += 1;
            let what = format!("{:?} bio {id} at {}+{}", live.op, live.sector, live.sectors);
            ensure!(
                status == live.expected,
                "{what} ended with {status:?}, the driver gave {:?}",
                live.expected
            );
            ensure!(
                live.refused
                    || live.op == BioOp::Flush
                    || live.ended_sectors == u64::from(live.sectors),
                "{what} ended with {} of its sectors ended in requests",
                live.ended_sectors
            );
            if live.refused || live.op == BioOp::Flush {
                continue;
            }
            let first = live.sector as usize;
            let range = first * 512..(first + live.sectors as usize) * 512;
            let known = first..first + live.sectors as usize;
            if !status.is_ok() {
                if live.op.is_write() {
                    self.known[known].fill(false);
                }
                continue;
            }
            match live.op {
                BioOp::Read => {
                    let mut device = range.start;
                    for &(off, len) in &live.pieces {
                        let mem = &self.memory[self.base + off..self.base + off + len];
                        for (i, chunk) in mem.chunks(512).enumerate() {
                            let at = device + i * 512;
                            if self.known[at / 512] {
                                ensure!(
                                    chunk == &self.model[at..at + 512],
                                    "{what}: sector {} read back wrong",
                                    at / 512
                                );
                            }
                        }
                        device += len;
                    }
                    self.stats.bytes_read += live.sectors as u64 * 512;
                }
                BioOp::Write => {
                    let mut device = range.start;
                    for &(off, len) in &live.pieces {
                        let mem = self.base + off..self.base + off + len;
                        self.model[device..device + len].copy_from_slice(&self.memory[mem]);
                        device += len;
                    }
                    self.known[known].fill(true);
                    self.stats.bytes_written += live.sectors as u64 * 512;
                }
                _ => {
                    self.stats.bytes_written += live.sectors as u64 * 512;
                    self.model[range].fill(0);
                    self.known[known].fill(true);
                }
            }
        }
        Ok(())
    }

    /// Ends everything in flight: submits what waits, ends what the driver holds with `Ok`,
    /// runs kicked queues and the elevator's timers, until nothing is left; then checks the
    /// RAM disk against the model.
    fn drain(&mut self) -> Result<(), String> {
        self.unplug();
        self.stats.barriers += 1;
        let queue = Arc::clone(&self.queue);
        let platform = queue.platform();
        let mut rounds = 0;
        loop {
            self.collect()?;
            let held = self.host.driver().held.lock().pop_front();
            if let Some(rq) = held {
                self.end(rq, None, Status::Ok)?;
                continue;
            }
            if self.live.is_empty() && self.back.is_empty() {
                break;
            }
            rounds += 1;
            ensure!(
                rounds < MAX_DRAIN_ROUNDS,
                "still not drained after {rounds} rounds: {} bios outstanding, {} handed \
                 back, {} requests in the driver, usage {}",
                self.live.len(),
                self.back.len(),
                self.host.in_driver(),
                self.queue.usage()
            );
            for bio in core::mem::take(&mut self.back) {
                if let Err(back) = self.queue.submit(bio) {
                    self.back.push(back);
                }
            }
            self.queue.kick_requeue_list();
            self.host.run_kicked();
            self.queue.run_hw_queues();
            if self.host.driver().held.lock().is_empty() {
                // Nothing to end: what is left waits for a timer (BFQ idling).
                let now = platform.now_ns();
                let next = self.queue.next_timer().unwrap_or(now + 1_000_000);
                platform.advance(next.saturating_sub(now).max(1));
                self.host.service();
            }
        }
        self.next = 0;
        for sector in 0..self.limits.capacity as usize {
            if self.known[sector] {
                let range = sector * 512..(sector + 1) * 512;
                ensure!(
                    self.disk[range.clone()] == self.model[range],
                    "after a barrier, sector {sector} on the disk is not what was written"
                );
            }
        }
        Ok(())
    }
}
