//! The RAID HBA driver: how a driver for a host with many hardware queues, shared tags and
//! a per-device queue depth is written on blkmq.
//!
//! # The hardware
//!
//! A megaraid-like host bus adapter: the firmware exposes one RAID-0 volume striped over
//! [`MEMBERS`] drives in strips of [`STRIPE_SECTORS`], takes commands on as many request
//! queues as the host has hardware queues (one per CPU, up to 128), and posts each finished
//! command on a reply queue, one per MSI-X vector, whose interrupt the host handles on a
//! CPU of its own. The volume, like every SCSI device, accepts at most its queue depth of
//! commands at a time (its *budget*), whatever the tags the host has free. Here the
//! firmware is modeled: a command "goes to" the member drive its sector stripes to, that
//! member moves the data, and it is due on its reply queue at once or after the member's
//! service time. In verify mode the members keep data stores (the first
//! [`VERIFY_SECTORS`] of the volume) and `queue_rq` copies each request's segments to or
//! from the member stripes they map to; otherwise commands move no bytes, and cost only
//! what the block layer costs.
//!
//! # What each `Driver` method does
//!
//! * [`init_request`](Driver::init_request) makes the driver's data of every request (its
//!   [`Cmd`], Linux's `scsi_cmnd` private area) once, when the tags are created; nothing is
//!   allocated per I/O.
//! * [`get_budget`](Driver::get_budget) takes one unit of the volume's queue depth before
//!   the queue hands over a request, and answers `false` when none is left: the queue keeps
//!   the request and waits for a completion. [`put_budget`](Driver::put_budget) gives a unit
//!   back, called by the queue when the request it was taken for ends, is requeued or is
//!   not issued after all. The driver never gives budget back itself.
//! * [`queue_rq`](Driver::queue_rq) issues a request: it finds the member drive (the
//!   volume's `chunk_sectors` keeps every request inside one strip, so one command goes to
//!   one member), fills in the command, and posts it on the reply queue of its hardware
//!   queue. When the firmware's queue is full it answers [`Status::Resource`] and hands the
//!   request back. In verify mode it first moves the data: it walks the request's
//!   segments ([`RequestQueue::segments`](blkmq_core::RequestQueue::segments)) and maps
//!   each byte range to its member and member sector by RAID-0 chunking ([`stripe`]),
//!   copying member to buffer for a read, buffer to member for a write.
//!
//! # Where completions come from
//!
//! From the reply queues, as from an interrupt: the load's completion threads (or, with
//! completions inline, each submitter for the reply queue of its own hardware queue) call
//! [`Hba::take_due`] for the commands due and end them in one batch with
//! [`RequestQueue::end_requests`](blkmq_core::RequestQueue::end_requests). Ending a request
//! frees its tag and its budget unit, and reruns its hardware queue. The driver has no
//! thread and never looks at the queue for work: it takes what the queue hands it.
//!
//! # Restart and resource
//!
//! Two things can turn a request away, and neither needs code in the driver to recover:
//!
//! * No budget left (`get_budget` answers `false`): the request stays queued, and the
//!   completion that gives a unit back reruns the hardware queue.
//! * The firmware's queue full (`queue_rq` answers [`Status::Resource`]): the queue keeps
//!   the request at the head of the hardware queue and runs it again when a request
//!   completes (with nothing in flight, it asks the platform to kick the queue).
//!
//! Either way the hardware queue that gave up is marked as waiting, and a completion, once
//! it gave its tag and budget unit back, reruns the queues marked and only those: with
//! shared host tags a completion on one hardware queue may free the tag another waits for,
//! and nothing scans the 128 queues to find it. Seed 001's regression was a completion path
//! that asked every hardware queue instead; the load's [`Mode::Naive`](super::Mode::Naive)
//! does so, outside the driver, to measure what that cost.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use blkmq_core::{
    Driver, HctxCx, Op, Rejected, RequestInit, RequestQueue, Rq, SECTOR_SIZE, Status, StdPlatform,
};

use super::setup::Config;

/// Member drives of the RAID-0 volume.
pub(crate) const MEMBERS: u64 = 8;
/// The strip: sectors on one member before the next member takes over (64 KiB).
pub(crate) const STRIPE_SECTORS: u64 = 128;
/// Sectors of every read (4 KiB).
pub(crate) const IO_SECTORS: u32 = 8;
/// Sectors of each member drive (8 GiB).
pub(crate) const MEMBER_SECTORS: u64 = 1 << 24;
/// Sectors of the volume.
pub(crate) const CAPACITY: u64 = MEMBERS * MEMBER_SECTORS;

