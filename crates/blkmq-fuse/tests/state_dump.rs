//! `blkmq-disk` prints its host's state dump on SIGUSR1 (every hardware queue of its
//! queue, as blk-mq's debugfs shows them) and serves on. Skips, saying why, without root,
//! `/dev/fuse` or `fusermount3`.

#![cfg(target_os = "linux")]

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Duration;

use common::daemon::Daemon;
use common::{Aligned, skip_reason, wait_for};

#[test]
fn sigusr1_prints_the_state_dump_and_serving_goes_on() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let daemon = Daemon::start(
        "state-dump",
        "16M",
        &["--elevator", "mq-deadline", "--hw-queues", "2"],
    );
    // SAFETY: a signal to the child the daemon started and has not reaped.
    assert_eq!(unsafe { libc::kill(daemon.pid(), libc::SIGUSR1) }, 0);
    let dumped = wait_for(Duration::from_secs(10), || {
        daemon.log().contains("hctx 1 of queue")
    });
    let log = daemon.log();
    assert!(dumped, "no dump within 10 s: {log}");
    assert!(log.contains("host: in_driver="), "{log}");
    assert!(log.contains(" elevator=mq-deadline "), "{log}");
    assert!(log.contains("hctx 0 of queue"), "{log}");
    assert!(log.contains("  sched_tags: depth="), "{log}");

    // Still serving: a write reads back.
    let mut out = Aligned::new(64 << 10);
    out.as_mut().fill(0xa5);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(daemon.disk())
        .unwrap();
    file.write_all_at(out.as_slice(), 1 << 20).unwrap();
    let mut back = Aligned::new(64 << 10);
    file.read_exact_at(back.as_mut(), 1 << 20).unwrap();
    assert!(
        back.as_slice() == out.as_slice(),
        "the bytes written read back"
    );
    drop(file);
    daemon.stop();
}
