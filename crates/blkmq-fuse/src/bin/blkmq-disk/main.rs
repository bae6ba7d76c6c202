//! `blkmq-disk`: a disk image served through a blkmq request queue, as a file in a FUSE
//! mount, so that `fio`, `losetup`, `mkfs` and file systems do real I/O through the block
//! layer's tags, software and hardware queues and I/O scheduler.
//!
//! ```text
//! blkmq-disk --backing disk.img --size 1G --mount /mnt/blkmq --elevator mq-deadline \
//!     --hw-queues 2 --depth 64
//! ```
//!
//! It serves until SIGINT or SIGTERM (or until the mount is unmounted from outside), then
//! unmounts, flushes the device, drains the queue, syncs the backing file and prints a
//! summary; the exit status is 0. Once a second a line on stderr gives the IOPS, MB/s,
//! mean and 99th percentile latency of the last second as the file's users saw them, then
//! the device's side from the queue's I/O accounting (`iostat -x`'s r/s, w/s, rkB/s, wkB/s,
//! r_await, w_await, aqu-sz and %util) and the mean number of requests on each hardware
//! queue (allocated, not yet completed). The summary ends with the device's
//! `/proc/diskstats` line. SIGUSR1 prints the host's state dump on stderr (each hardware
//! queue's state, lists, tags and requests in the driver: `Host::dump`), as blk-mq's
//! debugfs shows it, while serving goes on. A problem found before serving (no `/dev/fuse`, no way to
//! mount, a backing file that cannot be opened or sized, no mount point) is one line on
//! stderr and exit status 1; a bad command line, exit status 2.
//!
//! The backing file is served by the io_uring driver of `blkmq-uring` (one ring and reaper
//! per hardware queue, `O_DIRECT` where the file takes it), or with `--driver pread` (and
//! where io_uring cannot be set up) by pread/pwrite threads per hardware queue (the driver
//! in `file.rs`). Either way every segment of a request is read or written at its place in
//! the file, flushes are `fdatasync`, discards punch holes and write-zeroes zero ranges.

#![cfg_attr(not(target_os = "linux"), allow(unused))]

mod args;
#[cfg(target_os = "linux")]
mod file;
#[cfg(target_os = "linux")]
mod trace;

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("blkmq-disk: Linux only (FUSE)");
    std::process::exit(1);
}

