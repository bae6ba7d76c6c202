//! Opening the backing: the builder, the probe for `O_DIRECT`, set-up errors.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use blkmq_core::SECTOR_SIZE;

use crate::disk::UringDisk;

/// The deepest ring: io_uring's 32768 entries hold this many requests and the wake-up.
pub(crate) const MAX_DEPTH: usize = 1 << 14;

/// The most iovecs one vectored operation takes (Linux's `UIO_MAXIOV`).
pub(crate) const IOV_MAX: u32 = 1024;

/// How the backing is read and written.
///
/// ```
/// use blkmq_uring::IoMode;
/// assert!(IoMode::Direct.is_direct());
/// assert!(!IoMode::Buffered { reason: "tmpfs" }.is_direct());
/// assert_eq!(IoMode::Direct.to_string(), "O_DIRECT");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoMode {
    /// `O_DIRECT`: I/O goes to the device, bypassing the page cache. A request whose
    /// buffers are not aligned to the logical block size (addresses and lengths), which
    /// `O_DIRECT` refuses, goes through the page cache instead, on a second descriptor of
    /// the same file (the kernel keeps the two coherent).
    Direct,
    /// Through the page cache: the backing refused `O_DIRECT` (or it was not asked for);
    /// `reason` says why. Flushes and FUA writes still make data durable.
    Buffered {
        /// Why `O_DIRECT` is not used.
        reason: &'static str,
    },
}

impl IoMode {
    /// Whether I/O bypasses the page cache.
    ///
    /// ```
    /// use blkmq_uring::IoMode;
    /// assert!(IoMode::Direct.is_direct());
    /// ```
    pub fn is_direct(&self) -> bool {
        matches!(self, IoMode::Direct)
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoMode::Direct => f.write_str("O_DIRECT"),
            IoMode::Buffered { reason } => write!(f, "buffered ({reason})"),
        }
    }
}

/// Why a [`UringDisk`] could not be opened or attached.
///
/// ```
/// use blkmq_uring::{OpenError, UringDisk};
/// let err = UringDisk::builder("/nonexistent/dir/disk.img").size(1 << 20).open().unwrap_err();
/// assert!(matches!(err, OpenError::Open { .. }));
/// assert!(err.to_string().starts_with("cannot open /nonexistent/dir/disk.img"));
/// ```
#[derive(Debug)]
pub enum OpenError {
    /// The path could not be opened (missing, no permission, ...).
    Open {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The path is neither a regular file nor a block device.
    NotADisk {
        /// The path.
        path: PathBuf,
    },
    /// The device would have no sectors: no size given for an empty file.
    ZeroSize,
    /// The size is not a multiple of the logical block size.
    Misaligned {
        /// The size asked for, in bytes.
        size: u64,
        /// The logical block size, in bytes.
        block: u32,
    },
    /// The size asked for is larger than the block device, or than a read-only file.
    TooLarge {
        /// The size asked for, in bytes.
        size: u64,
        /// What the backing holds, in bytes.
        available: u64,
    },
    /// Sizing or probing the backing failed.
    Io {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: io::Error,
    },
    /// io_uring could not be set up (an old kernel, a seccomp filter, a limit on locked
    /// memory).
    Uring(io::Error),
    /// A hardware queue count of zero, a depth out of `1..=16384`, or a segment count out
    /// of `1..=1024`.
    BadConfig {
        /// The setting.
        what: &'static str,
    },
    /// The queue's tag set does not fit the rings: more hardware queues or a larger depth
    /// than the disk was opened with.
    Shape {
        /// The setting.
        what: &'static str,
        /// What the queue's tag set has.
        queue: usize,
        /// What the disk was opened with.
        disk: usize,
    },
    /// The disk already serves a queue (a disk serves one).
    AlreadyAttached,
    /// The block layer refused the queue.
    Queue(blkmq_core::ConfigError),
    /// A reaper thread could not be started.
    Thread(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Open { path, source } => {
                write!(f, "cannot open {}: {source}", path.display())
            }
            OpenError::NotADisk { path } => write!(
                f,
                "{} is neither a regular file nor a block device",
                path.display()
            ),
            OpenError::ZeroSize => f.write_str("the disk would be empty: give a size"),
            OpenError::Misaligned { size, block } => write!(
                f,
                "size {size} is not a multiple of the {block}-byte logical block"
            ),
            OpenError::TooLarge { size, available } => write!(
                f,
                "size {size} is larger than the {available} bytes the backing holds"
            ),
            OpenError::Io { what, source } => write!(f, "cannot {what}: {source}"),
            OpenError::Uring(source) => write!(f, "io_uring is unavailable: {source}"),
            OpenError::BadConfig { what } => write!(f, "bad setting: {what}"),
            OpenError::Shape { what, queue, disk } => write!(
                f,
                "the queue's {what} ({queue}) exceeds the disk's ({disk})"
            ),
            OpenError::AlreadyAttached => f.write_str("the disk already serves a queue"),
            OpenError::Queue(err) => write!(f, "the block layer refused the queue: {err:?}"),
            OpenError::Thread(source) => write!(f, "cannot start a reaper thread: {source}"),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Open { source, .. }
            | OpenError::Io { source, .. }
            | OpenError::Uring(source)
            | OpenError::Thread(source) => Some(source),
            _ => None,
        }
    }
}

