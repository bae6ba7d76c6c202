//! `blkmq-disk --trace FILE`: the events of real I/O through the mount, one `blkparse` line
//! each in FILE, and the `btt`-like summary at exit. Skips, saying why, without root,
//! `/dev/fuse` or `fusermount3`.

#![cfg(target_os = "linux")]

mod common;

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Aligned, is_mounted, skip_reason, temp_dir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_blkmq-disk");

#[test]
fn traces_real_io_to_its_file_and_summarises_it_at_exit() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = temp_dir("trace");
    let (backing, mount, trace) = (dir.join("disk.img"), dir.join("mnt"), dir.join("trace.txt"));
    std::fs::create_dir(&mount).unwrap();
    let mut child = Command::new(BIN)
        .arg("--backing")
        .arg(&backing)
        .args([
            "--size",
            "16M",
            "--quiet",
            "--elevator",
            "mq-deadline",
            "--mount",
        ])
        .arg(&mount)
        .arg("--trace")
        .arg(&trace)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = wait_for(Duration::from_secs(20), || {
        is_mounted(&mount) || child.try_wait().unwrap().is_some()
    });
    assert!(up && is_mounted(&mount), "no mount within 20 s");
    let mut out = Aligned::new(256 << 10);
    out.as_mut().fill(0xa5);
    {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(mount.join("disk"))
            .unwrap();
        file.write_all_at(out.as_slice(), 1 << 20).unwrap();
        let mut back = Aligned::new(256 << 10);
        file.read_exact_at(back.as_mut(), 1 << 20).unwrap();
        assert!(back.as_slice() == out.as_slice());
    }
    // SAFETY: a signal to the child we started, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let mut status = None;
    assert!(wait_for(Duration::from_secs(30), || {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.unwrap().success(), "{log}");

    let lines = std::fs::read_to_string(&trace).unwrap();
    let count = |letter: &str| {
        let field = format!("  {letter} ");
        lines.lines().filter(|l| l.contains(&field)).count()
    };
    // The write and the read, and the final flush, at least: each queued, issued, ended.
    assert!(
        count("Q") >= 3 && count("D") >= 3 && count("C") >= 3,
        "{lines}"
    );
    assert!(
        lines.lines().any(|l| l.contains("  Q   W 2048 + ")),
        "{lines}"
    );
    assert!(
        lines
            .lines()
            .any(|l| l.contains("  C   R 2048 + ") && l.ends_with(" ok")),
        "{lines}"
    );
    let written = format!("trace: {} events written to", lines.lines().count());
    assert!(log.contains(&written), "{log}");
    assert!(log.contains(", 0 dropped"), "{log}");
    let q2c = log
        .lines()
        .find(|l| l.starts_with("Q2C "))
        .expect("the summary");
    let n: u64 = q2c.split_whitespace().last().unwrap().parse().unwrap();
    assert!(n >= 4, "{log}"); // the flushes too
    std::fs::remove_dir_all(&dir).unwrap();
}
