//! Who may read a monitoring endpoint (docs/monitoring.md, "Authentication").
//!
//! On loopback the endpoint is open, as before, unless told otherwise. Beyond loopback
//! it requires a login: HTTP Basic (a user's password) or Bearer (a user's token) of a
//! user with `admin = true` in an `[auth]` table in the router's format (the router's
//! own, or `--http-auth FILE`), unless `--http-open` opens it, with a warning.
//! `/healthz` is always open: it says only "ok" or why not.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use tickwire_monitor::credentials::{parse_authorization, Credentials};
use tickwire_monitor::http::{Request, Response};
use tickwire_router::auth::{Anonymous, AuthConfig, Authenticator};
use tickwire_wire::frame::AuthMethod;

/// The challenge a browser answers with a login dialog.
const CHALLENGE: &str = "Basic realm=\"tickwire monitoring\", charset=\"UTF-8\"";
/// An accepted `Authorization` value is trusted again for this long without a new
/// password check (the dashboard polls every second; argon2 costs milliseconds).
const REMEMBER: Duration = Duration::from_secs(60);
/// Most remembered `Authorization` values.
const REMEMBERED: usize = 32;

/// The login check of one endpoint.
pub struct Guard {
    auth: Authenticator,
    /// SHA-256 (hex) of recently accepted `Authorization` values, and when.
    recent: Mutex<Vec<(String, Instant)>>,
    /// One argon2 check at a time: a flood of wrong passwords costs one core's worth
    /// of checks and 19 MiB, never one of each per connection.
    argon2: Mutex<()>,
    failures: AtomicU64,
}

impl Guard {
    /// A guard admitting the admin users of `cfg`.
    pub fn new(cfg: &AuthConfig, from: &str) -> anyhow::Result<Guard> {
        let admin_groups: Vec<&String> = cfg
            .groups
            .iter()
            .filter(|(_, r)| r.admin)
            .map(|(n, _)| n)
            .collect();
        let admins = cfg
            .users
            .iter()
            .filter(|u| u.rules.admin || u.groups.iter().any(|g| admin_groups.contains(&g)))
            .count();
        if admins == 0 {
            anyhow::bail!(
                "{from}: no user with admin = true, so nobody could read the monitoring endpoint \
                 (docs/monitoring.md, \"Authentication\")"
            );
        }
        // Anonymous access is never used here; allowing it only keeps the router's
        // "nobody could connect" check from firing on a file of admin users.
        let cfg = AuthConfig {
            anonymous: Anonymous::Allow,
            ..cfg.clone()
        };
        let auth = Authenticator::new(&cfg, true, usize::MAX)
            .map_err(anyhow::Error::new)
            .with_context(|| format!("reading the users of {from}"))?;
        Ok(Guard {
            auth,
            recent: Mutex::new(Vec::new()),
            argon2: Mutex::new(()),
            failures: AtomicU64::new(0),
        })
    }

    /// Failed logins so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Lets `req` through, or answers 401 (no or wrong credentials) or 403 (a user who
    /// is not an admin).
    pub fn admit(&self, req: &Request<'_>) -> Result<(), Response> {
        let Some(value) = req.authorization else {
            return Err(Response::unauthorized(
                CHALLENGE,
                "authentication required: log in as an admin user (HTTP Basic with a password, or Bearer with a token)",
            ));
        };
        let key = tickwire_router::auth::token_sha256(value);
        if self.remembered(&key) {
            return Ok(());
        }
        let creds =
            parse_authorization(value).map_err(|e| self.refuse(req, None, &e.to_string()))?;
        let login = match &creds {
            Credentials::Basic { user, password } => {
                let _one = self.argon2.lock().unwrap_or_else(PoisonError::into_inner);
                self.auth.login(AuthMethod::Password, user, password)
            }
            Credentials::Bearer(token) => self.auth.login(AuthMethod::Token, "", token),
        };
        let user = match &creds {
            Credentials::Basic { user, .. } => Some(user.as_str()),
            Credentials::Bearer(_) => None,
        };
        match login {
            Err(e) => Err(self.refuse(req, user, &e.to_string())),
            Ok(id) if !id.perms.is_admin() => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %req.peer, user = id.name(), path = req.path, "monitoring: refused, not an admin user");
                Err(Response::error(
                    403,
                    &format!(
                        "user {:?} may not read the monitoring endpoint (it needs admin = true)",
                        id.name()
                    ),
                ))
            }
            Ok(_) => {
                self.remember(key);
                Ok(())
            }
        }
    }

    fn refuse(&self, req: &Request<'_>, user: Option<&str>, why: &str) -> Response {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(peer = %req.peer, user = user.unwrap_or("-"), path = req.path, why, "monitoring: login failed");
        Response::unauthorized(CHALLENGE, why)
    }

    fn remembered(&self, key: &str) -> bool {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.retain(|(_, at)| at.elapsed() < REMEMBER);
        recent.iter().any(|(k, _)| k == key)
    }

    fn remember(&self, key: String) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() >= REMEMBERED {
            recent.remove(0);
        }
        recent.push((key, Instant::now()));
    }
}

/// The `[auth]` table of `path`: a TOML file with an `[auth]` table in the router's
/// format (the router's own configuration file will do; other tables are ignored).
pub fn read_auth_file(path: &Path) -> anyhow::Result<AuthConfig> {
    let text = tickwire_rt::files::read_to_string_limited(path, 16 << 20)
        .with_context(|| format!("reading --http-auth {}", path.display()))?;
    let doc: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing --http-auth {}", path.display()))?;
    let Some(auth) = doc.get("auth") else {
        anyhow::bail!(
            "--http-auth {}: no [auth] table (users as in the router's configuration, docs/security.md)",
            path.display()
        );
    };
    auth.clone()
        .try_into()
        .with_context(|| format!("--http-auth {}: the [auth] table", path.display()))
}

/// Why `addr` may not be served as asked: a non-loopback address with no way to log in.
/// `router`: the command is the router, whose own [auth] users may log in too (feed and
/// fix have no users of their own: --http-auth is their only way). A usage error (exit
/// status 2): the flags given cannot work together, and nothing has started.
pub fn refuse_open(addr: SocketAddr, router: bool) -> anyhow::Error {
    let own = match router {
        true => "configure users in the router's [auth], ",
        false => "",
    };
    crate::units::UsageError(format!(
        "--http {addr} serves beyond loopback, where the monitoring endpoint requires a login: \
         give --http-auth FILE (a TOML [auth] table whose admin users may log in; docs/monitoring.md), \
         {own}or pass --http-open to serve it to anyone who can reach it"
    ))
    .into()
}
