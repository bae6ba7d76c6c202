//! What an fsync acknowledged survives the daemon's death: writers put self-describing
//! records (sequence number, place, pseudo-random pattern, checksum) at distinct places of
//! the served file with `O_DIRECT` and only log them as acknowledged once they are durable:
//! one writer fsyncs after each batch of records, the other has the file open `O_DSYNC`,
//! so that each write returns durable (a FUA write); `blkmq-disk` is killed with SIGKILL while they write. Their I/O then fails (the FUSE
//! connection is aborted) and they stop; every acknowledged record is on the backing file,
//! byte for byte. With the io_uring driver and with the pread/pwrite one.
//! Skips, saying why, without root, `/dev/fuse` or `fusermount3`.

#![cfg(target_os = "linux")]

mod common;

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::daemon::Daemon;
use common::{Aligned, fill_pattern, hash64, skip_reason, wait_for};

/// A record's size: one 4 KiB block.
const RECORD: usize = 4096;
/// The served disk's size, and the records it holds.
const DISK: &str = "64M";
const SLOTS: u64 = (64 << 20) / RECORD as u64;
/// Records acknowledged before the kill, at least.
const ACKED_BEFORE_KILL: u64 = 300;
const WRITERS: u64 = 2;
const MAGIC: &[u8; 8] = b"blkmqrec";

/// Where record `seq` goes: a stride coprime with the slot count, so that every record
/// has a place of its own, scattered over the disk.
fn slot(seq: u64) -> u64 {
    seq * 7919 % SLOTS
}

/// Record `seq`: the magic, its sequence number and slot, a pattern drawn from the
/// sequence number, and the checksum of all that in its last 8 bytes.
fn record(seq: u64, out: &mut [u8]) {
    fill_pattern(seq, out);
    out[..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..24].copy_from_slice(&slot(seq).to_le_bytes());
    let sum = hash64(&out[..RECORD - 8]);
    out[RECORD - 8..].copy_from_slice(&sum.to_le_bytes());
}

/// How a writer ended.
#[derive(Debug)]
enum Ended {
    /// Its I/O failed (the daemon is gone), at record `at`.
    Failed { at: u64, error: io::Error },
    /// It wrote every record it had a slot for: the kill came too late.
    RanOut,
}

/// Writer `id`: records `id`, `id + WRITERS`, ... in batches of one to four, each batch
/// written and then fsynced (by writer 0; writer 1 has the file open `O_DSYNC`, and its
/// batches are one record each, durable when its write returns); once the fsync (or the
/// write) returned Ok the batch's records go into `acked` (and the count into `count`).
/// Runs until an I/O fails.
fn writer(disk: PathBuf, id: u64, acked: Arc<Mutex<Vec<u64>>>, count: Arc<AtomicU64>) -> Ended {
    let dsync = id == 1;
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | if dsync { libc::O_DSYNC } else { 0 })
        .open(&disk)
    {
        Ok(file) => file,
        Err(error) => return Ended::Failed { at: id, error },
    };
    let mut buf = Aligned::new(RECORD);
    let mut batch = Vec::with_capacity(4);
    let mut seq = id;
    while seq < SLOTS {
        batch.clear();
        let records = if dsync { 1 } else { 1 + (seq / WRITERS) % 4 };
        for _ in 0..records {
            if seq >= SLOTS {
                break;
            }
            record(seq, buf.as_mut());
            if let Err(error) = file.write_all_at(buf.as_slice(), slot(seq) * RECORD as u64) {
                return Ended::Failed { at: seq, error };
            }
            batch.push(seq);
            seq += WRITERS;
        }
        if !dsync {
            if let Err(error) = file.sync_data() {
                return Ended::Failed { at: seq, error };
            }
        }
        acked.lock().unwrap().extend_from_slice(&batch);
        count.fetch_add(batch.len() as u64, Ordering::SeqCst);
    }
    Ended::RanOut
}

/// Serves a disk with `driver`, writes and kills the daemon, and checks the backing file.
fn acknowledged_writes_survive_sigkill(driver: &str) {
    let mut daemon = Daemon::start(
        &format!("durability-{driver}"),
        DISK,
        &["--driver", driver, "--hw-queues", "2", "--depth", "32"],
    );
    let acked = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| {
            let (disk, acked, count) = (daemon.disk(), acked.clone(), count.clone());
            std::thread::spawn(move || writer(disk, id, acked, count))
        })
        .collect();

    let enough = wait_for(Duration::from_secs(60), || {
        count.load(Ordering::SeqCst) >= ACKED_BEFORE_KILL || writers.iter().any(|w| w.is_finished())
    });
    assert!(
        enough,
        "{ACKED_BEFORE_KILL} records not acknowledged in 60 s"
    );
    assert!(
        writers.iter().all(|w| !w.is_finished()),
        "a writer stopped before the kill: {}",
        daemon.log()
    );
    // The writers are still writing: they stop only on an error, which the kill brings.
    daemon.kill();
    let stopped = wait_for(Duration::from_secs(30), || {
        writers.iter().all(|w| w.is_finished())
    });
    assert!(stopped, "a writer still hangs 30 s after the kill");
    for (id, writer) in writers.into_iter().enumerate() {
        match writer.join().unwrap() {
            Ended::Failed { at, error } => {
                eprintln!("{driver} writer {id}: I/O failed at record {at} after the kill: {error}")
            }
            Ended::RanOut => panic!("writer {id} wrote every record before the kill"),
        }
    }

    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() as u64 >= ACKED_BEFORE_KILL);
    let on_file = daemon.backing_bytes();
    let mut want = vec![0u8; RECORD];
    let mut lost = Vec::new();
    for &seq in &acked {
        record(seq, &mut want);
        let at = (slot(seq) as usize) * RECORD;
        if on_file[at..at + RECORD] != want[..] {
            lost.push(seq);
        }
    }
    // Written records beyond those acknowledged, found whole on the file.
    let whole = (0..SLOTS)
        .filter(|&seq| {
            let at = (slot(seq) as usize) * RECORD;
            record(seq, &mut want);
            on_file[at..at + RECORD] == want[..]
        })
        .count();
    eprintln!(
        "durability ({driver}): {} records acknowledged before SIGKILL, {} of them on the \
         backing file; {whole} whole records on it in all",
        acked.len(),
        acked.len() - lost.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged records not on the backing file: {lost:?}"
    );
}

#[test]
fn acknowledged_writes_survive_sigkill_with_io_uring() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    acknowledged_writes_survive_sigkill("uring");
}

#[test]
fn acknowledged_writes_survive_sigkill_with_pread() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    acknowledged_writes_survive_sigkill("pread");
}
