//! Serves a blkmq [`RequestQueue`](blkmq_core::RequestQueue) as one regular file in a FUSE
//! mount, so that real programs (`fio`, `losetup`, `mkfs`, a file system) do I/O through the
//! block layer.
//!
//! [`serve`] mounts a directory holding one file (named `disk` unless
//! [`ServeOptions::name`] says otherwise) whose size is the queue's capacity. Every open of
//! it is direct I/O (`FOPEN_DIRECT_IO`, with `FOPEN_PARALLEL_DIRECT_WRITES`): the kernel's
//! page cache stays out of the way and each read or write of the file reaches the queue as
//! one bio, which the queue splits at the device's limits itself. FUSE requests are served
//! by several threads at once ([`ServeOptions::threads`]), each waiting for its own bio, so
//! as many bios are in flight as the kernel sends requests in parallel.
//! Each bio's [issuer](blkmq_core::Bio::issuer) is the thread that asked for the I/O (the
//! caller FUSE names), so that an I/O scheduler (BFQ) keeps issuers apart.
//!
//! | on the file | in the block layer |
//! | --- | --- |
//! | `read` | an [`Op::Read`](blkmq_core::Op::Read) bio into the serving thread's reply buffer, which it owns until the bio ends (as [`RequestQueue::read_at`](blkmq_core::RequestQueue::read_at) makes it) |
//! | `write` | an [`Op::Write`](blkmq_core::Op::Write) bio whose data is the FUSE request's own buffer (as [`RequestQueue::write_at`](blkmq_core::RequestQueue::write_at) makes it) |
//! | `write` to a file opened `O_DSYNC` or `O_SYNC`, or with `RWF_DSYNC` | the same bio with [`BioFlags::FUA`](blkmq_core::BioFlags::FUA), as Linux's direct writes to a block device: durable when it returns (the queue follows it with a flush where the device has no FUA) |
//! | `fsync`, `fdatasync`, `flush` (each `close`) | an empty [`Op::Flush`](blkmq_core::Op::Flush) bio, sequenced as the queue's flush handling does |
//! | `fallocate(PUNCH_HOLE \| KEEP_SIZE)` | [`Op::Discard`](blkmq_core::Op::Discard) bios |
//! | `fallocate(ZERO_RANGE)` | [`Op::WriteZeroes`](blkmq_core::Op::WriteZeroes) bios |
//!
//! # Alignment
//!
//! Reads may start and end anywhere: the whole logical blocks around them are read, and the
//! bytes asked for replied. Writes must start and end on the queue's logical block size
//! (`EINVAL` otherwise), as writes to a Linux block device opened with `O_DIRECT` must: a
//! read-modify-write here would not be atomic against a racing write to the same block.
//! A loop device and `fio --direct=1` send aligned I/O. Fallocate ranges must be aligned
//! likewise.
//!
//! A write's data is the FUSE request's buffer, which starts at no particular address
//! (a few dozen bytes into a page). A driver that needs its data aligned (`O_DIRECT` on
//! the backing file, DMA) names its need in [`ServeOptions::dma_alignment`] (512 bytes
//! unless told otherwise): a write whose buffer is not aligned so is copied into an
//! aligned buffer of the serving thread first; with no need named, the bio's segment is
//! the FUSE buffer itself.
//!
//! # Errors
//!
//! A bio's [`Status`](blkmq_core::Status) reaches the program as the errno Linux gives it
//! ([`errno`]): `EIO` for an I/O error, `EOPNOTSUPP` for an operation the device lacks,
//! `ENOSPC`, `ETIMEDOUT`, and so on.
//!
//! ```no_run
//! use blkmq_core::testing::Null;
//! use blkmq_core::{Host, QueueConfig, QueueLimits, StdPlatform, TagSet};
//! use blkmq_fuse::{ServeOptions, serve};
//!
//! let host = Host::new(TagSet::builder(64), StdPlatform::new(), Null::new()).unwrap();
//! let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 21))).unwrap();
//! let served = serve(queue, "/mnt/blkmq", &ServeOptions::default()).unwrap();
//! println!("{} is a 1 GiB file", served.path().display());
//! // ... `fio --filename=/mnt/blkmq/disk --direct=1 ...` runs meanwhile ...
//! served.unmount().unwrap();
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

mod errno;
#[cfg(target_os = "linux")]
mod fs;
mod stats;

pub use errno::errno;
#[cfg(target_os = "linux")]
pub use fs::{ServeOptions, Served, check_fuse, serve};
pub use stats::{OpKind, Snapshot, Stats};
