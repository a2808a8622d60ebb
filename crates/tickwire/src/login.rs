//! The connection flags every command that connects to a router shares: the login
//! (`--user`, `--password-file`, `--token`) and TLS (`--tls`, `--ca`, `--cert`, `--key`,
//! `--server-name`); and `tickwire passwd`, which makes the hashes the router's `[auth]`
//! table holds.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use tickwire_client::{ClientOptions, Login};

/// Environment variable holding the password for `--user`.
pub const PASSWORD_ENV: &str = "TICKWIRE_PASSWORD";
/// Environment variable holding a token (used when neither --user nor --token is given).
pub const TOKEN_ENV: &str = "TICKWIRE_TOKEN";

/// How a client command logs in to a router that requires it, and connects over TLS
/// (docs/security.md): one set of flags for every command that connects to a router.
#[derive(Args, Debug, Clone, Default)]
pub struct LoginArgs {
    /// Log in as USER, with the password in --password-file or the TICKWIRE_PASSWORD
    /// environment variable, or else typed at a prompt when standard input is a
    /// terminal (never on the command line, which other users of the host can read)
    /// [default: anonymous, or the token in TICKWIRE_TOKEN when set].
    #[arg(long, value_name = "USER", help_heading = "Login")]
    user: Option<String>,
    /// The password of --user: the first line of FILE ('-': standard input), at most 4 KiB.
    #[arg(long, value_name = "FILE", requires = "user", help_heading = "Login")]
    password_file: Option<PathBuf>,
    /// Log in with a token (`tickwire passwd --token` makes one; TICKWIRE_TOKEN is read
    /// when no login flag is given).
    #[arg(
        long,
        value_name = "TOKEN",
        conflicts_with = "user",
        help_heading = "Login"
    )]
    token: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

impl LoginArgs {
    /// The --user given, if any.
    pub(crate) fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether the password is to be read from standard input (`--password-file -`).
    pub(crate) fn password_from_stdin(&self) -> bool {
        self.password_file
            .as_deref()
            .is_some_and(|p| p.as_os_str() == "-")
    }
}

/// How a client command connects over TLS (docs/security.md, "TLS").
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Connect over TLS (as a tls://HOST:PORT address does).
    #[arg(long, help_heading = "TLS")]
    tls: bool,
    /// The CA certificate(s) that signed the router's certificate, PEM. Required for TLS.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    ca: Option<PathBuf>,
    /// This client's certificate (PEM chain), for a router that asks for one; with --key.
    /// A router may take the certificate's name as the login (docs/security.md).
    #[arg(long, value_name = "FILE", requires = "key", help_heading = "TLS")]
    cert: Option<PathBuf>,
    /// The private key of --cert, PEM.
    #[arg(long, value_name = "FILE", requires = "cert", help_heading = "TLS")]
    key: Option<PathBuf>,
    /// The name the router's certificate must carry [default: the host of --router].
    #[arg(long, value_name = "NAME", help_heading = "TLS")]
    server_name: Option<String>,
}

impl TlsArgs {
    /// TLS to `router` (a `tls://` address, or --tls, --cert or --server-name) needs
    /// --ca: there is no other way to trust the router's certificate. A usage error
    /// (exit status 2) naming what asked for TLS.
    fn check(&self, router: &str) -> Result<(), crate::units::UsageError> {
        // A shared-memory connection is local: nothing to encrypt, and the flags would
        // have been ignored (new-user pass: `--router shm:NAME --tls --ca FILE` ran
        // without TLS and said nothing).
        if router.starts_with("shm:") {
            let given = [
                (self.tls, "--tls"),
                (self.ca.is_some(), "--ca"),
                (self.cert.is_some(), "--cert"),
                (self.server_name.is_some(), "--server-name"),
            ];
            if let Some((_, flag)) = given.iter().find(|(on, _)| *on) {
                return Err(crate::units::UsageError(format!(
                    "{flag} is for TLS, which a shared-memory address (--router {router}) \
                     does not use: the rings are on this host, and who may attach is the \
                     handshake socket's file permissions (docs/shm.md)"
                )));
            }
            return Ok(());
        }
        if self.ca.is_some() {
            return Ok(());
        }
        let asked = if router.starts_with(tickwire_client::TLS_SCHEME) {
            format!("--router {router}")
        } else if self.tls {
            "--tls".to_owned()
        } else if self.cert.is_some() {
            "--cert".to_owned()
        } else if self.server_name.is_some() {
            "--server-name".to_owned()
        } else {
            return Ok(());
        };
        Err(crate::units::UsageError(format!(
            "{asked} connects over TLS, which needs --ca FILE: the CA certificate(s) (PEM) \
             that signed the router's certificate"
        )))
    }

