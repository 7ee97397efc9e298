//! The external programs that tests and tools run, and the package that installs each.
//!
//! One list, `deploy/tools.list`, serves three readers: `deploy/prereqs.sh` installs what it
//! names, `prereqs.sh check` fails before the tests when something is missing, and this module
//! turns "the program is not there" into an error carrying its install line. Without that, `ip
//! netns exec NS iperf3` starts fine (the missing program is `ip`'s child), `ip` exits 255, and
//! a test waiting for the server's port times out 40 s later with nothing said about why.
//!
//! Deviations: none.

use crate::Error;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `deploy/tools.list`, compiled in so an installed binary needs no checkout.
const LIST: &str = include_str!("../../deploy/tools.list");

/// Every `(program, package)` of `deploy/tools.list`, in its order.
pub fn listed() -> impl Iterator<Item = (&'static str, &'static str)> {
    LIST.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            Some((words.next()?, words.next()?))
        })
}

/// The Debian package that installs `program`, if the list names it.
pub fn package(program: &str) -> Option<&'static str> {
    listed().find(|(p, _)| *p == program).map(|(_, pkg)| pkg)
}

/// Where `program` runs from: itself when it names a path, else the first executable file of
/// that name on `PATH` (as `execvp` searches).
pub fn find(program: &OsStr) -> Option<PathBuf> {
    find_in(program, &std::env::var_os("PATH")?)
}

fn find_in(program: &OsStr, path: &OsStr) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let as_path = Path::new(program);
    if as_path.components().count() > 1 {
        return executable(as_path).then(|| as_path.to_owned());
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// Ok when `program` can run; otherwise [`Error::MissingTool`] with the line that installs it.
///
/// # Errors
/// [`Error::MissingTool`].
pub fn require(program: &OsStr) -> Result<(), Error> {
    require_in(program, &std::env::var_os("PATH").unwrap_or_default())
}

fn require_in(program: &OsStr, path: &OsStr) -> Result<(), Error> {
    if find_in(program, path).is_some() {
        return Ok(());
    }
    let name = program.to_string_lossy().into_owned();
    let install = match package(&name) {
        Some(pkg) => match pkg.strip_prefix("cargo:") {
            // A crate, installed by its own step of prereqs.sh.
            Some(krate) => format!("cargo install {krate} --locked (or: bash deploy/prereqs.sh)"),
            None => format!("apt-get install -y {pkg} (or: bash deploy/prereqs.sh)"),
        },
        None => format!(
            "nothing in deploy/tools.list installs `{name}`: build it, or add it to the list"
        ),
    };
    Err(Error::MissingTool {
        program: name,
        install,
    })
}

/// [`require`] for what `cmd` will run: its program and, for `ip netns exec NS PROGRAM …`, that
/// program too.
pub(crate) fn require_for(cmd: &Command) -> Result<(), Error> {
    require(cmd.get_program())?;
    let args: Vec<&OsStr> = cmd.get_args().take(4).collect();
    match args.as_slice() {
        [netns, exec, _, program] if *netns == "netns" && *exec == "exec" => require(program),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_names_packages_for_what_tests_run() {
        assert_eq!(package("iperf3"), Some("iperf3"));
        assert_eq!(package("tcpdump"), Some("tcpdump"));
        assert_eq!(package("tc"), Some("iproute2"));
        assert_eq!(package("no-such-tool"), None);
        assert!(listed().all(|(p, pkg)| !p.is_empty() && !pkg.is_empty()));
    }

    #[test]
    fn missing_program_inside_netns_names_its_install_line() {
        let mut cmd = crate::exec::netns_command("rv2-none", "iperf3-not-installed-here");
        cmd.arg("-s");
        let err = require_for(&cmd).unwrap_err().to_string();
        assert!(err.contains("iperf3-not-installed-here"), "{err}");
        assert!(err.contains("deploy/tools.list"), "{err}");
        // A listed program that is missing names its package.
        let Err(Error::MissingTool { install, .. }) =
            require_in(OsStr::new("iperf3"), OsStr::new("/nonexistent"))
        else {
            panic!("iperf3 found on a PATH of one missing directory")
        };
        assert_eq!(
            install,
            "apt-get install -y iperf3 (or: bash deploy/prereqs.sh)"
        );
        // A program a crate installs names cargo's line.
        let Err(Error::MissingTool { install, .. }) =
            require_in(OsStr::new("inferno-flamegraph"), OsStr::new("/nonexistent"))
        else {
            panic!("inferno-flamegraph found on a PATH of one missing directory")
        };
        assert_eq!(
            install,
            "cargo install inferno --locked (or: bash deploy/prereqs.sh)"
        );
    }

    #[test]
    fn present_programs_and_paths_pass() {
        require_for(&Command::new("sh")).unwrap();
        require(OsStr::new("/bin/sh")).unwrap();
        assert!(require(OsStr::new("/bin/no-such-file")).is_err());
    }
}
