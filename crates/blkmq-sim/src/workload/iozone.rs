//! iozone's automatic mode with direct I/O (`iozone -az -i0 -i1 -i2 -s 20m -I`): for each
//! record size from 4 KiB to 16 MiB, write, rewrite, read, reread, random read and random
//! write of the whole file, one record at a time, each waited for; and the grid of rates
//! it prints.

use std::fmt;

use blkmq_core::{BioFlags, IssuerId, Op, SECTOR_SIZE};

use super::{Cx, Done, Io, Workload};
use crate::SimRng;
use crate::svg::escape;

/// One of iozone's tests, in the grid's column order.
///
/// ```
/// use blkmq_sim::{IOZONE_TESTS, IozoneTest};
/// assert_eq!(IOZONE_TESTS[5], IozoneTest::RandomWrite);
/// assert_eq!(IozoneTest::RandomRead.name(), "random read");
/// assert!(IozoneTest::Rewrite.is_write());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IozoneTest {
    /// Sequential writes of a new file.
    Write,
    /// Sequential writes over it again.
    Rewrite,
    /// Sequential reads.
    Read,
    /// Sequential reads again.
    Reread,
    /// Reads of every record in a random order.
    RandomRead,
    /// Writes of every record in a random order.
    RandomWrite,
}

/// iozone's tests in the grid's column order.
///
/// ```
/// use blkmq_sim::IOZONE_TESTS;
/// let names: Vec<&str> = IOZONE_TESTS.iter().map(|t| t.name()).collect();
/// assert_eq!(names, ["write", "rewrite", "read", "reread", "random read", "random write"]);
/// ```
pub const IOZONE_TESTS: [IozoneTest; 6] = [
    IozoneTest::Write,
    IozoneTest::Rewrite,
    IozoneTest::Read,
    IozoneTest::Reread,
    IozoneTest::RandomRead,
    IozoneTest::RandomWrite,
];

impl IozoneTest {
    /// Its name in iozone's header.
    ///
    /// ```
    /// use blkmq_sim::IozoneTest;
    /// assert_eq!(IozoneTest::Reread.name(), "reread");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            IozoneTest::Write => "write",
            IozoneTest::Rewrite => "rewrite",
            IozoneTest::Read => "read",
            IozoneTest::Reread => "reread",
            IozoneTest::RandomRead => "random read",
            IozoneTest::RandomWrite => "random write",
        }
    }

    /// Whether it writes.
    ///
    /// ```
    /// use blkmq_sim::IozoneTest;
    /// assert!(IozoneTest::RandomWrite.is_write() && !IozoneTest::RandomRead.is_write());
    /// ```
    pub fn is_write(self) -> bool {
        matches!(
            self,
            IozoneTest::Write | IozoneTest::Rewrite | IozoneTest::RandomWrite
        )
    }

    fn is_random(self) -> bool {
        matches!(self, IozoneTest::RandomRead | IozoneTest::RandomWrite)
    }

    fn column(self) -> usize {
        self as usize
    }
}

/// iozone's result grid: kB/s (kB = 1024 bytes) per record size and test.
///
/// Displays in the seed's layout; [`IozoneGrid::parse`] reads that layout back (the seed's
/// own figures, say, to compare with).
///
/// ```
/// use blkmq_sim::{IozoneGrid, IozoneTest};
/// let text = "\
/// (kBytes/second)
///                                                     random    random
///     kB  reclen    write  rewrite    read    reread    read     write
///  20480       4     2112     2157     6052     6060     6025       40
///  20480       8     4820     5074     9163     9121     9125       81
/// ";
/// let grid = IozoneGrid::parse(text).unwrap();
/// assert_eq!(grid.get(8, IozoneTest::Read), Some(9163));
/// assert_eq!(grid.to_string(), text);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IozoneGrid {
    /// The file size in kB (the `-s` argument).
    pub file_kb: u64,
    /// One row per record size: (record size in kB, kB/s of each test in
    /// [`IOZONE_TESTS`] order).
    pub rows: Vec<(u64, [u64; 6])>,
}

impl IozoneGrid {
    /// The rate of `test` at record size `reclen_kb`.
    ///
    /// ```
    /// use blkmq_sim::{IozoneGrid, IozoneTest};
    /// let grid = IozoneGrid { file_kb: 20480, rows: vec![(4, [1, 2, 3, 4, 5, 6])] };
    /// assert_eq!(grid.get(4, IozoneTest::RandomRead), Some(5));
    /// assert_eq!(grid.get(8, IozoneTest::Read), None);
    /// ```
    pub fn get(&self, reclen_kb: u64, test: IozoneTest) -> Option<u64> {
        self.rows
            .iter()
            .find(|(r, _)| *r == reclen_kb)
            .map(|(_, rates)| rates[test.column()])
    }

