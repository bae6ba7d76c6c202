//! Trace replay: a simple text format of timed I/Os, and a workload that issues each at
//! its time (open loop: it does not wait for earlier ones to end).

use std::fmt;

use blkmq_core::{BioFlags, IssuerId, Op, SECTOR_SIZE};

use super::{Cx, Done, Io, Workload};

/// One timed I/O of a [`Trace`].
///
/// ```
/// use blkmq_core::{BioFlags, IssuerId, Op};
/// use blkmq_sim::{Trace, TraceRecord};
/// let trace = Trace::parse("3 0.5 64 8192 WS").unwrap();
/// assert_eq!(trace.records()[0], TraceRecord {
///     issuer: IssuerId(3), time_ns: 500_000_000, sector: 64, bytes: 8192,
///     op: Op::Write, flags: BioFlags::SYNC,
/// });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Who issues it.
    pub issuer: IssuerId,
    /// When, from the start of the replay.
    pub time_ns: u64,
    /// The first sector.
    pub sector: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// The operation.
    pub op: Op,
    /// Its flags.
    pub flags: BioFlags,
}

/// A line a [`Trace`] could not read: its number (from 1) and what is wrong.
///
/// ```
/// use blkmq_sim::Trace;
/// let err = Trace::parse("# header\n1 0 0 100 R").unwrap_err();
/// assert_eq!(err.line, 2);
/// assert!(err.to_string().contains("multiple of 512"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

/// A list of timed I/Os, read from and written to a simple text format.
///
/// # Format
///
/// One I/O per line, five fields separated by white space; `#` starts a comment.
///
/// ```text
/// # issuer  time (s)     sector   bytes  op
/// 1         0.000000000  2048     4096   R
/// 2         0.000150     0        65536  WS
/// 1         1            0        0      F
/// ```
///
/// * issuer: a number, the [`IssuerId`];
/// * time: seconds from the start of the replay, with up to 9 decimals (as `blkparse`
///   prints them), read exactly;
/// * sector: the first 512-byte sector;
/// * bytes: the length, a multiple of 512 (0 for a flush);
/// * op: `R` read, `W` write, `F` flush, `D` discard, `Z` write zeroes, followed by any
///   of `S` (synchronous), `M` (metadata), `A` (readahead), `N` (no merge).
///
/// # Example
///
/// ```
/// use blkmq_sim::Trace;
/// let text = "1 0.000000000 2048 4096 R\n2 0.000150000 0 65536 WS\n";
/// let trace = Trace::parse(text).unwrap();
/// assert_eq!(trace.records().len(), 2);
/// assert_eq!(trace.total_bytes(), 4096 + 65536);
/// assert_eq!(trace.to_text(), text); // and back
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    records: Vec<TraceRecord>,
}

/// Reads seconds with up to 9 decimals into nanoseconds, exactly.
fn parse_time(text: &str) -> Option<u64> {
    let (whole, frac) = match text.split_once('.') {
        Some((w, f)) => (w, f),
        None => (text, ""),
    };
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = 0u64;
    for (i, b) in frac.bytes().enumerate() {
        nanos += u64::from(b - b'0') * 10u64.pow(8 - i as u32);
    }
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

fn parse_op(text: &str) -> Option<(Op, BioFlags)> {
    let mut chars = text.chars();
    let op = match chars.next()? {
        'R' => Op::Read,
        'W' => Op::Write,
        'F' => Op::Flush,
        'D' => Op::Discard,
        'Z' => Op::WriteZeroes,
        _ => return None,
    };
    let mut flags = BioFlags::empty();
    for c in chars {
        flags |= match c {
            'S' => BioFlags::SYNC,
            'M' => BioFlags::META,
            'A' => BioFlags::RAHEAD,
            'N' => BioFlags::NOMERGE,
            _ => return None,
        };
    }
    Some((op, flags))
}

fn op_text(op: Op, flags: BioFlags) -> String {
    let mut s = String::from(match op {
        Op::Read => "R",
        Op::Write => "W",
        Op::Flush => "F",
        Op::Discard => "D",
        Op::WriteZeroes => "Z",
    });
    for (flag, c) in [
        (BioFlags::SYNC, 'S'),
        (BioFlags::META, 'M'),
        (BioFlags::RAHEAD, 'A'),
        (BioFlags::NOMERGE, 'N'),
    ] {
        if flags.contains(flag) {
            s.push(c);
        }
    }
    s
}

impl Trace {
    /// Reads a trace.
    ///
    /// # Errors
    /// The first line that is not five valid fields, a length that is not a multiple of
    /// 512, a flush with a length, or a longer I/O than a bio can carry.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::Trace;
    /// let trace = Trace::parse("# a comment\n\n7 .25 0 0 F # flush\n").unwrap();
    /// assert_eq!((trace.records()[0].time_ns, trace.records()[0].op), (250_000_000, Op::Flush));
    /// assert!(Trace::parse("7 0.25 0 0").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, TraceError> {
        let mut records = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: &str| TraceError {
                line: n + 1,
                message: message.into(),
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [issuer, time, sector, bytes, op] = fields[..] else {
                return Err(err("expected 5 fields: issuer time sector bytes op"));
            };
            let issuer: u32 = issuer.parse().map_err(|_| err("bad issuer"))?;
            let time_ns = parse_time(time).ok_or_else(|| err("bad time"))?;
            let sector: u64 = sector.parse().map_err(|_| err("bad sector"))?;
            let bytes: u64 = bytes.parse().map_err(|_| err("bad byte count"))?;
            let (op, flags) = parse_op(op).ok_or_else(|| err("bad op"))?;
            if bytes % SECTOR_SIZE != 0 {
                return Err(err("bytes must be a multiple of 512"));
            }
            if bytes / SECTOR_SIZE > u64::from(u32::MAX) {
                return Err(err("too many bytes for one bio"));
            }
            if (op == Op::Flush) != (bytes == 0) {
                return Err(err("a flush, and only a flush, has 0 bytes"));
            }
            records.push(TraceRecord {
                issuer: IssuerId(issuer),
                time_ns,
                sector,
                bytes,
                op,
                flags,
            });
        }
        Ok(Self { records })
    }

    /// A trace of `records` (replayed in time order, ties in this order).
    ///
    /// ```
    /// use blkmq_core::{BioFlags, IssuerId, Op};
    /// use blkmq_sim::{Trace, TraceRecord};
    /// let r = TraceRecord { issuer: IssuerId(1), time_ns: 0, sector: 0, bytes: 512, op: Op::Read, flags: BioFlags::empty() };
    /// assert_eq!(Trace::from_records(vec![r]).to_text(), "1 0.000000000 0 512 R\n");
    /// ```
    pub fn from_records(records: Vec<TraceRecord>) -> Self {
        Self { records }
    }

    /// The records, in the order read.
    ///
    /// ```
    /// use blkmq_sim::Trace;
    /// let trace = Trace::parse("1 2 0 512 R\n1 1 8 512 W").unwrap();
    /// let times: Vec<u64> = trace.records().iter().map(|r| r.time_ns).collect();
    /// assert_eq!(times, [2_000_000_000, 1_000_000_000]); // not sorted
    /// ```
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The bytes of every record.
    ///
    /// ```
    /// use blkmq_sim::Trace;
    /// assert_eq!(Trace::parse("1 0 0 512 R\n1 0 0 0 F\n1 0 0 1024 D").unwrap().total_bytes(), 1536);
    /// ```
    pub fn total_bytes(&self) -> u64 {
        self.records.iter().map(|r| r.bytes).sum()
    }

    /// The trace as text, one record per line with 9 decimals of seconds.
    ///
    /// ```
    /// use blkmq_sim::Trace;
    /// assert_eq!(Trace::parse("4 1.5 8 512 RSM").unwrap().to_text(), "4 1.500000000 8 512 RSM\n");
    /// ```
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for r in &self.records {
            out.push_str(&format!(
                "{} {}.{:09} {} {} {}\n",
                r.issuer.0,
                r.time_ns / 1_000_000_000,
                r.time_ns % 1_000_000_000,
                r.sector,
                r.bytes,
                op_text(r.op, r.flags)
            ));
        }
        out
    }
}