/// A 64-bit mix (splitmix64's finaliser).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The member drive and its sector for a volume sector.
pub(crate) fn stripe(sector: u64) -> (u64, u64) {
    let strip = sector / STRIPE_SECTORS;
    let member = strip % MEMBERS;
    (
        member,
        (strip / MEMBERS) * STRIPE_SECTORS + sector % STRIPE_SECTORS,
    )
}

/// Sectors of the volume a verify run writes and reads (16 MiB: 2 MiB on each member),
/// the size of the members' data stores.
pub(crate) const VERIFY_SECTORS: u64 = 32_768;

/// The seed of what member `member` holds at its sector `member_sector` (see
/// [`pattern`]): different for every member and sector.
pub(crate) fn data_of(member: u64, member_sector: u64) -> u64 {
    mix((member << 56) ^ member_sector)
}

/// Fills `out` (whole sectors) with what a verify run of generation `generation` writes
/// from volume sector `sector` on: each sector's bytes derived from the seed of the member
/// and member sector it stripes to, so a byte in the wrong place, on the wrong member or
/// left from another run does not match.
pub(crate) fn pattern(sector: u64, generation: u64, out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(SECTOR_SIZE as usize).enumerate() {
        let (member, member_sector) = stripe(sector + i as u64);
        let seed = data_of(member, member_sector) ^ generation.wrapping_mul(0x9e37_79b9);
        for (w, bytes) in chunk.chunks_mut(8).enumerate() {
            let word = mix(seed ^ w as u64).to_le_bytes();
            bytes.copy_from_slice(&word[..bytes.len()]);
        }
    }
}

/// The driver's data in every request (Linux's `scsi_cmnd` private area).
#[derive(Debug, Default)]
pub(crate) struct Cmd {
    /// The member drive the command went to.
    pub(crate) member: AtomicU64,
}

/// A command on a reply queue: due at `due_ns` (platform time).
struct Reply {
    rq: Rq,
    due_ns: u64,
}

/// The HBA driver.
pub(crate) struct Hba {
    /// The reply queues, one per MSI-X vector.
    replies: Box<[Mutex<VecDeque<Reply>>]>,
    /// Budget units left.
    budget: AtomicUsize,
    /// Read commands each member drive took.
    member_ios: [AtomicU64; MEMBERS as usize],
    /// Commands turned down for want of room.
    rejects: AtomicU64,
    /// In verify mode, each member's data: its first `VERIFY_SECTORS / MEMBERS` sectors.
    members: Box<[Mutex<Vec<u8>>]>,
    /// Requests whose data did not map to the members' stores (outside them, or naming
    /// no buffer).
    data_errors: AtomicU64,
    latency_ns: u64,
    verify: bool,
}

impl Hba {
    /// A host of `cfg.reply_queues` reply queues of `cfg.depth` commands each, a volume of
    /// `cfg.budget` commands at a time, members of `cfg.latency_ns`.
    pub(crate) fn new(cfg: &Config) -> Self {
        Self {
            replies: (0..cfg.reply_queues.max(1))
                .map(|_| Mutex::new(VecDeque::with_capacity(cfg.depth)))
                .collect(),
            budget: AtomicUsize::new(cfg.budget),
            member_ios: Default::default(),
            rejects: AtomicU64::new(0),
            members: (0..if cfg.verify { MEMBERS } else { 0 })
                .map(|_| Mutex::new(vec![0; (VERIFY_SECTORS / MEMBERS * SECTOR_SIZE) as usize]))
                .collect(),
            data_errors: AtomicU64::new(0),
            latency_ns: cfg.latency_ns,
            verify: cfg.verify,
        }
    }