    /// Reads the rows of a grid in the seed's layout (lines of eight numbers; other lines
    /// are skipped). `None` when no row is found or rows disagree on the file size.
    ///
    /// ```
    /// use blkmq_sim::IozoneGrid;
    /// let grid = IozoneGrid::parse(" 20480  4  1 2 3 4 5 6\n 20480  8  2 3 4 5 6 7").unwrap();
    /// assert_eq!((grid.file_kb, grid.rows.len()), (20480, 2));
    /// assert!(IozoneGrid::parse("no numbers here").is_none());
    /// assert!(IozoneGrid::parse(" 1 4 1 2 3 4 5 6\n 2 8 1 2 3 4 5 6").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let mut grid = IozoneGrid::default();
        for line in text.lines() {
            let numbers: Option<Vec<u64>> =
                line.split_whitespace().map(|w| w.parse().ok()).collect();
            let Some(numbers) = numbers else { continue };
            if numbers.len() != 8 {
                continue;
            }
            if grid.rows.is_empty() {
                grid.file_kb = numbers[0];
            } else if grid.file_kb != numbers[0] {
                return None;
            }
            let mut rates = [0; 6];
            rates.copy_from_slice(&numbers[2..]);
            grid.rows.push((numbers[1], rates));
        }
        (!grid.rows.is_empty()).then_some(grid)
    }

    /// A line chart of the grid as a self-contained SVG document: kB/s against the record
    /// size (log scale), one line per test.
    ///
    /// ```
    /// use blkmq_sim::IozoneGrid;
    /// let grid = IozoneGrid { file_kb: 20480, rows: vec![(4, [1, 2, 3, 4, 5, 6]), (8, [2, 3, 4, 5, 6, 7])] };
    /// let svg = grid.to_svg("mmc, none");
    /// assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    /// assert_eq!(svg.matches("<polyline").count(), 6);
    /// assert!(svg.contains("mmc, none"));
    /// ```
    pub fn to_svg(&self, title: &str) -> String {
        const W: f64 = 720.0;
        const H: f64 = 420.0;
        const LEFT: f64 = 70.0;
        const RIGHT: f64 = 150.0;
        const TOP: f64 = 40.0;
        const BOTTOM: f64 = 50.0;
        const COLOURS: [&str; 6] = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
        ];
        let plot_w = W - LEFT - RIGHT;
        let plot_h = H - TOP - BOTTOM;
        let max = self
            .rows
            .iter()
            .flat_map(|(_, r)| r.iter().copied())
            .max()
            .unwrap_or(1)
            .max(1);
        // A round top for the y axis: 1, 2 or 5 times a power of ten.
        let mut top = 1u64;
        while top < max {
            top = match top.to_string().as_bytes()[0] {
                b'1' => top * 2,
                b'2' => top / 2 * 5,
                _ => top * 2,
            };
        }
        let logs: Vec<f64> = self
            .rows
            .iter()
            .map(|(r, _)| (*r.max(&1) as f64).log2())
            .collect();
        let (lo, hi) = match (logs.first(), logs.last()) {
            (Some(&lo), Some(&hi)) if hi > lo => (lo, hi),
            (Some(&lo), _) => (lo, lo + 1.0),
            _ => (0.0, 1.0),
        };
        let x = |log: f64| LEFT + (log - lo) / (hi - lo) * plot_w;
        let y = |v: u64| TOP + plot_h - v as f64 / top as f64 * plot_h;
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
             viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
            LEFT + plot_w / 2.0,
            escape(title)
        );
        svg.push_str(&format!(
            "<line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
             <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"black\"/>\n",
            TOP + plot_h,
            LEFT + plot_w,
            TOP + plot_h,
            TOP + plot_h
        ));
        for i in 0..=4 {
            let v = top / 4 * i;
            let yy = y(v);
            svg.push_str(&format!(
                "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>\n",
                LEFT + plot_w,
                LEFT - 6.0,
                yy + 4.0
            ));
        }
        for ((reclen, _), &log) in self.rows.iter().zip(&logs) {
            svg.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{reclen}</text>\n",
                x(log),
                TOP + plot_h + 18.0
            ));
        }
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">record size (kB)</text>\n\
             <text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">kB/s</text>\n",
            LEFT + plot_w / 2.0,
            H - 10.0,
            TOP + plot_h / 2.0,
            TOP + plot_h / 2.0
        ));
        for (t, test) in IOZONE_TESTS.iter().enumerate() {
            let points: Vec<String> = self
                .rows
                .iter()
                .zip(&logs)
                .map(|((_, rates), &log)| format!("{:.1},{:.1}", x(log), y(rates[t])))
                .collect();
            svg.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                COLOURS[t],
                points.join(" ")
            ));
            let ly = TOP + 10.0 + t as f64 * 20.0;
            let lx = LEFT + plot_w + 15.0;
            svg.push_str(&format!(
                "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"2\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                lx + 20.0,
                COLOURS[t],
                lx + 26.0,
                ly + 4.0,
                test.name()
            ));
        }
        svg.push_str("</svg>\n");
        svg
    }
}

