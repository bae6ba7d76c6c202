//! An io_uring block driver for blkmq: a regular file or a block device served through the
//! multi-queue block layer.
//!
//! [`UringDisk`] is a [`Driver`](blkmq_core::Driver) whose medium is a file or a block
//! device, reached through one io_uring per hardware queue:
//!
//! * reads and writes go straight from the request's data segments (the submitter's
//!   buffers: segment addresses are pointers in this process) as one vectored
//!   `IORING_OP_READV`/`IORING_OP_WRITEV` at byte offset `sector * 512`, through a
//!   per-request iovec table made once when the tags are created (nothing is allocated per
//!   I/O);
//! * [`Op::Flush`](blkmq_core::Op::Flush) is `IORING_OP_FSYNC` with
//!   `IORING_FSYNC_DATASYNC` (`fdatasync`), a write with
//!   [`BioFlags::FUA`](blkmq_core::BioFlags::FUA) carries `RWF_DSYNC`;
//! * [`Op::Discard`](blkmq_core::Op::Discard) punches a hole
//!   (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`), and
//!   [`Op::WriteZeroes`](blkmq_core::Op::WriteZeroes) zeroes the range
//!   (`FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`);
//! * completions are reaped by one thread per ring, which ends each request with its real
//!   status (an `EIO` is [`Status::IoErr`](blkmq_core::Status::IoErr), an `ENOSPC`
//!   [`Status::NoSpace`](blkmq_core::Status::NoSpace), see [`status_of_errno`]); a short
//!   transfer ends the bytes done with
//!   [`update_request`](blkmq_core::RequestQueue::update_request) and issues the rest, and
//!   a read that reaches the end of a file shorter than the device ends with
//!   [`Status::IoErr`](blkmq_core::Status::IoErr), as a block device would.
//!
//! The file is opened with `O_DIRECT` where the backing takes it (probed with an aligned
//! read); elsewhere (tmpfs on older kernels, for one) it falls back to buffered I/O, which
//! [`UringDisk::mode`] reports. With `O_DIRECT`, a request whose buffers are not aligned
//! to the logical block size (which `O_DIRECT` refuses) goes through the page cache on a
//! second descriptor of the file.
//!
//! Submissions are batched: requests issued with `last == false` are only queued on the
//! ring, and the ring is entered once for the batch (on `last` or in `commit_rqs`); while a
//! ring's reaper is ending requests, requests issued meanwhile (a completion handler
//! submitting the next I/O) are entered by the reaper's next wait, in the same system call.
//! A reaper that holds its CPU alone ends each batch as its hardware queue's runner
//! ([`RequestQueue::run_batch`](blkmq_core::RequestQueue::run_batch)): what the completion
//! handlers submit there is issued without claiming the runner for each I/O, and a handler
//! must not quiesce the queue (as inside any run).
//!
//! ```no_run
//! use blkmq_core::{Host, QueueConfig, StdPlatform, Status};
//! use blkmq_uring::UringDisk;
//!
//! let disk = UringDisk::builder("/tmp/disk.img").size(64 << 20).hw_queues(2).open()?;
//! let limits = disk.limits();
//! let host = Host::new(disk.tag_set(), StdPlatform::new(), disk)?;
//! let queue = UringDisk::add_queue(&host, QueueConfig::new(limits))?;
//! assert_eq!(queue.write_at(8, &[0xa5; 4096]), Status::Ok);
//! let mut back = vec![0; 4096];
//! assert_eq!(queue.read_at(8, &mut back), Status::Ok);
//! assert_eq!(back, [0xa5; 4096]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(target_os = "linux")]
mod disk;
#[cfg(target_os = "linux")]
mod open;
#[cfg(target_os = "linux")]
mod status;

#[cfg(target_os = "linux")]
pub use disk::{IoTable, UringDisk};
#[cfg(target_os = "linux")]
pub use open::{IoMode, OpenError, UringDiskBuilder};
#[cfg(target_os = "linux")]
pub use status::status_of_errno;
