//! The FUSE file system: one directory, one file, its I/O as bios.

use std::cell::RefCell;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use blkmq_core::{Bio, BioFlags, Driver, IssuerId, Op, RequestQueue, SECTOR_SIZE, Status};
use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, SessionACL,
    WriteFlags,
};

use crate::errno::errno;
use crate::stats::{OpKind, Stats};

/// The served file's inode.
const FILE: INodeNo = INodeNo(2);
/// How long the kernel may keep names and attributes: they never change.
const TTL: Duration = Duration::from_secs(1);
/// The largest FUSE read or write asked for.
const MAX_IO: u32 = 1 << 20;
/// The most sectors one discard or write-zeroes bio is given (the queue splits further).
const CHUNK_SECTORS: u64 = 1 << 31;

/// How [`serve`] mounts a queue.
///
/// ```
/// use blkmq_fuse::ServeOptions;
///
/// let options = ServeOptions { threads: 16, ..ServeOptions::default() };
/// assert_eq!((options.name.as_str(), options.dma_alignment), ("disk", 511));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// The file's name in the mounted directory.
    pub name: String,
    /// Threads serving FUSE requests, each with one bio in flight at most (at least one).
    pub threads: usize,
    /// The alignment mask the driver needs of a segment's address (`511`, the default:
    /// 512-byte aligned, as `O_DIRECT` and most DMA engines want; `0`: any address).
    /// A write's data is the FUSE request's buffer, which starts at no particular
    /// address: a write whose buffer does not meet the mask is copied into an aligned
    /// buffer of the serving thread; with `0` every write goes from the FUSE buffer itself.
    pub dma_alignment: u64,
    /// Let other users than the one mounting reach the file (FUSE's `allow_other`, which
    /// needs root or `user_allow_other` in `/etc/fuse.conf`).
    pub allow_other: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            name: "disk".into(),
            threads: 8,
            dma_alignment: 511,
            allow_other: false,
        }
    }
}

/// Checks that FUSE can be mounted here: `/dev/fuse` exists, and this is root (which
/// mounts directly) or `fusermount3` is on the path (which mounts for other users). The
/// error says what is missing, in one line.
///
/// ```
/// match blkmq_fuse::check_fuse() {
///     Ok(()) => println!("FUSE mounts work here"),
///     Err(why) => println!("no FUSE: {why}"),
/// }
/// ```
pub fn check_fuse() -> io::Result<()> {
    if !Path::new("/dev/fuse").exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "/dev/fuse is missing (load the fuse module, or give the container the device)",
        ));
    }
    let root = is_root();
    if !root && find_in_path("fusermount3").is_none() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not root, and no fusermount3 on the path to mount with (install fuse3)",
        ));
    }
    Ok(())
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A queue served in a FUSE mount, until [`unmount`](Self::unmount) or drop.
///
/// ```no_run
/// # use blkmq_core::testing::Null;
/// # use blkmq_core::{Host, QueueConfig, QueueLimits, StdPlatform, TagSet};
/// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
/// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(2048))).unwrap();
/// let served = blkmq_fuse::serve(queue, "/mnt/blkmq", &Default::default()).unwrap();
/// assert_eq!(served.path(), std::path::Path::new("/mnt/blkmq/disk"));
/// let io = served.stats().snapshot();
/// served.unmount().unwrap();
/// # let _ = io;
/// ```
#[derive(Debug)]
pub struct Served {
    session: Option<BackgroundSession>,
    stats: Arc<Stats>,
    path: PathBuf,
    /// The mount point, absolute.
    mountpoint: PathBuf,
}