    /// The TLS options these flags give, if TLS is asked for (--tls or a CA or a
    /// certificate given).
    pub fn options(&self) -> anyhow::Result<Option<tickwire_client::TlsOptions>> {
        if !self.tls && self.ca.is_none() && self.cert.is_none() && self.server_name.is_none() {
            return Ok(None);
        }
        let files = tickwire_client::tls::ClientFiles {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        };
        let config = tickwire_client::tls::client_config(&files)?;
        Ok(Some(tickwire_client::TlsOptions {
            config,
            server_name: self.server_name.clone(),
        }))
    }
}

impl LoginArgs {
    /// The credentials these flags and the environment give, if any.
    pub fn login(&self) -> anyhow::Result<Option<Login>> {
        if let Some(token) = &self.token {
            return Ok(Some(Login::Token(token.clone())));
        }
        let Some(user) = &self.user else {
            return Ok(std::env::var(TOKEN_ENV)
                .ok()
                .filter(|t| !t.is_empty())
                .map(Login::Token));
        };
        let password = match &self.password_file {
            Some(path) => first_line(path)?,
            None => match std::env::var(PASSWORD_ENV) {
                // An empty one is none, as an empty TICKWIRE_TOKEN is no token (review).
                Ok(password) if !password.is_empty() => password,
                Err(std::env::VarError::NotUnicode(_)) => {
                    anyhow::bail!("{PASSWORD_ENV} is not UTF-8")
                }
                // At a terminal the password is asked for (the login hint promised a
                // prompt that only `passwd` gave: new-user pass).
                _ if can_prompt() => {
                    prompt_password(&format!("password for {user} (not shown): "))?
                }
                _ => anyhow::bail!(
                    "--user {user} needs a password: --password-file FILE, the \
                     {PASSWORD_ENV} environment variable, or a terminal to type it at"
                ),
            },
        };
        Ok(Some(Login::Password {
            user: user.clone(),
            password,
        }))
    }

    /// `opts` with these credentials and TLS settings, for connecting to `router` (the
    /// --router address). TLS without --ca is a usage error, found before connecting.
    pub fn apply(&self, router: &str, mut opts: ClientOptions) -> anyhow::Result<ClientOptions> {
        self.tls.check(router)?;
        opts.login = self.login()?;
        opts.tls = self.tls.options()?;
        let logged_in = opts.login.is_some() || self.tls.cert.is_some();
        let _ = CONNECTION.set((self.repeat_flags(router), logged_in));
        Ok(opts)
    }

    /// The flags a command suggested in a hint needs to reach the same router as this
    /// one, logged in the same way: the --router when not the default, the login and
    /// TLS flags given (a token as the word TOKEN: a hint never prints a secret).
    pub(crate) fn repeat_flags(&self, router: &str) -> String {
        let mut out = String::new();
        let mut add = |flag: &str, value: Option<&str>| {
            out.push(' ');
            out.push_str(flag);
            if let Some(v) = value {
                out.push(' ');
                out.push_str(&shell_word(v));
            }
        };
        if router != crate::pubsub::DEFAULT_ROUTER {
            add("--router", Some(router));
        }
        if let Some(user) = &self.user {
            add("--user", Some(user));
        }
        if let Some(path) = &self.password_file {
            add("--password-file", Some(&absolute(path)));
        }
        if self.token.is_some() {
            add("--token", Some("TOKEN"));
        }
        let t = &self.tls;
        if t.tls {
            add("--tls", None);
        }
        for (flag, path) in [("--ca", &t.ca), ("--cert", &t.cert), ("--key", &t.key)] {
            if let Some(p) = path {
                add(flag, Some(&absolute(p)));
            }
        }
        if let Some(name) = &t.server_name {
            add("--server-name", Some(name));
        }
        out
    }
}

/// What [`LoginArgs::repeat_flags`] gave for this command's connection, and whether it
/// logged in, once it connected (see [`connection_flags`]).
static CONNECTION: std::sync::OnceLock<(String, bool)> = std::sync::OnceLock::new();

