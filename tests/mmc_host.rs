//! The `mmc_host` example's scenarios, checked: the seed's figures parse and print back
//! as posted, the card driven as the legacy path drove it stays within the calibration
//! bounds of the seed's BEFORE, each simulated column goes the expected way, the host
//! driver pipelines and is driven by its completions only, and runs repeat exactly.
//!
//! The checks run at a smaller scale (`dd` of 64 MiB, iozone records from 4 KiB to
//! 2 MiB) and at the seed's (what the example prints). The assertions are on simulated
//! figures only.
//!
//! The pipelined columns (`none`, `mq-deadline`, `bfq`) must be no worse than the seed's
//! BEFORE on every figure checked, and no worse than the model's BEFORE: they save the
//! legacy queue thread's wake-ups. That holds for the seed's thread wake-up and, the card
//! refitted, for a much shorter and a much longer one.

#[path = "../examples/mmc_host/host.rs"]
mod host;

use std::sync::OnceLock;

use blkmq_core::OpGroup;
use blkmq_sim::{Dd, IozoneTest};
use host::compare::{calibration, directions};
use host::driver::HOST_MAX_SECTORS;
use host::figures::{Counters, Figure, Figures, SEED_AFTER, SEED_BEFORE};
use host::pictures::pictures;
use host::scenario::{COLUMNS, Column, Expect, Results, host_sim};
use host::summary::checks as checks_text;
use host::{Scale, Setup, report, run_all, summary, write_pictures};

fn results(scale: Scale) -> &'static Results {
    static SMALL: OnceLock<Results> = OnceLock::new();
    static SEED: OnceLock<Results> = OnceLock::new();
    let cell = if scale == Scale::SMALL { &SMALL } else { &SEED };
    cell.get_or_init(|| run_all(Setup::seed(), scale).expect("the scenarios run"))
}

fn before() -> Figures {
    Figures::parse_seed(SEED_BEFORE).expect("the seed's BEFORE parses")
}

#[test]
fn seed_figures_parse_and_print_back_as_posted() {
    for text in [SEED_BEFORE, SEED_AFTER] {
        let seed = Figures::parse_seed(text).expect("the seed parses");
        assert_eq!(seed.grid.rows.len(), 13);
        for line in seed.dd_text().lines().chain([seed.find_text().as_str()]) {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} is not the seed's"
            );
        }
        assert!(text.contains(&seed.grid.to_string()));
    }
    let before = before();
    assert_eq!(before.dd.elapsed_ns, 47_781_464_000);
    assert_eq!(before.dd_real_ns, 47_790_000_000);
    assert_eq!(before.find_ns, 3_600_000_000);
    assert_eq!(before.grid.get(16384, IozoneTest::Read), Some(22399));
}

#[test]
fn the_small_scale_is_part_of_the_seed_scale() {
    let (small, seed) = (Scale::SMALL, Scale::SEED);
    assert!(small.dd_bytes < seed.dd_bytes);
    assert!(small.min_record >= seed.min_record && small.max_record < seed.max_record);
    // It keeps records of one request and records of several.
    assert!(small.max_record > u64::from(HOST_MAX_SECTORS) * 512);
}

fn check_calibration(scale: Scale) {
    let rows = calibration(&before(), &results(scale).legacy);
    let cells = results(scale).legacy.grid.rows.len() * 6;
    assert_eq!(rows.len(), 2 + cells);
    for c in &rows {
        assert!(
            c.ok,
            "{}: model {} against the seed's {}, {:+.2}% (limit {}%)",
            c.figure.name(),
            c.model,
            c.seed,
            c.error * 100.0,
            c.figure.calibration_limit() * 100.0
        );
    }
}

#[test]
fn calibration_is_within_bounds_small() {
    check_calibration(Scale::SMALL);
}

#[test]
fn calibration_is_within_bounds_seed_scale() {
    check_calibration(Scale::SEED);
}