impl Served {
    /// The served file's path.
    ///
    /// ```no_run
    /// # let served = blkmq_fuse::serve(
    /// #     blkmq_core::Host::new(blkmq_core::TagSet::builder(8), blkmq_core::StdPlatform::new(),
    /// #         blkmq_core::testing::Null::new()).unwrap()
    /// #         .add_queue(blkmq_core::QueueConfig::new(blkmq_core::QueueLimits::new(8))).unwrap(),
    /// #     "/mnt", &Default::default()).unwrap();
    /// std::fs::metadata(served.path()).unwrap();
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The I/O served so far.
    ///
    /// ```no_run
    /// # let served = blkmq_fuse::serve(
    /// #     blkmq_core::Host::new(blkmq_core::TagSet::builder(8), blkmq_core::StdPlatform::new(),
    /// #         blkmq_core::testing::Null::new()).unwrap()
    /// #         .add_queue(blkmq_core::QueueConfig::new(blkmq_core::QueueLimits::new(8))).unwrap(),
    /// #     "/mnt", &Default::default()).unwrap();
    /// println!("{} operations", served.stats().snapshot().ops());
    /// ```
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Whether the mount is still served: false once it was unmounted from outside
    /// (`fusermount3 -u`, `umount`) and its serving threads ended.
    ///
    /// ```no_run
    /// # let served = blkmq_fuse::serve(
    /// #     blkmq_core::Host::new(blkmq_core::TagSet::builder(8), blkmq_core::StdPlatform::new(),
    /// #         blkmq_core::testing::Null::new()).unwrap()
    /// #         .add_queue(blkmq_core::QueueConfig::new(blkmq_core::QueueLimits::new(8))).unwrap(),
    /// #     "/mnt", &Default::default()).unwrap();
    /// assert!(served.is_serving());
    /// ```
    pub fn is_serving(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|session| !session.guard.is_finished())
    }

    /// Tries to unmount now, without waiting for anyone: `Ok(true)` once unmounted and
    /// every serving thread has ended (each had waited for its own bio, so no I/O of the
    /// mount is in flight then); `Ok(false)`, still mounted and served, when a program (or
    /// a loop device) holds the file open (`EBUSY`). Already unmounted from outside counts
    /// as unmounted. As another user than root the unmount goes through `fusermount3 -u
    /// -z`, as [`unmount`](Self::unmount) does, and is never busy.
    ///
    /// # Errors
    /// The unmount failed otherwise, or a serving thread did.
    ///
    /// ```no_run
    /// # let mut served = blkmq_fuse::serve(
    /// #     blkmq_core::Host::new(blkmq_core::TagSet::builder(8), blkmq_core::StdPlatform::new(),
    /// #         blkmq_core::testing::Null::new()).unwrap()
    /// #         .add_queue(blkmq_core::QueueConfig::new(blkmq_core::QueueLimits::new(8))).unwrap(),
    /// #     "/mnt", &Default::default()).unwrap();
    /// while !served.try_unmount().unwrap() {
    ///     eprintln!("{} is still open", served.path().display());
    ///     std::thread::sleep(std::time::Duration::from_secs(1));
    /// }
    /// ```
    pub fn try_unmount(&mut self) -> io::Result<bool> {
        if self.session.is_none() {
            return Ok(true);
        }
        if !is_root() {
            self.session
                .take()
                .map_or(Ok(()), BackgroundSession::umount_and_join)?;
            return Ok(true);
        }
        match umount(&self.mountpoint, 0) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(false),
            // Not a mount point any more: unmounted from outside.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
        self.join()?;
        Ok(true)
    }

    /// Unmounts and waits for every serving thread to end; once this returns no I/O of the
    /// mount is in flight. When a program still holds the file open, the mount is detached
    /// (`MNT_DETACH`: gone from the directory tree at once) and served until the program
    /// closes the file, and this waits for that.
    ///
    /// # Errors
    /// The unmount failed, or a serving thread did.
    ///
    /// ```no_run
    /// # let served = blkmq_fuse::serve(
    /// #     blkmq_core::Host::new(blkmq_core::TagSet::builder(8), blkmq_core::StdPlatform::new(),
    /// #         blkmq_core::testing::Null::new()).unwrap()
    /// #         .add_queue(blkmq_core::QueueConfig::new(blkmq_core::QueueLimits::new(8))).unwrap(),
    /// #     "/mnt", &Default::default()).unwrap();
    /// served.unmount().unwrap();
    /// ```
    pub fn unmount(mut self) -> io::Result<()> {
        if self.try_unmount()? {
            return Ok(());
        }
        umount(&self.mountpoint, libc::MNT_DETACH)?;
        self.join()
    }

    /// Waits for the serving threads of a mount already unmounted (or detached).
    fn join(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        // The rest of the session goes here: its own unmount finds nothing left to do
        // (or, detached and still held, fails quietly).
        let guard = { session }.guard;
        match guard.join() {
            Err(_) => Err(io::Error::other("a FUSE serving thread panicked")),
            // A detached mount's connection ends with its last close as aborted.
            Ok(Err(e)) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            Ok(ended) => ended,
        }
    }
}

