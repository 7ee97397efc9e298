//! Running programs inside a testbed's namespaces: build the command, capture its output, wait
//! for it to be ready, collect the JSON it prints.
//!
//! Everything goes through `ip netns exec NETNS PROGRAM…`: this crate forbids `unsafe`, which
//! rules out calling `setns` ourselves, and `ip netns exec` also mounts the namespace's own
//! `/sys`, so `/sys/class/net` inside shows the namespace's interfaces. It execs the program in
//! place, so a [`Process`]'s pid is the program's own and killing it kills the program.
//!
//! Every wait has a timeout, and a [`Process`] is killed and reaped when dropped, so a failing
//! test never leaves a server running (the testbed's teardown also kills whatever is left in
//! its namespaces).
//!
//! Deviations: none.

use crate::Error;
use serde::de::DeserializeOwned;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A command that runs `program` inside `netns` (`ip netns exec NETNS PROGRAM`); add arguments
/// with [`Command::arg`]/[`Command::args`].
pub fn netns_command(netns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns]).arg(program);
    cmd
}

/// A command line as one would type it, for logs and error messages.
pub fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// A network namespace this process added, deleted (with every interface in it) on drop, also
/// when a test panics.
#[derive(Debug)]
pub struct Namespace(String);

impl Namespace {
    /// Adds namespace `name` (`ip netns add`).
    ///
    /// # Errors
    /// As [`run`]: `ip` failed (the name is taken, not root).
    pub fn add(name: &str) -> Result<Namespace, Error> {
        run(
            Command::new("ip").args(["netns", "add", name]),
            Duration::from_secs(30),
        )?;
        Ok(Namespace(name.to_string()))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The environment variable that marks a test binary re-run by [`in_fresh_netns`].
const INSIDE_NETNS: &str = "ROCEV2_TESTBED_INSIDE_NETNS";

/// For a test that builds its own interfaces (veths, XDP programs) in a namespace nobody else
/// sees: the first call (as root) creates a fresh namespace named `ns`, re-runs this test binary
/// with `--exact test` inside it (`ip netns exec`, at most `limit`), checks that the re-run
/// passed exactly one test, deletes the namespace, and returns `Ok(false)`. Inside the re-run it
/// returns `Ok(true)`: run the test's body then. Without root it prints the loud skip line and
/// returns `Ok(false)`. A failed re-run is an error carrying its output.
///
/// Deleting the namespace removes every interface the body created, even when it panicked.
pub fn in_fresh_netns(test: &str, ns: &str, limit: Duration) -> Result<bool, Error> {
    if std::env::var_os(INSIDE_NETNS).is_some() {
        return Ok(true);
    }
    if !crate::need_root(test) {
        return Ok(false);
    }
    let _ns = Namespace::add(ns)?;
    let exe = std::env::current_exe().map_err(|source| Error::Spawn {
        cmd: format!("{test} (the test binary)"),
        source,
    })?;
    let mut cmd = netns_command(ns, exe);
    cmd.args(["--exact", test, "--nocapture"])
        .env(INSIDE_NETNS, "1");
    let out = run(&mut cmd, limit)?;
    if !out.stdout.contains("1 passed") {
        return Err(Error::Failed {
            cmd: out.cmd,
            status: "the test did not run inside the namespace".into(),
            stderr: format!("{}\n{}", out.stdout, out.stderr),
        });
    }
    Ok(false)
}

/// The output of a command that has finished.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The command line.
    pub cmd: String,
    /// How it exited.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

impl Captured {
    /// Parse stdout as one JSON document.
    ///
    /// # Errors
    /// [`Error::Json`] when stdout is not valid JSON of type `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(&self.stdout).map_err(|source| Error::Json {
            cmd: self.cmd.clone(),
            source,
            stdout: self.stdout.clone(),
        })
    }
}

/// Run `cmd` to completion with stdin closed, capturing its output.
///
/// # Errors
/// [`Error::Spawn`] if it cannot start, [`Error::Timeout`] (after killing it) if it runs longer
/// than `timeout`, [`Error::Failed`] if it exits unsuccessfully.
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<Captured, Error> {
    Process::spawn(cmd)?.finish(timeout)
}

