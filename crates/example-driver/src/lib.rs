//! A memory-backed block driver over blkmq, and the shape of a driver crate's own
//! verification.
//!
//! [`MemDisk`] is a device whose medium is memory: it moves a request's data when the
//! request is issued ([`Driver::queue_rq`]), as a DMA engine would, and posts the
//! completion. The completion is not ended there: it waits until the device's interrupt is
//! served ([`MemDisk::interrupt`]), which a driver calls from its interrupt handler and a
//! test from a thread of its own. So, as on real hardware, a request ends on another
//! thread than the one that issued it, racing the next submissions. The device holds at
//! most `depth` commands; a request issued to a full device is refused with
//! [`Status::Resource`], and the block layer issues it again once a completion makes room.
//!
//! The crate uses only the public API of `blkmq-core`, as any driver crate would, and
//! keeps what such a crate keeps to check itself against the real engine:
//!
//! * `tests/disk.rs`: ordinary tests, on [`StdPlatform`](blkmq_core::StdPlatform), with a
//!   real interrupt thread.
//! * `tests/loom.rs`: a [loom](https://docs.rs/loom) model of the interrupt racing a
//!   submission, on [`LoomPlatform`](blkmq_core::testing) (which `blkmq-core` has under
//!   `--cfg loom`): every bio ends once, and nothing leaks. Run it with
//!   `RUSTFLAGS="--cfg loom" cargo test -p blkmq-example-driver --release --test loom`.
//! * `benches/io.rs`: a criterion bench of the driver's I/O path, from submission to the
//!   end of the bio.
//!
//! The driver needs no synchronisation of its own beyond the platform's lock
//! (`Platform::RawMutex`): under loom that is a lock loom sees, so the model covers the
//! driver's own critical sections too. A driver that keeps atomics of its own takes them
//! from `loom::sync::atomic` under `cfg(loom)`, as [`Ticket`] does here.
//!
//! ```
//! use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, StdPlatform, TagSet};
//! use blkmq_example_driver::{MemDisk, Ticket};
//!
//! let disk = MemDisk::new(1024, 4);
//! let host = Host::new(TagSet::builder(8), StdPlatform::new(), disk).unwrap();
//! let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
//!
//! let ticket = Ticket::new();
//! queue.submit(ticket.bio(Bio::new(Op::Write, 16, 8).payload(0xab))).unwrap();
//! assert_eq!(ticket.ended(), 0); // on the device, its interrupt not served yet
//! assert_eq!(host.driver().interrupt(&queue), 1);
//! assert_eq!((ticket.ended(), ticket.ended_ok()), (1, true));
//! assert_eq!(host.driver().read_sector(20), Some(0xab));
//! ```

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use blkmq_core::{
    Bio, Driver, HctxCx, Op, Platform, Rejected, Request, RequestInit, RequestQueue, Rq, Status,
};

mod ticket;

pub use ticket::Ticket;

/// A block device whose medium is memory and whose completions arrive by interrupt.
///
/// Each sector holds one word. A write fills every sector it covers with its bio's
/// `payload` (the stand-in for the buffer a real bio would point to); a read moves
/// nothing. A request reaching past the medium ends with [`Status::IoErr`].
///
/// ```
/// use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, StdPlatform, TagSet};
/// use blkmq_example_driver::MemDisk;
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), MemDisk::new(64, 1)).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// queue.submit(Bio::new(Op::Write, 0, 8).payload(7)).unwrap();
/// queue.submit(Bio::new(Op::Write, 8, 8).payload(9)).unwrap(); // the device is full
/// assert_eq!((host.driver().in_flight(), host.driver().issued()), (1, 1));
/// host.driver().interrupt(&queue); // ends the first, which issues the second
/// assert_eq!((host.driver().in_flight(), host.driver().issued()), (1, 2));
/// host.driver().interrupt(&queue);
/// assert_eq!(host.driver().in_flight(), 0);
/// assert_eq!((host.driver().read_sector(0), host.driver().read_sector(8)), (Some(7), Some(9)));
/// ```
pub struct MemDisk<P: Platform> {
    depth: usize,
    state: lock_api::Mutex<P::RawMutex, State>,
}

/// What the device's lock guards.
struct State {
    /// One word per sector.
    medium: Vec<u64>,
    /// Commands on the device: taken in `queue_rq`, given back when their request ends.
    /// Each request's payload says whether it holds one.
    in_flight: usize,
    /// Completions posted and not yet served by an interrupt.
    posted: Vec<(Rq, Status)>,
    /// Commands taken so far.
    issued: u64,
}

impl<P: Platform> MemDisk<P> {
    /// A device of `sectors` sectors (all zero) that holds at most `depth` commands at
    /// once (at least one).
    ///
    /// ```
    /// use blkmq_core::StdPlatform;
    /// use blkmq_example_driver::MemDisk;
    ///
    /// let disk: MemDisk<StdPlatform> = MemDisk::new(128, 0);
    /// assert_eq!((disk.sectors(), disk.depth()), (128, 1));
    /// assert_eq!(disk.read_sector(127), Some(0));
    /// ```
    pub fn new(sectors: usize, depth: usize) -> Self {
        Self {
            depth: depth.max(1),
            state: lock_api::Mutex::new(State {
                medium: vec![0; sectors],
                in_flight: 0,
                posted: Vec::new(),
                issued: 0,
            }),
        }
    }

    /// The medium's size in sectors.
    ///
    /// ```
    /// use blkmq_core::StdPlatform;
    /// use blkmq_example_driver::MemDisk;
    ///
    /// assert_eq!(MemDisk::<StdPlatform>::new(64, 2).sectors(), 64);
    /// ```
    pub fn sectors(&self) -> u64 {
        self.state.lock().medium.len() as u64
    }