#[cfg(target_os = "linux")]
fn main() {
    let parsed = match args::parse(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("blkmq-disk: {why}");
            std::process::exit(2);
        }
    };
    let args = match parsed {
        args::Parsed::Run(args) => args,
        args::Parsed::Help => {
            println!("{}", args::USAGE);
            return;
        }
    };
    if let Err(why) = linux::run(&args) {
        eprintln!("blkmq-disk: {why}");
        std::process::exit(1);
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::fs::{File, OpenOptions};
    use std::io::{Seek, SeekFrom, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use blkmq_core::{
        Bio, Driver, Elevator, Host, IoStats, Op, Platform, QueueConfig, QueueLimits, Rates,
        RequestQueue, SECTOR_SIZE, Status, StdPlatform, TagSet,
    };
    use blkmq_fuse::{OpKind, ServeOptions, Served, Snapshot, serve};
    use blkmq_sched_bfq::Bfq;
    use blkmq_sched_deadline::Deadline;
    use blkmq_uring::{OpenError, UringDisk};

    use crate::args::{self, Args, DriverKind};
    use crate::file::FileDisk;

    /// The most I/O threads per hardware queue of the pread/pwrite driver.
    const IO_THREADS: usize = 8;

    pub(crate) fn run(args: &Args) -> Result<(), String> {
        blkmq_fuse::check_fuse().map_err(|e| e.to_string())?;
        crate::trace::start(args.trace.as_deref())?;
        if !args.mount.is_dir() {
            return Err(format!(
                "mount point {} is not a directory",
                args.mount.display()
            ));
        }
        // Ask for the signals before anything is mounted, so none is missed.
        let stop = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, stop.clone())
                .map_err(|e| format!("cannot handle signal {signal}: {e}"))?;
        }
        match args.driver {
            DriverKind::Pread => run_pread(args, &stop),
            DriverKind::Uring => {
                let mut builder = UringDisk::builder(&args.backing)
                    .hw_queues(args.hw_queues)
                    .depth(args.depth);
                if let Some(size) = args.size {
                    builder = builder.size(size);
                }
                match builder.open() {
                    Ok(disk) => run_uring(args, disk, &stop),
                    Err(OpenError::Uring(why)) => {
                        eprintln!(
                            "blkmq-disk: io_uring is unavailable ({why}): serving with pread/pwrite"
                        );
                        run_pread(args, &stop)
                    }
                    Err(e) => Err(backing_error(args, &e.to_string())),
                }
            }
        }
    }

    fn backing_error(args: &Args, why: &str) -> String {
        format!("backing file {}: {why}", args.backing.display())
    }

    fn config(args: &Args, limits: QueueLimits) -> QueueConfig {
        let config = crate::trace::config(QueueConfig::new(limits).accounting(true));
        let elevator: Option<Box<dyn Elevator>> = match args.elevator {
            args::Elevator::None => None,
            args::Elevator::Deadline => Some(Box::new(Deadline::new())),
            args::Elevator::Bfq => Some(Box::new(Bfq::new())),
        };
        match elevator {
            Some(elevator) => config.elevator(elevator),
            None => config,
        }
    }

    /// The io_uring driver: one ring and reaper per hardware queue.
    fn run_uring(args: &Args, disk: UringDisk, stop: &AtomicBool) -> Result<(), String> {
        let limits = disk.limits();
        let how = format!("io_uring, {}", disk.mode());
        // O_DIRECT wants whole blocks at aligned addresses, and FUSE's write buffers are
        // not aligned: writes are copied to aligned buffers, whose bios go O_DIRECT.
        let dma_alignment = u64::from(limits.logical_block_size) - 1;
        let host = Host::new(disk.tag_set(), StdPlatform::new(), disk)
            .map_err(|e| format!("bad queue set-up: {e:?}"))?;
        let queue = UringDisk::add_queue(&host, config(args, limits))
            .map_err(|e| format!("bad queue set-up: {e}"))?;
        // The reapers stop when the disk drops, with the host.
        serve_until_stopped(args, &host, &queue, stop, &how, dma_alignment)
    }

    /// Opens (and sizes) the backing file for the pread/pwrite driver; its size in bytes.
    fn open_backing(args: &Args) -> Result<(File, u64), String> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(args.size.is_some())
            .truncate(false)
            .open(&args.backing)
            .map_err(|e| backing_error(args, &format!("cannot open it: {e}")))?;
        // The end, not the metadata: a block device has no length in its metadata.
        let len = file
            .seek(SeekFrom::End(0))
            .map_err(|e| backing_error(args, &format!("cannot size it: {e}")))?;
        let size = match args.size {
            Some(size) if size > len => {
                file.set_len(size).map_err(|e| {
                    backing_error(args, &format!("cannot grow it to {size} bytes: {e}"))
                })?;
                size
            }
            Some(size) => size,
            None => len / SECTOR_SIZE * SECTOR_SIZE,
        };
        if size == 0 {
            return Err(backing_error(args, "the disk would be empty: give a size"));
        }
        Ok((file, size))
    }

    /// The pread/pwrite driver: a few I/O threads per hardware queue.
    fn run_pread(args: &Args, stop: &AtomicBool) -> Result<(), String> {
        let (file, size) = open_backing(args)?;
        let tags = TagSet::builder(args.depth).hw_queues(args.hw_queues);
        let driver = FileDisk::new(file, args.hw_queues, args.depth);
        let host = Host::new(tags, StdPlatform::new(), driver)
            .map_err(|e| format!("bad queue set-up: {e:?}"))?;
        let limits = QueueLimits {
            max_discard_sectors: 1 << 22,
            max_write_zeroes_sectors: 1 << 22,
            // Writes land in the page cache: flushes are fdatasync.
            write_cache: true,
            ..QueueLimits::new(size / SECTOR_SIZE)
        };
        let queue = host
            .add_queue(config(args, limits))
            .map_err(|e| format!("bad queue set-up: {e:?}"))?;
        let io_threads = FileDisk::start(&queue, args.depth.min(IO_THREADS))
            .map_err(|e| format!("cannot start I/O threads: {e}"))?;
        // The block layer's own segment alignment (512 bytes): pread and pwrite take any
        // address, but segments are kept as aligned as the queue's default limits ask.
        let served = serve_until_stopped(args, &host, &queue, stop, "pread/pwrite", 511);
        queue.driver().stop();
        for thread in io_threads {
            let _ = thread.join();
        }
        served?;
        queue
            .driver()
            .file()
            .sync_all()
            .map_err(|e| backing_error(args, &format!("cannot sync it: {e}")))
    }

    /// The queue's accounting now: the whole queue, then each hardware queue, and the
    /// platform time of the reading.
    fn device<D: Driver>(queue: &RequestQueue<D>) -> (IoStats, Vec<IoStats>, u64) {
        let at = queue.platform().coarse_now_ns();
        let whole = queue.stats().unwrap_or_default();
        let hctxs = (0..queue.nr_hw_queues())
            .map(|h| queue.hctx_stats(h).unwrap_or_default())
            .collect();
        (whole, hctxs, at)
    }

    /// Mounts `queue`, prints a line a second until a signal (or an unmount from outside),
    /// then unmounts, flushes, drains the queue and prints the summary.
    fn serve_until_stopped<D: Driver>(
        args: &Args,
        host: &Host<D>,
        queue: &Arc<RequestQueue<D>>,
        stop: &AtomicBool,
        how: &str,
        dma_alignment: u64,
    ) -> Result<(), String> {
        let options = ServeOptions {
            name: args.name.clone(),
            threads: args.threads,
            dma_alignment,
            ..ServeOptions::default()
        };
        // SIGUSR1: the state dump, printed by the loop below (the handler only sets a flag).
        let dump = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, dump.clone())
            .map_err(|e| format!("cannot handle SIGUSR1: {e}"))?;
        let served = serve(queue.clone(), &args.mount, &options)
            .map_err(|e| format!("cannot mount on {}: {e}", args.mount.display()))?;
        eprintln!(
            "blkmq-disk: serving {} ({} bytes, {how}, {}, {} hardware queues of depth {}) as {}",
            args.backing.display(),
            queue.limits().capacity * SECTOR_SIZE,
            args.elevator.name(),
            args.hw_queues,
            args.depth,
            served.path().display()
        );

        let began = Instant::now();
        let mut last = served.stats().snapshot();
        let mut last_dev = device(queue);
        let mut tick = Instant::now();
        while !stop.load(Ordering::Relaxed) && served.is_serving() {
            std::thread::sleep(Duration::from_millis(50));
            if dump.swap(false, Ordering::Relaxed) {
                // Formatted first: no queue lock is held while stderr blocks.
                let text = host.dump().to_string();
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
            if tick.elapsed() >= Duration::from_secs(1) {
                let now = served.stats().snapshot();
                let now_dev = device(queue);
                if !args.quiet {
                    let elapsed = now_dev.2.saturating_sub(last_dev.2);
                    let rates = now_dev.0.since(&last_dev.0, elapsed);
                    // Each hardware queue's aqu-sz: its mean number of requests.
                    let mean: Vec<f64> = now_dev
                        .1
                        .iter()
                        .zip(&last_dev.1)
                        .map(|(now, then)| now.since(then, elapsed).aqu_sz)
                        .collect();
                    let line = live_line(&now.since(&last), tick.elapsed(), &rates, &mean);
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
                last = now;
                last_dev = now_dev;
                tick = Instant::now();
            }
        }
        let why = if stop.load(Ordering::Relaxed) {
            "signal"
        } else {
            "unmounted"
        };

        // Unmount: every serving thread ends, each after its own bio ended.
        let stats = served.stats().clone();
        let unmounted = unmount(served, stop);
        // What the device caches reaches the medium, then nothing is left in flight.
        let flushed = queue.submit_and_wait(Bio::new(Op::Flush, 0, 0));
        queue.freeze();
        eprintln!("{}", summary(&stats.snapshot(), began.elapsed(), why));
        if let Some(device) = queue.stats() {
            eprintln!(
                "blkmq-disk: the device: {} requests ({} merges), {:.1}% busy; diskstats: {device}",
                device.ios(),
                device.merges(),
                100.0 * device.io_ticks_ns as f64 / began.elapsed().as_nanos().max(1) as f64,
            );
        }
        crate::trace::finish();
        unmounted.map_err(|e| format!("unmount failed: {e}"))?;
        if flushed != Status::Ok {
            return Err(format!("the final flush failed: {flushed:?}"));
        }
        Ok(())
    }

    /// Unmounts once nothing holds the file open (saying so, once, while something does);
    /// a further signal meanwhile detaches the mount and waits for the last close instead.
    fn unmount(mut served: Served, stop: &AtomicBool) -> std::io::Result<()> {
        stop.store(false, Ordering::Relaxed);
        let mut said = false;
        while !served.try_unmount()? {
            if stop.load(Ordering::Relaxed) {
                eprintln!("blkmq-disk: detaching the mount; serving it until the file is closed");
                return served.unmount();
            }
            if !said {
                eprintln!(
                    "blkmq-disk: {} is still open (a program or a loop device holds it): \
                     waiting for it to be closed; signal again to detach the mount",
                    served.path().display()
                );
                said = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn micros(ns: Option<u64>) -> String {
        match ns {
            Some(ns) => format!("{:.1} us", ns as f64 / 1000.0),
            None => "-".into(),
        }
    }
    /// One second's line: IOPS, MB/s, mean and p99 latency of the file's operations; the
    /// device's rates; the mean number of requests on each hardware queue.
    fn live_line(delta: &Snapshot, over: Duration, dev: &Rates, in_flight: &[f64]) -> String {
        let secs = over.as_secs_f64().max(1e-9);
        let in_flight: Vec<String> = in_flight.iter().map(|n| format!("{n:.1}")).collect();
        format!(
            "{:>9.0} IOPS {:>9.1} MB/s  mean {:>10}  p99 {:>10}  device r/s {:.0} w/s {:.0} \
             rkB/s {:.0} wkB/s {:.0} r_await {:.2} ms w_await {:.2} ms aqu-sz {:.2} %util {:.1}  \
             in flight per hw queue [{}]",
            delta.ops() as f64 / secs,
            delta.bytes() as f64 / secs / 1e6,
            micros(delta.mean_latency_ns()),
            micros(delta.percentile_ns(0.99)),
            dev.r_s,
            dev.w_s,
            dev.rkb_s,
            dev.wkb_s,
            dev.r_await_ms,
            dev.w_await_ms,
            dev.aqu_sz,
            dev.util_pct,
            in_flight.join(" ")
        )
    }

    fn summary(total: &Snapshot, over: Duration, why: &str) -> String {
        let secs = over.as_secs_f64().max(1e-9);
        let n = |k: OpKind| total.count[k as usize];
        let b = |k: OpKind| total.bytes[k as usize];
        format!(
            "blkmq-disk: stopped ({why}) after {secs:.1} s: {} reads ({} bytes), {} writes ({} \
             bytes), {} flushes, {} discards ({} bytes), {} errors; {:.0} IOPS, {:.1} MB/s, mean \
             {}, p99 {}",
            n(OpKind::Read),
            b(OpKind::Read),
            n(OpKind::Write),
            b(OpKind::Write),
            n(OpKind::Flush),
            n(OpKind::Discard),
            b(OpKind::Discard),
            total.errors,
            total.ops() as f64 / secs,
            total.bytes() as f64 / secs / 1e6,
            micros(total.mean_latency_ns()),
            micros(total.percentile_ns(0.99)),
        )
    }
}
