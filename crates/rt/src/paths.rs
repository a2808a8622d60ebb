//! Where the binary finds the files it needs at run time but does not contain: the
//! QuickFIX data dictionaries, the QuickFIX reference peer, sample configurations.
//!
//! No build-tree path is compiled in (`CARGO_MANIFEST_DIR` is for tests and build
//! scripts), so an installed binary works from any directory. A [`DataItem`] is looked
//! for, in this order:
//!
//! 1. the command-line flag, when given (then only there);
//! 2. its environment variable (e.g. `TICKWIRE_FIX_SPEC`), when set (then only there);
//! 3. `<current dir>/<checkout path>`: `cargo run` or a built binary run from a checkout;
//! 4. the per-user data directory: `$XDG_DATA_HOME/tickwire/<data path>`, else
//!    `~/.local/share/tickwire/<data path>`;
//! 5. beside the installed binary: `<exe dir>/../share/tickwire/<data path>`, then
//!    `<exe dir>/../<data path>` (a binary in `target/release/` finds `target/fix-spec`,
//!    wherever the checkout or `CARGO_TARGET_DIR` is), then `<exe dir>/<data path>`.
//!
//! When nothing is found, [`NotFound`] names every place looked and how to get the item.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// Something the binary needs at run time, and the names it goes by.
#[derive(Debug, Clone, Copy)]
pub struct DataItem {
    /// What it is, for the error message ("the QuickFIX dictionaries").
    pub what: &'static str,
    /// The environment variable naming it (`TICKWIRE_FIX_SPEC`).
    pub env: &'static str,
    /// Its path in a checkout, relative to the checkout's root (`target/fix-spec`).
    pub checkout: &'static str,
    /// Its path under a data directory (`fix-spec`).
    pub data: &'static str,
    /// How to get it when it is nowhere ("run scripts/fetch-fix-spec.sh").
    pub hint: &'static str,
}

/// The standard QuickFIX XML data dictionaries (a directory with `FIX44.xml`, ...).
pub const FIX_SPEC: DataItem = DataItem {
    what: "the QuickFIX data dictionaries (FIX44.xml, ...)",
    env: "TICKWIRE_FIX_SPEC",
    checkout: "target/fix-spec",
    data: "fix-spec",
    hint: "fetch them with scripts/fetch-fix-spec.sh from a tickwire checkout (into \
           target/fix-spec there; with --user into the per-user data directory listed \
           above: $XDG_DATA_HOME/tickwire/fix-spec, else ~/.local/share/tickwire/fix-spec), \
           or point TICKWIRE_FIX_SPEC at a directory holding them",
};

/// The QuickFIX/C++ reference peer (`qf_peer`), built by `scripts/install-quickfix.sh`.
pub const QUICKFIX_PEER: DataItem = DataItem {
    what: "the QuickFIX reference peer (qf_peer)",
    env: "TICKWIRE_QUICKFIX",
    checkout: "target/quickfix/bin/qf_peer",
    data: "quickfix/bin/qf_peer",
    hint: "build it with scripts/install-quickfix.sh from a tickwire checkout, or point \
           TICKWIRE_QUICKFIX at the binary",
};

/// The QuickFIX reference algo's settings (`tools/quickfix/algo-acceptor.cfg`).
pub const QUICKFIX_ALGO_CONFIG: DataItem = DataItem {
    what: "the QuickFIX algo settings (algo-acceptor.cfg)",
    env: "TICKWIRE_QUICKFIX_ALGO_CONFIG",
    checkout: "tools/quickfix/algo-acceptor.cfg",
    data: "tools/quickfix/algo-acceptor.cfg",
    hint: "copy tools/quickfix/algo-acceptor.cfg from a tickwire checkout to \
           ~/.local/share/tickwire/tools/quickfix/, or point TICKWIRE_QUICKFIX_ALGO_CONFIG \
           at it",
};

/// How a place was chosen (for the error message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// "--spec-dir", "$TICKWIRE_FIX_SPEC", "current directory", "data directory", ...
    pub source: String,
    pub path: PathBuf,
}

/// Nothing found: names every place looked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFound {
    pub what: &'static str,
    pub looked: Vec<Place>,
    pub hint: &'static str,
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} not found; looked in:", self.what)?;
        for p in &self.looked {
            write!(f, "\n  {} ({})", p.path.display(), p.source)?;
        }
        write!(f, "\n{}", self.hint)
    }
}

impl std::error::Error for NotFound {}

/// What the search depends on besides the file system: read once from the process.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: Vec<(String, OsString)>,
    cwd: Option<PathBuf>,
    exe: Option<PathBuf>,
}

impl Environment {
    /// This process's environment variables, current directory and executable.
    pub fn current() -> Environment {
        Environment {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
                .collect(),
            cwd: std::env::current_dir().ok(),
            exe: std::env::current_exe().ok(),
        }
    }