/// The flags (with a leading space; empty for the default router, anonymous) that a
/// `tickwire` command suggested in a hint needs to reach the router this command used
/// the way it did (new-user pass: copied from a hint, `tickwire queue show orders` went
/// to the default router, not the one the failing command named).
pub(crate) fn connection_flags() -> &'static str {
    CONNECTION.get().map_or("", |c| c.0.as_str())
}

/// Whether this command logged in (a user or a token) or offered a client certificate
/// (which the router may map to a user): its hints may suggest commands its rights do
/// not allow (queue administration), so they say whom to ask.
pub(crate) fn logged_in() -> bool {
    CONNECTION.get().is_some_and(|c| c.1)
}

/// `path` made absolute (a hint's command may be run from another directory; review:
/// a relative --password-file failed there), `-` (standard input) left alone.
fn absolute(path: &std::path::Path) -> String {
    if path.as_os_str() == "-" {
        return "-".to_owned();
    }
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// `s` as one shell word: unchanged when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Whether a client command may ask for its password: standard input and standard
/// error are a terminal (where the prompt shows and the typing comes from), and this
/// process is that terminal's foreground job (a background job that turned the echo
/// off would be stopped by SIGTTOU instead; review).
fn can_prompt() -> bool {
    let (stdin, stderr) = (std::io::stdin(), std::io::stderr());
    rustix::termios::isatty(&stdin)
        && rustix::termios::isatty(&stderr)
        && rustix::termios::tcgetpgrp(&stdin).is_ok_and(|p| p == rustix::process::getpgrp())
}

/// Asks for the password on a terminal: a prompt on standard error, the terminal's
/// echo off while it is typed (new-user pass: typed at a terminal, the password was
/// echoed and no prompt said what was awaited). The terminal is set before the prompt
/// (nothing typed after the prompt is echoed) and read a byte at a time with its
/// signals off, so that Ctrl-C ends the command here, with the terminal's settings
/// given back, instead of killing it with the echo off (review).
fn prompt_password(prompt: &str) -> anyhow::Result<String> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions, SpecialCodeIndex};
    let stdin = std::io::stdin();
    let saved = tcgetattr(&stdin).context("reading the terminal's settings")?;
    let mut quiet = saved.clone();
    quiet
        .local_modes
        .remove(LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG);
    quiet.special_codes[SpecialCodeIndex::VMIN] = 1;
    quiet.special_codes[SpecialCodeIndex::VTIME] = 0;
    tcsetattr(&stdin, OptionalActions::Now, &quiet).context("turning the terminal's echo off")?;
    eprint!("{prompt}");
    let read = read_typed_line(&mut stdin.lock());
    // Settings back whatever happened.
    let restored = tcsetattr(&stdin, OptionalActions::Now, &saved);
    eprintln!();
    let line = read?;
    restored.context("turning the terminal's echo back on")?;
    Ok(line)
}

/// A line typed at a terminal without its line discipline: up to Enter (CR or LF),
/// Backspace/Delete taking back a character; Ctrl-C, or Ctrl-D on an empty line, is an
/// error. At most 4 KiB.
fn read_typed_line(input: &mut impl Read) -> anyhow::Result<String> {
    let mut line: Vec<u8> = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        if input
            .read(&mut byte)
            .context("reading the password from the terminal")?
            == 0
        {
            break;
        }
        match byte[0] {
            b'\r' | b'\n' => break,
            0x03 => anyhow::bail!("interrupted (Ctrl-C): no password read"),
            0x04 if line.is_empty() => anyhow::bail!("no password given (Ctrl-D)"),
            0x7f | 0x08 => {
                // One character back: its continuation bytes, then its first.
                while line.last().is_some_and(|b| b & 0xc0 == 0x80) {
                    line.pop();
                }
                line.pop();
            }
            b => {
                anyhow::ensure!(line.len() < 4096, "a password of more than 4 KiB");
                line.push(b);
            }
        }
    }
    String::from_utf8(line).context("the password typed is not UTF-8")
}

