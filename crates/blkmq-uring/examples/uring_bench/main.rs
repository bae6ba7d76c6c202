//! Random 4 KiB reads over a file, through blkmq with the io_uring driver (none,
//! mq-deadline, BFQ) and straight on io_uring with the same generator, in paired rounds:
//! IOPS and CPU time per I/O of each, the ratios blkmq / raw, and fio's own io_uring
//! figure on the same file when `fio` is on the PATH. Before them, the responsiveness
//! table ([`startup`]): an application's start-up reads, alone and while four writers
//! stream, with each elevator.
//!
//! ```sh
//! cargo run --release -p blkmq-uring --example uring_bench
//! cargo run --release -p blkmq-uring --example uring_bench -- --secs 3 --rounds 3 --size-mib 2048
//! cargo run --release -p blkmq-uring --example uring_bench -- --startup
//! ```
//!
//! The file (`--file`, default `uring-bench.img` in the temporary directory) is made once,
//! sparse then written through, so reads reach the device; later runs reuse it (the
//! start-up's writers write over its middle). A default run takes about a minute and a
//! quarter. Every variant runs each round, in an order that turns from round to round.
//! IOPS and CPU per I/O are over all rounds; the ratios to raw are medians of each
//! round's pair (a variant and the raw run of the same round). Rounds are short and many
//! (16 of a quarter second by default): a shared machine's load moves over seconds, so the
//! two runs of a pair see much the same machine, and the median leaves out the pairs that
//! straddle a change. The closing lines, for iodepth 32, give the range of the rounds'
//! CPU per I/O over raw and where its median lies with 95% confidence (between two of
//! the rounds' own figures, chosen by the binomial law: no assumption on how they are
//! spread).
//!
//! The generator keeps `iodepth` reads in flight per thread. Straight on io_uring, each
//! thread has a ring and reaps its completions, submitting the next read for each. Through
//! blkmq, each thread's reads are bios whose completion submits the next bio (on the
//! driver's reaper thread, as a completion-driven client does); the disk has one
//! hardware queue per thread, each thread's first reads go to a queue of its own, and
//! the reads each reaper submits go to its own ring.
//!
//! CPU time is the process's (`getrusage(RUSAGE_SELF)`: user + system of every thread,
//! so the reapers and the block layer's worker on the blkmq side, the ring threads on
//! the raw side), from just before the threads start to just after the last read of the
//! span has ended, divided by the reads done; both sides are measured the same way, and
//! neither side's setup (rings, queue) nor teardown is in it. The user part is printed
//! beside it: the block layer's own cost is there, the kernel's is the same on both sides.

#[cfg(target_os = "linux")]
mod startup;

#[cfg(target_os = "linux")]
fn main() {
    bench::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("uring_bench: Linux only");
}

#[cfg(target_os = "linux")]
mod bench {
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use blkmq_core::{
        Bio, Host, Op, Plug, QueueConfig, QueueType, RequestQueue, Status, StdPlatform,
    };
    use blkmq_sched_bfq::Bfq;
    use blkmq_sched_deadline::Deadline;
    use blkmq_uring::UringDisk;
    use io_uring::{IoUring, opcode, types};

    pub(crate) const BS: usize = 4096;
    const MARK: &[u8; 16] = b"blkmq-uring-fill";

    struct Args {
        file: PathBuf,
        size: u64,
        secs: f64,
        rounds: usize,
        depths: Vec<usize>,
        threads: Vec<usize>,
        variants: Vec<String>,
        fio: bool,
        startup_rounds: usize,
        startup_only: bool,
    }

    const USAGE: &str = "uring_bench [flags]
  --file PATH            the bench file (default: uring-bench.img in the temporary directory)
  --size-mib N           its size (default 1024)
  --secs S               seconds per variant and round (default 0.25)
  --rounds N             paired rounds (default 16)
  --depths D,D           iodepths (default 32,128)
  --threads T,T          threads (default 1,2)
  --variants V,V         of raw,none,mq-deadline,bfq (default all)
  --no-fio               no fio line
  --startup-rounds N     rounds of the start-up table (default 3)
  --no-startup           no start-up table
  --startup              the start-up table only";