    /// A made-up environment (tests).
    pub fn new(vars: &[(&str, &str)], cwd: Option<&Path>, exe: Option<&Path>) -> Environment {
        Environment {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), OsString::from(v)))
                .collect(),
            cwd: cwd.map(Path::to_path_buf),
            exe: exe.map(Path::to_path_buf),
        }
    }

    fn var(&self, name: &str) -> Option<&OsString> {
        self.vars
            .iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v)
    }

    /// `$XDG_DATA_HOME/tickwire`, else `$HOME/.local/share/tickwire`.
    pub fn data_home(&self) -> Option<PathBuf> {
        if let Some(x) = self.var("XDG_DATA_HOME") {
            return Some(PathBuf::from(x).join("tickwire"));
        }
        self.var("HOME")
            .map(|h| PathBuf::from(h).join(".local/share/tickwire"))
    }
}

/// Every place `item` may be, in the order they are tried (see the module docs).
/// `flag` is the command-line value and its flag's name, when given.
pub fn places(item: &DataItem, flag: Option<(&str, &Path)>, env: &Environment) -> Vec<Place> {
    let place = |source: &str, path: PathBuf| Place {
        source: source.to_string(),
        path,
    };
    if let Some((name, path)) = flag {
        return vec![place(name, path.to_path_buf())];
    }
    if let Some(v) = env.var(item.env) {
        return vec![place(&format!("${}", item.env), PathBuf::from(v))];
    }
    let mut out = Vec::new();
    if let Some(cwd) = &env.cwd {
        out.push(place("current directory", cwd.join(item.checkout)));
    }
    if let Some(d) = env.data_home() {
        out.push(place("per-user data directory", d.join(item.data)));
    }
    if let Some(dir) = env.exe.as_deref().and_then(Path::parent) {
        if let Some(up) = dir.parent() {
            let share = up.join("share/tickwire").join(item.data);
            out.push(place("beside the binary", share));
            out.push(place("beside the binary", up.join(item.data)));
        }
        out.push(place("beside the binary", dir.join(item.data)));
    }
    out
}

/// The first of [`places`] that exists.
pub fn find_in(
    item: &DataItem,
    flag: Option<(&str, &Path)>,
    env: &Environment,
) -> Result<PathBuf, NotFound> {
    let looked = places(item, flag, env);
    match looked.iter().find(|p| p.path.exists()) {
        Some(p) => Ok(p.path.clone()),
        None => Err(NotFound {
            what: item.what,
            looked,
            hint: item.hint,
        }),
    }
}

/// [`find_in`] this process's environment.
pub fn find(item: &DataItem, flag: Option<(&str, &Path)>) -> Result<PathBuf, NotFound> {
    find_in(item, flag, &Environment::current())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &[Place]) -> Vec<String> {
        v.iter().map(|p| p.path.display().to_string()).collect()
    }

    #[test]
    fn every_place_in_order_without_flag_or_variable() {
        let env = Environment::new(
            &[("HOME", "/home/u")],
            Some(Path::new("/work/co")),
            Some(Path::new("/opt/tw/bin/tickwire")),
        );
        assert_eq!(
            paths(&places(&FIX_SPEC, None, &env)),
            [
                "/work/co/target/fix-spec",
                "/home/u/.local/share/tickwire/fix-spec",
                "/opt/tw/share/tickwire/fix-spec",
                "/opt/tw/fix-spec",
                "/opt/tw/bin/fix-spec",
            ]
        );
    }

    #[test]
    fn xdg_data_home_wins_over_home() {
        let env = Environment::new(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "/d")], None, None);
        assert_eq!(
            paths(&places(&QUICKFIX_PEER, None, &env)),
            ["/d/tickwire/quickfix/bin/qf_peer"]
        );
    }

    #[test]
    fn flag_then_variable_are_the_only_place() {
        let env = Environment::new(
            &[("TICKWIRE_FIX_SPEC", "/from/env"), ("HOME", "/home/u")],
            Some(Path::new("/cwd")),
            None,
        );
        let flag = Some(("--spec-dir", Path::new("/from/flag")));
        assert_eq!(paths(&places(&FIX_SPEC, flag, &env)), ["/from/flag"]);
        assert_eq!(paths(&places(&FIX_SPEC, None, &env)), ["/from/env"]);
        // An empty variable counts as unset.
        let env = Environment::new(&[("TICKWIRE_FIX_SPEC", "")], Some(Path::new("/c")), None);
        assert_eq!(
            paths(&places(&FIX_SPEC, None, &env)),
            ["/c/target/fix-spec"]
        );
    }

    #[test]
    fn not_found_names_every_place_and_the_hint() {
        let env = Environment::new(
            &[("HOME", "/nonexistent-home")],
            Some(Path::new("/nonexistent-cwd")),
            Some(Path::new("/nonexistent-exe/bin/tickwire")),
        );
        let e = find_in(&FIX_SPEC, None, &env).unwrap_err();
        assert_eq!(e.looked.len(), 5);
        let text = e.to_string();
        for p in &e.looked {
            assert!(text.contains(&p.path.display().to_string()), "{text}");
        }
        assert!(text.contains("scripts/fetch-fix-spec.sh"), "{text}");
        assert!(text.contains("TICKWIRE_FIX_SPEC"), "{text}");
    }

    #[test]
    fn finds_the_first_existing_place() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let spec = dir.join("data/tickwire/fix-spec");
        std::fs::create_dir_all(&spec).unwrap();
        let env = Environment::new(
            &[("XDG_DATA_HOME", dir.join("data").to_str().unwrap())],
            Some(dir),
            None,
        );
        assert_eq!(find_in(&FIX_SPEC, None, &env).unwrap(), spec);
    }
}