/// Run `cmd` with `input` on its stdin (an `ip -batch -` script, say), capturing its output.
///
/// # Errors
/// As [`run`].
pub fn run_with_input(
    cmd: &mut Command,
    input: &str,
    timeout: Duration,
) -> Result<Captured, Error> {
    Process::spawn_with_input(cmd, Some(input))?.finish(timeout)
}

/// A binary of this workspace built beside the running test or program
/// (`target/<profile>/<name>`, where `cargo build` and `cargo test --workspace` put it): for a
/// test of one package that runs another package's binary, which `CARGO_BIN_EXE_*` cannot name.
///
/// # Errors
/// [`Error::Spawn`] (not found) naming the `cargo build` that makes it.
pub fn built_binary(name: &str) -> Result<PathBuf, Error> {
    let exe = std::env::current_exe().map_err(|source| Error::Spawn {
        cmd: name.to_owned(),
        source,
    })?;
    // A test runs from `target/<profile>/deps/`, a program from `target/<profile>/`.
    let dirs = exe.ancestors().skip(1).take(2);
    dirs.map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Spawn {
            cmd: name.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "not built beside {}: build it with `cargo build --bin {name}`",
                    exe.display()
                ),
            ),
        })
}

/// Run `cmd` (for instance a [`netns_command`] running `rocev2d stats --json`) and parse
/// what it prints on stdout as one JSON document of type `T`.
///
/// # Errors
/// As [`run`], and [`Error::Json`] when stdout is not valid JSON of type `T`.
pub fn collect_json<T: DeserializeOwned>(cmd: &mut Command, timeout: Duration) -> Result<T, Error> {
    run(cmd, timeout)?.json()
}

/// Transport protocol of a port awaited by [`wait_for_port`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// A TCP socket in LISTEN.
    Tcp,
    /// A bound UDP socket.
    Udp,
}

/// Run a client against a server, as tools with an out-of-band TCP exchange are tested: spawn
/// `server`, wait until it listens on TCP `port` in `server_netns`, run `client` to its end,
/// then wait for the server. Returns (server, client).
///
/// # Errors
/// What [`Process::spawn`], [`wait_for_port`] and [`Process::wait`] return; [`Error::Failed`]
/// when either side exits unsuccessfully, carrying both sides' output (one side failing
/// usually makes the other fail too, and the first cause may be in either).
pub fn run_server_client(
    server: &mut Command,
    server_netns: &str,
    port: u16,
    client: &mut Command,
    timeout: Duration,
) -> Result<(Captured, Captured), Error> {
    let server = Process::spawn(server)?;
    wait_for_port(server_netns, Proto::Tcp, port, timeout)?;
    let client = Process::spawn(client)?.wait(timeout)?;
    let server = server.wait(timeout)?;
    if server.status.success() && client.status.success() {
        return Ok((server, client));
    }
    let show = |c: &Captured| format!("{} ({}):\n{}\n{}", c.cmd, c.status, c.stdout, c.stderr);
    Err(Error::Failed {
        cmd: format!("{} / {}", server.cmd, client.cmd),
        status: format!("server {}, client {}", server.status, client.status),
        stderr: format!("server {}\nclient {}", show(&server), show(&client)),
    })
}