    fn args() -> Args {
        let mut a = Args {
            file: std::env::temp_dir().join("uring-bench.img"),
            size: 1 << 30,
            secs: 0.25,
            rounds: 16,
            depths: vec![32, 128],
            threads: vec![1, 2],
            variants: VARIANTS.iter().map(|v| v.to_string()).collect(),
            fio: true,
            startup_rounds: 3,
            startup_only: false,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            match flag.as_str() {
                "--file" => a.file = PathBuf::from(value()),
                "--size-mib" => a.size = value().parse::<u64>().expect("MiB") << 20,
                "--secs" => a.secs = value().parse().expect("seconds"),
                "--rounds" => a.rounds = value().parse().expect("rounds"),
                "--depths" => {
                    a.depths = value()
                        .split(',')
                        .map(|d| d.parse().expect("depth"))
                        .collect()
                }
                "--threads" => {
                    a.threads = value()
                        .split(',')
                        .map(|d| d.parse().expect("threads"))
                        .collect()
                }
                "--variants" => {
                    a.variants = value().split(',').map(String::from).collect();
                    assert!(
                        a.variants.iter().all(|v| VARIANTS.contains(&v.as_str())),
                        "variants are {VARIANTS:?}"
                    );
                }
                "--no-fio" => a.fio = false,
                "--startup-rounds" => a.startup_rounds = value().parse().expect("rounds"),
                "--no-startup" => a.startup_rounds = 0,
                "--startup" => a.startup_only = true,
                "--help" | "-h" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                // `cargo bench` style flags are ignored.
                "--bench" => {}
                other => panic!("unknown flag {other}"),
            }
        }
        a
    }

