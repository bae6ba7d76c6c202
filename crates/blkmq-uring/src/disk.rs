//! The driver: rings, issue, the reapers.

use std::cell::UnsafeCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::{JoinHandle, ThreadId};

use blkmq_core::{
    BioFlags, Driver, HctxCx, Host, Op, Platform, QueueConfig, QueueLimits, QueueType, Rejected,
    RequestInit, RequestQueue, Rq, SECTOR_SIZE, Status, StdPlatform, TagSet, TagSetBuilder,
};
use io_uring::{IoUring, opcode, squeue, types};

use crate::open::{Backing, IoMode, OpenError, UringDiskBuilder};
use crate::status::status_of_errno;

thread_local! {
    /// On a reaper thread while it ends requests: its disk, its ring, and the rings of
    /// that disk whose entering it does once its batch is done (a completion submitting
    /// to another ring of the same disk leaves the system call to the end of the batch).
    static BATCH: std::cell::Cell<(*const Shared, usize, u64)> =
        const { std::cell::Cell::new((std::ptr::null(), usize::MAX, 0)) };
}

/// The user data of the completion that wakes a reaper at shutdown (a unique tag is at
/// most 32 bits).
const WAKE: u64 = u64::MAX;

/// A block device over a regular file or a block device, through io_uring: a
/// [`Driver`] with one ring per hardware queue and a reaper thread per ring.
///
/// Made by [`UringDisk::builder`]; served by the queue given to [`UringDisk::attach`]
/// (or made by [`UringDisk::add_queue`]), which starts the reapers. A disk serves one
/// queue; a queue of another disk's host, or a request reaching the disk before it serves
/// a queue, ends with [`Status::IoErr`].
///
/// Dropping the host (after its queues) drops the disk: its reapers wait for the
/// operations still on the rings, then stop; no thread is left.
///
/// ```
/// use blkmq_core::{Host, QueueConfig, StdPlatform, Status};
/// use blkmq_uring::UringDisk;
///
/// let path = std::env::temp_dir().join(format!("blkmq-uring-doc-{}.img", std::process::id()));
/// let disk = match UringDisk::builder(&path).size(1 << 20).open() {
///     Ok(disk) => disk,
///     Err(err) => return eprintln!("skipped: {err}"), // io_uring unavailable here
/// };
/// let limits = disk.limits();
/// let host = Host::new(disk.tag_set(), StdPlatform::new(), disk).unwrap();
/// let queue = UringDisk::add_queue(&host, QueueConfig::new(limits)).unwrap();
/// let block = vec![7u8; 4096];
/// assert_eq!(queue.write_at(0, &block), Status::Ok);
/// let mut back = vec![0u8; 4096];
/// assert_eq!(queue.read_at(0, &mut back), Status::Ok);
/// assert_eq!(back, block);
/// drop(queue);
/// drop(host); // the reaper stops
/// std::fs::remove_file(&path).unwrap();
/// ```
pub struct UringDisk {
    shared: Arc<Shared>,
    reapers: Mutex<Vec<JoinHandle<()>>>,
}

/// What the disk and its reapers share.
struct Shared {
    file: File,
    /// With `O_DIRECT`, the same file opened without it: what a request with a buffer not
    /// aligned to the logical block goes through.
    buffered: Option<File>,
    bytes: u64,
    block: u32,
    mode: IoMode,
    read_only: bool,
    block_device: bool,
    depth: usize,
    max_segments: u32,
    rings: Box<[Ring]>,
    /// The queue served, set once by `attach`.
    queue: OnceLock<Weak<RequestQueue<UringDisk>>>,
    stop: AtomicBool,
}

/// One hardware queue's ring, on cache lines of its own (two lines: the pair the
/// processor fetches together): its lock, taken per request, shares no line with the
/// next ring's, which another reaper reads and writes at the same time.
#[repr(align(128))]
struct Ring {
    uring: IoUring,
    /// Guards the submission queue (one producer at a time).
    sq: Mutex<SqState>,
    /// The reaper is ending requests: an issue now leaves entering the ring to the
    /// reaper's next wait. Set by the reaper alone; cleared under `sq`'s lock and read
    /// under it (see `Shared::reap`).
    reaping: AtomicBool,
    /// The operations the reaper's own batch issues to its ring, pushed under one lock
    /// at the end of the batch: reached by the ring's reaper alone, room for every tag.
    held: UnsafeCell<Vec<squeue::Entry>>,
    /// The request of each driver tag on the ring, and what it asked for.
    slots: Box<[Slot]>,
}

