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
    /// environment variable (never on the command line, which other users of the host
    /// can read) [default: anonymous, or the token in TICKWIRE_TOKEN when set].
    #[arg(long, value_name = "USER", help_heading = "Login")]
    user: Option<String>,
    /// The password of --user: the first line of FILE ('-': standard input).
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
            None => std::env::var(PASSWORD_ENV).map_err(|_| {
                anyhow::anyhow!(
                    "--user {user} needs a password: --password-file FILE, or the {PASSWORD_ENV} environment variable"
                )
            })?,
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
        Ok(opts)
    }
}

/// Asks for the password on a terminal: a prompt on standard error, the terminal's
/// echo off while it is typed (new-user pass: typed at a terminal, the password was
/// echoed and no prompt said what was awaited).
fn prompt_password() -> anyhow::Result<String> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    let stdin = std::io::stdin();
    eprint!("password (not shown): ");
    let saved = tcgetattr(&stdin).context("reading the terminal's settings")?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    tcsetattr(&stdin, OptionalActions::Now, &quiet).context("turning the terminal's echo off")?;
    let mut line = String::new();
    let read = stdin.read_line(&mut line);
    // Echo back on whatever happened.
    let restored = tcsetattr(&stdin, OptionalActions::Now, &saved);
    eprintln!();
    read.context("reading the password from the terminal")?;
    restored.context("turning the terminal's echo back on")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}

/// The first line of `path` ('-': standard input), without its line ending.
fn first_line(path: &std::path::Path) -> anyhow::Result<String> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the password from standard input")?;
    } else {
        text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the password file {}", path.display()))?;
    }
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

const PASSWD_HELP: &str = "\
Prints what the router's [auth] table stores for a user (docs/security.md):

  printf '%s' \"$PASSWORD\" | tickwire passwd      # -> password_hash = \"$argon2id$...\"
  tickwire passwd --token                         # a new token, and its token_sha256

The password is read from the first line of standard input (or --password-file; at a
terminal, after a prompt, with the terminal's echo off) and
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
        prompt_password()?
    } else {
        first_line(&path)?
    };
    if password.is_empty() {
        anyhow::bail!("empty password: pipe it on standard input or pass --password-file FILE");
    }
    let hash =
        tickwire_router::auth::hash_password(password.as_bytes()).map_err(anyhow::Error::msg)?;
    println!("password_hash = \"{hash}\"");
    Ok(ExitCode::SUCCESS)
}