    /// How many commands the device holds at once.
    ///
    /// ```
    /// use blkmq_core::StdPlatform;
    /// use blkmq_example_driver::MemDisk;
    ///
    /// assert_eq!(MemDisk::<StdPlatform>::new(64, 2).depth(), 2);
    /// ```
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The word in `sector`, or `None` past the medium.
    ///
    /// ```
    /// use blkmq_core::StdPlatform;
    /// use blkmq_example_driver::MemDisk;
    ///
    /// let disk = MemDisk::<StdPlatform>::new(8, 1);
    /// assert_eq!((disk.read_sector(7), disk.read_sector(8)), (Some(0), None));
    /// ```
    pub fn read_sector(&self, sector: u64) -> Option<u64> {
        let state = self.state.lock();
        usize::try_from(sector)
            .ok()
            .and_then(|s| state.medium.get(s).copied())
    }

    /// Commands on the device now: issued, and their request not ended yet.
    ///
    /// ```
    /// use blkmq_core::StdPlatform;
    /// use blkmq_example_driver::MemDisk;
    ///
    /// assert_eq!(MemDisk::<StdPlatform>::new(8, 1).in_flight(), 0);
    /// ```
    pub fn in_flight(&self) -> usize {
        self.state.lock().in_flight
    }

    /// Completions posted that an interrupt has not served yet.
    ///
    /// ```
    /// use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, StdPlatform, TagSet};
    /// use blkmq_example_driver::MemDisk;
    ///
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), MemDisk::new(64, 4)).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(host.driver().pending(), 1);
    /// host.driver().interrupt(&queue);
    /// assert_eq!(host.driver().pending(), 0);
    /// ```
    pub fn pending(&self) -> usize {
        self.state.lock().posted.len()
    }

    /// Commands the device has taken since it was made.
    ///
    /// ```
    /// use blkmq_core::StdPlatform;
    /// use blkmq_example_driver::MemDisk;
    ///
    /// assert_eq!(MemDisk::<StdPlatform>::new(8, 1).issued(), 0);
    /// ```
    pub fn issued(&self) -> u64 {
        self.state.lock().issued
    }

    /// Serves the device's interrupt: ends, on the calling thread, every request whose
    /// completion is posted, in one batch. Returns how many. Should a request not be
    /// `queue`'s, it and those after it stay posted, for an interrupt given their queue.
    ///
    /// Ending a request gives its command back to the device, and the block layer then
    /// issues what waited for room, possibly from inside this call.
    ///
    /// ```
    /// use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, StdPlatform, TagSet};
    /// use blkmq_example_driver::MemDisk;
    ///
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), MemDisk::new(64, 4)).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 8, 8)).unwrap();
    /// let irq = std::thread::scope(|s| s.spawn(|| host.driver().interrupt(&queue)).join());
    /// assert_eq!(irq.unwrap(), 2);
    /// assert_eq!((host.in_driver(), queue.usage()), (0, 0));
    /// ```
    pub fn interrupt(&self, queue: &RequestQueue<Self>) -> usize {
        // Taken under the lock, ended without it: ending calls `complete`, which takes it.
        let posted = core::mem::take(&mut self.state.lock().posted);
        let mut served = posted.len();
        if served != 0 {
            if let Err(unended) = queue.end_requests(posted) {
                let mut state = self.state.lock();
                served -= 1 + unended.rest.len();
                state.posted.push((unended.misused.rq, unended.status));
                state.posted.extend(unended.rest);
            }
        }
        served
    }
}

impl<P: Platform> Driver for MemDisk<P> {
    type Platform = P;
    /// Whether the request holds one of the device's commands. Read and written only under
    /// the device's lock, which orders it (so loom need not see it).
    type Payload = AtomicBool;

    fn init_request(&self, _: RequestInit) -> AtomicBool {
        AtomicBool::new(false)
    }

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let mut state = self.state.lock();
        if state.in_flight == self.depth {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        state.in_flight += 1;
        state.issued += 1;
        if let Some(request) = cx.queue().request(&rq) {
            request.payload().store(true, Ordering::Relaxed);
        }
        let State { medium, .. } = &mut *state;
        let mut status = Status::Ok;
        cx.queue().for_each_bio(&rq, |bio| {
            if !transfer(medium, bio) {
                status = Status::IoErr;
            }
        });
        state.posted.push((rq, status));
        Ok(())
    }

    fn complete(&self, _: &HctxCx<'_, Self>, request: &Request<AtomicBool>) {
        // A request may end without reaching the device (an error before it was issued):
        // only one that holds a command gives one back.
        let mut state = self.state.lock();
        if request.payload().swap(false, Ordering::Relaxed) {
            state.in_flight -= 1;
        }
    }
}

/// Moves the data of one bio; false when it reaches past the medium (nothing moved).
fn transfer(medium: &mut [u64], bio: &Bio) -> bool {
    let start = usize::try_from(bio.sector).unwrap_or(usize::MAX);
    let Some(sectors) = start
        .checked_add(bio.sectors as usize)
        .and_then(|end| medium.get_mut(start..end))
    else {
        return false;
    };
    if bio.op == Op::Write {
        sectors.fill(bio.payload);
    }
    true
}

impl<P: Platform> fmt::Debug for MemDisk<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("MemDisk")
            .field("sectors", &state.medium.len())
            .field("depth", &self.depth)
            .field("in_flight", &state.in_flight)
            .field("pending", &state.posted.len())
            .finish()
    }
}
