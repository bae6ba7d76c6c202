//! The command line.

use std::path::PathBuf;

pub(crate) const USAGE: &str = "\
usage: blkmq-disk --backing FILE --mount DIR [options]

Serves FILE through a blkmq request queue as DIR/disk, a file of direct I/O, until
SIGINT or SIGTERM; then drains, flushes and unmounts.

  --backing FILE      the backing file (created if --size is given and it is missing)
  --mount DIR         an existing directory to mount on
  --size SIZE         the disk's size (512-byte multiple; K, M, G, T suffixes, powers of
                      1024); the file grows to it; default: the file's own size
  --elevator NAME     none, mq-deadline or bfq (default mq-deadline)
  --hw-queues N       hardware queues (default 2)
  --depth N           requests per hardware queue (default 64)
  --threads N         FUSE serving threads (default 32)
  --driver NAME       uring (io_uring, the default) or pread (pread/pwrite threads;
                      also what serves where io_uring cannot be set up)
  --name NAME         the file's name in DIR (default disk)
  --quiet             no live line, only the summary
  --trace FILE        write the queue's trace events to FILE, one blkparse-like line
                      each, and print the btt-like latency summary at exit
  -h, --help          this text";

/// The I/O scheduler asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elevator {
    None,
    Deadline,
    Bfq,
}

impl Elevator {
    /// Its name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Elevator::None => "none",
            Elevator::Deadline => "mq-deadline",
            Elevator::Bfq => "bfq",
        }
    }
}

/// The driver of the backing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriverKind {
    Uring,
    Pread,
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) backing: PathBuf,
    pub(crate) mount: PathBuf,
    pub(crate) size: Option<u64>,
    pub(crate) elevator: Elevator,
    pub(crate) hw_queues: usize,
    pub(crate) depth: usize,
    pub(crate) threads: usize,
    pub(crate) name: String,
    pub(crate) driver: DriverKind,
    pub(crate) quiet: bool,
    pub(crate) trace: Option<PathBuf>,
}

/// What parsing gives: the arguments, or help asked for.
pub(crate) enum Parsed {
    Run(Args),
    Help,
}

/// Parses `args` (without the program's name); the error is one line.
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut args = args.into_iter();
    let (mut backing, mut mount, mut size) = (None, None, None);
    let mut elevator = Elevator::Deadline;
    let (mut hw_queues, mut depth, mut threads) = (2, 64, 32);
    let mut name = String::from("disk");
    let mut quiet = false;
    let mut trace = None;
    let mut driver = DriverKind::Uring;
    while let Some(arg) = args.next() {
        // `--flag=value` and `--flag value` alike.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--backing" => backing = Some(PathBuf::from(value("--backing")?)),
            "--mount" => mount = Some(PathBuf::from(value("--mount")?)),
            "--size" => size = Some(parse_size(&value("--size")?)?),
            "--elevator" => {
                elevator = match value("--elevator")?.as_str() {
                    "none" => Elevator::None,
                    "mq-deadline" | "deadline" => Elevator::Deadline,
                    "bfq" => Elevator::Bfq,
                    other => {
                        return Err(format!(
                            "unknown elevator {other:?} (none, mq-deadline or bfq)"
                        ));
                    }
                }
            }
            "--hw-queues" => hw_queues = parse_count("--hw-queues", &value("--hw-queues")?)?,
            "--depth" => depth = parse_count("--depth", &value("--depth")?)?,
            "--threads" => threads = parse_count("--threads", &value("--threads")?)?,
            "--name" => name = value("--name")?,
            "--driver" => {
                driver = match value("--driver")?.as_str() {
                    "uring" | "io_uring" => DriverKind::Uring,
                    "pread" => DriverKind::Pread,
                    other => return Err(format!("unknown driver {other:?} (uring or pread)")),
                }
            }
            "--quiet" => quiet = true,
            "--trace" => trace = Some(PathBuf::from(value("--trace")?)),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    let backing = backing.ok_or("--backing FILE is required (see --help)")?;
    let mount = mount.ok_or("--mount DIR is required (see --help)")?;
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(format!("--name {name:?} is not a file name"));
    }
    Ok(Parsed::Run(Args {
        backing,
        mount,
        size,
        elevator,
        hw_queues,
        depth,
        threads,
        name,
        driver,
        quiet,
        trace,
    }))
}

fn parse_count(flag: &str, text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} wants a positive number, not {text:?}")),
    }
}

/// `512`, `64K`, `1G`, `1.5T` is not taken: whole numbers with an optional suffix.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let bad =
        || format!("--size wants a number of bytes with an optional K, M, G or T, not {text:?}");
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(bad)?;
    if bytes == 0 || bytes % 512 != 0 {
        return Err(format!(
            "--size {text} is not a positive multiple of 512 bytes"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<Args, String> {
        match parse(line.split_whitespace().map(String::from))? {
            Parsed::Run(args) => Ok(args),
            Parsed::Help => Err("help".into()),
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert!(parse_size("100").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999999T").is_err());
    }

    #[test]
    fn arguments() {
        let args =
            run("--backing d.img --size 1G --mount m --elevator bfq --hw-queues 4 --depth=8")
                .unwrap();
        assert_eq!(args.backing, PathBuf::from("d.img"));
        assert_eq!(args.mount, PathBuf::from("m"));
        assert_eq!(args.size, Some(1 << 30));
        assert_eq!(args.elevator, Elevator::Bfq);
        assert_eq!((args.hw_queues, args.depth, args.threads), (4, 8, 32));
        assert_eq!(
            (args.name.as_str(), args.driver),
            ("disk", DriverKind::Uring)
        );
        assert_eq!(args.trace, None);
        let args = run("--backing d --mount m --driver pread --trace t.txt").unwrap();
        assert_eq!(args.driver, DriverKind::Pread);
        assert_eq!(args.trace, Some(PathBuf::from("t.txt")));
        assert!(
            run("--backing d --mount m --driver aio")
                .unwrap_err()
                .contains("aio")
        );
        let args = run("--backing d --mount m --elevator none").unwrap();
        assert_eq!((args.elevator, args.size), (Elevator::None, None));
        assert!(run("--mount m").unwrap_err().contains("--backing"));
        assert!(run("--backing d").unwrap_err().contains("--mount"));
        assert!(
            run("--backing d --mount m --elevator cfq")
                .unwrap_err()
                .contains("cfq")
        );
        assert!(
            run("--backing d --mount m --depth 0")
                .unwrap_err()
                .contains("--depth")
        );
        assert!(
            run("--backing d --mount m --bogus")
                .unwrap_err()
                .contains("--bogus")
        );
        assert!(run("--backing").unwrap_err().contains("needs a value"));
        assert_eq!(run("--help").unwrap_err(), "help");
    }
}