#[derive(Default)]
struct SqState {
    /// Operations pushed since the ring was made (the reaper drains up to this).
    pushed: u64,
}

// SAFETY: `held` is reached only by the ring's reaper thread (`Shared::hold` checks that
// the caller is it); the rest is `Sync` on its own.
unsafe impl Sync for Ring {}

/// A request on the ring.
struct Slot {
    /// The request's token, from its issue until its completion is reaped.
    rq: UnsafeCell<Option<Rq>>,
    /// The bytes its operation moves (reads and writes; none for the rest), to tell a short
    /// transfer.
    bytes: UnsafeCell<u64>,
}

// SAFETY: a slot is reached only by whoever holds its driver tag: the issuer until the
// operation is pushed on the ring, the reaper once its completion is seen (the push
// happens before the kernel takes the entry, which happens before the completion), so
// no two threads touch a slot at once.
unsafe impl Sync for Slot {}

/// A request's iovec table: the payload the disk gives each request, made once when the
/// tags are created ([`Driver::init_request`]), filled from the request's segments at each
/// issue.
///
/// ```
/// use blkmq_core::RequestInit;
/// use blkmq_core::Driver;
/// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-t-{}.img", std::process::id()));
/// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).max_segments(16).open() else { return };
/// let table = disk.init_request(RequestInit { map: 0, tag: 0, scheduler: false });
/// assert_eq!(table.capacity(), 16);
/// # drop(disk); std::fs::remove_file(&path).unwrap();
/// ```
pub struct IoTable {
    iov: UnsafeCell<Box<[libc::iovec]>>,
    len: usize,
}

// SAFETY: the table is written and read only by the holder of its request's token (the
// issuer, then the kernel until the completion, then the reaper): never by two at once.
unsafe impl Sync for IoTable {}
// SAFETY: the iovecs are plain numbers (addresses the block layer never dereferences).
unsafe impl Send for IoTable {}

impl IoTable {
    /// Entries the table holds: the disk's `max_segments`.
    ///
    /// ```
    /// # use blkmq_core::{Driver, RequestInit};
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-c-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// let table = disk.init_request(RequestInit { map: 0, tag: 3, scheduler: true });
    /// assert_eq!(table.capacity(), 128);
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn capacity(&self) -> usize {
        self.len
    }
}

