//! A queue served in a real FUSE mount: O_DIRECT writes read back, fsync reaches the
//! driver as a flush, a punched hole reads back zeroes, and the mount goes away cleanly.
//! Each test skips, saying why, without root, `/dev/fuse` or `fusermount3`.

#![cfg(target_os = "linux")]

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blkmq_core::{Host, QueueConfig, QueueLimits, SECTOR_SIZE, StdPlatform, TagSet};
use blkmq_fuse::{OpKind, ServeOptions, serve};
use blkmq_sched_deadline::Deadline;
use common::{Aligned, RamDisk, is_mounted, skip_reason, temp_dir, wait_for};

const SIZE: usize = 64 << 20;

#[test]
fn write_read_fsync_punch_and_unmount() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let host = Host::new(
        TagSet::builder(32).hw_queues(2),
        StdPlatform::new(),
        RamDisk::new(SIZE),
    )
    .unwrap();
    let limits = QueueLimits {
        max_discard_sectors: 1 << 16,
        max_write_zeroes_sectors: 1 << 16,
        // A volatile cache, so that flushes reach the driver.
        write_cache: true,
        ..QueueLimits::new(SIZE as u64 / SECTOR_SIZE)
    };
    let queue = host
        .add_queue(QueueConfig::new(limits).elevator(Box::new(Deadline::new())))
        .unwrap();
    let dir = temp_dir("mount");
    let served = serve(queue.clone(), &dir, &ServeOptions::default()).unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || is_mounted(&dir)),
        "the mount appears"
    );
    let meta = std::fs::metadata(served.path()).unwrap();
    assert_eq!(meta.len(), SIZE as u64);
    assert!(meta.is_file());
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["disk"]);

    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(served.path())
        .unwrap();
    // 1 MiB of a pattern at 3 MiB: larger than one request, so the queue splits it.
    let mut out = Aligned::new(1 << 20);
    for (i, b) in out.as_mut().iter_mut().enumerate() {
        *b = (i * 7 + i / 4096) as u8;
    }
    file.write_all_at(out.as_slice(), 3 << 20).unwrap();
    // The issuer is the thread that asked (FUSE names the caller's thread).
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u64;
    assert_eq!(host.driver().last_issuer.load(Ordering::Relaxed), me);
    let mut back = Aligned::new(1 << 20);
    file.read_exact_at(back.as_mut(), 3 << 20).unwrap();
    assert!(
        back.as_slice() == out.as_slice(),
        "the bytes written read back"
    );
    {
        let medium = host.driver().medium.lock().unwrap();
        assert!(&medium[3 << 20..4 << 20] == out.as_slice(), "on the medium");
    }

    // Many threads at once, each its own region.
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let file = &file;
            s.spawn(move || {
                let mut buf = Aligned::new(64 << 10);
                for i in 0..16u64 {
                    let at = (8 << 20) + u64::from(t) * (1 << 20) + i * (64 << 10);
                    buf.as_mut().fill(t ^ i as u8);
                    file.write_all_at(buf.as_slice(), at).unwrap();
                    let mut got = Aligned::new(64 << 10);
                    file.read_exact_at(got.as_mut(), at).unwrap();
                    assert!(got.as_slice() == buf.as_slice());
                }
            });
        }
    });

    // fsync is a flush bio, which reaches the driver of a device with a volatile cache.
    let flushes = served.stats().snapshot().count[OpKind::Flush as usize];
    let driver_flushes = host.driver().flushes.load(Ordering::Relaxed);
    file.sync_all().unwrap();
    assert!(served.stats().snapshot().count[OpKind::Flush as usize] > flushes);
    assert!(host.driver().flushes.load(Ordering::Relaxed) > driver_flushes);

    // A hole punched in the middle of the pattern reads back as zeroes.
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: a plain system call on an open descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, (3 << 20) + 4096, 8192) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    assert!(host.driver().discards.load(Ordering::Relaxed) > 0);
    file.read_exact_at(back.as_mut(), 3 << 20).unwrap();
    assert!(back.as_slice()[4096..12288].iter().all(|&b| b == 0));
    assert!(back.as_slice()[..4096] == out.as_slice()[..4096]);
    assert!(back.as_slice()[12288..] == out.as_slice()[12288..]);
    // And a zeroed range too.
    // SAFETY: as above.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_ZERO_RANGE, 3 << 20, 512) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    file.read_exact_at(back.as_mut(), 3 << 20).unwrap();
    assert!(back.as_slice()[..512].iter().all(|&b| b == 0));

    // An unaligned read is served; an unaligned write is refused.
    let mut few = [0u8; 10];
    file.read_exact_at(&mut few, (3 << 20) + 20000).unwrap();
    assert_eq!(few, out.as_slice()[20000..20010]);
    let plain = OpenOptions::new().write(true).open(served.path()).unwrap();
    let err = plain.write_at(&[1, 2, 3], 5).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    // Past the end: nothing to read, no room to write; across it, what fits.
    assert_eq!(file.read_at(back.as_mut(), SIZE as u64).unwrap(), 0);
    let err = file
        .write_at(&out.as_slice()[..4096], SIZE as u64)
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    let at_end = SIZE as u64 - 4096;
    assert_eq!(
        file.write_at(&out.as_slice()[..8192], at_end).unwrap(),
        4096
    );
    assert_eq!(
        file.read_at(&mut back.as_mut()[..8192], at_end).unwrap(),
        4096
    );
    assert!(back.as_slice()[..4096] == out.as_slice()[..4096]);
    drop((file, plain));

    let stats = served.stats().snapshot();
    assert!(stats.ops() > 8 * 16 * 2 && stats.errors == 0, "{stats:?}");
    served.unmount().unwrap();
    assert!(!is_mounted(&dir), "unmounted");
    assert_eq!(host.in_driver(), 0);
    assert_eq!(queue.usage(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_file_held_open_keeps_the_mount_until_it_is_closed() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let host = Host::new(
        TagSet::builder(8),
        StdPlatform::new(),
        RamDisk::new(1 << 20),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(2048)))
        .unwrap();
    let dir = temp_dir("busy");
    let options = ServeOptions {
        name: "lun0".into(),
        threads: 2,
        ..ServeOptions::default()
    };
    let mut served = serve(queue, &dir, &options).unwrap();
    assert_eq!(served.path(), dir.join("lun0"));
    let file = std::fs::File::open(served.path()).unwrap();
    assert!(
        !served.try_unmount().unwrap(),
        "busy while the file is open"
    );
    assert!(is_mounted(&dir) && served.is_serving());
    let mut buf = [0u8; 512];
    file.read_exact_at(&mut buf, 512).unwrap(); // still served
    drop(file);
    assert!(served.try_unmount().unwrap(), "unmounted once closed");
    assert!(!is_mounted(&dir));
    served.unmount().unwrap(); // nothing left to do
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_missing_mount_point_is_an_error() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let host = Host::new(
        TagSet::builder(8),
        StdPlatform::new(),
        RamDisk::new(1 << 20),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(2048)))
        .unwrap();
    let err = serve(queue, "/nonexistent/blkmq", &ServeOptions::default()).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}