impl Drop for Served {
    /// Unmounts; when a program still holds the file, detaches the mount and leaves it to
    /// be served until the program closes the file, without waiting for that.
    fn drop(&mut self) {
        if let Ok(false) = self.try_unmount() {
            let _ = umount(&self.mountpoint, libc::MNT_DETACH);
            drop(self.session.take().map(|session| session.guard));
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `umount2(path, flags)`.
fn umount(path: &Path, flags: i32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path that lives across the call.
    if unsafe { libc::umount2(path.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Mounts `queue` at `mountpoint` as one file, served by [`ServeOptions::threads`] threads
/// until the returned [`Served`] is unmounted or dropped. The mount is ready when this
/// returns. The file's size is the queue's capacity in bytes; its mode is 0600, owned by
/// the user mounting.
///
/// # Errors
/// FUSE is not usable here ([`check_fuse`]), `mountpoint` is not a directory, or the mount
/// failed.
///
/// ```no_run
/// use blkmq_core::testing::Null;
/// use blkmq_core::{Host, QueueConfig, QueueLimits, StdPlatform, TagSet};
/// use blkmq_fuse::{ServeOptions, serve};
///
/// let host = Host::new(TagSet::builder(64), StdPlatform::new(), Null::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 21))).unwrap();
/// let options = ServeOptions { name: "lun0".into(), ..ServeOptions::default() };
/// let served = serve(queue, "/mnt/blkmq", &options).unwrap();
/// assert_eq!(std::fs::metadata(served.path()).unwrap().len(), 1 << 30);
/// ```
pub fn serve<D: Driver>(
    queue: Arc<RequestQueue<D>>,
    mountpoint: impl AsRef<Path>,
    options: &ServeOptions,
) -> io::Result<Served> {
    let mountpoint = mountpoint.as_ref();
    check_fuse()?;
    if !mountpoint.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("mount point {} is not a directory", mountpoint.display()),
        ));
    }
    let stats = Arc::new(Stats::new());
    let limits = queue.limits();
    let fs = DiskFs {
        name: OsString::from(&options.name),
        size: limits.capacity * SECTOR_SIZE,
        block: u64::from(limits.logical_block_size).max(SECTOR_SIZE),
        dma_alignment: options.dma_alignment,
        stats: stats.clone(),
        // SAFETY: getuid and getgid have no preconditions and cannot fail.
        owner: unsafe { (libc::geteuid(), libc::getegid()) },
        born: SystemTime::now(),
        threads: options.threads.max(1),
        queue,
    };
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("blkmq".into()),
        MountOption::Subtype("blkmq".into()),
        MountOption::NoAtime,
    ];
    if options.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(options.threads.max(1));
    config.clone_fd = true;
    let absolute = std::fs::canonicalize(mountpoint)?;
    let session = fuser::spawn_mount(fs, mountpoint, &config)?;
    Ok(Served {
        session: Some(session),
        stats,
        path: mountpoint.join(&options.name),
        mountpoint: absolute,
    })
}

/// The file system: a root directory holding the queue's file.
struct DiskFs<D: Driver> {
    queue: Arc<RequestQueue<D>>,
    name: OsString,
    /// The file's size in bytes.
    size: u64,
    /// The logical block size in bytes.
    block: u64,
    dma_alignment: u64,
    stats: Arc<Stats>,
    owner: (u32, u32),
    born: SystemTime,
    /// Serving threads.
    threads: usize,
}

thread_local! {
    /// The serving thread's buffer for reads (and for writes it has to align): reused from
    /// one request to the next, grown only when a request is larger than any before.
    static BUFFER: RefCell<AlignedBuf> = const { RefCell::new(AlignedBuf::new()) };
}

/// A byte buffer whose start is page aligned.
struct AlignedBuf {
    bytes: Vec<u8>,
}

impl AlignedBuf {
    const ALIGN: usize = 4096;

    const fn new() -> Self {
        Self { bytes: Vec::new() }
    }

    /// `len` bytes starting on a page boundary.
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.bytes.len() < len + Self::ALIGN {
            self.bytes = vec![0; len + Self::ALIGN];
        }
        let skip = self.bytes.as_ptr().align_offset(Self::ALIGN);
        &mut self.bytes[skip..skip + len]
    }
}

impl<D: Driver> DiskFs<D> {
    fn attr(&self, ino: INodeNo) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == FILE {
            (FileType::RegularFile, 0o600, self.size, 1)
        } else {
            (FileType::Directory, 0o755, 0, 2)
        };
        FileAttr {
            ino,
            size,
            blocks: size / SECTOR_SIZE,
            atime: self.born,
            mtime: self.born,
            ctime: self.born,
            crtime: self.born,
            kind,
            perm,
            nlink,
            uid: self.owner.0,
            gid: self.owner.1,
            rdev: 0,
            blksize: self.block as u32,
            flags: 0,
        }
    }