/// Replays a [`Trace`]: each record is submitted at the replay's start plus its time,
/// whatever is still in flight. A record that finds no free request waits, as any bio.
///
/// ```
/// use blkmq_sim::{Ideal, IdealParams, Replay, Sim, Trace};
///
/// let trace = Trace::parse("1 0 0 4096 R\n1 0.001 8 4096 R\n2 0.001 4096 4096 W\n").unwrap();
/// let params = IdealParams { latency_ns: 200_000, bandwidth: 0, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, Replay::new(trace));
/// let report = sim.run().unwrap();
/// assert_eq!(report.workloads[0].elapsed_ns(), 1_200_000);
/// assert_eq!((report.workloads[0].bytes_read, report.workloads[0].bytes_written), (8192, 4096));
/// assert_eq!(report.issuers.len(), 2);
/// ```
#[derive(Clone, Debug)]
pub struct Replay {
    records: Vec<TraceRecord>,
    next: usize,
    start_ns: u64,
}

impl Replay {
    /// A replay of `trace`, in time order (records at the same time in their order).
    ///
    /// ```
    /// use blkmq_sim::{Replay, Trace, Workload};
    /// let replay = Replay::new(Trace::parse("1 1 0 512 R\n1 0 8 1024 W").unwrap());
    /// assert_eq!(replay.claimed_bytes(), 1536);
    /// ```
    pub fn new(trace: Trace) -> Self {
        let mut records = trace.records;
        records.sort_by_key(|r| r.time_ns); // stable: ties keep their order
        Self {
            records,
            next: 0,
            start_ns: 0,
        }
    }

    /// Records submitted so far.
    ///
    /// ```
    /// use blkmq_sim::{Replay, Trace};
    /// assert_eq!(Replay::new(Trace::default()).issued(), 0);
    /// ```
    pub fn issued(&self) -> usize {
        self.next
    }

    /// Submits every record due by now; asks to be woken for the next.
    fn catch_up(&mut self, cx: &mut Cx<'_>) {
        while let Some(r) = self.records.get(self.next) {
            let due = self.start_ns.saturating_add(r.time_ns);
            if due > cx.now_ns() {
                cx.wake_at(due, 0);
                return;
            }
            cx.submit(
                Io::new(r.op, r.sector, (r.bytes / SECTOR_SIZE) as u32)
                    .flags(r.flags)
                    .issuer(r.issuer)
                    .tag(self.next as u64),
            );
            self.next += 1;
        }
    }
}

impl Workload for Replay {
    fn name(&self) -> String {
        "replay".into()
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        self.start_ns = cx.now_ns();
        self.catch_up(cx);
    }

    fn completed(&mut self, _cx: &mut Cx<'_>, _done: &Done) {}

    fn woken(&mut self, cx: &mut Cx<'_>, _token: u64) {
        self.catch_up(cx);
    }

    fn is_finished(&self) -> bool {
        self.next == self.records.len()
    }

    fn claimed_bytes(&self) -> u64 {
        self.records.iter().map(|r| r.bytes).sum()
    }
}
