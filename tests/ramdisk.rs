//! The RAM disk of `examples/ramdisk.rs`: its run reads back every byte it wrote, through
//! several segment layouts; and the driver's edges: a bio that names no memory, an I/O past
//! the end, discard.

#[path = "../examples/ramdisk.rs"]
#[allow(dead_code)]
mod ramdisk;

use blkmq::{Bio, Host, Op, QueueConfig, RequestQueue, SECTOR_SIZE, Status, StdPlatform, TagSet};
use ramdisk::{DISK, RamDisk, layout, pattern, table};

#[test]
fn the_example_reads_back_every_byte() {
    let report = ramdisk::run();
    assert_eq!(report.mismatches, 0);
    assert_eq!(report.bytes_written, DISK as u64);
    // The whole disk three times (contiguous, 512-byte pieces, mixed pieces) and 512 KiB
    // around the zeroed range.
    assert_eq!(report.bytes_read, 3 * DISK as u64 + (512 << 10));
    // 64 writes of six segments each.
    assert!(report.segments > 64 * 6);
    ramdisk::main();
}

fn disk() -> (
    std::sync::Arc<Host<RamDisk>>,
    std::sync::Arc<RequestQueue<RamDisk>>,
) {
    // SAFETY: the tests name only memory they own and keep until `submit_and_wait`
    // returns.
    let disk = unsafe { RamDisk::new(1 << 20) };
    let limits = disk.limits();
    let host = Host::new(TagSet::builder(4), StdPlatform::new(), disk).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    (host, queue)
}

#[test]
fn a_bio_naming_no_memory_is_refused_and_copies_nothing() {
    let (_host, queue) = disk();
    assert_eq!(
        queue.submit_and_wait(Bio::new(Op::Write, 0, 8)),
        Status::Invalid
    );
    let mut buf = vec![0xeeu8; 4096];
    let read = Bio::new(Op::Read, 0, 8).buffer(buf.as_mut_ptr() as u64);
    assert_eq!(queue.submit_and_wait(read), Status::Ok);
    assert!(buf.iter().all(|&b| b == 0), "the disk starts zeroed");
    // Past the end: the queue refuses it before the driver sees it.
    let past = Bio::new(Op::Read, (1 << 20) / SECTOR_SIZE, 8).buffer(buf.as_mut_ptr() as u64);
    assert_eq!(queue.submit_and_wait(past), Status::IoErr);
}

#[test]
fn a_scattered_write_reads_back_contiguous_and_discard_zeroes() {
    let (_host, queue) = disk();
    let mut buf = vec![0u8; 16 << 10];
    let pieces = layout(buf.len(), &[512, 3584, 1024]);
    let mut at = 0;
    for &(off, len) in &pieces {
        for (i, b) in buf[off..off + len].iter_mut().enumerate() {
            *b = pattern((at + i) as u64);
        }
        at += len;
    }
    let table = table(&mut buf, &pieces);
    assert!(table.len() > 4);
    let write = Bio::new(Op::Write, 0, 32);
    assert_eq!(queue.submit_and_wait_with(write, &table), Status::Ok);
    let mut back = vec![0u8; 16 << 10];
    let read = Bio::new(Op::Read, 0, 32).buffer(back.as_mut_ptr() as u64);
    assert_eq!(queue.submit_and_wait(read), Status::Ok);
    assert!(
        back.iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i as u64))
    );
    assert_eq!(
        queue.submit_and_wait(Bio::new(Op::Discard, 8, 8)),
        Status::Ok
    );
    let read = Bio::new(Op::Read, 0, 32).buffer(back.as_mut_ptr() as u64);
    assert_eq!(queue.submit_and_wait(read), Status::Ok);
    for (i, &b) in back.iter().enumerate() {
        let want = if (4096..8192).contains(&i) {
            0
        } else {
            pattern(i as u64)
        };
        assert_eq!(b, want, "byte {i}");
    }
}