    fn aligned(&self, n: u64) -> bool {
        n % self.block == 0
    }

    /// Reads into or writes from the `len` bytes (whole blocks) at `addr`, at `sector`,
    /// for `issuer`, with `flags`, waiting for the end: a bio whose one buffer they are, as
    /// [`read_at`](RequestQueue::read_at) makes, with the issuer named so that an I/O
    /// scheduler keeps the processes doing I/O apart. The caller holds the buffer borrowed
    /// across the call (mutably for a read), which returns only once the bio ended.
    fn transfer(
        &self,
        op: Op,
        sector: u64,
        addr: *const u8,
        len: usize,
        issuer: IssuerId,
        flags: BioFlags,
    ) -> Status {
        let sectors = (len as u64 / SECTOR_SIZE) as u32;
        let bio = Bio::new(op, sector, sectors)
            .buffer(addr as u64)
            .issuer(issuer)
            .flags(flags);
        self.queue.submit_and_wait(bio)
    }

    /// Submits one bio without data per chunk of `[offset, offset + len)` and waits for
    /// each; the first error.
    fn ranged(&self, op: Op, offset: u64, len: u64, issuer: IssuerId) -> Status {
        let mut sector = offset / SECTOR_SIZE;
        let end = (offset + len) / SECTOR_SIZE;
        while sector < end {
            let n = (end - sector).min(CHUNK_SECTORS);
            let bio = Bio::new(op, sector, n as u32).issuer(issuer);
            let status = self.queue.submit_and_wait(bio);
            if status != Status::Ok {
                return status;
            }
            sector += n;
        }
        Status::Ok
    }

    fn flush(&self, issuer: IssuerId) -> Result<(), Errno> {
        let start = Instant::now();
        let status = self
            .queue
            .submit_and_wait(Bio::new(Op::Flush, 0, 0).issuer(issuer));
        self.stats
            .record(OpKind::Flush, 0, start.elapsed(), status == Status::Ok);
        result(status)
    }
}

/// The caller of a FUSE request (the thread the kernel names), as the bios' issuer.
fn issuer(req: &Request) -> IssuerId {
    IssuerId(req.pid())
}

/// The flags of a write's bio, from the file flags the kernel sends with it: a write the
/// caller wants durable when it returns (the file opened `O_DSYNC` or `O_SYNC`, which
/// includes `O_DSYNC`'s bit, or written with `RWF_DSYNC`/`RWF_SYNC`, which the kernel adds
/// as those flags) is FUA, as Linux's direct writes to a block device are; the queue
/// follows it with a flush where the device does not honour FUA.
fn write_flags(flags: OpenFlags) -> BioFlags {
    if flags.0 & libc::O_DSYNC != 0 {
        BioFlags::FUA
    } else {
        BioFlags::empty()
    }
}

fn result(status: Status) -> Result<(), Errno> {
    match status {
        Status::Ok => Ok(()),
        other => Err(Errno::from_i32(errno(other))),
    }
}