impl std::fmt::Debug for IoTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoTable")
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl UringDisk {
    /// A builder for a disk over `path` (a regular file or a block device).
    ///
    /// ```no_run
    /// use blkmq_uring::UringDisk;
    /// let disk = UringDisk::builder("/dev/nvme0n1").read_only(true).open()?;
    /// # Ok::<(), blkmq_uring::OpenError>(())
    /// ```
    pub fn builder(path: impl AsRef<Path>) -> UringDiskBuilder {
        UringDiskBuilder::new(path.as_ref())
    }

    pub(crate) fn from_backing(b: UringDiskBuilder, backing: Backing) -> Result<Self, OpenError> {
        // Room for every request of the ring at once (each has one operation on it at
        // most) and the shutdown wake-up; completions have twice that.
        let entries = (b.depth + 1).next_power_of_two() as u32;
        let rings = (0..b.hw_queues)
            .map(|_| {
                Ok(Ring {
                    uring: IoUring::new(entries).map_err(OpenError::Uring)?,
                    sq: Mutex::new(SqState::default()),
                    reaping: AtomicBool::new(false),
                    held: UnsafeCell::new(Vec::with_capacity(b.depth)),
                    slots: (0..b.depth)
                        .map(|_| Slot {
                            rq: UnsafeCell::new(None),
                            bytes: UnsafeCell::new(0),
                        })
                        .collect(),
                })
            })
            .collect::<Result<Box<[Ring]>, OpenError>>()?;
        Ok(Self {
            shared: Arc::new(Shared {
                file: backing.file,
                buffered: backing.buffered,
                bytes: backing.bytes,
                block: backing.block,
                mode: backing.mode,
                read_only: b.read_only,
                block_device: backing.block_device,
                depth: b.depth,
                max_segments: b.max_segments,
                rings,
                queue: OnceLock::new(),
                stop: AtomicBool::new(false),
            }),
            reapers: Mutex::new(Vec::new()),
        })
    }

    /// The device's size in sectors.
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-s-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// assert_eq!(disk.sectors(), 2048);
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn sectors(&self) -> u64 {
        self.shared.bytes / SECTOR_SIZE
    }

    /// The logical block size in bytes: the block device's, or for a file 512 (4096 where
    /// `O_DIRECT` asks for it).
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-b-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// assert!(disk.logical_block_size() == 512 || disk.logical_block_size() == 4096);
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn logical_block_size(&self) -> u32 {
        self.shared.block
    }

    /// How the backing is read and written: `O_DIRECT`, or buffered and why.
    ///
    /// ```
    /// use blkmq_uring::{IoMode, UringDisk};
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-m-{}.img", std::process::id()));
    /// let Ok(disk) = UringDisk::builder(&path).size(1 << 20).direct(false).open() else { return };
    /// assert!(matches!(disk.mode(), IoMode::Buffered { .. }));
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn mode(&self) -> IoMode {
        self.shared.mode
    }

    /// Whether the backing was opened read-only.
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-r-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// assert!(!disk.is_read_only());
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// Whether the backing is a block device (else a regular file).
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-bd-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// assert!(!disk.is_block_device());
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn is_block_device(&self) -> bool {
        self.shared.block_device
    }

    /// Hardware queues (rings).
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-h-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).hw_queues(2).open() else { return };
    /// assert_eq!(disk.hw_queues(), 2);
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn hw_queues(&self) -> usize {
        self.shared.rings.len()
    }

    /// Requests each ring holds at once.
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-d-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).depth(32).open() else { return };
    /// assert_eq!(disk.depth(), 32);
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn depth(&self) -> usize {
        self.shared.depth
    }

    /// The tag set that fits the rings: the disk's depth and hardware queues.
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-ts-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// let tags = disk.tag_set().timeout_ns(30_000_000_000);
    /// # let _ = tags; drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn tag_set(&self) -> TagSetBuilder {
        TagSet::builder(self.shared.depth).hw_queues(self.shared.rings.len())
    }

    /// The queue limits the disk asks for: its capacity and logical block size, a volatile
    /// write cache with FUA (flushes are `fdatasync`, FUA writes `RWF_DSYNC`), at most
    /// `max_segments` segments, discard and write-zeroes up to 4 GiB at once (read-only:
    /// no write cache, no discard, no write-zeroes).
    ///
    /// ```
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-l-{}.img", std::process::id()));
    /// # let Ok(disk) = blkmq_uring::UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// let limits = disk.limits();
    /// assert_eq!(limits.capacity, 2048);
    /// assert!(limits.write_cache && limits.fua);
    /// assert!(limits.max_discard_sectors > 0);
    /// # drop(disk); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn limits(&self) -> QueueLimits {
        let s = &self.shared;
        // 4 GiB at once: a whole number of blocks of any size.
        let space = if s.read_only { 0 } else { 1 << 23 };
        QueueLimits {
            logical_block_size: s.block,
            max_segments: s.max_segments,
            max_discard_sectors: space,
            max_write_zeroes_sectors: space,
            write_cache: !s.read_only,
            fua: !s.read_only,
            ..QueueLimits::new(s.bytes / SECTOR_SIZE)
        }
    }

    /// Adds a queue to `host` and serves it ([`attach`](Self::attach)): what to call
    /// instead of [`Host::add_queue`].
    ///
    /// # Errors
    /// [`OpenError::Queue`] when the block layer refuses the queue, else as
    /// [`attach`](Self::attach).
    ///
    /// ```
    /// use blkmq_core::{Host, QueueConfig, StdPlatform};
    /// use blkmq_uring::{OpenError, UringDisk};
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-a-{}.img", std::process::id()));
    /// # let Ok(disk) = UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// let limits = disk.limits();
    /// let host = Host::new(disk.tag_set(), StdPlatform::new(), disk).unwrap();
    /// let queue = UringDisk::add_queue(&host, QueueConfig::new(limits)).unwrap();
    /// let second = UringDisk::add_queue(&host, QueueConfig::new(limits));
    /// assert!(matches!(second, Err(OpenError::AlreadyAttached)));
    /// # drop(queue); drop(host); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn add_queue(
        host: &Arc<Host<UringDisk>>,
        config: QueueConfig,
    ) -> Result<Arc<RequestQueue<UringDisk>>, OpenError> {
        if host.driver().shared.queue.get().is_some() {
            return Err(OpenError::AlreadyAttached);
        }
        let queue = host.add_queue(config)?;
        host.driver().attach(&queue)?;
        Ok(queue)
    }

    /// Serves `queue` (a queue of the host that owns this disk): starts a reaper thread
    /// per ring, which ends the queue's requests as their operations complete.
    ///
    /// # Errors
    /// [`OpenError::AlreadyAttached`] for a second queue, [`OpenError::Shape`] when the
    /// queue's tag set has more hardware queues or a greater depth than the rings,
    /// [`OpenError::Thread`] when a thread cannot start.
    ///
    /// ```
    /// use blkmq_core::{Host, QueueConfig, StdPlatform};
    /// use blkmq_uring::UringDisk;
    /// # let path = std::env::temp_dir().join(format!("blkmq-uring-doc-at-{}.img", std::process::id()));
    /// # let Ok(disk) = UringDisk::builder(&path).size(1 << 20).open() else { return };
    /// let limits = disk.limits();
    /// let host = Host::new(disk.tag_set(), StdPlatform::new(), disk).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    /// host.driver().attach(&queue).unwrap();
    /// # drop(queue); drop(host); std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn attach(&self, queue: &Arc<RequestQueue<UringDisk>>) -> Result<(), OpenError> {
        let s = &self.shared;
        let set = queue.host().set();
        if !std::ptr::eq(queue.driver(), self) {
            return Err(OpenError::Shape {
                what: "host (the queue belongs to another disk's host)",
                queue: 1,
                disk: 0,
            });
        }
        if set.nr_hw_queues() > s.rings.len() {
            return Err(OpenError::Shape {
                what: "hardware queues",
                queue: set.nr_hw_queues(),
                disk: s.rings.len(),
            });
        }
        if set.depth() > s.depth {
            return Err(OpenError::Shape {
                what: "depth",
                queue: set.depth(),
                disk: s.depth,
            });
        }
        s.queue
            .set(Arc::downgrade(queue))
            .map_err(|_| OpenError::AlreadyAttached)?;
        let mut reapers = self.reapers.lock().unwrap_or_else(|e| e.into_inner());
        // Each reaper says when it runs: the disk serves once `attach` returns, with every
        // reaper's thread started (and named).
        let (started, running) = std::sync::mpsc::sync_channel::<()>(s.rings.len());
        for hctx in 0..s.rings.len() {
            let shared = Arc::clone(s);
            let started = started.clone();
            let reaper = std::thread::Builder::new()
                .name(format!("blkmq-uring-{hctx}"))
                .spawn(move || {
                    // Before it says it runs: a thread of the caller's pinned to the same
                    // CPU once `attach` has returned finds it held.
                    shared.take_cpu(hctx);
                    let _ = started.send(());
                    drop(started);
                    shared.reap(hctx)
                })
                .map_err(OpenError::Thread)?;
            reapers.push(reaper);
        }
        drop(started);
        for _ in 0..reapers.len() {
            // A reaper that ended before saying so (it cannot) would close the channel.
            if running.recv().is_err() {
                break;
            }
        }
        Ok(())
    }
}

