//! `blkmq-disk` as a child process for the real-stack tests: started on a backing file in a
//! temporary directory, its stderr collected, stopped with SIGTERM (or killed with SIGKILL),
//! and on every path (a failed assertion included) killed and its mount detached on drop.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{is_mounted, temp_dir, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_blkmq-disk");

/// A running `blkmq-disk`: its backing file and mount point in a temporary directory.
pub(crate) struct Daemon {
    child: Option<Child>,
    dir: PathBuf,
    pub(crate) backing: PathBuf,
    pub(crate) mount: PathBuf,
    stderr: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

/// Whether `name` is a file in one of `PATH`'s directories, where [`run`] finds it.
pub(crate) fn have_tool(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(name).is_file())
}

/// The first tool of `tools` that is missing, as a reason to skip.
pub(crate) fn missing_tool(tools: &[(&str, &str)]) -> Option<String> {
    tools
        .iter()
        .find(|(tool, _)| !have_tool(tool))
        .map(|(tool, package)| format!("no {tool} (install {package})"))
}

/// Runs `program` with `args`, waiting for it; its exit status and what it printed (stdout
/// then stderr).
pub(crate) fn run(program: &str, args: &[&str]) -> (ExitStatus, String) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status, text)
}

/// Runs `program` with `args` and fails the test unless it exits 0; what it printed.
pub(crate) fn run_ok(program: &str, args: &[&str]) -> String {
    let (status, text) = run(program, args);
    assert!(status.success(), "{program} {args:?}: {status}: {text}");
    text
}

/// Detaches the FUSE mount at `mount` if it is still there (a killed daemon leaves it).
pub(crate) fn detach(mount: &Path) {
    if is_mounted(mount) {
        let target = mount.to_str().unwrap();
        let (status, _) = run("fusermount3", &["-u", "-z", target]);
        if !status.success() {
            let _ = run("umount", &["-l", target]);
        }
    }
}

impl Daemon {
    /// Starts `blkmq-disk --quiet` on a new backing file of `size` (as the command line
    /// takes it: `64M`) in a fresh temporary directory named after `name`, with `extra`
    /// arguments, and waits (at most 20 s) for its mount; fails the test with the daemon's
    /// stderr if it does not come up.
    pub(crate) fn start(name: &str, size: &str, extra: &[&str]) -> Self {
        let dir = temp_dir(name);
        let (backing, mount) = (dir.join("disk.img"), dir.join("mnt"));
        std::fs::create_dir(&mount).unwrap();
        let mut child = Command::new(BIN)
            .arg("--backing")
            .arg(&backing)
            .args(["--size", size, "--mount"])
            .arg(&mount)
            .arg("--quiet")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read stderr as it comes, so that the daemon never blocks on a full pipe.
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut daemon = Self {
            child: Some(child),
            dir,
            backing,
            mount,
            stderr,
            reader: Some(reader),
        };
        let up = wait_for(Duration::from_secs(20), || {
            is_mounted(&daemon.mount) || daemon.exited()
        });
        assert!(
            up && is_mounted(&daemon.mount),
            "blkmq-disk {extra:?}: no mount within 20 s: {}",
            daemon.log()
        );
        daemon
    }

    /// The served file.
    pub(crate) fn disk(&self) -> PathBuf {
        self.mount.join("disk")
    }

    /// The daemon's process id.
    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// What the daemon printed on stderr so far.
    pub(crate) fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|child| child.try_wait().unwrap().is_some())
    }

    fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: a signal to the child we started, which has not been reaped yet
            // (it is reaped only where `child` is taken), so the id is still its own.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Waits, at most `limit`, for the daemon to exit; its status, and everything it
    /// printed on stderr. Fails the test if it does not exit in time (the drop kills it).
    fn wait(&mut self, limit: Duration) -> (ExitStatus, String) {
        let mut status = None;
        let child = self.child.as_mut().expect("running");
        let exited = wait_for(limit, || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        assert!(
            exited,
            "blkmq-disk did not exit within {limit:?}: {}",
            self.log()
        );
        self.child = None;
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status.unwrap(), self.log())
    }

    /// Stops the daemon with SIGTERM and checks the clean exit: status 0, its summary
    /// with no errors, the mount gone. The summary line.
    pub(crate) fn stop(mut self) -> String {
        self.signal(libc::SIGTERM);
        let (status, log) = self.wait(Duration::from_secs(30));
        assert!(status.success(), "blkmq-disk: {status}: {log}");
        let summary = log
            .lines()
            .find(|line| line.contains("stopped (signal)"))
            .unwrap_or_else(|| panic!("no summary: {log}"))
            .to_string();
        assert!(summary.contains(" 0 errors"), "{log}");
        assert!(!is_mounted(&self.mount), "unmounted: {log}");
        summary
    }

    /// Kills the daemon with SIGKILL, reaps it and detaches the mount it leaves behind.
    pub(crate) fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let (status, _) = self.wait(Duration::from_secs(30));
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        detach(&self.mount);
    }

    /// Reads the backing file (once the daemon is gone).
    pub(crate) fn backing_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.backing).unwrap()
    }
}

impl Drop for Daemon {
    /// Kills a daemon still running, detaches its mount and removes the temporary
    /// directory (leaving it where the mount could not be detached).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        detach(&self.mount);
        if !is_mounted(&self.mount) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
