//! `blkmq-disk` as a process: started on a temporary backing file, I/O through its mount,
//! SIGTERM, a clean exit 0 with the data on the backing file; and its one-line errors.
//! The tests that mount skip, saying why, without root, `/dev/fuse` or `fusermount3`.

#![cfg(target_os = "linux")]

mod common;

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{Aligned, is_mounted, skip_reason, temp_dir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_blkmq-disk");

/// Waits, at most `limit`, for `child` to exit; kills it and fails the test otherwise.
fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let mut status = None;
    let exited = wait_for(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("blkmq-disk did not exit within {limit:?}");
    }
    status.unwrap()
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// Starts blkmq-disk, waits for its mount, does I/O through it, stops it with SIGTERM
/// and checks the backing file.
fn serve_and_stop(name: &str, extra: &[&str]) {
    let dir = temp_dir(name);
    let (backing, mount) = (dir.join("disk.img"), dir.join("mnt"));
    std::fs::create_dir(&mount).unwrap();
    let mut child = Command::new(BIN)
        .arg("--backing")
        .arg(&backing)
        .args(["--size", "16M", "--mount"])
        .arg(&mount)
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = wait_for(Duration::from_secs(20), || {
        is_mounted(&mount) || child.try_wait().unwrap().is_some()
    });
    if !up || !is_mounted(&mount) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no mount within 20 s: {}", stderr_of(&mut child));
    }
    let disk = mount.join("disk");
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), 16 << 20);

    let mut out = Aligned::new(256 << 10);
    for (i, b) in out.as_mut().iter_mut().enumerate() {
        *b = (i % 251) as u8 ^ 0x5a;
    }
    {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&disk)
            .unwrap();
        file.write_all_at(out.as_slice(), 1 << 20).unwrap();
        let mut back = Aligned::new(256 << 10);
        file.read_exact_at(back.as_mut(), 1 << 20).unwrap();
        assert!(
            back.as_slice() == out.as_slice(),
            "the bytes written read back"
        );
        file.sync_all().unwrap();
    }

    // SAFETY: a signal to the child we started, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = stderr_of(&mut child);
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("stopped (signal)"), "{log}");
    assert!(log.contains(" 0 errors"), "{log}");
    // The device's accounting: at least the 256 KiB written and read back (512 sectors
    // each), and nothing left in flight.
    let diskstats: Vec<u64> = log
        .lines()
        .find_map(|line| line.split_once("diskstats: "))
        .map(|(_, fields)| {
            fields
                .split_whitespace()
                .map(|f| f.parse().unwrap())
                .collect()
        })
        .unwrap_or_else(|| panic!("no diskstats line: {log}"));
    assert_eq!(diskstats.len(), 17, "{log}");
    assert!(diskstats[2] >= 512 && diskstats[6] >= 512, "{log}");
    assert_eq!(diskstats[8], 0, "in flight: {log}");
    assert!(!is_mounted(&mount), "unmounted");

    let on_file = std::fs::read(&backing).unwrap();
    assert_eq!(on_file.len(), 16 << 20);
    assert!(
        &on_file[1 << 20..(1 << 20) + (256 << 10)] == out.as_slice(),
        "on the backing file"
    );
    assert!(on_file[..1 << 20].iter().all(|&b| b == 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serves_until_sigterm_and_leaves_the_data_on_the_backing_file() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    serve_and_stop(
        "deadline",
        &[
            "--elevator",
            "mq-deadline",
            "--hw-queues",
            "2",
            "--depth",
            "64",
        ],
    );
}

#[test]
fn serves_with_bfq_and_with_no_elevator() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    serve_and_stop(
        "bfq",
        &["--elevator", "bfq", "--hw-queues", "1", "--depth", "8"],
    );
    serve_and_stop(
        "none",
        &["--elevator", "none", "--hw-queues", "4", "--depth", "2"],
    );
}

#[test]
fn serves_with_the_pread_driver() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    serve_and_stop(
        "pread",
        &["--driver", "pread", "--hw-queues", "2", "--depth", "16"],
    );
}

/// Runs blkmq-disk expecting it to fail at once; its exit code and stderr.
fn fails(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(20));
    let log = stderr_of(&mut child);
    (status.code().expect("an exit, not a signal"), log)
}

#[test]
fn a_bad_command_line_is_one_line_and_exit_2() {
    for args in [
        &["--mount", "/tmp"][..],
        &["--backing", "x.img"],
        &["--backing", "x.img", "--mount", "/tmp", "--elevator", "cfq"],
        &["--backing", "x.img", "--mount", "/tmp", "--size", "100"],
        &["--frobnicate"],
    ] {
        let (code, log) = fails(args);
        assert_eq!(code, 2, "{args:?}: {log}");
        assert_eq!(log.lines().count(), 1, "{args:?}: {log}");
        assert!(log.starts_with("blkmq-disk: "), "{log}");
    }
}

#[test]
fn what_cannot_be_served_is_one_line_and_exit_1() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = temp_dir("errors");
    let d = |p: &str| dir.join(p).to_str().unwrap().to_string();
    let cases: [(Vec<String>, &str); 5] = [
        (
            vec![
                "--backing".into(),
                d("a.img"),
                "--size".into(),
                "1M".into(),
                "--mount".into(),
                d("none"),
            ],
            "mount point",
        ),
        // A missing backing file and no size to create it with.
        (
            vec![
                "--backing".into(),
                d("missing.img"),
                "--mount".into(),
                d("."),
            ],
            "cannot open",
        ),
        // A directory cannot be opened for writing.
        (
            vec!["--backing".into(), d("."), "--mount".into(), d(".")],
            "cannot open",
        ),
        // An empty file has no size of its own.
        (
            vec!["--backing".into(), d("empty.img"), "--mount".into(), d(".")],
            "give a size",
        ),
        (
            vec![
                "--driver".into(),
                "pread".into(),
                "--backing".into(),
                d("empty.img"),
                "--mount".into(),
                d("."),
            ],
            "give a size",
        ),
    ];
    std::fs::write(dir.join("empty.img"), b"").unwrap();
    for (args, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, log) = fails(&args);
        assert_eq!(code, 1, "{args:?}: {log}");
        assert_eq!(log.lines().count(), 1, "{args:?}: {log}");
        assert!(log.contains(says), "{args:?}: {log}");
    }
    assert!(
        !Path::new(&d("a.img")).exists(),
        "nothing made before the checks pass"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