impl Shared {
    /// Whether `queue` is the one served.
    #[inline]
    fn serves(&self, queue: &RequestQueue<UringDisk>) -> bool {
        self.queue
            .get()
            .is_some_and(|q| std::ptr::eq(q.as_ptr(), queue))
    }

    /// Builds the request's operation and pushes it on `hctx`'s ring; enters the ring when
    /// `last` (unless the reaper will). A request that cannot be built ends here.
    fn issue(
        &self,
        queue: &RequestQueue<UringDisk>,
        hctx: usize,
        rq: Rq,
        last: bool,
    ) -> Result<(), Rejected> {
        match self.prepare(queue, &rq) {
            Ok(op) => {
                let ring = &self.rings[hctx];
                let slot = &ring.slots[op.tag];
                // SAFETY: we hold the request of driver tag `op.tag` on this ring (see `Slot`).
                unsafe {
                    *slot.rq.get() = Some(rq);
                    *slot.bytes.get() = op.bytes;
                }
                if self.hold(hctx, &op) {
                    return Ok(());
                }
                let entry = op.entry();
                let (pushed, enter) = {
                    let mut sq = ring.sq.lock().unwrap_or_else(|e| e.into_inner());
                    // SAFETY: the lock makes us the submission queue's one producer; the
                    // entry's iovec table is the request's (it stays until the
                    // completion is reaped) and the buffers are the submitter's, alive
                    // until the request ends.
                    let pushed = unsafe { ring.uring.submission_shared().push(&entry) };
                    if pushed.is_ok() {
                        sq.pushed += 1;
                    }
                    (
                        pushed.is_ok(),
                        last && !ring.reaping.load(Ordering::Relaxed),
                    )
                };
                if !pushed {
                    // Never with the ring sized for every tag; handed back, to come again.
                    // SAFETY: the entry was not pushed: the slot is still ours.
                    let rq = unsafe { (*slot.rq.get()).take() }.expect("just stored");
                    return Err(Rejected {
                        rq,
                        status: Status::Resource,
                    });
                }
                if enter && !self.defer_enter(hctx) {
                    ring.enter();
                }
                Ok(())
            }
            Err(status) => {
                let _ = queue.end_request(rq, status);
                Ok(())
            }
        }
    }