fn check_directions(results: &Results) {
    let checks = directions(&before(), results);
    let by = |column: &str, figure: Figure| {
        *checks
            .iter()
            .find(|d| d.column == column && d.figure == figure)
            .expect("the check exists")
    };

    // The naive set-up loses `dd` against both BEFOREs: preparation on an idle bus.
    let dd = by("naive", Figure::Dd);
    assert!(dd.vs_seed && dd.vs_legacy, "{dd:?}");
    // And `find`: its readahead bursts, merged into one request each on the legacy path,
    // go to the card block by block (the seed lost 0.82 s, 0.22 s of it processor time).
    let find = by("naive", Figure::Find);
    assert!(find.vs_seed && find.vs_legacy, "{find:?}");
    assert!(find.value > find.legacy + 0.5, "{find:?}");

    for d in checks.iter().filter(|d| d.expect == Expect::NoWorse) {
        // No worse than the legacy path on the same card, and no worse than the seed.
        assert!(d.vs_legacy && d.vs_seed, "{d:?}");
    }
    // With no thread to wake, one request at a time is faster than the legacy path:
    // `find` and iozone's records of one request.
    for column in ["none", "mq-deadline", "bfq"] {
        let find = by(column, Figure::Find);
        assert!(find.value < find.legacy, "{find:?}");
        let read = by(column, Figure::Iozone(4, IozoneTest::Read));
        assert!(read.value > read.legacy, "{read:?}");
    }

    // Pipelining shows where there is something to hide: `dd` and records of several
    // requests are faster than naive, records of one request are not slower.
    let (columns, naive) = (&results.columns, &results.columns[0].1);
    assert_eq!(results.columns[0].0.expect, Expect::Regression);
    for (column, figures) in columns.iter().filter(|(c, _)| c.expect == Expect::NoWorse) {
        let value = |f: &Figures, figure| f.value(figure).expect("the figure exists");
        assert!(
            value(figures, Figure::Dd) > value(naive, Figure::Dd),
            "{}",
            column.name
        );
        for (reclen, _) in &figures.grid.rows {
            let read = Figure::Iozone(*reclen, IozoneTest::Read);
            if *reclen * 1024 > u64::from(HOST_MAX_SECTORS) * 512 {
                assert!(value(figures, read) > value(naive, read), "{}", column.name);
            } else {
                assert!(
                    value(figures, read) >= value(naive, read),
                    "{}",
                    column.name
                );
            }
        }
    }
}

#[test]
fn columns_go_the_expected_way_small() {
    check_directions(results(Scale::SMALL));
}

#[test]
fn columns_go_the_expected_way_seed_scale() {
    check_directions(results(Scale::SEED));
}

#[test]
fn columns_go_the_expected_way_whatever_the_thread_wake_up() {
    // At the seed's scale: `dd` of 64 MiB starts and ends less pipelined than the seed's
    // 1 GiB, and a wake-up of 3 us does not make up for that.
    let seed = results(Scale::SEED);
    for wake_ns in [3_000, 40_000] {
        let setup = Setup::with_thread_wake(wake_ns).expect("a fit with that wake-up");
        let results = run_all(setup, Scale::SEED).expect("the scenarios run");
        // The refit leaves the legacy path where it was, so the calibration holds.
        assert_eq!(results.legacy, seed.legacy, "{wake_ns}");
        check_directions(&results);
    }
    assert_eq!(Setup::with_thread_wake(10_000), Some(Setup::seed()));
    assert_eq!(Setup::with_thread_wake(1_000_000), None);
}

#[test]
fn the_driver_pipelines_and_runs_on_completions_only() {
    for (column, figures) in &results(Scale::SMALL).columns {
        let activity = figures.activity.expect("a simulated column");
        let host = activity.host;
        // One interrupt per command, every command started either from `queue_rq` on an
        // idle card or from the interrupt that freed the bus.
        assert_eq!(
            host.interrupts,
            host.started_idle + host.started_from_irq,
            "{}",
            column.name
        );
        // The queue never needed a kick: every rerun came from a completion.
        assert_eq!(activity.kick_runs, 0, "{}", column.name);
        match column.expect {
            Expect::Regression => {
                assert_eq!(host.prepared_behind, 0, "{}", column.name);
                assert_eq!(host.started_from_irq, 0, "{}", column.name);
            }
            Expect::NoWorse => {
                assert!(host.prepared_behind > 0, "{}", column.name);
                assert_eq!(
                    host.started_from_irq, host.prepared_behind,
                    "{}",
                    column.name
                );
                // Two tags, two slots: the queue never offers a third request.
                assert_eq!(host.resource_busy, 0, "{}", column.name);
            }
        }
    }
}

#[test]
fn a_request_beyond_the_two_slots_waits_for_a_completion() {
    // More tags than slots: the queue offers a third request, the driver turns it away,
    // and the completion that frees a slot runs the queue again.
    let deep = Column {
        depth: 4,
        ..COLUMNS[1]
    };
    let (mut sim, queue) = host_sim(&deep, Setup::seed()).expect("the simulation");
    let dd = sim.add_workload(queue, Dd::read(0, 8 << 20).window(8).refill(1));
    let report = sim.run().expect("the run");
    assert_eq!(report.stats.end_io_calls, report.stats.bios_submitted);
    assert_eq!(report.stats.kick_runs, 0);
    let result = sim.workload(dd).result().expect("dd finished");
    assert_eq!((result.bytes, result.errors), (8 << 20, 0));
    let host = sim.host().driver().stats();
    assert!(host.resource_busy > 0, "{host:?}");
    assert!(host.prepared_behind > 0, "{host:?}");
}