impl<D: Driver> Filesystem for DiskFs<D> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // The nearest the kernel takes, if not these.
        let _ = config
            .set_max_write(MAX_IO)
            .or_else(|n| config.set_max_write(n));
        let _ = config
            .set_max_readahead(MAX_IO)
            .or_else(|n| config.set_max_readahead(n));
        // Asynchronous direct I/O (`io_submit`, `io_uring`) reaches us as parallel
        // requests, as many as the kernel keeps in the background: room for every thread.
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        let background = u16::try_from(self.threads.saturating_mul(2)).unwrap_or(u16::MAX);
        let _ = config
            .set_max_background(background.max(16))
            .or_else(|n| config.set_max_background(n));
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == self.name {
            reply.entry(&TTL, &self.attr(FILE), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == FILE || ino == INodeNo::ROOT {
            reply.attr(&TTL, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A device's size is its capacity: only "no change" is taken; times and modes are
        // not kept, and the attributes stay as they are.
        match size {
            Some(size) if ino != FILE || size != self.size => reply.error(Errno::EPERM),
            _ => reply.attr(&TTL, &self.attr(ino)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != FILE {
            reply.error(Errno::EISDIR);
            return;
        }
        let flags = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        reply.opened(FileHandle(0), flags);
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != FILE {
            reply.error(Errno::EISDIR);
            return;
        }
        if offset >= self.size || size == 0 {
            reply.data(&[]); // the end of the file
            return;
        }
        let start = Instant::now();
        let end = (offset + u64::from(size)).min(self.size);
        // The whole blocks around the bytes asked for (the size is a multiple of a block).
        let first = offset / self.block * self.block;
        let last = end.div_ceil(self.block) * self.block;
        BUFFER.with_borrow_mut(|buffer| {
            let buf = buffer.get((last - first) as usize);
            let (addr, len) = (buf.as_mut_ptr(), buf.len());
            let sector = first / SECTOR_SIZE;
            let status = self.transfer(Op::Read, sector, addr, len, issuer(req), BioFlags::empty());
            let ok = status == Status::Ok;
            self.stats
                .record(OpKind::Read, end - offset, start.elapsed(), ok);
            match result(status) {
                Ok(()) => reply.data(&buf[(offset - first) as usize..(end - first) as usize]),
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != FILE {
            reply.error(Errno::EISDIR);
            return;
        }
        if !self.aligned(offset) || !self.aligned(data.len() as u64) {
            reply.error(Errno::EINVAL);
            return;
        }
        if data.is_empty() {
            reply.written(0);
            return;
        }
        if offset >= self.size {
            reply.error(Errno::ENOSPC);
            return;
        }
        let start = Instant::now();
        // A write reaching past the end writes what fits (a short write).
        let len = (data.len() as u64).min(self.size - offset) as usize;
        let data = &data[..len];
        let sector = offset / SECTOR_SIZE;
        let flags = write_flags(flags);
        let status = if data.as_ptr() as u64 & self.dma_alignment == 0 {
            // The FUSE request's own buffer, borrowed until the bio ends.
            self.transfer(Op::Write, sector, data.as_ptr(), len, issuer(req), flags)
        } else {
            BUFFER.with_borrow_mut(|buffer| {
                let buf = buffer.get(len);
                buf.copy_from_slice(data);
                self.transfer(Op::Write, sector, buf.as_ptr(), len, issuer(req), flags)
            })
        };
        self.stats.record(
            OpKind::Write,
            len as u64,
            start.elapsed(),
            status == Status::Ok,
        );
        match result(status) {
            Ok(()) => reply.written(len as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if ino != FILE {
            reply.ok();
            return;
        }
        match self.flush(issuer(req)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.flush(issuer(req)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != FILE {
            reply.error(Errno::EISDIR);
            return;
        }
        let Some(end) = offset.checked_add(length).filter(|&end| end <= self.size) else {
            reply.error(Errno::EINVAL);
            return;
        };
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let op = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            // Within the device every byte is allocated already.
            0 => {
                reply.ok();
                return;
            }
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => Op::Discard,
            libc::FALLOC_FL_ZERO_RANGE => Op::WriteZeroes,
            _ => {
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
        };
        if !self.aligned(offset) || !self.aligned(end) {
            reply.error(Errno::EINVAL);
            return;
        }
        let start = Instant::now();
        let status = self.ranged(op, offset, length, issuer(req));
        self.stats.record(
            OpKind::Discard,
            length,
            start.elapsed(),
            status == Status::Ok,
        );
        match result(status) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let entries: [(INodeNo, FileType, &OsStr); 3] = [
            (INodeNo::ROOT, FileType::Directory, OsStr::new(".")),
            (INodeNo::ROOT, FileType::Directory, OsStr::new("..")),
            (FILE, FileType::RegularFile, &self.name),
        ];
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