    /// On the reaper of ring `hctx` ending requests: keeps the entry of `op` for the push at
    /// the end of its batch, and says so; elsewhere false.
    #[inline]
    fn hold(&self, hctx: usize, op: &Prepared) -> bool {
        let (disk, own, _) = BATCH.with(|batch| batch.get());
        if !std::ptr::eq(disk, self) || own != hctx {
            return false;
        }
        // SAFETY: this thread is ring `hctx`'s reaper (only it sets BATCH to this disk
        // and ring): the one user of `held`.
        let held = unsafe { &mut *self.rings[hctx].held.get() };
        // Room for every tag, each with one operation at most: never grows.
        held.push(op.entry());
        true
    }

    /// On a reaper of this disk ending requests: notes that ring `hctx` is to be entered
    /// at the end of the batch, and says so.
    #[inline]
    fn defer_enter(&self, hctx: usize) -> bool {
        BATCH.with(|batch| {
            let (disk, own, rings) = batch.get();
            if std::ptr::eq(disk, self) && hctx < 64 {
                batch.set((disk, own, rings | 1 << hctx));
                true
            } else {
                false
            }
        })
    }

    /// The request's operation: what its entry is made of, its driver tag and the bytes it
    /// moves.
    fn prepare(&self, queue: &RequestQueue<UringDisk>, rq: &Rq) -> Result<Prepared, Status> {
        if !self.serves(queue) {
            return Err(Status::IoErr);
        }
        let (request, io) = queue.request_and_io(rq).ok_or(Status::IoErr)?;
        let tag = request.driver_tag() as usize;
        if tag >= self.depth {
            return Err(Status::IoErr);
        }
        let mut fd = self.file.as_raw_fd();
        let offset = io.sector() * SECTOR_SIZE;
        let len = io.sectors() * SECTOR_SIZE;
        let (kind, addr, count, rw_flags) = match io.op() {
            op @ (Op::Read | Op::Write) => {
                let table = request.payload();
                // SAFETY: we hold the request's token: nobody else touches its table.
                let iov = unsafe { &mut *table.iov.get() };
                // The first buffer is kept here, and the table written only from a second
                // one on: a request of one buffer (the common case) leaves its table
                // untouched, which spares a cache line per I/O.
                let mut first = libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                };
                let mut n = 0usize;
                let mut unaligned = 0u64;
                match io.single_segment().filter(|seg| seg.len != 0) {
                    // One segment in a named buffer (the common case): the whole request,
                    // without a walk of its bios or its segments.
                    Some(seg) => {
                        first = libc::iovec {
                            iov_base: seg.addr as *mut libc::c_void,
                            iov_len: seg.len as usize,
                        };
                        n = 1;
                        unaligned = seg.addr | u64::from(seg.len);
                    }
                    None => {
                        // Addresses are only ever this process's pointers: a bio naming no
                        // buffer has none to move.
                        let mut mapped = true;
                        queue.for_each_bio(rq, |bio| mapped &= bio.data.is_mapped());
                        if !mapped {
                            return Err(Status::Invalid);
                        }
                        let segments = queue.segments(rq).ok_or(Status::IoErr)?;
                        for seg in segments {
                            if seg.len == 0 {
                                continue;
                            }
                            unaligned |= seg.addr | u64::from(seg.len);
                            if n > 0 {
                                let prev = if n == 1 { &mut first } else { &mut iov[n - 1] };
                                if prev.iov_base as u64 + prev.iov_len as u64 == seg.addr {
                                    prev.iov_len += seg.len as usize;
                                    continue;
                                }
                            }
                            let entry = libc::iovec {
                                iov_base: seg.addr as *mut libc::c_void,
                                iov_len: seg.len as usize,
                            };
                            if n == 0 && !iov.is_empty() {
                                first = entry;
                            } else {
                                let Some(slot) = iov.get_mut(n) else {
                                    return Err(Status::Invalid);
                                };
                                *slot = entry;
                            }
                            n += 1;
                        }
                        if n > 1 {
                            iov[0] = first;
                        }
                    }
                }
                if unaligned & (u64::from(self.block) - 1) != 0 {
                    if let Some(buffered) = &self.buffered {
                        fd = buffered.as_raw_fd();
                    }
                }
                let flags = if op == Op::Write && io.flags().contains(BioFlags::FUA) {
                    libc::RWF_DSYNC
                } else {
                    0
                };
                // One buffer: a plain read or write, which spares the kernel the iovec.
                match (op, n) {
                    (Op::Read, 1) => (Kind::Read, first.iov_base as u64, first.iov_len, 0),
                    (Op::Read, _) => (Kind::Readv, iov.as_ptr() as u64, n, 0),
                    (_, 1) => (Kind::Write, first.iov_base as u64, first.iov_len, flags),
                    _ => (Kind::Writev, iov.as_ptr() as u64, n, flags),
                }
            }
            Op::Flush => (Kind::Fsync, 0, 0, 0),
            Op::Discard => (Kind::PunchHole, 0, 0, 0),
            Op::WriteZeroes => (Kind::ZeroRange, 0, 0, 0),
        };
        Ok(Prepared {
            kind,
            fd,
            offset,
            addr,
            count: count as u32,
            len,
            rw_flags,
            tag,
            bytes: if io.op().has_data() { len } else { 0 },
        })
    }

    /// On the reaper of ring `hctx`, before it reaps: runs it on the first CPU of its
    /// hardware queue, and holds that CPU alone where nobody does yet.
    ///
    /// A completion's context is a CPU of its ring's hardware queue (Linux's interrupt
    /// affinity): what a completion submits goes to this ring, entered by this reaper's own
    /// wait, not to another reaper's ring. The reaper ends and submits the most on that
    /// CPU, so it is the one to hold it ([`Platform::exclusive_cpu`]): its usage and
    /// accounting counts there take plain stores instead of locked operations.
    fn take_cpu(&self, hctx: usize) {
        let Some(queue) = self.queue.get().and_then(Weak::upgrade) else {
            return;
        };
        let cpu = queue
            .maps()
            .map(QueueType::Default)
            .and_then(|map| map.cpus_of(hctx).next());
        if let Some(cpu) = cpu {
            let platform = queue.platform();
            platform.pin_current_thread(cpu);
            let _ = platform.exclusive_cpu();
        }
    }

    /// The reaper of ring `hctx`: waits for completions and ends their requests, until
    /// the disk stops and every operation pushed has completed.
    fn reap(&self, hctx: usize) {
        let ring = &self.rings[hctx];
        let weak = self.queue.get().cloned().unwrap_or_default();
        let mut reaped: u64 = 0;
        let mut errors = 0u32;
        // SAFETY: this thread is the ring's reaper, the one user of `held`.
        let held = unsafe { &mut *ring.held.get() };
        loop {
            {
                let mut sq = ring.sq.lock().unwrap_or_else(|e| e.into_inner());
                // What the batch issued to this ring goes on it now, under the one lock
                // of the batch.
                for entry in held.drain(..) {
                    // SAFETY: the lock makes us the one producer; each entry was built by
                    // `issue` for a request whose token its slot holds (see there).
                    let pushed = unsafe { ring.uring.submission_shared().push(&entry) };
                    // The ring has room for every tag, each with one operation at most.
                    debug_assert!(pushed.is_ok(), "room on the ring for every tag");
                    sq.pushed += u64::from(pushed.is_ok());
                }
                if self.stop.load(Ordering::Acquire) && reaped == sq.pushed {
                    return;
                }
                // Cleared under the lock: an issuer that saw it set pushed before this
                // lock, so the wait below enters its operation.
                ring.reaping.store(false, Ordering::Relaxed);
            }
            // Enters whatever was pushed while we were ending requests, and waits.
            match ring.uring.submitter().submit_and_wait(1) {
                Ok(_) => errors = 0,
                Err(err) if err.raw_os_error() == Some(libc::EINTR) => {}
                Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {}
                Err(_) => {
                    // A ring that cannot be entered now: do not spin on it.
                    errors += 1;
                    std::thread::sleep(std::time::Duration::from_millis(u64::from(
                        errors.min(100),
                    )));
                }
            }
            // Set without the lock: an issuer reads it under the lock, so it sees it set
            // only before this batch's closing lock above, whose wait enters its push.
            ring.reaping.store(true, Ordering::Relaxed);
            BATCH.with(|batch| batch.set((self as *const Shared, hctx, 0)));
            let queue = weak.upgrade();
            reaped += match &queue {
                // As the hardware queue's runner: what the completions submit to it is
                // issued without claiming the runner for each.
                Some(q) => q.run_batch(hctx, || self.end_completions(hctx, Some(q))),
                None => self.end_completions(hctx, None),
            };
            let (_, _, mut rings) =
                BATCH.with(|batch| batch.replace((std::ptr::null(), usize::MAX, 0)));
            while rings != 0 {
                let other = rings.trailing_zeros() as usize;
                rings &= rings - 1;
                // Our own ring is entered by the wait that follows.
                if other != hctx {
                    self.rings[other].enter();
                }
            }
            // Dropped here, not while the queue may be ending the last request: if this is
            // the last reference, the host (and the disk) may drop with it, on this thread.
            drop(queue);
        }
    }

    /// Takes ring `hctx`'s completions off it, a batch at a time, and ends (or continues)
    /// their requests (none when the queue is gone: nobody waits for them); returns how
    /// many it took.
    fn end_completions(&self, hctx: usize, queue: Option<&Arc<RequestQueue<UringDisk>>>) -> u64 {
        let ring = &self.rings[hctx];
        let mut reaped = 0;
        // Completions are taken off the ring a batch at a time: the kernel sees the
        // ring's head move once per batch, not once per completion.
        let mut batch = [(0u64, 0i32); 32];
        loop {
            let mut n = 0;
            // SAFETY: this thread is the ring's one consumer of completions.
            for cqe in unsafe { ring.uring.completion_shared() }.take(batch.len()) {
                batch[n] = (cqe.user_data(), cqe.result());
                n += 1;
            }
            if n == 0 {
                return reaped;
            }
            reaped += n as u64;
            for &(user_data, res) in &batch[..n] {
                if user_data == WAKE {
                    continue;
                }
                let slot = &ring.slots[user_data as usize];
                // SAFETY: the completion of the operation pushed for driver tag
                // `user_data`: the slot is ours now (see `Slot`).
                let (rq, bytes) = unsafe { ((*slot.rq.get()).take(), *slot.bytes.get()) };
                let Some(rq) = rq else { continue };
                match queue {
                    Some(q) => self.complete(q, hctx, rq, bytes, res),
                    None => drop(rq),
                }
            }
        }
    }

    /// Ends (or continues) the request whose operation completed with `res`.
    fn complete(
        &self,
        queue: &RequestQueue<UringDisk>,
        hctx: usize,
        mut rq: Rq,
        bytes: u64,
        res: i32,
    ) {
        // Every byte moved (an operation without data has none to move: its `bytes` is 0):
        // the common case ends without a look at the request's I/O, which `end_request`
        // looks up anyway.
        if res >= 0 && res as u64 >= bytes {
            let _ = queue.end_request(rq, Status::Ok);
            return;
        }
        if res < 0 {
            // The error's status depends on the operation.
            let Some(op) = queue.io(&rq).map(|io| io.op()) else {
                return;
            };
            let _ = queue.end_request(rq, status_of_errno(op, -res));
            return;
        }
        let done = res as u64;
        // A short transfer of a read or write: the end of a file shorter than the device reads nothing (or
        // less than a block), so it ends with an error; otherwise the bytes done end and
        // the rest goes again.
        if done < u64::from(self.block) {
            let _ = queue.end_request(rq, Status::IoErr);
            return;
        }
        match queue.update_request(&mut rq, done, Status::Ok) {
            Ok(true) => {
                if let Err(rejected) = self.issue(queue, hctx, rq, true) {
                    let _ = queue.end_request(rejected.rq, Status::IoErr);
                }
            }
            Ok(false) => {
                let _ = queue.end_request(rq, Status::Ok);
            }
            Err(_) => {
                let _ = queue.end_request(rq, Status::IoErr);
            }
        }
    }
}