impl From<blkmq_core::ConfigError> for OpenError {
    fn from(err: blkmq_core::ConfigError) -> Self {
        OpenError::Queue(err)
    }
}

/// How to open a [`UringDisk`]: made by [`UringDisk::builder`].
///
/// ```no_run
/// use blkmq_uring::UringDisk;
/// let disk = UringDisk::builder("/tmp/disk.img")
///     .size(1 << 30) // create or extend the file to 1 GiB (sparse)
///     .hw_queues(2)
///     .depth(64)
///     .open()?;
/// println!("{} sectors, {}", disk.sectors(), disk.mode());
/// # Ok::<(), blkmq_uring::OpenError>(())
/// ```
#[derive(Clone, Debug)]
pub struct UringDiskBuilder {
    pub(crate) path: PathBuf,
    pub(crate) size: Option<u64>,
    pub(crate) read_only: bool,
    pub(crate) direct: bool,
    pub(crate) hw_queues: usize,
    pub(crate) depth: usize,
    pub(crate) max_segments: u32,
}

impl UringDiskBuilder {
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            size: None,
            read_only: false,
            direct: true,
            hw_queues: 1,
            depth: 64,
            max_segments: 128,
        }
    }

    /// The device's size in bytes. A regular file is created or extended (sparse) to it;
    /// a larger file keeps its bytes past it. A block device must hold it. Without a size,
    /// the backing's own size is the device's.
    ///
    /// ```
    /// use blkmq_uring::UringDisk;
    /// let builder = UringDisk::builder("/tmp/x.img").size(8 << 20);
    /// # let _ = builder;
    /// ```
    pub fn size(mut self, bytes: u64) -> Self {
        self.size = Some(bytes);
        self
    }

    /// Opens the backing read-only: writes, flushes, discards and write-zeroes end with an
    /// error status (the backing refuses them). The file must exist.
    ///
    /// ```
    /// use blkmq_uring::UringDisk;
    /// let builder = UringDisk::builder("/tmp/x.img").read_only(true);
    /// # let _ = builder;
    /// ```
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Whether to try `O_DIRECT` (default `true`); with `false`, I/O is buffered.
    ///
    /// ```
    /// use blkmq_uring::UringDisk;
    /// let builder = UringDisk::builder("/tmp/x.img").direct(false);
    /// # let _ = builder;
    /// ```
    pub fn direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        self
    }

    /// Hardware queues, one ring each (default 1); the tag set must have this many.
    ///
    /// ```
    /// use blkmq_uring::UringDisk;
    /// let builder = UringDisk::builder("/tmp/x.img").hw_queues(4);
    /// # let _ = builder;
    /// ```
    pub fn hw_queues(mut self, nr: usize) -> Self {
        self.hw_queues = nr;
        self
    }

    /// Requests each ring holds at once (default 64, at most 16384): the tag set's depth
    /// at most.
    ///
    /// ```
    /// use blkmq_uring::UringDisk;
    /// let builder = UringDisk::builder("/tmp/x.img").depth(128);
    /// # let _ = builder;
    /// ```
    pub fn depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// Most data segments of one request (default 128, at most 1024, Linux's `IOV_MAX`):
    /// the size of each request's iovec table and the `max_segments` of
    /// [`UringDisk::limits`].
    ///
    /// ```
    /// use blkmq_uring::UringDisk;
    /// let builder = UringDisk::builder("/tmp/x.img").max_segments(256);
    /// # let _ = builder;
    /// ```
    pub fn max_segments(mut self, nr: u32) -> Self {
        self.max_segments = nr;
        self
    }

    /// Opens the backing, probes `O_DIRECT` and sets up one ring per hardware queue.
    ///
    /// # Errors
    /// An [`OpenError`] saying what failed.
    ///
    /// ```
    /// use blkmq_uring::{OpenError, UringDisk};
    /// let path = std::env::temp_dir().join("blkmq-uring-doc-zero.img");
    /// let _ = std::fs::remove_file(&path);
    /// let err = UringDisk::builder(&path).size(0).open().unwrap_err();
    /// assert!(matches!(err, OpenError::ZeroSize));
    /// let err = UringDisk::builder(&path).size(1000).open().unwrap_err();
    /// assert!(matches!(err, OpenError::Misaligned { size: 1000, .. }));
    /// # let _ = std::fs::remove_file(&path);
    /// ```
    pub fn open(self) -> Result<UringDisk, OpenError> {
        if self.hw_queues == 0 {
            return Err(OpenError::BadConfig { what: "hw_queues" });
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(OpenError::BadConfig { what: "depth" });
        }
        if self.max_segments == 0 || self.max_segments > IOV_MAX {
            return Err(OpenError::BadConfig {
                what: "max_segments",
            });
        }
        if let Some(size) = self.size {
            if size == 0 {
                return Err(OpenError::ZeroSize);
            }
            if size % SECTOR_SIZE != 0 {
                return Err(OpenError::Misaligned { size, block: 512 });
            }
        }
        let backing = Backing::open(&self)?;
        UringDisk::from_backing(self, backing)
    }
}