#[test]
fn runs_repeat_exactly() {
    let first = report(results(Scale::SMALL)).expect("the report");
    let again = run_all(Setup::seed(), Scale::SMALL).expect("the scenarios run");
    assert_eq!(first, report(&again).expect("the report"));
}

#[test]
fn bfq_starts_an_application_up_under_writes_as_on_an_idle_card() {
    let rows = &results(Scale::SMALL).startup;
    let by = |name: &str| {
        rows.iter()
            .find(|(c, _)| c.name == name)
            .map(|(_, s)| *s)
            .expect("the column ran")
    };
    let (none, deadline, bfq) = (by("none"), by("mq-deadline"), by("bfq"));
    // The same burst on the same idle card, whatever the scheduler.
    assert_eq!(none.idle_ns, bfq.idle_ns);
    assert_eq!(deadline.idle_ns, bfq.idle_ns);
    // Under four writers, none and mq-deadline serve it behind the writeback: hundreds of
    // times slower. BFQ raises the new issuer's weight and lets it preempt the writers; it
    // still waits for the writes already on the card when it starts, two requests of up to
    // 512 KiB (about 70 ms each, against its 82 ms alone).
    assert!(
        none.slowdown() > 100.0 && deadline.slowdown() > 100.0,
        "{rows:?}"
    );
    assert!(bfq.slowdown() <= 4.0, "{rows:?}");
    // Not by starving the writers: they keep moving at the others' rate.
    assert!(
        bfq.writers_bytes_per_sec * 10 >= deadline.writers_bytes_per_sec * 8,
        "{rows:?}"
    );
}

/// A small XML reader, enough to tell a well-formed document from one that is not and to
/// read back its elements: one root, tags that nest and close in order, quoted and unique
/// attributes, no `<` or stray `&` in text or values, only the predefined and numeric
/// entities.
mod xml {
    /// An element: its name, attributes and children.
    #[derive(Debug)]
    pub(crate) struct Element {
        pub(crate) name: String,
        pub(crate) attrs: Vec<(String, String)>,
        pub(crate) children: Vec<Node>,
    }

    /// A child: an element or text (entities decoded).
    #[derive(Debug)]
    pub(crate) enum Node {
        Element(Element),
        Text(String),
    }

    impl Element {
        pub(crate) fn attr(&self, name: &str) -> Option<&str> {
            self.attrs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }

        /// Its text, its children's included.
        pub(crate) fn text(&self) -> String {
            self.children
                .iter()
                .map(|c| match c {
                    Node::Element(e) => e.text(),
                    Node::Text(t) => t.clone(),
                })
                .collect()
        }

        /// Every element named `name` below it, in document order.
        pub(crate) fn descendants<'a>(&'a self, name: &str, out: &mut Vec<&'a Element>) {
            for child in &self.children {
                if let Node::Element(e) = child {
                    if e.name == name {
                        out.push(e);
                    }
                    e.descendants(name, out);
                }
            }
        }