/// What a request's operation is made of, found by [`Shared::prepare`]; the entry itself is
/// made where it goes ([`Prepared::entry`]), not carried through the checks that may
/// refuse it.
struct Prepared {
    kind: Kind,
    fd: i32,
    offset: u64,
    /// The buffer (one), or the iovec table (several).
    addr: u64,
    /// The buffer's bytes, or the iovecs.
    count: u32,
    /// The range's bytes (a discard's or a zeroing's).
    len: u64,
    rw_flags: i32,
    tag: usize,
    /// The bytes the operation moves (reads and writes).
    bytes: u64,
}

/// The operation of a [`Prepared`].
#[derive(Clone, Copy)]
enum Kind {
    Read,
    Readv,
    Write,
    Writev,
    Fsync,
    PunchHole,
    ZeroRange,
}

impl Prepared {
    /// The submission entry, its user data the driver tag.
    #[inline(always)]
    fn entry(&self) -> squeue::Entry {
        let fd = types::Fd(self.fd);
        let entry = match self.kind {
            Kind::Read => opcode::Read::new(fd, self.addr as *mut u8, self.count)
                .offset(self.offset)
                .build(),
            Kind::Readv => opcode::Readv::new(fd, self.addr as *const libc::iovec, self.count)
                .offset(self.offset)
                .build(),
            Kind::Write => opcode::Write::new(fd, self.addr as *const u8, self.count)
                .offset(self.offset)
                .rw_flags(self.rw_flags)
                .build(),
            Kind::Writev => opcode::Writev::new(fd, self.addr as *const libc::iovec, self.count)
                .offset(self.offset)
                .rw_flags(self.rw_flags)
                .build(),
            Kind::Fsync => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            Kind::PunchHole => opcode::Fallocate::new(fd, self.len)
                .offset(self.offset)
                .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
            Kind::ZeroRange => opcode::Fallocate::new(fd, self.len)
                .offset(self.offset)
                .mode(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
        };
        entry.user_data(self.tag as u64)
    }
}

impl Ring {
    /// Enters the ring for what is pushed.
    fn enter(&self) {
        // An error here leaves the entries on the ring: the reaper's next wait enters them.
        let _ = self.uring.submitter().submit();
    }
}

impl Driver for UringDisk {
    type Platform = StdPlatform;
    type Payload = IoTable;