/// The opened backing: the file, its size and how it is read.
#[derive(Debug)]
pub(crate) struct Backing {
    pub(crate) file: File,
    /// With `O_DIRECT`, the plain descriptor kept for buffers it cannot take.
    pub(crate) buffered: Option<File>,
    pub(crate) bytes: u64,
    pub(crate) block: u32,
    pub(crate) mode: IoMode,
    pub(crate) block_device: bool,
}

impl Backing {
    fn open(b: &UringDiskBuilder) -> Result<Self, OpenError> {
        let open_err = |source| OpenError::Open {
            path: b.path.clone(),
            source,
        };
        // A plain open first: it creates the file and tells its kind.
        let mut plain = OpenOptions::new();
        plain.read(true).write(!b.read_only);
        if !b.read_only && b.size.is_some() {
            plain.create(true);
        }
        let file = plain.open(&b.path).map_err(open_err)?;
        let kind = file
            .metadata()
            .map_err(|source| OpenError::Io {
                what: "read the backing's metadata",
                source,
            })?
            .file_type();
        let block_device = kind.is_block_device();
        if !block_device && !kind.is_file() {
            return Err(OpenError::NotADisk {
                path: b.path.clone(),
            });
        }
        let io_err = |what| move |source| OpenError::Io { what, source };
        let mut file = file;
        let available = file
            .seek(SeekFrom::End(0))
            .map_err(io_err("size the backing"))?;
        let block = if block_device {
            logical_block_size(&file).map_err(io_err("read the device's logical block size"))?
        } else {
            512
        };
        let bytes = match b.size {
            Some(size) if size > available && (block_device || b.read_only) => {
                return Err(OpenError::TooLarge { size, available });
            }
            Some(size) => {
                if size > available {
                    file.set_len(size).map_err(io_err("extend the file"))?;
                }
                size
            }
            None => available,
        };
        if bytes == 0 {
            return Err(OpenError::ZeroSize);
        }
        let mut backing = Backing {
            file,
            buffered: None,
            bytes,
            block,
            mode: IoMode::Buffered {
                reason: "O_DIRECT not asked for",
            },
            block_device,
        };
        if bytes % u64::from(block) != 0 {
            return Err(OpenError::Misaligned { size: bytes, block });
        }
        if b.direct {
            backing.probe_direct(b)?;
        }
        Ok(backing)
    }

    /// Reopens with `O_DIRECT` if an aligned read through it works; a regular file learns
    /// its logical block size there (512, else 4096).
    fn probe_direct(&mut self, b: &UringDiskBuilder) -> Result<(), OpenError> {
        let direct = OpenOptions::new()
            .read(true)
            .write(!b.read_only)
            .custom_flags(libc::O_DIRECT)
            .open(&b.path);
        let file = match direct {
            Ok(file) => file,
            Err(_) => {
                self.mode = IoMode::Buffered {
                    reason: "the backing refuses O_DIRECT",
                };
                return Ok(());
            }
        };
        let mut buf = AlignedBuf::new(4096);
        let sizes: &[u32] = if self.block_device {
            &[self.block]
        } else {
            &[512, 4096]
        };
        for &size in sizes {
            if u64::from(size) > self.bytes || self.bytes % u64::from(size) != 0 {
                continue;
            }
            // SAFETY: `buf` holds 4096 writable bytes, at least `size`.
            let done = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    size as usize,
                    i64::from(size).min(self.bytes as i64 - i64::from(size)),
                )
            };
            if done >= 0 {
                self.buffered = Some(std::mem::replace(&mut self.file, file));
                self.block = size;
                self.mode = IoMode::Direct;
                return Ok(());
            }
        }
        self.mode = IoMode::Buffered {
            reason: "an aligned O_DIRECT read failed",
        };
        Ok(())
    }
}

/// The logical block size of a block device (`BLKSSZGET`).
fn logical_block_size(file: &File) -> io::Result<u32> {
    const BLKSSZGET: libc::c_ulong = 0x1268;
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points to `size`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET as _, &mut size) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size.max(512) as u32)
}

/// A zeroed buffer aligned to 4096 bytes, for the probe.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("a valid layout");
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Self { ptr, layout }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}