        /// The text of every `<text class="{class}">` below it, in document order.
        pub(crate) fn texts(&self, class: &str) -> Vec<String> {
            let mut all = Vec::new();
            self.descendants("text", &mut all);
            all.into_iter()
                .filter(|e| e.attr("class") == Some(class))
                .map(Element::text)
                .collect()
        }
    }

    fn decode(raw: &str) -> Result<String, String> {
        if raw.contains('<') {
            return Err(format!("a '<' in {raw:?}"));
        }
        let mut out = String::new();
        let mut rest = raw;
        while let Some(at) = rest.find('&') {
            out.push_str(&rest[..at]);
            let end = rest[at..]
                .find(';')
                .ok_or_else(|| format!("an unterminated entity in {raw:?}"))?;
            let entity = &rest[at + 1..at + end];
            let c = match entity {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                _ => {
                    let code = if let Some(hex) = entity.strip_prefix("#x") {
                        u32::from_str_radix(hex, 16).ok()
                    } else if let Some(dec) = entity.strip_prefix('#') {
                        dec.parse().ok()
                    } else {
                        None
                    };
                    code.and_then(char::from_u32)
                        .ok_or_else(|| format!("an unknown entity &{entity};"))?
                }
            };
            out.push(c);
            rest = &rest[at + end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.')
    }

    /// Reads a name at the start of `text`: the name and the rest.
    fn name(text: &str) -> Result<(&str, &str), String> {
        let end = text.find(|c| !is_name_char(c)).unwrap_or(text.len());
        let name = &text[..end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
            return Err(format!("no name at {:?}", &text[..text.len().min(20)]));
        }
        Ok((name, &text[end..]))
    }

    /// Parses a whole document: its root element.
    pub(crate) fn parse(doc: &str) -> Result<Element, String> {
        let mut rest = doc.trim_start();
        if rest.starts_with("<?xml") {
            rest = rest[rest.find("?>").ok_or("an unterminated prolog")? + 2..].trim_start();
        }
        let mut stack: Vec<Element> = Vec::new();
        let mut root = None;
        while !rest.is_empty() {
            let lt = rest.find('<').unwrap_or(rest.len());
            let text = decode(&rest[..lt])?;
            match stack.last_mut() {
                Some(open) if !text.is_empty() => open.children.push(Node::Text(text)),
                None if !text.trim().is_empty() => return Err("text outside the root".into()),
                _ => {}
            }
            rest = &rest[lt..];
            if rest.is_empty() {
                break;
            }
            if let Some(comment) = rest.strip_prefix("<!--") {
                rest = &comment[comment.find("-->").ok_or("an unterminated comment")? + 3..];
            } else if let Some(close) = rest.strip_prefix("</") {
                let (name, after) = name(close)?;
                rest = after
                    .trim_start()
                    .strip_prefix('>')
                    .ok_or_else(|| format!("</{name} not closed by '>'"))?;
                let element = stack
                    .pop()
                    .ok_or_else(|| format!("</{name}> closes nothing"))?;
                if element.name != name {
                    return Err(format!("<{}> closed by </{name}>", element.name));
                }
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::Element(element)),
                    None => root = Some(element),
                }
            } else {
                if root.is_some() {
                    return Err("a second root element".into());
                }
                let (tag, mut after) = name(&rest[1..])?;
                let mut element = Element {
                    name: tag.into(),
                    attrs: Vec::new(),
                    children: Vec::new(),
                };
                let self_closing = loop {
                    let trimmed = after.trim_start();
                    if let Some(r) = trimmed.strip_prefix("/>") {
                        after = r;
                        break true;
                    }
                    if let Some(r) = trimmed.strip_prefix('>') {
                        after = r;
                        break false;
                    }
                    if trimmed.len() == after.len() {
                        return Err(format!("<{tag}: no space before an attribute"));
                    }
                    let (attr, r) = name(trimmed)?;
                    let r = r
                        .trim_start()
                        .strip_prefix('=')
                        .ok_or("an attribute without '='")?;
                    let r = r.trim_start();
                    let quote = r
                        .chars()
                        .next()
                        .filter(|q| matches!(q, '"' | '\''))
                        .ok_or("an unquoted attribute value")?;
                    let end = r[1..]
                        .find(quote)
                        .ok_or("an unterminated attribute value")?;
                    if element.attr(attr).is_some() {
                        return Err(format!("<{tag}: {attr} twice"));
                    }
                    element.attrs.push((attr.into(), decode(&r[1..1 + end])?));
                    after = &r[end + 2..];
                };
                rest = after;
                if self_closing {
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(Node::Element(element)),
                        None => root = Some(element),
                    }
                } else {
                    stack.push(element);
                }
            }
        }
        if let Some(open) = stack.last() {
            return Err(format!("<{}> never closed", open.name));
        }
        root.ok_or_else(|| "no root element".into())
    }

    #[test]
    fn the_reader_tells_well_formed_from_not() {
        let doc = parse("<a x=\"1 &amp; 2\"><b/>t&lt;<c y='2'>u</c><!-- c --></a>\n")
            .expect("well-formed");
        assert_eq!((doc.name.as_str(), doc.attr("x")), ("a", Some("1 & 2")));
        assert_eq!(doc.text(), "t<u");
        for bad in [
            "<a><b></a></b>",
            "<a>",
            "<a></a><b/>",
            "<a x=1/>",
            "<a x=\"1\" x=\"2\"/>",
            "<a>&nbsp;</a>",
            "<a>R&D</a>",
            "<a x=\"<\"/>",
            "text<a/>",
            "</a>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} passed");
        }
    }
}

/// An iozone grid as read back from text: (record size in kB, the six rates) per row.
type Rows = Vec<(u64, [u64; 6])>;

/// The figures of `--full` (the whole report), read back from its text.
struct FullFigures {
    /// `dd` (MB/s, as the tables show it) and `find` (s) of every set-up, by name.
    dd_find: Vec<(String, String, String)>,
    /// The iozone cells of every set-up, by name, row by row.
    grids: Vec<(String, Rows)>,
    /// The responsiveness table's rows, split in words.
    startup: Vec<Vec<String>>,
    /// Calibration figures and their misses; direction checks and their misses against
    /// the model's and the seed's BEFORE.
    counts: [usize; 5],
}