    /// Makes the file once: sparse, then written through (so reads reach the device), a
    /// mark at its end saying it is complete.
    fn prepare(path: &Path, size: u64) {
        if let Ok(file) = File::open(path) {
            let mut mark = [0u8; 16];
            if file.metadata().map(|m| m.len()).ok() == Some(size + 4096)
                && file.read_exact_at(&mut mark, size).is_ok()
                && &mark == MARK
            {
                return;
            }
        }
        eprintln!("making {} ({} MiB) ...", path.display(), size >> 20);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .expect("create the bench file");
        file.set_len(size).expect("size the bench file");
        let chunk: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + 1) as u8).collect();
        for _ in 0..size >> 20 {
            file.write_all(&chunk).expect("fill the bench file");
        }
        let mut mark = vec![0u8; 4096];
        mark[..16].copy_from_slice(MARK);
        file.write_all_at(&mark, size).expect("mark the bench file");
        file.sync_all().expect("sync the bench file");
    }

    /// The process's CPU time, all its threads (the reapers and the block layer's worker
    /// as well as the generator's): user and system, in nanoseconds.
    fn cpu_ns() -> (u64, u64) {
        // SAFETY: getrusage writes one rusage through the pointer.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `ru` is ours.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        (tv(ru.ru_utime), tv(ru.ru_stime))
    }

    /// What a measured span took: its wall time and the process's CPU time.
    struct Span {
        t0: Instant,
        cpu0: (u64, u64),
    }

    impl Span {
        fn start() -> Self {
            Self {
                cpu0: cpu_ns(),
                t0: Instant::now(),
            }
        }

        fn end(self, ios: u64) -> Total {
            let wall_ns = self.t0.elapsed().as_nanos() as u64;
            let (user, sys) = cpu_ns();
            Total {
                ios,
                wall_ns,
                cpu_ns: user + sys - self.cpu0.0 - self.cpu0.1,
                user_ns: user - self.cpu0.0,
            }
        }
    }

    /// 4 KiB-aligned buffers.
    pub(crate) struct Buffers {
        ptr: *mut u8,
        layout: std::alloc::Layout,
    }

    // SAFETY: plain bytes the kernel reads into; the bench never reads them.
    unsafe impl Send for Buffers {}
    // SAFETY: as above.
    unsafe impl Sync for Buffers {}

    impl Buffers {
        pub(crate) fn new(n: usize) -> Self {
            let layout = std::alloc::Layout::from_size_align(n * BS, BS).unwrap();
            // SAFETY: a non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!ptr.is_null());
            Self { ptr, layout }
        }
        pub(crate) fn addr(&self, i: usize) -> u64 {
            self.ptr as u64 + (i * BS) as u64
        }
    }

    impl Drop for Buffers {
        fn drop(&mut self) {
            // SAFETY: allocated with this layout.
            unsafe { std::alloc::dealloc(self.ptr, self.layout) }
        }
    }

    /// The generator's random block: xorshift, one state per slot.
    pub(crate) fn next_block(state: &mut u64, blocks: u64) -> u64 {
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        x % blocks
    }

    /// One thread straight on io_uring: `depth` reads in flight until `until`.
    fn raw_thread(
        ring: IoUring,
        fd: i32,
        blocks: u64,
        depth: usize,
        until: Instant,
        seed: u64,
    ) -> u64 {
        let bufs = Buffers::new(depth);
        let mut states: Vec<u64> = (0..depth as u64)
            .map(|i| seed ^ ((i + 1) * 0x9e37_79b9))
            .collect();
        let read = |slot: usize, states: &mut [u64]| {
            let block = next_block(&mut states[slot], blocks);
            opcode::Read::new(types::Fd(fd), bufs.addr(slot) as *mut u8, BS as u32)
                .offset(block * BS as u64)
                .build()
                .user_data(slot as u64)
        };
        let sq_push = |entry: &io_uring::squeue::Entry| {
            // SAFETY: this thread is the ring's one producer, and the buffers outlive the
            // ring's operations (every one is reaped below before they go).
            unsafe { ring.submission_shared().push(entry) }.expect("room on the ring")
        };
        for slot in 0..depth {
            sq_push(&read(slot, &mut states));
        }
        let mut done = 0u64;
        let mut in_flight = depth;
        let mut stopping = false;
        while in_flight > 0 {
            ring.submitter().submit_and_wait(1).expect("enter");
            // SAFETY: this thread is the ring's one consumer.
            let cq: Vec<u64> = unsafe { ring.completion_shared() }
                .map(|c| {
                    assert!(c.result() == BS as i32, "read failed: {}", c.result());
                    c.user_data()
                })
                .collect();
            if !stopping && Instant::now() >= until {
                stopping = true;
            }
            for slot in cq {
                done += 1;
                if stopping {
                    in_flight -= 1;
                } else {
                    sq_push(&read(slot as usize, &mut states));
                }
            }
        }
        done
    }

    /// A thread's reads through blkmq: shared with the completions that submit the next.
    struct Gen {
        queue: Arc<RequestQueue<UringDisk>>,
        bufs: Buffers,
        slots: Box<[SlotState]>,
        blocks: u64,
        stop: AtomicBool,
        in_flight: AtomicU64,
        retry: Mutex<Vec<Bio>>,
    }

    /// One slot's generator state and count. A slot has one read in flight at a time, and
    /// a thread's reads all end on its hardware queue's reaper, so the slots are packed as
    /// the raw side's are (four to a cache line): the generator costs both sides alike.
    struct SlotState {
        rng: AtomicU64,
        done: AtomicU64,
    }

    impl Gen {
        fn bio(&self, slot: usize) -> Bio {
            let state = &self.slots[slot];
            let mut rng = state.rng.load(Ordering::Relaxed);
            let block = next_block(&mut rng, self.blocks);
            state.rng.store(rng, Ordering::Relaxed);
            let mut bio = Bio::new(Op::Read, block * (BS as u64 / 512), (BS / 512) as u32)
                .buffer(self.bufs.addr(slot))
                .end_io(ended);
            bio.private = self as *const Gen as u64;
            bio.payload = slot as u64;
            bio
        }

        fn submit(&self, bio: Bio) {
            if let Err(bio) = self.queue.submit(bio) {
                self.retry.lock().unwrap().push(bio);
            }
        }
    }

    fn ended(bio: Bio, status: Status) {
        assert_eq!(status, Status::Ok, "read failed");
        // SAFETY: `private` is the address of the `Gen` that submitted the bio, which its
        // thread keeps until every bio it submitted has ended.
        let generator = unsafe { &*(bio.private as *const Gen) };
        let slot = bio.payload as usize;
        let state = &generator.slots[slot];
        let done = state.done.load(Ordering::Relaxed);
        state.done.store(done + 1, Ordering::Relaxed);
        if generator.stop.load(Ordering::Relaxed) {
            generator.in_flight.fetch_sub(1, Ordering::Release);
            return;
        }
        generator.submit(generator.bio(slot));
    }

    fn blkmq_thread(
        queue: Arc<RequestQueue<UringDisk>>,
        thread: usize,
        blocks: u64,
        depth: usize,
        until: Instant,
        seed: u64,
    ) -> u64 {
        // The thread's first reads go to hardware queue `thread`, as each raw thread has a
        // ring of its own; the reads after them are submitted by that queue's reaper.
        let cpu = queue
            .maps()
            .map(QueueType::Default)
            .and_then(|map| map.cpus_of(thread).next());
        if let Some(cpu) = cpu {
            queue.platform().pin_current_thread(cpu);
        }
        let generator = Gen {
            queue,
            bufs: Buffers::new(depth),
            slots: (0..depth as u64)
                .map(|i| SlotState {
                    rng: AtomicU64::new(seed ^ ((i + 1) * 0x9e37_79b9)),
                    done: AtomicU64::new(0),
                })
                .collect(),
            blocks,
            stop: AtomicBool::new(false),
            in_flight: AtomicU64::new(depth as u64),
            retry: Mutex::new(Vec::new()),
        };
        // The first reads go down together, as the raw side pushes its first entries and
        // enters its ring once: a plug hands them to the driver as one batch, which
        // enters the ring once for them.
        {
            let mut plug = Plug::new();
            for slot in 0..depth {
                if let Err(bio) = generator
                    .queue
                    .submit_plugged(&mut plug, generator.bio(slot))
                {
                    generator.retry.lock().unwrap().push(bio);
                }
            }
        }
        loop {
            let now = Instant::now();
            if now >= until {
                break;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(50)));
            let again = std::mem::take(&mut *generator.retry.lock().unwrap());
            for bio in again {
                generator.submit(bio);
            }
        }
        generator.stop.store(true, Ordering::Relaxed);
        while generator.in_flight.load(Ordering::Acquire) > 0 {
            let again = std::mem::take(&mut *generator.retry.lock().unwrap());
            for bio in again {
                generator.submit(bio);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        generator
            .slots
            .iter()
            .map(|s| s.done.load(Ordering::Acquire))
            .sum()
    }

    #[derive(Clone, Copy, Default)]
    struct Total {
        ios: u64,
        wall_ns: u64,
        /// User and system.
        cpu_ns: u64,
        user_ns: u64,
    }

    impl Total {
        fn iops(&self) -> f64 {
            self.ios as f64 / (self.wall_ns as f64 / 1e9)
        }
        fn cpu_per_io(&self) -> f64 {
            self.cpu_ns as f64 / self.ios.max(1) as f64
        }
        fn user_per_io(&self) -> f64 {
            self.user_ns as f64 / self.ios.max(1) as f64
        }
        fn add(&mut self, other: &Total) {
            self.ios += other.ios;
            self.wall_ns += other.wall_ns;
            self.cpu_ns += other.cpu_ns;
            self.user_ns += other.user_ns;
        }
    }

    /// The median of `v` (of an even count, the mean of the two in the middle).
    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = v.len();
        (v[(n - 1) / 2] + v[n / 2]) / 2.0
    }

    /// Where the median of `v` lies with 95% confidence, whatever the distribution: the
    /// order statistics `k` and `n + 1 - k` (from 1), `k` the largest with at most 2.5% of
    /// a fair coin's `n` tosses below it on either side. `None` under 6 values.
    fn median_interval(mut v: Vec<f64>) -> Option<(f64, f64)> {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = v.len();
        // P(B <= j) for B ~ Binomial(n, 1/2), j = 0, 1, ...; each term's logarithm, so
        // that 2^-n does not underflow to nothing for many rounds.
        let mut ln_term = -(n as f64) * std::f64::consts::LN_2;
        let mut below = 0.0;
        let mut k = 0;
        for j in 0..n / 2 {
            below += ln_term.exp();
            if below > 0.025 {
                break;
            }
            k = j + 1;
            ln_term += ((n - j) as f64 / (j + 1) as f64).ln();
        }
        (k > 0).then(|| (v[k - 1], v[n - k]))
    }

    /// A variant beside raw over a run's rounds: each round's pair, summed up.
    struct Paired {
        /// The median of the rounds' IOPS ratios.
        ratio: f64,
        /// The median of the rounds' CPU per I/O over raw, ns.
        extra: f64,
        /// Where that median lies (see [`median_interval`]).
        extra_interval: Option<(f64, f64)>,
        /// The rounds' least and greatest CPU per I/O over raw.
        lo: f64,
        hi: f64,
    }

    const VARIANTS: [&str; 4] = ["raw", "none", "mq-deadline", "bfq"];

    fn run(
        variant: &str,
        file: &Path,
        size: u64,
        depth: usize,
        threads: usize,
        secs: f64,
    ) -> Total {
        let blocks = size / BS as u64;
        let span = Duration::from_secs_f64(secs);
        if variant == "raw" {
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(file)
                .expect("open O_DIRECT");
            let fd = f.as_raw_fd();
            // Made before the span, as the blkmq side's rings are.
            let rings: Vec<IoUring> = (0..threads)
                .map(|_| IoUring::new((depth as u32).next_power_of_two()).expect("io_uring"))
                .collect();
            let measured = Span::start();
            let until = measured.t0 + span;
            let ios: u64 = std::thread::scope(|s| {
                let hs: Vec<_> = rings
                    .into_iter()
                    .enumerate()
                    .map(|(t, ring)| {
                        let seed = t as u64 * 77 + 1;
                        s.spawn(move || raw_thread(ring, fd, blocks, depth, until, seed))
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            return measured.end(ios);
        }
        // Tags for every thread's reads on one hardware queue, and the one being
        // submitted while its predecessor ends.
        let tags = depth * threads + 16;
        let disk = UringDisk::builder(file)
            .hw_queues(threads)
            .depth(tags)
            .open()
            .expect("open the disk");
        assert!(disk.mode().is_direct(), "the bench file takes O_DIRECT");
        let limits = disk.limits();
        let host = Host::new(disk.tag_set(), StdPlatform::new(), disk).expect("host");
        let mut config = QueueConfig::new(limits).nr_requests(tags);
        match variant {
            "mq-deadline" => config = config.elevator(Box::new(Deadline::new())),
            "bfq" => config = config.elevator(Box::new(Bfq::new())),
            _ => {}
        }
        let queue = UringDisk::add_queue(&host, config).expect("queue");
        let measured = Span::start();
        let until = measured.t0 + span;
        let ios: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let q = queue.clone();
                    s.spawn(move || blkmq_thread(q, t, blocks, depth, until, t as u64 * 77 + 1))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let total = measured.end(ios);
        if std::env::var_os("BENCH_THREADS").is_some() {
            for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                let sched = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
                let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
                let cs: Vec<&str> = status
                    .lines()
                    .filter(|l| l.contains("ctxt_switches"))
                    .collect();
                eprintln!("  {} {} {:?}", comm.trim(), sched.trim(), cs);
            }
        }
        drop(queue);
        drop(host);
        total
    }

    /// fio's random-read IOPS on the file with io_uring, or why there is none.
    fn fio(file: &Path, depth: usize, threads: usize, secs: f64) -> Result<f64, String> {
        let out = std::process::Command::new("fio")
            .args([
                "--name=uring-bench",
                &format!("--filename={}", file.display()),
                "--rw=randread",
                "--bs=4k",
                "--ioengine=io_uring",
                "--direct=1",
                &format!("--iodepth={depth}"),
                &format!("--numjobs={threads}"),
                "--time_based",
                &format!("--runtime={}ms", (secs * 1000.0) as u64),
                "--group_reporting",
                "--output-format=json",
            ])
            .output()
            .map_err(|e| format!("fio not run: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "fio failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let json = String::from_utf8_lossy(&out.stdout);
        let read = json
            .find("\"read\"")
            .ok_or("no read figures in fio's output")?;
        let at = json[read..]
            .find("\"iops\"")
            .ok_or("no iops in fio's output")?
            + read;
        let rest = &json[at + 6..];
        let num: String = rest
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse().map_err(|_| "fio's iops unreadable".to_string())
    }

    pub(super) fn main() {
        let a = args();
        prepare(&a.file, a.size);
        if a.startup_rounds > 0 {
            startup_table(&a);
        }
        if a.startup_only {
            return;
        }
        let has_fio = a.fio
            && std::process::Command::new("fio")
                .arg("--version")
                .output()
                .is_ok();
        println!(
            "random {} KiB reads over {} ({} MiB, O_DIRECT), {} round(s) of {:.2} s per variant, \
             the order turning each round; figures are noisy on a shared machine",
            BS / 1024,
            a.file.display(),
            a.size >> 20,
            a.rounds,
            a.secs
        );
        println!(
            "IOPS and CPU/IO over all rounds; CPU is the process's (getrusage: user + system, \
             every thread, reapers included); the last two columns are medians of each \
             round's pair with raw"
        );
        println!();
        println!(
            "{:>5} {:>7} {:>12} {:>10} {:>11} {:>11} {:>9} {:>12}",
            "depth",
            "threads",
            "variant",
            "IOPS",
            "CPU/IO ns",
            "user/IO ns",
            "IOPS/raw",
            "CPU-raw ns"
        );
        // fio's run: a quarter of a variant's time over all rounds, a second at least.
        let fio_secs = (a.secs * a.rounds as f64 / 4.0).max(1.0);
        let mut verdicts = Vec::new();
        for &depth in &a.depths {
            for &threads in &a.threads {
                let mut rounds = Vec::new();
                for round in 0..a.rounds {
                    let mut totals = [Total::default(); VARIANTS.len()];
                    for k in 0..VARIANTS.len() {
                        let v = (k + round) % VARIANTS.len();
                        if !a.variants.iter().any(|x| x == VARIANTS[v]) {
                            continue;
                        }
                        totals[v] = run(VARIANTS[v], &a.file, a.size, depth, threads, a.secs);
                    }
                    rounds.push(totals);
                }
                let mut sums = [Total::default(); VARIANTS.len()];
                for totals in &rounds {
                    for (sum, t) in sums.iter_mut().zip(totals) {
                        sum.add(t);
                    }
                }
                // Each round's variant beside that round's raw run.
                let paired = |v: usize| {
                    let ratios = rounds.iter().map(|r| r[v].iops() / r[0].iops());
                    let extras = rounds.iter().map(|r| r[v].cpu_per_io() - r[0].cpu_per_io());
                    let extras: Vec<f64> = extras.collect();
                    let (lo, hi) = extras
                        .iter()
                        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    Paired {
                        ratio: median(ratios.collect()),
                        extra: median(extras.clone()),
                        extra_interval: median_interval(extras),
                        lo,
                        hi,
                    }
                };
                for (v, (name, t)) in VARIANTS.iter().zip(&sums).enumerate() {
                    if t.ios == 0 {
                        continue;
                    }
                    let (ratio, extra) = if v == 0 || sums[0].ios == 0 {
                        (String::from("-"), String::from("-"))
                    } else {
                        let p = paired(v);
                        (format!("{:.3}", p.ratio), format!("{:+.0}", p.extra))
                    };
                    println!(
                        "{:>5} {:>7} {:>12} {:>10.0} {:>11.0} {:>11.0} {:>9} {:>12}",
                        depth,
                        threads,
                        name,
                        t.iops(),
                        t.cpu_per_io(),
                        t.user_per_io(),
                        ratio,
                        extra
                    );
                }
                let fio_line = if has_fio {
                    match fio(&a.file, depth, threads, fio_secs) {
                        Ok(iops) => format!("{iops:>10.0}"),
                        Err(why) => why,
                    }
                } else {
                    String::from(if a.fio {
                        "(fio not on PATH)"
                    } else {
                        "(not run)"
                    })
                };
                println!("{:>5} {:>7} {:>12} {}", depth, threads, "fio", fio_line);
                if depth == 32 && sums[0].ios > 0 && sums[1].ios > 0 {
                    verdicts.push((threads, paired(1)));
                }
            }
        }
        if verdicts.is_empty() {
            return;
        }
        println!();
        let met = verdicts
            .iter()
            .all(|(_, p)| p.ratio >= 0.95 && p.extra <= 200.0);
        let parts: Vec<String> = verdicts
            .iter()
            .map(|(threads, p)| {
                format!(
                    "{:.2}x IOPS, CPU/IO {:+.0} ns ({threads}t)",
                    p.ratio, p.extra
                )
            })
            .collect();
        println!(
            "iodepth 32: blkmq+uring(none) / raw = {}: {} (target >= 0.95x, <= +200 ns)",
            parts.join("; "),
            if met { "met" } else { "NOT met" }
        );
        for (threads, p) in &verdicts {
            let interval = match p.extra_interval {
                Some((lo, hi)) => format!("the median within {lo:+.0} to {hi:+.0} ns (95%)"),
                None => String::from("too few rounds to bound the median"),
            };
            println!(
                "  ({threads}t: CPU/IO over raw per round from {:+.0} to {:+.0} ns, {interval}, \
                 {} rounds)",
                p.lo, p.hi, a.rounds
            );
        }
    }

    /// The responsiveness table: the start-up alone and under the writers, per elevator.
    fn startup_table(a: &Args) {
        use crate::startup;
        if a.size < startup::MIN_FILE {
            println!(
                "start-up: not run (it wants a file of {} MiB at least)",
                startup::MIN_FILE >> 20
            );
            println!();
            return;
        }
        println!(
            "start-up: {} reads of {} KiB, one at a time, over {} MiB, by a thread new to the \
             queue; {} writers of {} KiB sequential writes, {} in flight each, streaming for \
             {} ms first; one hardware queue of {} tags (O_DIRECT on {}); medians of {} rounds, \
             the elevators' order turning each round",
            startup::READS,
            BS / 1024,
            startup::READ_SPAN >> 20,
            startup::WRITERS,
            startup::WRITE_BYTES >> 10,
            startup::WRITER_DEPTH,
            startup::WARM_UP.as_millis(),
            startup::DISK_DEPTH,
            a.file.display(),
            a.startup_rounds
        );
        println!();
        println!(
            "{:>12} | {:>17} | {:>25} | {:>8} | {:>11}",
            "elevator", "start-up idle ms", "start-up under writers ms", "slowdown", "writers MB/s"
        );
        for row in startup::run(&a.file, a.size, a.startup_rounds) {
            println!(
                "{:>12} | {:>17.1} | {:>25.1} | {:>7.1}x | {:>11.0}",
                row.elevator,
                row.idle_ns as f64 / 1e6,
                row.loaded_ns as f64 / 1e6,
                row.slowdown(),
                row.writers_bytes_per_sec / 1e6
            );
        }
        println!();
    }
}