impl fmt::Display for IozoneGrid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "(kBytes/second)")?;
        writeln!(
            f,
            "                                                    random    random"
        )?;
        writeln!(
            f,
            "    kB  reclen    write  rewrite    read    reread    read     write"
        )?;
        for (reclen, rates) in &self.rows {
            write!(f, "{:>6}{:>8}", self.file_kb, reclen)?;
            for rate in rates {
                write!(f, "{rate:>9}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The parameters of an [`Iozone`] run; the defaults are the seed's command line.
///
/// ```
/// use blkmq_sim::IozoneParams;
/// let p = IozoneParams::default();
/// assert_eq!((p.file_bytes, p.min_record, p.max_record), (20 << 20, 4 << 10, 16 << 20));
/// assert_eq!(p.records(), [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384].map(|k| k << 10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IozoneParams {
    /// Where the file starts on the device.
    pub file_sector: u64,
    /// The file size (`-s 20m`).
    pub file_bytes: u64,
    /// The smallest record (4 KiB).
    pub min_record: u64,
    /// The largest record (16 MiB); sizes double from the smallest.
    pub max_record: u64,
    /// Processor time between records (default 0).
    pub think_ns: u64,
    /// The seed of the random orders.
    pub seed: u64,
    /// Who issues the I/O.
    pub issuer: IssuerId,
}

impl Default for IozoneParams {
    fn default() -> Self {
        Self {
            file_sector: 0,
            file_bytes: 20 << 20,
            min_record: 4 << 10,
            max_record: 16 << 20,
            think_ns: 0,
            seed: 1,
            issuer: IssuerId(0),
        }
    }
}

impl IozoneParams {
    /// The record sizes of the sweep, in bytes.
    ///
    /// ```
    /// use blkmq_sim::IozoneParams;
    /// let p = IozoneParams { min_record: 64 << 10, max_record: 256 << 10, ..Default::default() };
    /// assert_eq!(p.records(), [64 << 10, 128 << 10, 256 << 10]);
    /// ```
    pub fn records(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut r = self.min_record.max(SECTOR_SIZE);
        while r <= self.max_record {
            out.push(r);
            r *= 2;
        }
        out
    }

    /// Records of `record` bytes in the file (as iozone, the whole records that fit).
    fn count(&self, record: u64) -> u64 {
        self.file_bytes / record
    }
}

/// iozone's automatic mode with direct I/O (`iozone -az -i0 -i1 -i2 -s 20m -I`): for each
/// record size, write, rewrite, read, reread, random read and random write of the whole
/// file, one record at a time, each waited for. Each record is one bio, submitted when the
/// previous one ended (the queue splits it to its limits); random tests visit every record
/// once, in an order from the seed. A test's rate is the bytes it moved over its elapsed
/// time, in kB/s. Only whole records move: with 16 MiB records a 20 MiB file moves 16 MiB
/// per test, and the rate is of those bytes.
///
/// ```
/// use blkmq_sim::{Ideal, IdealParams, Iozone, IozoneParams, IozoneTest, Sim};
///
/// let params = IdealParams { latency_ns: 100_000, bandwidth: 100 << 20, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
/// let sweep = IozoneParams { file_bytes: 1 << 20, max_record: 64 << 10, ..Default::default() };
/// let iozone = sim.add_workload(queue, Iozone::new(sweep));
/// sim.run().unwrap();
/// let grid = sim.workload(iozone).grid();
/// assert_eq!(grid.rows.len(), 5); // 4, 8, 16, 32 and 64 kB
/// // 4 KiB records: 100 us + 4 KiB at 100 MiB/s (39.062 us) each, 256 of them:
/// // 1024 kB in 35.599872 ms.
/// assert_eq!(grid.get(4, IozoneTest::Read), Some(28_764));
/// ```
#[derive(Clone, Debug)]
pub struct Iozone {
    params: IozoneParams,
    records: Vec<u64>,
    rng: SimRng,
    record: usize,
    test: usize,
    /// Records done in the current test.
    op: u64,
    /// The current random test's order of records.
    order: Vec<u64>,
    pass_start: u64,
    moved: u64,
    grid: IozoneGrid,
    row: [u64; 6],
    finished: bool,
}

impl Iozone {
    /// A sweep with `params`; record sizes larger than the file are left out.
    ///
    /// ```
    /// use blkmq_sim::{Iozone, IozoneParams, Workload};
    /// let iozone = Iozone::new(IozoneParams { file_bytes: 8 << 10, ..Default::default() });
    /// // 4 and 8 KiB records fit: each size writes and reads the file 6 times.
    /// assert_eq!(iozone.claimed_bytes(), 2 * 6 * (8 << 10));
    /// ```
    pub fn new(params: IozoneParams) -> Self {
        let records: Vec<u64> = params
            .records()
            .into_iter()
            .filter(|&r| {
                params.count(r) > 0
                    && r % SECTOR_SIZE == 0
                    && r / SECTOR_SIZE <= u64::from(u32::MAX)
            })
            .collect();
        Self {
            params,
            records,
            rng: SimRng::new(params.seed),
            record: 0,
            test: 0,
            op: 0,
            order: Vec::new(),
            pass_start: 0,
            moved: 0,
            grid: IozoneGrid {
                file_kb: params.file_bytes / 1024,
                rows: Vec::new(),
            },
            row: [0; 6],
            finished: false,
        }
    }

    /// The grid so far (complete once the workload has finished).
    ///
    /// ```
    /// use blkmq_sim::{Iozone, IozoneParams};
    /// let iozone = Iozone::new(IozoneParams::default());
    /// assert!(iozone.grid().rows.is_empty()); // not run
    /// assert_eq!(iozone.grid().file_kb, 20480);
    /// ```
    pub fn grid(&self) -> &IozoneGrid {
        &self.grid
    }

    fn begin_test(&mut self, cx: &mut Cx<'_>) {
        let record = self.records[self.record];
        self.op = 0;
        self.moved = 0;
        self.pass_start = cx.now_ns();
        if IOZONE_TESTS[self.test].is_random() {
            self.order = (0..self.params.count(record)).collect();
            self.rng.shuffle(&mut self.order);
        }
        self.issue(cx);
    }

    fn issue(&mut self, cx: &mut Cx<'_>) {
        let record = self.records[self.record];
        let test = IOZONE_TESTS[self.test];
        let index = if test.is_random() {
            self.order[self.op as usize]
        } else {
            self.op
        };
        let sector = self.params.file_sector + index * record / SECTOR_SIZE;
        let sectors = (record / SECTOR_SIZE) as u32;
        let io = if test.is_write() {
            // Direct writes are synchronous (Linux marks them REQ_SYNC | REQ_IDLE).
            Io::new(Op::Write, sector, sectors).flags(BioFlags::SYNC | BioFlags::IDLE)
        } else {
            Io::new(Op::Read, sector, sectors)
        };
        cx.submit(io.issuer(self.params.issuer));
    }

    /// The current test is over: its rate into the row, then the next test or record.
    fn end_test(&mut self, cx: &mut Cx<'_>) {
        let elapsed = cx.now_ns() - self.pass_start;
        let rate = if elapsed == 0 {
            0
        } else {
            (u128::from(self.moved) * 1_000_000_000 / (1024 * u128::from(elapsed))) as u64
        };
        self.row[self.test] = rate;
        self.test += 1;
        if self.test == IOZONE_TESTS.len() {
            self.grid
                .rows
                .push((self.records[self.record] / 1024, self.row));
            self.row = [0; 6];
            self.test = 0;
            self.record += 1;
            if self.record == self.records.len() {
                self.finished = true;
                return;
            }
        }
        self.begin_test(cx);
    }
}

impl Workload for Iozone {
    fn name(&self) -> String {
        "iozone".into()
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        if self.records.is_empty() {
            self.finished = true;
            return;
        }
        self.begin_test(cx);
    }

    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
        if done.status.is_ok() {
            self.moved += done.bytes;
        }
        self.op += 1;
        if self.op == self.params.count(self.records[self.record]) {
            self.end_test(cx);
        } else if self.params.think_ns > 0 {
            cx.wake_after(self.params.think_ns, 0);
        } else {
            self.issue(cx);
        }
    }

    fn woken(&mut self, cx: &mut Cx<'_>, _token: u64) {
        self.issue(cx);
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn claimed_bytes(&self) -> u64 {
        self.records
            .iter()
            .map(|&r| IOZONE_TESTS.len() as u64 * self.params.count(r) * r)
            .sum()
    }
}
