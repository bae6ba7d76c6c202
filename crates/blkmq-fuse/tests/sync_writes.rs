//! Synchronous writes through a FUSE mount reach the medium before they return, as on a
//! block device: a write to a file opened with `O_DSYNC` or `O_SYNC`, or written with
//! `RWF_DSYNC`, is a FUA write (Linux's direct writes to a block device carry `REQ_FUA`
//! then), which the queue hands to a device that honours FUA as such and follows with a
//! flush on one that does not. A plain write is neither. Skips, saying why, without root,
//! `/dev/fuse` or `fusermount3`.

#![cfg(target_os = "linux")]

mod common;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blkmq_core::{Host, QueueConfig, QueueLimits, RequestQueue, SECTOR_SIZE, StdPlatform, TagSet};
use blkmq_fuse::{ServeOptions, Served, serve};
use common::{Aligned, RamDisk, is_mounted, skip_reason, temp_dir, wait_for};

const SIZE: usize = 16 << 20;

/// A RAM disk with a volatile write cache (and FUA if `fua`), served in a fresh mount
/// (whose directory comes last).
fn mounted(name: &str, fua: bool) -> (Arc<RequestQueue<RamDisk>>, Served, PathBuf) {
    let host = Host::new(
        TagSet::builder(16).hw_queues(2),
        StdPlatform::new(),
        RamDisk::new(SIZE),
    )
    .unwrap();
    let limits = QueueLimits {
        write_cache: true,
        fua,
        ..QueueLimits::new(SIZE as u64 / SECTOR_SIZE)
    };
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    let dir = temp_dir(name);
    let served = serve(queue.clone(), &dir, &ServeOptions::default()).unwrap();
    assert!(wait_for(Duration::from_secs(10), || is_mounted(&dir)));
    (queue, served, dir)
}

fn open(served: &Served, flags: i32) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(served.path())
        .unwrap()
}

/// What the driver saw of one write of 64 KiB by `write`: (writes, FUA writes, flushes).
fn one_write(queue: &RequestQueue<RamDisk>, write: impl FnOnce(&[u8])) -> (u64, u64, u64) {
    let disk = queue.driver();
    let counts = || {
        (
            disk.writes.load(Ordering::SeqCst),
            disk.fua_writes.load(Ordering::SeqCst),
            disk.flushes.load(Ordering::SeqCst),
        )
    };
    let mut buf = Aligned::new(64 << 10);
    buf.as_mut().fill(0x6b);
    let before = counts();
    write(buf.as_slice());
    let after = counts();
    (after.0 - before.0, after.1 - before.1, after.2 - before.2)
}

/// `pwritev2(fd, [buf], offset, flags)`, all of it.
fn pwritev2(file: &File, buf: &[u8], offset: u64, flags: i32) {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one iovec naming `buf`, alive and unchanged across the call, on a
    // descriptor we own; the kernel only reads through it.
    let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as i64, flags) };
    assert_eq!(n, buf.len() as isize, "{}", std::io::Error::last_os_error());
}

#[test]
fn dsync_and_sync_writes_are_fua_on_a_device_that_honours_it() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let (queue, served, dir) = mounted("sync-fua", true);
    let plain = open(&served, libc::O_DIRECT);
    // Kept open across the writes: a close sends a flush of its own.
    let dsync = open(&served, libc::O_DIRECT | libc::O_DSYNC);
    let sync = open(&served, libc::O_SYNC);

    let (writes, fua, flushes) = one_write(&queue, |b| plain.write_all_at(b, 0).unwrap());
    assert!(writes >= 1);
    assert_eq!(
        (fua, flushes),
        (0, 0),
        "a plain write is neither FUA nor a flush"
    );

    let (writes, fua, flushes) = one_write(&queue, |b| dsync.write_all_at(b, 1 << 20).unwrap());
    assert!(writes >= 1);
    assert_eq!((fua, flushes), (writes, 0), "an O_DSYNC write is FUA");

    let (writes, fua, _) = one_write(&queue, |b| sync.write_all_at(b, 2 << 20).unwrap());
    assert!(writes >= 1);
    assert_eq!(fua, writes, "an O_SYNC write is FUA");

    let (writes, fua, _) = one_write(&queue, |b| pwritev2(&plain, b, 3 << 20, libc::RWF_DSYNC));
    assert!(writes >= 1);
    assert_eq!(fua, writes, "a RWF_DSYNC write is FUA");

    let (writes, fua, flushes) = one_write(&queue, |b| plain.write_all_at(b, 4 << 20).unwrap());
    assert!(writes >= 1);
    assert_eq!((fua, flushes), (0, 0), "RWF_DSYNC was for that write only");

    let medium = queue.driver().medium.lock().unwrap();
    for at in 0..5 {
        let start = at << 20;
        assert!(medium[start..start + (64 << 10)].iter().all(|&b| b == 0x6b));
    }
    drop(medium);
    drop((plain, dsync, sync));
    served.unmount().unwrap();
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_dsync_write_is_followed_by_a_flush_on_a_device_without_fua() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let (queue, served, dir) = mounted("sync-nofua", false);
    let plain = open(&served, libc::O_DIRECT);
    let dsync = open(&served, libc::O_DIRECT | libc::O_DSYNC);

    let (_, fua, flushes) = one_write(&queue, |b| plain.write_all_at(b, 0).unwrap());
    assert_eq!((fua, flushes), (0, 0));
    // The queue emulates FUA: the write, then a flush, both before the write returns.
    let (writes, fua, flushes) = one_write(&queue, |b| dsync.write_all_at(b, 1 << 20).unwrap());
    assert!(writes >= 1);
    assert_eq!(fua, 0, "the driver sees no FUA it does not honour");
    assert!(flushes >= 1, "an O_DSYNC write is followed by a flush");
    drop((plain, dsync));
    served.unmount().unwrap();
    std::fs::remove_dir(&dir).unwrap();
}