    /// Copies what member `member` holds from its sector `member_sector` into `out`;
    /// `false` outside its store (or without one: not verifying).
    pub(crate) fn member_data(&self, member: u64, member_sector: u64, out: &mut [u8]) -> bool {
        let Some(store) = self.members.get(member as usize) else {
            return false;
        };
        let start = (member_sector * SECTOR_SIZE) as usize;
        match lock(store).get(start..start + out.len()) {
            Some(bytes) => {
                out.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Requests whose data did not map to the members' stores, so far.
    pub(crate) fn data_errors(&self) -> u64 {
        self.data_errors.load(Ordering::Relaxed)
    }

    /// Moves a request's data between its segments and the member stripes they map to;
    /// `false`, having moved what maps, when some does not.
    fn move_data(&self, queue: &RequestQueue<Self>, rq: &Rq) -> bool {
        let Some(io) = queue.io(rq) else {
            return false;
        };
        let (read, mut at) = (io.op() == Op::Read, io.sector() * SECTOR_SIZE);
        let mut mapped = true;
        queue.for_each_bio(rq, |bio| mapped &= bio.data.is_mapped());
        if !mapped || !io.op().has_data() {
            return !io.op().has_data();
        }
        for seg in queue.segments(rq).into_iter().flatten() {
            let (mut addr, mut left) = (seg.addr, u64::from(seg.len));
            while left > 0 {
                // The piece of the segment inside one strip, on one member.
                let (member, member_sector) = stripe(at / SECTOR_SIZE);
                let in_strip = STRIPE_SECTORS * SECTOR_SIZE - at % (STRIPE_SECTORS * SECTOR_SIZE);
                let n = left.min(in_strip);
                let start = (member_sector * SECTOR_SIZE + at % SECTOR_SIZE) as usize;
                let mut store = lock(&self.members[member as usize]);
                let Some(bytes) = store.get_mut(start..start + n as usize) else {
                    return false;
                };
                let mem = addr as usize as *mut u8;
                // SAFETY: in verify mode the load names, in each bio, a buffer of its own
                // that is valid for the bio's length and untouched by anything else until
                // the bio ends (after this request's completion); `bytes` is the member's
                // own memory, borrowed here, so the two never overlap.
                unsafe {
                    if read {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), mem, bytes.len());
                    } else {
                        std::ptr::copy_nonoverlapping(
                            mem.cast_const(),
                            bytes.as_mut_ptr(),
                            bytes.len(),
                        );
                    }
                }
                (addr, left, at) = (addr + n, left - n, at + n);
            }
        }
        true
    }

    /// Budget units left (all of them once the volume is idle).
    pub(crate) fn budget_left(&self) -> usize {
        self.budget.load(Ordering::Acquire)
    }

    /// Read commands each member drive took.
    pub(crate) fn member_ios(&self) -> [u64; MEMBERS as usize] {
        core::array::from_fn(|m| self.member_ios[m].load(Ordering::Relaxed))
    }

    /// Commands still on the reply queues.
    pub(crate) fn pending(&self) -> usize {
        self.replies.iter().map(|r| lock(r).len()).sum()
    }

    /// The reply queues (MSI-X vectors).
    pub(crate) fn reply_queues(&self) -> usize {
        self.replies.len()
    }

    /// The interrupt of reply queue `reply_queue`: moves every command due by `now_ns`
    /// (in order; a later one waits behind an earlier one not yet due) onto `batch`, for
    /// the caller to end.
    pub(crate) fn take_due(&self, reply_queue: usize, now_ns: u64, batch: &mut Vec<Rq>) {
        let mut reply = lock(&self.replies[reply_queue]);
        while reply.front().is_some_and(|c| c.due_ns <= now_ns) {
            if let Some(c) = reply.pop_front() {
                batch.push(c.rq);
            }
        }
    }
}

/// Locks `m`, through a poisoned lock too.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Driver for Hba {
    type Platform = StdPlatform;
    type Payload = Cmd;

    fn init_request(&self, _: RequestInit) -> Cmd {
        Cmd::default()
    }

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let Some((sector, op)) = cx.io(&rq).map(|io| (io.sector(), io.op())) else {
            return Err(Rejected {
                rq,
                status: Status::IoErr,
            });
        };
        // `chunk_sectors` keeps a request inside one strip: one member per command.
        let (member, _) = stripe(sector);
        if let Some(cmd) = cx.request(&rq).map(|r| r.payload()) {
            cmd.member.store(member, Ordering::Relaxed);
        }
        if self.verify && !self.move_data(cx.queue(), &rq) {
            self.data_errors.fetch_add(1, Ordering::Relaxed);
        }
        if op == Op::Read {
            self.member_ios[member as usize].fetch_add(1, Ordering::Relaxed);
        }
        let due_ns = if self.latency_ns == 0 {
            0
        } else {
            use blkmq_core::Platform;
            cx.queue().platform().now_ns() + self.latency_ns
        };
        let mut reply = lock(&self.replies[cx.hctx() % self.replies.len()]);
        if reply.len() == reply.capacity() {
            // The firmware's queue is full: "not now".
            self.rejects.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        reply.push_back(Reply { rq, due_ns });
        Ok(())
    }

    fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
        self.budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    fn put_budget(&self, _: &HctxCx<'_, Self>) {
        self.budget.fetch_add(1, Ordering::AcqRel);
    }
}