/// The lines of section `n` of the whole report.
fn section(full: &str, n: u32) -> Vec<&str> {
    let head = format!("=== {n}. ");
    full.lines()
        .skip_while(|l| !l.starts_with(&head))
        .skip(1)
        .take_while(|l| !l.starts_with("=== "))
        .collect()
}

/// The iozone grids side by side in `lines`: lines of numbers only, eight per grid.
fn grids_side_by_side(lines: &[&str]) -> Vec<Rows> {
    let mut grids: Vec<Rows> = Vec::new();
    for line in lines {
        let numbers: Option<Vec<u64>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
        let Some(numbers) = numbers.filter(|n| !n.is_empty() && n.len() % 8 == 0) else {
            continue;
        };
        grids.resize(numbers.len() / 8, Vec::new());
        for (grid, row) in grids.iter_mut().zip(numbers.chunks(8)) {
            grid.push((row[1], row[2..].try_into().expect("six rates")));
        }
    }
    grids
}

/// `0m 4.42s` in seconds, as the tables show `find`.
fn real_seconds(entry: &str) -> String {
    let (minutes, seconds) = entry.trim().split_once('m').expect("a `real` entry");
    let seconds: f64 = seconds
        .trim()
        .trim_end_matches('s')
        .parse()
        .expect("seconds");
    let minutes: f64 = minutes.parse().expect("minutes");
    Figure::Find.show(minutes * 60.0 + seconds)
}

fn parse_full(full: &str) -> FullFigures {
    let columns: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    // Section 1: the seed's AFTER as posted (its BEFORE is in the direction table too).
    let seed = section(full, 1);
    let copied = seed
        .iter()
        .find(|l| l.contains(" copied, "))
        .expect("dd's line");
    let words: Vec<&str> = copied.split_whitespace().collect();
    let mut dd_rates = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w == "copied," {
            let bytes: f64 = words[i - 3].parse().expect("bytes");
            let seconds: f64 = words[i + 1].parse().expect("seconds");
            dd_rates.push(Figure::Dd.show(bytes / seconds / f64::from(1 << 20)));
        }
    }
    let finds = seed
        .iter()
        .skip_while(|l| !l.starts_with("time find"))
        .nth(2)
        .expect("find's line");
    let finds: Vec<String> = finds.split("real").skip(1).map(real_seconds).collect();
    let seed_grids = grids_side_by_side(&seed);

    // Section 3: the model's BEFORE, figure by figure, and the calibration's count.
    let calibration = section(full, 3);
    let mut model = (String::new(), String::new(), Vec::new());
    let mut cells = Vec::new();
    for line in &calibration {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            Some(&"dd") => model.0 = words[3].to_string(),
            Some(&"find") => model.1 = words[3].to_string(),
            Some(&"iozone") => {
                let unit = words.iter().position(|w| *w == "(kB/s)").expect("a unit");
                cells.push((words[1].parse::<u64>().expect("reclen"), words[unit + 2]));
            }
            _ => {}
        }
    }
    for row in cells.chunks(6) {
        let rates = row.iter().map(|(_, v)| v.parse().expect("kB/s"));
        let rates: Vec<u64> = rates.collect();
        model
            .2
            .push((row[0].0, rates.try_into().expect("six rates")));
    }
    let limits = calibration
        .iter()
        .find(|l| l.contains(" figures within their limits"))
        .expect("the calibration's count");
    let words: Vec<&str> = limits.split_whitespace().collect();
    let held: usize = words[0].parse().expect("a count");
    let figures: usize = words[2].parse().expect("a count");

    // Section 4: the seed's BEFORE and every column's dd and find, and the checks' count.
    let direction = section(full, 4);
    let mut dd_find = vec![(String::new(), String::new(), String::new()); 3 + columns.len()];
    for line in &direction {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(c) = columns.iter().position(|c| words.first() == Some(c)) else {
            continue;
        };
        let slot = match words.get(2) {
            Some(&"dd") => 1,
            Some(&"find") => 2,
            _ => continue,
        };
        let set = |row: &mut (String, String, String), value: &str| {
            *(if slot == 1 { &mut row.1 } else { &mut row.2 }) = value.to_string();
        };
        set(&mut dd_find[3 + c], words[4]);
        set(&mut dd_find[0], words[5]);
    }
    dd_find[1].1 = dd_rates[1].clone();
    dd_find[2].1 = model.0.clone();
    dd_find[1].2 = finds[1].clone();
    dd_find[2].2 = model.1.clone();
    for (row, name) in dd_find.iter_mut().zip(
        ["seed BEFORE", "seed AFTER", "model BEFORE"]
            .into_iter()
            .chain(columns.iter().copied()),
    ) {
        row.0 = name.to_string();
    }
    assert_eq!(
        dd_rates[0], dd_find[0].1,
        "the seed's BEFORE as posted and as checked"
    );
    assert_eq!(
        finds[0], dd_find[0].2,
        "the seed's BEFORE as posted and as checked"
    );
    let checks = direction
        .iter()
        .find(|l| l.contains(" checks: "))
        .expect("the checks' count");
    let numbers: Vec<usize> = checks
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();

    // Section 2: the simulated grids.
    let simulated = grids_side_by_side(&section(full, 2));
    let mut grids = vec![
        ("seed BEFORE".to_string(), seed_grids[0].clone()),
        ("seed AFTER".to_string(), seed_grids[1].clone()),
        ("model BEFORE".to_string(), model.2),
    ];
    grids.extend(columns.iter().map(|c| c.to_string()).zip(simulated));

    // Section 5: the responsiveness table.
    let startup = section(full, 5)
        .iter()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|w| w.first().is_some_and(|c| columns.contains(&c.as_str())))
        .collect();
    FullFigures {
        dd_find,
        grids,
        startup,
        counts: [figures, figures - held, numbers[0], numbers[1], numbers[2]],
    }
}