    fn init_request(&self, _init: RequestInit) -> IoTable {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let len = self.shared.max_segments as usize;
        IoTable {
            iov: UnsafeCell::new(vec![empty; len].into_boxed_slice()),
            len,
        }
    }

    #[inline]
    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, last: bool) -> Result<(), Rejected> {
        self.shared.issue(cx.queue(), cx.hctx(), rq, last)
    }

    fn commit_rqs(&self, cx: &HctxCx<'_, Self>) {
        let ring = &self.shared.rings[cx.hctx()];
        let reaping = {
            let _sq = ring.sq.lock().unwrap_or_else(|e| e.into_inner());
            ring.reaping.load(Ordering::Relaxed)
        };
        if !reaping {
            ring.enter();
        }
    }
}

impl Drop for UringDisk {
    fn drop(&mut self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::Release);
        let wake = opcode::Nop::new().build().user_data(WAKE);
        let reapers = std::mem::take(self.reapers.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !reapers.is_empty() {
            for ring in s.rings.iter() {
                {
                    let mut sq = ring.sq.lock().unwrap_or_else(|e| e.into_inner());
                    // SAFETY: the lock makes us the one producer; a nop names no memory.
                    if unsafe { ring.uring.submission_shared().push(&wake) }.is_ok() {
                        sq.pushed += 1;
                    }
                }
                ring.enter();
            }
        }
        let me: ThreadId = std::thread::current().id();
        for reaper in reapers {
            // The last reference may be dropped by a reaper itself: it stops on its own
            // once this returns.
            if reaper.thread().id() != me {
                let _ = reaper.join();
            }
        }
    }
}

impl std::fmt::Debug for UringDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDisk")
            .field("bytes", &self.shared.bytes)
            .field("block", &self.shared.block)
            .field("mode", &self.shared.mode)
            .field("hw_queues", &self.shared.rings.len())
            .field("depth", &self.shared.depth)
            .finish_non_exhaustive()
    }
}