/// Wait until a socket in `netns` listens on (TCP) or is bound to (UDP) local `port`.
///
/// This asks the kernel (`ss -N NETNS`) rather than sending probes, so it neither needs a
/// client nor disturbs the server.
///
/// # Errors
/// [`Error::Timeout`] if nothing is bound within `timeout`; [`Error::Failed`] if `ss` fails
/// (no such namespace, say).
pub fn wait_for_port(netns: &str, proto: Proto, port: u16, timeout: Duration) -> Result<(), Error> {
    let flag = match proto {
        Proto::Tcp => "-t",
        Proto::Udp => "-u",
    };
    let start = Instant::now();
    let mut cmd = Command::new("ss");
    cmd.args([
        "-N",
        netns,
        "-H",
        "-l",
        "-n",
        flag,
        "sport",
        "=",
        &format!(":{port}"),
    ]);
    loop {
        if !run(&mut cmd, timeout)?.stdout.trim().is_empty() {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(Error::Timeout {
                cmd: display(&cmd),
                what: format!("a socket on port {port}"),
                after: timeout,
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A running program whose stdout and stderr are read line by line as it prints them, so a
/// caller can wait for a readiness line while the rest is kept for later. Killed and reaped on
/// drop.
#[derive(Debug)]
pub struct Process {
    cmd: String,
    child: Child,
    lines: Receiver<String>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// Whether the child has been reaped.
    reaped: Option<ExitStatus>,
}

impl Process {
    /// Start `cmd` with stdin closed and stdout/stderr captured.
    ///
    /// # Errors
    /// [`Error::MissingTool`] if the program (or, for `ip netns exec`, the program it runs) is
    /// not installed; [`Error::Spawn`] if it cannot start.
    pub fn spawn(cmd: &mut Command) -> Result<Process, Error> {
        Self::spawn_with_input(cmd, None)
    }

    /// The child's process id (for `ip netns exec` and `env`, which exec what they run: the
    /// program's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn spawn_with_input(cmd: &mut Command, input: Option<&str>) -> Result<Process, Error> {
        crate::tools::require_for(cmd)?;
        let line = display(cmd);
        tracing::debug!(cmd = %line, "spawn");
        cmd.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            cmd: line.clone(),
            source,
        })?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            tracing::debug!(cmd = %line, "stdin:\n{input}");
            let input = input.to_owned();
            // A writer thread: a large script must not deadlock against a full stdout pipe.
            thread::spawn(move || {
                use std::io::Write;
                let _ = stdin.write_all(input.as_bytes());
            });
        }
        let (tx, lines) = mpsc::channel();
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(out) = child.stdout.take() {
            reader(out, tx.clone(), Arc::clone(&stdout));
        }
        if let Some(err) = child.stderr.take() {
            reader(err, tx, Arc::clone(&stderr));
        }
        Ok(Process {
            cmd: line,
            child,
            lines,
            stdout,
            stderr,
            reaped: None,
        })
    }

    /// The process id (the program's own: `ip netns exec` execs it in place).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The command line.
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    /// Wait until the program prints a line (on stdout or stderr) for which `ready` is true,
    /// and return that line. Lines seen while waiting stay in the captured output. The two
    /// streams are separate pipes, so lines of one may arrive before earlier lines of the other.
    ///
    /// # Errors
    /// [`Error::Timeout`] if no such line comes within `timeout`; [`Error::Exited`] if the
    /// program closes its output (exits) first.
    pub fn wait_for_line(
        &mut self,
        mut ready: impl FnMut(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if ready(&line) => return Ok(line),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Error::Timeout {
                        cmd: self.cmd.clone(),
                        what: "the readiness line".to_owned(),
                        after: timeout,
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_exit(Duration::from_secs(1));
                    return Err(Error::Exited {
                        cmd: self.cmd.clone(),
                        status: status
                            .map_or_else(|| "still running".to_owned(), |s| s.to_string()),
                        stderr: self.stderr(),
                    });
                }
            }
        }
    }

    /// What the program printed on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// What the program printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Whether the program is still running.
    pub fn is_running(&mut self) -> bool {
        self.reaped.is_none() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait for the program to exit on its own and return its output, whatever its exit
    /// status (a probe that reports a failure in JSON and exits 1, say).
    ///
    /// # Errors
    /// [`Error::Timeout`] (after killing it) if it runs longer than `timeout`.
    pub fn wait(mut self, timeout: Duration) -> Result<Captured, Error> {
        let Some(status) = self.wait_exit(timeout) else {
            self.kill();
            return Err(Error::Timeout {
                cmd: self.cmd.clone(),
                what: "exit".to_owned(),
                after: timeout,
            });
        };
        self.drain_output();
        Ok(Captured {
            cmd: self.cmd.clone(),
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        })
    }

    /// Wait for the program to exit on its own and return its output.
    ///
    /// # Errors
    /// [`Error::Timeout`] (after killing it) if it runs longer than `timeout`;
    /// [`Error::Failed`] if it exits unsuccessfully.
    pub fn finish(self, timeout: Duration) -> Result<Captured, Error> {
        let captured = self.wait(timeout)?;
        if captured.status.success() {
            Ok(captured)
        } else {
            Err(Error::Failed {
                status: captured.status.to_string(),
                stderr: captured.stderr.trim_end().to_owned(),
                cmd: captured.cmd,
            })
        }
    }

    /// Kill the program (SIGKILL) and reap it; returns what it printed. Killing one that has
    /// already exited is fine.
    pub fn kill(&mut self) -> Captured {
        if self.reaped.is_none() {
            let _ = self.child.kill();
            self.reaped = self.child.wait().ok();
        }
        self.drain_output();
        Captured {
            cmd: self.cmd.clone(),
            status: self.reaped.unwrap_or_default(),
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }

    /// Poll for exit until `timeout`; `None` if still running.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_millis(1);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.reaped = Some(status);
                return self.reaped;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    /// After exit, let the reader threads take in the last bytes. Bounded: a grandchild that
    /// inherited the pipes could hold them open forever.
    fn drain_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A thread that appends every line of `pipe` to `buf` and forwards it on `tx`; it ends at
/// EOF, dropping its sender, which is how [`Process`] learns the output has closed.
fn reader<R: Read + Send + 'static>(pipe: R, tx: mpsc::Sender<String>, buf: Arc<Mutex<String>>) {
    thread::spawn(move || {
        let mut pipe = BufReader::new(pipe);
        let mut line = String::new();
        loop {
            line.clear();
            match pipe.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if let Ok(mut b) = buf.lock() {
                        b.push_str(&line);
                    }
                    let _ = tx.send(line.trim_end_matches('\n').to_owned());
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_captures_and_fails_on_status() {
        let out = run(
            Command::new("sh").args(["-c", "echo hi; echo oops >&2"]),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("hi\n", "oops\n")
        );
        let e = run(
            Command::new("sh").args(["-c", "echo bad >&2; exit 3"]),
            Duration::from_secs(5),
        );
        assert!(matches!(e, Err(Error::Failed { stderr, .. }) if stderr == "bad"));
    }

    #[test]
    fn run_times_out_and_kills() {
        let t = Instant::now();
        let e = run(Command::new("sleep").arg("10"), Duration::from_millis(100));
        assert!(matches!(e, Err(Error::Timeout { .. })));
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn wait_for_line_sees_stderr_and_keeps_stdout() {
        let mut p = Process::spawn(Command::new("sh").args(["-c", "echo one; echo two; sleep 10"]))
            .unwrap();
        p.wait_for_line(|l| l == "two", Duration::from_secs(5))
            .unwrap();
        // Lines skipped while waiting are still in the captured output.
        assert_eq!(p.stdout(), "one\ntwo\n");
        assert!(p.is_running());
        let out = p.kill();
        assert!(!out.status.success());
        let mut p =
            Process::spawn(Command::new("sh").args(["-c", "echo ready >&2; sleep 10"])).unwrap();
        let line = p
            .wait_for_line(|l| l == "ready", Duration::from_secs(5))
            .unwrap();
        assert_eq!(line, "ready");
    }

    #[test]
    fn wait_for_line_reports_early_exit() {
        let mut p =
            Process::spawn(Command::new("sh").args(["-c", "echo nope >&2; exit 2"])).unwrap();
        let e = p.wait_for_line(|l| l == "ready", Duration::from_secs(5));
        assert!(matches!(e, Err(Error::Exited { stderr, .. }) if stderr == "nope\n"));
    }

    #[test]
    fn collect_json_parses_stdout() {
        #[derive(serde::Deserialize)]
        struct Stats {
            tx_packets: u64,
        }
        let s: Stats = collect_json(
            Command::new("echo").arg(r#"{"tx_packets": 42, "other": true}"#),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(s.tx_packets, 42);
        let e = collect_json::<Stats>(Command::new("echo").arg("nope"), Duration::from_secs(5));
        assert!(matches!(e, Err(Error::Json { .. })));
    }

    #[test]
    fn run_with_input_feeds_stdin() {
        let out =
            run_with_input(&mut Command::new("cat"), "a\nb\n", Duration::from_secs(5)).unwrap();
        assert_eq!(out.stdout, "a\nb\n");
    }

    #[test]
    fn netns_command_line() {
        let mut c = netns_command("rv2-1-0-h0", "ip");
        c.args(["-br", "addr"]);
        assert_eq!(display(&c), "ip netns exec rv2-1-0-h0 ip -br addr");
    }
}