/// The figures of the summary, read back from its text.
struct SummaryFigures {
    /// Per set-up: its name, `dd`, `dd` against BEFORE and AFTER, `find`, `find` against
    /// BEFORE and AFTER (blank against itself).
    dd_find: Vec<[String; 7]>,
    /// Per set-up but the seed's BEFORE: its name and the gains of the six tests and all.
    iozone: Vec<(String, Vec<String>)>,
    /// The responsiveness table's rows, split in words.
    startup: Vec<Vec<String>>,
    /// The last line: the checks.
    checks: String,
}

/// The lines of `summary`'s table under the header that starts with `first` and names
/// `column`, up to a blank line.
fn table<'a>(summary: &'a str, first: &str, column: &str) -> Vec<&'a str> {
    summary
        .lines()
        .skip_while(|l| !(l.starts_with(first) && l.contains(column)))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

fn parse_summary(summary: &str) -> SummaryFigures {
    // Fixed columns: a set-up's own figure against itself is blank.
    let cut = |line: &str, from: usize, to: usize| {
        line.get(from..to.min(line.len()))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let dd_find = table(summary, "set-up", "dd MB/s")
        .iter()
        .map(|l| {
            let bounds = [
                (0, 13),
                (13, 22),
                (22, 33),
                (33, 44),
                (44, 54),
                (54, 65),
                (65, 76),
            ];
            bounds.map(|(from, to)| cut(l, from, to))
        })
        .collect();
    let iozone = table(summary, "set-up", "rewrite")
        .iter()
        .map(|l| {
            let words = l[12..].split_whitespace().map(String::from).collect();
            (l[..12].trim().to_string(), words)
        })
        .collect();
    let startup = table(summary, "column", "idle card")
        .iter()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    let checks = summary
        .lines()
        .skip_while(|l| !l.starts_with("all ") && !l.contains(" checks fail "))
        .collect::<Vec<_>>()
        .join("\n");
    SummaryFigures {
        dd_find,
        iozone,
        startup,
        checks,
    }
}

/// `value` against `reference` as the summary prints it, from the figures as printed.
fn percent(value: &str, reference: &str) -> f64 {
    let (v, r): (f64, f64) = (
        value.parse().expect("a figure"),
        reference.parse().expect("a figure"),
    );
    (v - r) / r * 100.0
}

fn check_summary_against_full(results: &Results) {
    let summary = summary(results).expect("the summary");
    let full = report(results).expect("the whole report");
    let (s, f) = (parse_summary(&summary), parse_full(&full));

    // dd and find: the same figure of every set-up in both, and the summary's percentages
    // those of the figures printed (to their last digit's rounding).
    assert_eq!(s.dd_find.len(), f.dd_find.len(), "{summary}");
    for (row, (name, dd, find)) in s.dd_find.iter().zip(&f.dd_find) {
        assert_eq!((&row[0], &row[1], &row[4]), (name, dd, find), "{summary}");
        for (value, col, reference) in [(1, 2, 0), (1, 3, 1), (4, 5, 0), (4, 6, 1)] {
            let reference = &s.dd_find[reference];
            if reference[0] == row[0] {
                assert_eq!(row[col], "", "{summary}");
                continue;
            }
            let printed: f64 = row[col]
                .trim_end_matches('%')
                .parse()
                .expect("a percentage");
            let from_full = percent(&row[value], &reference[value]);
            assert!(
                (printed - from_full).abs() <= 0.011,
                "{}: {printed} against {from_full}",
                row[0]
            );
        }
    }

    // iozone: each set-up's geometric mean against the seed's BEFORE, per test and over
    // all cells, from the grids the whole report prints.
    let before = &f.grids[0].1;
    assert_eq!(s.iozone.len(), f.grids.len() - 1, "{summary}");
    for ((name, gains), (full_name, grid)) in s.iozone.iter().zip(&f.grids[1..]) {
        assert_eq!(name, full_name);
        let mut expected = Vec::new();
        for test in (0..6).map(Some).chain([None]) {
            let (mut logs, mut cells) = (0.0, 0.0);
            for (reclen, rates) in grid {
                let seed = before
                    .iter()
                    .find(|(r, _)| r == reclen)
                    .expect("a seed row")
                    .1;
                for t in (0..6).filter(|t| test.is_none_or(|test| test == *t)) {
                    logs += (rates[t] as f64 / seed[t] as f64).ln();
                    cells += 1.0;
                }
            }
            expected.push(format!("{:+.2}%", ((logs / cells).exp() - 1.0) * 100.0));
        }
        assert_eq!(gains, &expected, "{name}");
    }

    // The responsiveness table, word for word.
    assert_eq!(s.startup, f.startup);
    assert_eq!(s.startup.len(), results.startup.len());

    // The checks: as many as the whole report counts, all holding when it counts no miss.
    let [
        figures,
        calibration_misses,
        directions,
        model_misses,
        seed_misses,
    ] = f.counts;
    let what =
        format!("{figures} calibration figures within their limits, {directions} direction checks");
    assert!(s.checks.contains(&what), "{}", s.checks);
    if calibration_misses + model_misses + seed_misses == 0 {
        let total = figures + directions;
        assert!(
            s.checks.starts_with(&format!("all {total} checks hold")),
            "{}",
            s.checks
        );
    } else {
        assert!(s.checks.contains(" checks fail "), "{}", s.checks);
        assert!(
            s.checks
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("MISS "))
        );
    }
}