/// The first line of `path` ('-': standard input), without its line ending. Only that
/// line is read, and at most 4 KiB of it (a password, as typed): a 300 MB line was read
/// whole, and `/dev/zero` until memory ran out (probe). A pipe (`<(...)`) is read as a
/// file is.
fn first_line(path: &std::path::Path) -> anyhow::Result<String> {
    let what = if path.as_os_str() == "-" {
        "reading the password from standard input".to_owned()
    } else {
        format!("reading the password file {}", path.display())
    };
    let source: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| what.clone())?)
    };
    let mut head = Vec::new();
    source
        .take(MAX_PASSWORD + 2)
        .read_to_end(&mut head)
        .with_context(|| what.clone())?;
    let line = match head.iter().position(|&b| b == b'\n') {
        Some(end) => &head[..end],
        None => &head[..],
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    anyhow::ensure!(
        line.len() as u64 <= MAX_PASSWORD,
        "{what}: its first line is more than 4 KiB: not a password"
    );
    String::from_utf8(line.to_vec()).with_context(|| format!("{what}: not UTF-8"))
}

/// The longest password read from a file or standard input (as typed: 4 KiB).
const MAX_PASSWORD: u64 = 4096;

const PASSWD_HELP: &str = "\
Prints what the router's [auth] table stores for a user (docs/security.md):

  printf '%s' \"$PASSWORD\" | tickwire passwd      # -> password_hash = \"$argon2id$...\"
  tickwire passwd --token                         # a new token, and its token_sha256

The password is read from the first line of standard input (or --password-file; at a
terminal, after a prompt, with the terminal's echo off, and asked twice) and
hashed with argon2id (m=19MiB, t=2, p=1) and a random salt; only the hash goes in the
config file. A token is 32 random bytes in hex: give the token to the client
(--token or TICKWIRE_TOKEN), put its SHA-256 in the config.

Example [auth] entry:
  [[auth.users]]
  name = \"alice\"
  password_hash = \"$argon2id$v=19$m=19456,t=2,p=1$...\"
  subscribe = { allow = [\"md/>\"] }";

/// `tickwire passwd`.
#[derive(Args)]
#[command(after_help = PASSWD_HELP)]
pub struct PasswdArgs {
    /// Make a new random token instead of hashing a password.
    #[arg(long, conflicts_with = "password_file")]
    token: bool,
    /// Read the password from the first line of FILE instead of standard input.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

pub fn run_passwd(a: PasswdArgs) -> anyhow::Result<ExitCode> {
    if a.token {
        let (token, digest) = tickwire_router::auth::new_token();
        println!("token = \"{token}\"          # give this to the client (--token, {TOKEN_ENV})");
        println!("token_sha256 = \"{digest}\"   # put this in [[auth.users]]");
        return Ok(ExitCode::SUCCESS);
    }
    let path = a.password_file.unwrap_or_else(|| PathBuf::from("-"));
    let stdin = std::io::stdin();
    let password = if path.as_os_str() == "-" && rustix::termios::isatty(&stdin) {
        let first = prompt_password("password (not shown): ")?;
        // Typed unseen: asked twice, as passwd(1) does (new-user pass: a typo went into
        // [auth] unnoticed, found at the first failed login).
        let again = prompt_password("the same again: ")?;
        if first != again {
            return Err(crate::units::UsageError(
                "the two passwords typed differ: nothing printed; run tickwire passwd again".into(),
            )
            .into());
        }
        first
    } else {
        first_line(&path)?
    };
    if password.is_empty() {
        // What the user gave is wrong, as a bad flag value is: exit status 2.
        return Err(crate::units::UsageError(
            "empty password: pipe it on standard input or pass --password-file FILE".into(),
        )
        .into());
    }
    let hash =
        tickwire_router::auth::hash_password(password.as_bytes()).map_err(anyhow::Error::msg)?;
    println!("password_hash = \"{hash}\"");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::read_typed_line;

    #[test]
    fn a_typed_line_ends_at_enter_and_takes_back_characters() {
        let read = |bytes: &[u8]| read_typed_line(&mut &bytes[..]);
        assert_eq!(read(b"hunter2\n").unwrap(), "hunter2");
        assert_eq!(read(b"hunter2\r").unwrap(), "hunter2");
        assert_eq!(read(b"ab\x7fc\n").unwrap(), "ac");
        assert_eq!(read("xé\x7f\n".as_bytes()).unwrap(), "x");
        assert_eq!(read(b"\x08\x08ok\n").unwrap(), "ok");
        assert!(read(b"hun\x03ter\n")
            .unwrap_err()
            .to_string()
            .contains("Ctrl-C"));
        assert!(read(b"\x04").unwrap_err().to_string().contains("Ctrl-D"));
        assert!(read(&[b'a'; 5000]).is_err());
    }
}
