//! fio's verification through the real stack, with each I/O scheduler: `blkmq-disk` on a
//! temporary backing file, two fio jobs of random direct writes of 4 KiB to 128 KiB
//! (`libaio`, iodepth 16), each on a region of its own and each block carrying its CRC32C,
//! read back and checked after the writes; then a second fio run that only reads and
//! checks every block again. fio exits 0, its JSON report has no error and the bytes
//! written and verified, and the daemon stops cleanly on SIGTERM.
//! Skips, saying why, without root, `/dev/fuse`, `fusermount3` or `fio`.

#![cfg(target_os = "linux")]

mod common;

use common::daemon::{Daemon, missing_tool, run};
use common::json::Json;
use common::skip_reason;

/// Bytes each of the two jobs writes, on a region of its own.
const REGION: u64 = 16 << 20;
const JOBS: u64 = 2;

fn skip() -> Option<String> {
    skip_reason().or_else(|| missing_tool(&[("fio", "fio")]))
}

/// Runs fio over `disk` (`verify_only`: reading and checking what an earlier run wrote)
/// and returns its jobs' reports, having checked its exit status and that no job saw an
/// error: `continue_on_error=verify` has every job check every block and count the
/// verification errors in `total_err`, whose first one would be `error`.
fn fio(disk: &str, verify_only: bool) -> Vec<Json> {
    let filename = format!("--filename={disk}");
    let mut args = vec![
        "--name=verify",
        filename.as_str(),
        "--ioengine=libaio",
        "--direct=1",
        "--rw=randwrite",
        "--bsrange=4k-128k",
        "--verify=crc32c",
        "--do_verify=1",
        "--continue_on_error=verify",
        "--numjobs=2",
        "--size=16m",
        "--offset_increment=16m",
        "--iodepth=16",
        "--randrepeat=1",
        // No state file left in the working directory.
        "--verify_state_save=0",
        "--output-format=json",
    ];
    if verify_only {
        args.push("--verify_only=1");
    }
    let (status, text) = run("fio", &args);
    assert!(status.success(), "fio {args:?}: {status}: {text}");
    // fio warns on stdout, before the report, that the jobs share a file (each keeps to
    // its own region here).
    let report = text
        .find('{')
        .and_then(|start| Json::parse(text[start..].trim_end_matches(|c| c != '}')).ok())
        .unwrap_or_else(|| panic!("no JSON report from fio: {text}"));
    let jobs = report.at(&["jobs"]).elements().to_vec();
    assert_eq!(jobs.len() as u64, JOBS, "{text}");
    for job in &jobs {
        assert_eq!(job.int(&["error"]), 0, "{text}");
        assert_eq!(job.int(&["total_err"]), 0, "verification errors: {text}");
    }
    jobs
}

/// The fio runs through `blkmq-disk --elevator elevator`; the line they make.
fn verify_through(elevator: &str) -> String {
    let daemon = Daemon::start(
        &format!("fio-{elevator}"),
        "32M",
        &["--elevator", elevator, "--hw-queues", "2", "--depth", "64"],
    );
    let disk = daemon.disk();
    let disk = disk.to_str().unwrap();

    let written = fio(disk, false);
    let sum = |jobs: &[Json], dir: &str| -> u64 {
        jobs.iter().map(|job| job.int(&[dir, "io_bytes"])).sum()
    };
    for job in &written {
        // Every byte of the job's region written once, and read back and checked once.
        assert_eq!(job.int(&["write", "io_bytes"]), REGION);
        assert_eq!(job.int(&["read", "io_bytes"]), REGION);
    }
    let checked = fio(disk, true);
    for job in &checked {
        assert_eq!(job.int(&["read", "io_bytes"]), REGION);
    }
    let summary = daemon.stop();
    let line = format!(
        "fio through blkmq-disk ({elevator}): {} bytes written, {} verified after writing, {} \
         verified again, 0 errors",
        sum(&written, "write"),
        sum(&written, "read"),
        sum(&checked, "read"),
    );
    eprintln!("{line}\n  {summary}");
    line
}

#[test]
fn fio_verifies_through_no_elevator() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    verify_through("none");
}

#[test]
fn fio_verifies_through_mq_deadline() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    verify_through("mq-deadline");
}

#[test]
fn fio_verifies_through_bfq() {
    if let Some(why) = skip() {
        eprintln!("skipped: {why}");
        return;
    }
    verify_through("bfq");
}

#[test]
fn the_report_reader_parses_what_fio_writes() {
    let text = r#"{ "jobs" : [ { "jobname" : "v\"1", "error" : 0, "write" : { "io_bytes" : 16777216,
        "iops" : 5875.000000 }, "empty" : {}, "list" : [], "ok" : true, "none" : null,
        "neg" : -1.5e2 } ] }"#;
    let json = Json::parse(text).unwrap();
    let job = &json.at(&["jobs"]).elements()[0];
    assert_eq!(job.at(&["jobname"]), &Json::String("v\"1".into()));
    assert_eq!(job.int(&["write", "io_bytes"]), 16 << 20);
    assert_eq!(job.int(&["error"]), 0);
    assert_eq!(job.at(&["neg"]), &Json::Number(-150.0));
    assert_eq!(job.at(&["none"]), &Json::Null);
    assert!(Json::parse("{} x").is_err());
    assert!(Json::parse("[1,").is_err());
}