#[test]
fn the_summary_and_the_whole_report_hold_the_same_figures() {
    for scale in [Scale::SMALL, Scale::SEED] {
        check_summary_against_full(results(scale));
    }
    // One screen, at the seed's scale as at the test's.
    for scale in [Scale::SMALL, Scale::SEED] {
        let lines = summary(results(scale))
            .expect("the summary")
            .lines()
            .count();
        assert!(lines <= 50, "{lines} lines");
    }
}

#[test]
fn the_pictures_are_well_formed_and_carry_the_figures_they_draw() {
    let results = results(Scale::SMALL);
    let s = parse_summary(&summary(results).expect("the summary"));
    let f = parse_full(&report(results).expect("the whole report"));
    let pictures = pictures(results).expect("the pictures");
    let names: Vec<&str> = pictures.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "dd.svg",
            "find.svg",
            "iozone.svg",
            "startup.svg",
            "latency.svg"
        ]
    );
    let setups: Vec<String> = s.dd_find.iter().map(|r| r[0].clone()).collect();
    for (name, svg) in &pictures {
        let doc = xml::parse(svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.name, "svg", "{name}");
        assert_eq!(
            doc.attr("xmlns"),
            Some("http://www.w3.org/2000/svg"),
            "{name}"
        );
        // A title, as the document's and on the picture, and two axis labels.
        let mut titles = Vec::new();
        doc.descendants("title", &mut titles);
        assert_eq!(titles.len(), 1, "{name}");
        assert_eq!(doc.texts("title"), [titles[0].text()], "{name}");
        assert_eq!(doc.texts("axis").len(), 2, "{name}");

        let values = doc.texts("value");
        match *name {
            "dd.svg" | "find.svg" => {
                let col = if *name == "dd.svg" { 1 } else { 4 };
                let figures: Vec<String> = s.dd_find.iter().map(|r| r[col].clone()).collect();
                assert_eq!(values, figures, "{name}");
                assert_eq!(doc.texts("group"), setups, "{name}");
                let references = [
                    format!("seed BEFORE {}", figures[0]),
                    format!("seed AFTER {}", figures[1]),
                ];
                assert_eq!(doc.texts("reference"), references, "{name}");
            }
            "iozone.svg" => {
                let cells: Vec<String> = f
                    .grids
                    .iter()
                    .flat_map(|(_, g)| g.iter().flat_map(|(_, r)| r.iter().map(u64::to_string)))
                    .collect();
                assert_eq!(values, cells);
                assert_eq!(doc.texts("panel"), setups);
                let reclens: Vec<String> = f
                    .grids
                    .iter()
                    .flat_map(|(_, g)| g.iter().map(|(r, _)| r.to_string()))
                    .collect();
                assert_eq!(doc.texts("reclen"), reclens);
            }
            "latency.svg" => check_latency_picture(&doc, results),
            _ => {
                // Each scheduler's start-up time idle and loaded, and its slowdown.
                let mut figures = Vec::new();
                let mut groups = Vec::new();
                for row in &s.startup {
                    figures.push(row[1].trim_end_matches("ms").to_string());
                    figures.push(row[2].trim_end_matches("ms").to_string());
                    groups.push(format!("{} ({})", row[0], row[3]));
                }
                assert_eq!(values, figures);
                assert_eq!(doc.texts("group"), groups);
            }
        }
    }

    // `--svg DIR` writes the same documents.
    let dir = std::env::temp_dir().join(format!("mmc_host-svg-{}", std::process::id()));
    let paths = write_pictures(results, &dir).expect("the pictures written");
    for (path, (name, svg)) in paths.iter().zip(&pictures) {
        assert_eq!(path, &dir.join(name));
        assert_eq!(&std::fs::read_to_string(path).expect("the file"), svg);
    }
    std::fs::remove_dir_all(&dir).expect("the directory removed");
}

