//! Dropping the host stops the reapers after draining: no thread is left, nothing hangs.
//! Alone in its binary, so it can count the process's reaper threads.

#![cfg(target_os = "linux")]

mod common;

use blkmq_core::{Bio, Op};
use blkmq_uring::UringDisk;
use common::*;

const MIB: u64 = 1 << 20;

#[test]
fn dropping_the_host_with_io_in_flight_stops_every_reaper() {
    fn reapers() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("blkmq-uring-"))
            .count()
    }
    bounded(60, || {
        for round in 0..5 {
            let path = TempPath::new(&format!("drop-{round}"));
            let builder = UringDisk::builder(&path.0).size(8 * MIB).hw_queues(2);
            let Some(rig) = rig_with(path, builder, "none") else {
                return;
            };
            let bufs: Vec<Aligned> = (0..48).map(|_| Aligned::new(65536, |_| 0)).collect();
            let done = Ended::new(bufs.len());
            for (i, b) in bufs.iter().enumerate() {
                let bio = Bio::new(Op::Write, 128 * i as u64, 128).buffer(b.addr());
                // The tags may run out: a bio that cannot go in now waits for the next round.
                let _ = rig.queue.submit(done.bio(bio, i));
            }
            assert_eq!(reapers(), 2);
            let Rig { queue, host, path } = rig;
            drop(queue);
            drop(host);
            // Buffers live until here; the reapers have drained the rings.
            drop(bufs);
            drop(path);
        }
        // The reaper threads are named after their ring; this is the only test here.
        assert_eq!(reapers(), 0);
    });
}