/// `latency.svg`: a panel per set-up whose queue counted (the model's BEFORE, then each
/// column), each bar's count written on it, the counts of each operation adding up to the
/// requests the queue's accounting completed over the iozone run, and those totals written
/// on the panel.
fn check_latency_picture(doc: &xml::Element, results: &Results) {
    let counted: Vec<(&str, &Counters)> = std::iter::once(("model BEFORE", &results.legacy))
        .chain(results.columns.iter().map(|(c, f)| (c.name, f)))
        .map(|(name, f)| (name, f.counters.as_ref().expect("the queue counted")))
        .collect();
    let names: Vec<String> = counted.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(doc.texts("panel"), names);
    // Each panel's bars, summed per operation, in document order.
    let mut texts = Vec::new();
    doc.descendants("text", &mut texts);
    let mut sums: Vec<[u64; 4]> = Vec::new();
    for text in texts {
        match text.attr("class") {
            Some("panel") => sums.push([0; 4]),
            Some("value") => {
                let op = match text.attr("data-op") {
                    Some("reads") => OpGroup::Read,
                    Some("writes") => OpGroup::Write,
                    Some("discards") => OpGroup::Discard,
                    Some("flushes") => OpGroup::Flush,
                    other => panic!("a bar of {other:?}"),
                };
                let n: u64 = text.text().parse().expect("a count");
                assert!(n > 0, "a bar of nothing drawn");
                sums.last_mut().expect("a bar in a panel")[op as usize] += n;
            }
            _ => {}
        }
    }
    let lines = doc.texts("count");
    assert_eq!((sums.len(), lines.len()), (counted.len(), counted.len()));
    for (((name, counters), sums), line) in counted.iter().zip(&sums).zip(&lines) {
        for group in OpGroup::ALL {
            let ios = counters.stats.op(group).ios;
            assert_eq!(sums[group as usize], ios, "{name}: {group:?}");
            assert_eq!(counters.latency.count(group), ios, "{name}: {group:?}");
        }
        let (reads, writes) = (
            counters.stats.op(OpGroup::Read).ios,
            counters.stats.op(OpGroup::Write).ios,
        );
        assert!(
            reads > 0 && writes > 0,
            "{name}: {reads} reads, {writes} writes"
        );
        assert!(
            line.starts_with(&format!("{reads} reads (p50 under ")),
            "{line}"
        );
        assert!(
            line.contains(&format!("; {writes} writes (p50 under ")),
            "{line}"
        );
    }
}

#[test]
fn the_summary_shows_each_failed_check_on_a_line() {
    let results = results(Scale::SMALL);
    let mut rows = calibration(&before(), &results.legacy);
    let checks = directions(&before(), results);
    let all = checks_text(&rows, &checks);
    let total = rows.len() + checks.len();
    assert!(
        all.starts_with(&format!("all {total} checks hold")),
        "{all}"
    );
    // Ten figures marked out of their limits: the first eight shown, the rest counted.
    for c in rows.iter_mut().take(10) {
        c.ok = false;
    }
    let text = checks_text(&rows, &checks);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!("10 of {total} checks fail")),
        "{text}"
    );
    assert_eq!(lines.len(), 1 + 8 + 1, "{text}");
    assert!(
        lines[1].starts_with("MISS calibration: dd (MB/s) model "),
        "{text}"
    );
    assert!(lines[1..9].iter().all(|l| l.starts_with("MISS ")), "{text}");
    assert_eq!(lines[9], "... and 2 more (--full)");
}
