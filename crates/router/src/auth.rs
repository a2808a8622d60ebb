//! Authentication and authorization (docs/security.md): who a client is, and what it
//! may publish, subscribe to, bind and ask.
//!
//! Pure: no IO and no clock. The `[auth]` table of the router's TOML file is an
//! [`AuthConfig`]; [`Authenticator::new`] checks and compiles it once at start (password
//! hashes parsed, patterns validated, each user's rules merged with its groups'), and
//! [`Authenticator::login`] turns an AUTH frame into an [`Identity`]. The core asks an
//! identity's [`Perms`] once per SUBSCRIBE, queue request or BIND, and once per topic per
//! connection for PUBLISH ([`PublishCache`]), never per message.
//!
//! # Precedence
//!
//! A user's rules and the rules of every group it belongs to are merged: for each of
//! `publish`, `subscribe` and `queues`, the `deny` lists add up and the `allow` lists
//! add up. Then, for a topic (or queue name):
//!
//! 1. any matching `deny` pattern refuses it, whoever (user or group) listed it;
//! 2. otherwise, when nobody gave an `allow` list for that action, it is allowed;
//! 3. otherwise it is allowed only when an `allow` pattern matches it.
//!
//! A SUBSCRIBE pattern (and a queue's subscription at create) is allowed when it is
//! *inside* an allowed pattern (every topic it can match is allowed) and *overlaps no*
//! denied pattern, so a subscription can only ever deliver allowed topics and nothing is
//! checked per delivered message. `admin` (STATS, listing queues) is granted when the
//! user or any of its groups says `admin = true`.

// A pure module: time is not read here.
#![deny(clippy::disallowed_methods)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use argon2::password_hash::{Output, PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tickwire_wire::frame::AuthMethod;
use tickwire_wire::topic::{
    pattern_covers, pattern_matches, patterns_overlap, validate_pattern, validate_topic,
};

/// Who may connect without logging in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Anonymous {
    /// Only when the router listens on a loopback address (the default: `tickwire
    /// router` on 127.0.0.1 works as before; on another address clients must log in).
    #[default]
    Loopback,
    /// Always, on any address (logged as a warning on a non-loopback address).
    Allow,
    /// Never: every client logs in.
    Deny,
}

impl std::fmt::Display for Anonymous {
    /// As the configuration spells it (`loopback`, `allow`, `deny`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Anonymous::Loopback => "loopback",
            Anonymous::Allow => "allow",
            Anonymous::Deny => "deny",
        })
    }
}

impl Anonymous {
    /// Whether this policy admits anonymous clients on a router whose listeners are
    /// all on loopback addresses (`loopback`) or not: the one rule the login check and
    /// the monitoring endpoint share.
    pub fn admits(self, loopback: bool) -> bool {
        match self {
            Anonymous::Allow => true,
            Anonymous::Deny => false,
            Anonymous::Loopback => loopback,
        }
    }
}

impl std::str::FromStr for Anonymous {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "loopback" => Ok(Anonymous::Loopback),
            "allow" => Ok(Anonymous::Allow),
            "deny" => Ok(Anonymous::Deny),
            _ => Err(format!(
                "unknown anonymous policy {s:?}: expected loopback, allow or deny"
            )),
        }
    }
}

/// Allowed and denied patterns for one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AllowDeny {
    /// Patterns allowed. Absent: everything not denied (unless a group gives a list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Patterns denied; a deny always wins over an allow.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl AllowDeny {
    /// No rule: neither an allow list nor a deny (the same as the table left out).
    pub fn is_unset(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }
}

/// The rules of a group, or of anonymous clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Rules {
    /// STATS and listing queues. Default false for groups and users; anonymous clients
    /// (where allowed) are admins unless `[auth.anonymous_rules]` says otherwise.
    pub admin: bool,
    /// Topics the members may publish to (direct, guaranteed, requests and replies).
    // Written out only when there is a rule: an empty table read as one (new-user pass:
    // print-config gave every user three empty tables).
    #[serde(skip_serializing_if = "AllowDeny::is_unset")]
    pub publish: AllowDeny,
    /// Patterns the members may subscribe to (also initial images and cache queries).
    #[serde(skip_serializing_if = "AllowDeny::is_unset")]
    pub subscribe: AllowDeny,
    /// Queue names the members may bind to, create, delete, purge and show.
    #[serde(skip_serializing_if = "AllowDeny::is_unset")]
    pub queues: AllowDeny,
    /// A member that is handed a request (a message with a reply topic) may publish
    /// one reply to that reply topic within [`RESPONSE_WINDOW_NS`] of the delivery,
    /// whatever its publish rules say (NATS' `allow_responses`): a responder needs no
    /// publish permission on every requester's inbox (`_reply/>`).
    pub allow_responses: bool,
}

/// One user of `[[auth.users]]`: its login, limits and [`Rules`] (the same keys as a
/// group's, at the user's level).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct UserConfig {
    /// The login name (1 to 64 bytes).
    pub name: String,
    /// The password's argon2 hash in PHC form (`tickwire passwd` prints one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// SHA-256 of the user's token, in hex (`tickwire passwd --token` makes a token and
    /// prints this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// A name in the user's TLS client certificate: its subject common name (CN) or a
    /// subject alternative name (DNS, e-mail or URI). A client whose verified
    /// certificate carries it is this user without AUTH (docs/security.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_name: Option<String>,
    /// Groups whose rules apply too (names of `[auth.groups.NAME]` tables).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Most simultaneous connections of this user. Default `[auth]
    /// max_connections_per_user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// What the user may do, besides what its groups allow.
    #[serde(flatten)]
    pub rules: Rules,
    /// Keys that are none of the above: refused by [`Authenticator::new`] (serde cannot
    /// deny unknown fields next to a flattened table, and a misspelt rule must not
    /// silently widen a user's rights).
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// The keys of a `[[auth.users]]` entry (its own and its [`Rules`]'), for the error
/// that names a misspelt one (a unit test keeps the list whole).
pub const USER_KEYS: &[&str] = &[
    "name",
    "password_hash",
    "token_sha256",
    "cert_name",
    "groups",
    "max_connections",
    "admin",
    "publish",
    "subscribe",
    "queues",
    "allow_responses",
];

/// The `[auth]` table of the router's configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Who may connect without logging in: `loopback` (default), `allow` or `deny`.
    pub anonymous: Anonymous,
    /// What anonymous clients may do, where they are allowed. Absent: everything
    /// (including STATS), as before authentication existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous_rules: Option<Rules>,
    /// Most simultaneous anonymous connections. Default: `max_clients` (no limit of
    /// its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous_max_connections: Option<usize>,
    /// Most simultaneous connections per user, unless the user sets its own. Default 64.
    pub max_connections_per_user: usize,
    /// The users.
    pub users: Vec<UserConfig>,
    /// Named groups of rules.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, Rules>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: Anonymous::Loopback,
            anonymous_rules: None,
            anonymous_max_connections: None,
            max_connections_per_user: 64,
            users: Vec::new(),
            groups: BTreeMap::new(),
        }
    }
}

/// Compiled rules of one action: the merged allow and deny patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Compiled {
    /// `None`: no allow list anywhere, so everything not denied is allowed.
    allow: Option<Vec<Box<str>>>,
    deny: Vec<Box<str>>,
}

impl Compiled {
    fn add(&mut self, rules: &AllowDeny) {
        if let Some(allow) = &rules.allow {
            self.allow
                .get_or_insert_with(Vec::new)
                .extend(allow.iter().map(|p| p.as_str().into()));
        }
        self.deny
            .extend(rules.deny.iter().map(|p| p.as_str().into()));
    }

    fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// A topic (validated): deny wins, then allow (or no allow list at all).
    fn allows_topic(&self, topic: &str) -> bool {
        if self.deny.iter().any(|d| pattern_matches(d, topic)) {
            return false;
        }
        self.allow
            .as_ref()
            .is_none_or(|a| a.iter().any(|p| pattern_matches(p, topic)))
    }

    /// A pattern (validated): it overlaps no denied pattern and lies inside an allowed
    /// one, so nothing it can ever match is refused.
    fn allows_pattern(&self, pattern: &str) -> Result<(), String> {
        if let Some(d) = self.deny.iter().find(|d| patterns_overlap(d, pattern)) {
            return Err(format!("it overlaps the denied pattern {d:?}"));
        }
        match &self.allow {
            Some(a) if !a.iter().any(|p| pattern_covers(p, pattern)) => {
                Err("it is not inside any allowed pattern".to_owned())
            }
            _ => Ok(()),
        }
    }
}

/// What one identity may do (its own rules merged with its groups').
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Perms {
    admin: bool,
    publish: Compiled,
    subscribe: Compiled,
    queues: Compiled,
    allow_responses: bool,
}

impl Perms {
    /// Everything, admin included (anonymous clients without `anonymous_rules`).
    pub fn everything() -> Perms {
        Perms {
            admin: true,
            ..Perms::default()
        }
    }

    fn from_rules<'a>(rules: impl IntoIterator<Item = &'a Rules>) -> Perms {
        let mut p = Perms::default();
        for r in rules {
            p.admin |= r.admin;
            p.allow_responses |= r.allow_responses;
            p.publish.add(&r.publish);
            p.subscribe.add(&r.subscribe);
            p.queues.add(&r.queues);
        }
        p
    }

    /// `allow_responses`: one reply per request handed to it, to the request's reply
    /// topic, whatever the publish rules say ([`Responses`]).
    pub fn allows_responses(&self) -> bool {
        self.allow_responses
    }

    /// STATS and queue listing.
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// No publish rule at all: the core skips the check (and its cache) entirely.
    pub fn publishes_anywhere(&self) -> bool {
        self.publish.is_open()
    }

    /// Whether a PUBLISH to `topic` (validated) is allowed. Costs a scan of the rules:
    /// call it through a [`PublishCache`]. Never inlined: it is the cache's miss path,
    /// once per topic per connection, and a profile shows it under its own name.
    #[inline(never)]
    pub fn may_publish(&self, topic: &str) -> bool {
        self.publish.allows_topic(topic)
    }

    /// Whether a SUBSCRIBE to `pattern` (validated; for a shared subscription, the
    /// pattern after `$share/GROUP/`) is allowed; the error says why not.
    pub fn may_subscribe(&self, pattern: &str) -> Result<(), String> {
        self.subscribe
            .allows_pattern(pattern)
            .map_err(|why| format!("not permitted to subscribe to {pattern:?}: {why}"))
    }

    /// Whether the queue `name`, which subscribes to `subscriptions` (`None`: no such
    /// queue, which the bind then reports), may be bound: its name must be allowed,
    /// and what it holds must be what this user may receive, as for a queue it
    /// creates: every subscription inside the subscribe rules. A queue without
    /// subscriptions, or one that takes dead letters (`any_topic`: the dead-message
    /// queue, a queue another names as its dead-letter queue), holds messages of any
    /// topic: under subscribe rules, binding it takes a `queues` allow list that names
    /// it.
    pub fn may_bind(
        &self,
        name: &str,
        subscriptions: Option<&[String]>,
        any_topic: bool,
    ) -> Result<(), String> {
        self.may_use_queue(name)?;
        let Some(subscriptions) = subscriptions else {
            return Ok(());
        };
        if self.subscribe.is_open() {
            return Ok(());
        }
        if subscriptions.is_empty() || any_topic {
            self.may_hold_any_topic(name)?;
        }
        for s in subscriptions {
            if let Ok(pattern) = validate_pattern(s.as_bytes()) {
                self.may_subscribe(pattern)
                    .map_err(|why| format!("not permitted to bind queue {name:?}: {why}"))?;
            }
        }
        Ok(())
    }

    /// Whether this user may bind or create `name`, a queue of dead-lettered messages of
    /// any topic: without subscribe rules, yes; under them, only with a `queues` allow
    /// list (which [`Perms::may_use_queue`] has checked names it).
    pub fn may_hold_any_topic(&self, name: &str) -> Result<(), String> {
        if self.subscribe.is_open() || self.queues.allow.is_some() {
            return Ok(());
        }
        Err(format!(
            "not permitted to use queue {name:?} this way: it holds dead-lettered messages \
             of any topic (it takes another queue's dead letters, or has no subscriptions \
             of its own), and under subscribe rules that takes a queues rule allowing it"
        ))
    }

    /// Whether the queue `name` may be bound, created, deleted, purged or shown.
    pub fn may_use_queue(&self, name: &str) -> Result<(), String> {
        let ok = match validate_topic(name.as_bytes()) {
            Ok(t) => self.queues.allows_topic(t),
            // Not a name any pattern can match: allowed only without rules.
            Err(_) => self.queues.is_open(),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("not permitted to use queue {name:?}"))
        }
    }
}

/// Who a connection is, once logged in (or anonymous).
#[derive(Debug)]
pub struct Identity {
    /// The user name; `None` for an anonymous client.
    pub user: Option<Box<str>>,
    /// What it may do.
    pub perms: Perms,
    /// Most simultaneous connections of this identity.
    pub max_connections: usize,
}

impl Identity {
    /// The name shown in logs and stats: the user, or `anonymous`.
    pub fn name(&self) -> &str {
        self.user.as_deref().unwrap_or("anonymous")
    }
}

/// Why a login failed; `Display` is the text of the fatal ERROR `AUTH_FAILED` (it never
/// says whether the user exists).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// Unknown user or wrong password.
    #[error("authentication failed: unknown user or wrong password")]
    BadPassword,
    /// No user has this token.
    #[error("authentication failed: unknown token")]
    BadToken,
    /// The listener requires a login and the HELLO offered none.
    #[error("authentication required: this router does not accept anonymous clients here (log in with a user and password, a token, or over TLS a client certificate the router maps to a user)")]
    Required,
    /// Too many password checks are waiting already (a flood of logins): try again.
    #[error("authentication busy: too many password logins in progress, try again")]
    Busy,
    /// Too many password checks from this client's address are waiting already.
    #[error(
        "authentication busy: too many password logins in progress from this address \
         (at most 16 at a time), try again"
    )]
    SourceBusy,
}

/// A configuration that cannot be used; the router refuses to start with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid [auth] configuration: {0}")]
pub struct AuthConfigError(pub String);

/// The compiled `[auth]` table: users by name and by token, anonymous access.
#[derive(Debug)]
pub struct Authenticator {
    users: HashMap<Box<str>, (Option<String>, Arc<Identity>)>,
    tokens: HashMap<[u8; 32], Arc<Identity>>,
    /// Users by the name their TLS client certificate carries.
    certs: HashMap<Box<str>, Arc<Identity>>,
    /// `None`: anonymous clients are refused.
    anonymous: Option<Arc<Identity>>,
    /// Verified for unknown users, so a login takes as long whether the user exists.
    dummy_hash: String,
    /// The argon2 working memory every password check of this authenticator uses
    /// (see [`ArgonMemory`]).
    memory: ArgonMemory,
}

impl Authenticator {
    /// Checks and compiles `cfg`. `loopback` says whether the listener is on a loopback
    /// address (for [`Anonymous::Loopback`]); `max_clients` is the router's limit.
    pub fn new(
        cfg: &AuthConfig,
        loopback: bool,
        max_clients: usize,
    ) -> Result<Authenticator, AuthConfigError> {
        fn err<T>(s: String) -> Result<T, AuthConfigError> {
            Err(AuthConfigError(s))
        }
        let check_rules = |who: &str, r: [&AllowDeny; 3]| -> Result<(), AuthConfigError> {
            for (what, ad) in ["publish", "subscribe", "queues"].iter().zip(r) {
                for p in ad.allow.iter().flatten().chain(&ad.deny) {
                    if let Err(e) = validate_pattern(p.as_bytes()) {
                        return err(format!("{who}: {what} pattern {p:?} is invalid: {e}"));
                    }
                }
            }
            Ok(())
        };
        for (name, g) in &cfg.groups {
            check_rules(
                &format!("group {name:?}"),
                [&g.publish, &g.subscribe, &g.queues],
            )?;
        }
        let mut users = HashMap::new();
        let mut tokens = HashMap::new();
        let mut certs = HashMap::new();
        for u in &cfg.users {
            let who = format!("user {:?}", u.name);
            if u.name.is_empty() || u.name.len() > tickwire_wire::frame::MAX_USER_LEN {
                return err(format!("{who}: a name is 1 to 64 bytes"));
            }
            // Names are shown in logs and stats, and key the user's publisher
            // identities (behind a control character as separator).
            if u.name.chars().any(char::is_control) {
                return err(format!("{who}: a name may not contain control characters"));
            }
            if let Some(key) = u.unknown.keys().next() {
                return err(format!("{who}: unknown key {key:?}"));
            }
            let r = &u.rules;
            check_rules(&who, [&r.publish, &r.subscribe, &r.queues])?;
            let mut rules = vec![r];
            for g in &u.groups {
                let Some(r) = cfg.groups.get(g) else {
                    return err(format!("{who}: no group {g:?} in [auth.groups]"));
                };
                rules.push(r);
            }
            if u.password_hash.is_none() && u.token_sha256.is_none() && u.cert_name.is_none() {
                return err(format!(
                    "{who} has none of password_hash, token_sha256 and cert_name: nobody could log in as it"
                ));
            }
            if let Some(h) = &u.password_hash {
                if let Err(e) = parse_phc(h, &mut [0; 64]) {
                    return err(format!(
                        "{who}: password_hash {e}; make one with `tickwire passwd`"
                    ));
                }
            }
            let identity = Arc::new(Identity {
                user: Some(u.name.as_str().into()),
                perms: Perms::from_rules(rules),
                max_connections: u.max_connections.unwrap_or(cfg.max_connections_per_user),
            });
            if let Some(t) = &u.token_sha256 {
                let Some(digest) = parse_hex32(t) else {
                    return err(format!(
                        "{who}: token_sha256 must be 64 hex digits (`tickwire passwd --token`)"
                    ));
                };
                if tokens.insert(digest, identity.clone()).is_some() {
                    return err(format!("{who}: another user has the same token"));
                }
            }
            if let Some(n) = &u.cert_name {
                if n.is_empty() {
                    return err(format!("{who}: cert_name must not be empty"));
                }
                if certs.insert(n.as_str().into(), identity.clone()).is_some() {
                    return err(format!("{who}: another user has the cert_name {n:?}"));
                }
            }
            let user = u.name.as_str().into();
            if users
                .insert(user, (u.password_hash.clone(), identity))
                .is_some()
            {
                return err(format!("{who} is listed twice"));
            }
        }
        let anonymous_ok = cfg.anonymous.admits(loopback);
        if !anonymous_ok && users.is_empty() {
            return err(if loopback {
                "anonymous = \"deny\" and no [[auth.users]]: nobody could connect".to_owned()
            } else {
                "the router listens on a non-loopback address, where clients must log in, but \
                 [auth] has no users: add [[auth.users]] (docs/security.md), or open it to \
                 anonymous clients with anonymous = \"allow\" (--anonymous allow)"
                    .to_owned()
            });
        }
        let anonymous = anonymous_ok.then(|| {
            Arc::new(Identity {
                user: None,
                perms: match &cfg.anonymous_rules {
                    Some(r) => Perms::from_rules([r]),
                    None => Perms::everything(),
                },
                max_connections: cfg.anonymous_max_connections.unwrap_or(max_clients),
            })
        });
        if let Some(r) = &cfg.anonymous_rules {
            check_rules("anonymous_rules", [&r.publish, &r.subscribe, &r.queues])?;
        }
        Ok(Authenticator {
            users,
            tokens,
            certs,
            anonymous,
            dummy_hash: DUMMY_HASH.to_owned(),
            memory: ArgonMemory::default(),
        })
    }

    /// An authenticator without users that lets everyone in with every permission.
    pub fn open() -> Authenticator {
        Authenticator {
            users: HashMap::new(),
            tokens: HashMap::new(),
            certs: HashMap::new(),
            anonymous: Some(Arc::new(Identity {
                user: None,
                perms: Perms::everything(),
                max_connections: usize::MAX,
            })),
            dummy_hash: DUMMY_HASH.to_owned(),
            memory: ArgonMemory::default(),
        }
    }

    /// An authenticator that lets nobody in (the fallback for a configuration that no
    /// longer compiles, which `Config::validate` prevents).
    pub fn closed() -> Authenticator {
        Authenticator {
            users: HashMap::new(),
            tokens: HashMap::new(),
            certs: HashMap::new(),
            anonymous: None,
            dummy_hash: DUMMY_HASH.to_owned(),
            memory: ArgonMemory::default(),
        }
    }

    /// The identity of a client that offered no login.
    pub fn anonymous(&self) -> Result<Arc<Identity>, LoginError> {
        self.anonymous.clone().ok_or(LoginError::Required)
    }

    /// The user named by a verified client certificate with these `names` (in the
    /// order [`tickwire_tls::cert_names`] gives them: CN first, then the alternative
    /// names): the first name that is some user's `cert_name`.
    pub fn cert_user(&self, names: &[String]) -> Option<Arc<Identity>> {
        names
            .iter()
            .find_map(|n| self.certs.get(n.as_str()).cloned())
    }

    /// Whether anonymous clients are refused (a HELLO without AUTH fails at once).
    pub fn anonymous_allowed(&self) -> bool {
        self.anonymous.is_some()
    }

    /// Checks an AUTH frame's credentials. A password check runs argon2 (milliseconds,
    /// by design); a token check is one SHA-256.
    pub fn login(
        &self,
        method: AuthMethod,
        user: &str,
        secret: &[u8],
    ) -> Result<Arc<Identity>, LoginError> {
        match method {
            AuthMethod::Token => {
                let digest: [u8; 32] = Sha256::digest(secret).into();
                match self.tokens.get(&digest) {
                    Some(id) if user.is_empty() || id.user.as_deref() == Some(user) => {
                        Ok(id.clone())
                    }
                    _ => Err(LoginError::BadToken),
                }
            }
            AuthMethod::Password => self.password_check(user, secret).run(),
        }
    }

    /// What checking a password takes, to run where the time can be spent (argon2 costs
    /// milliseconds and 19 MiB by design: the router runs it on a thread of its own).
    pub fn password_check(&self, user: &str, secret: &[u8]) -> PasswordCheck {
        let found = self.users.get(user);
        match found {
            Some((Some(h), id)) => PasswordCheck {
                hash: h.clone(),
                secret: secret.to_vec(),
                identity: Some(id.clone()),
                memory: self.memory.clone(),
            },
            // Unknown user, or one without a password: the same work, then no.
            _ => PasswordCheck {
                hash: self.dummy_hash.clone(),
                secret: secret.to_vec(),
                identity: None,
                memory: self.memory.clone(),
            },
        }
    }
}

/// One password login to check: the stored hash, the secret offered (at most
/// `frame::MAX_SECRET_LEN` bytes) and the identity it would give. Pure computation.
pub struct PasswordCheck {
    hash: String,
    secret: Vec<u8>,
    identity: Option<Arc<Identity>>,
    memory: ArgonMemory,
}

/// The argon2 working memory (19 MiB for the default m=19456) of one
/// [`Authenticator`], shared by every check it hands out: checks run one at a time
/// on it, whatever thread runs them. `Argon2::verify_password` allocates and frees
/// its own 19 MiB per check; run on many threads (the HTTP endpoint's connection
/// threads), each thread's malloc arena kept its last one: a flood of wrong
/// passwords from 16 connections left the process at ~400 MB (hostile-input probe).
/// Allocated at the first check, grown if a hash asks for more, never freed.
#[derive(Clone, Default)]
struct ArgonMemory(Arc<Mutex<Vec<Block>>>);

impl std::fmt::Debug for ArgonMemory {
    // Not its 19 MiB.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArgonMemory(..)")
    }
}

impl ArgonMemory {
    /// Whether `secret` hashes to `hash` (a PHC string): argon2 with the hash's own
    /// algorithm, version, parameters and salt, into this memory, compared in
    /// constant time (`Output`'s `PartialEq`), as `PasswordVerifier` does. False for a
    /// hash that does not parse.
    fn verify(&self, hash: &str, secret: &[u8]) -> bool {
        let mut salt_buf = [0u8; 64];
        let Ok(Phc {
            algorithm,
            version,
            params,
            salt,
            expected,
        }) = parse_phc(hash, &mut salt_buf)
        else {
            return false;
        };
        let blocks = params.block_count();
        let argon2 = Argon2::new(algorithm, version, params);
        // `Output` is at most 64 bytes.
        let mut out = [0u8; 64];
        let out = &mut out[..expected.len()];
        {
            let mut memory = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if memory.len() < blocks {
                memory.resize(blocks, Block::default());
            }
            if argon2
                .hash_password_into_with_memory(secret, salt, out, &mut memory[..blocks])
                .is_err()
            {
                return false;
            }
        }
        Output::new(out).is_ok_and(|computed| computed == expected)
    }
}

/// The most argon2 work one configured hash may ask of each login, in KiB of memory
/// times passes (`m` x `t`): RFC 9106's first recommended setting (t=1, m=2 GiB), 54
/// times the default hash's (m=19456, t=2: 38,912). A hash beyond it (a typo such as
/// m=19456000) would hold the login thread for many seconds per attempt and keep its
/// gigabytes (the working memory is kept for the next check).
pub const MAX_HASH_COST: u64 = 1 << 21;

/// A `password_hash` taken apart for checking.
struct Phc<'a> {
    algorithm: Algorithm,
    version: Version,
    params: Params,
    /// The decoded salt.
    salt: &'a [u8],
    expected: Output,
}

/// Parses a PHC string into what an argon2 check needs (the salt decoded into
/// `salt_buf`), or says what is wrong with it: checked when the configuration is
/// loaded, so a hash no check could use (another algorithm, a salt that does not
/// decode, a cost over [`MAX_HASH_COST`]) stops the start instead of refusing every
/// login of its user.
fn parse_phc<'a>(hash: &'a str, salt_buf: &'a mut [u8; 64]) -> Result<Phc<'a>, String> {
    // The crate's texts, with its "value to short" spelt right.
    let text = |e: argon2::password_hash::Error| {
        e.to_string()
            .replace("value to short", "value too short")
            .replace("value to long", "value too long")
    };
    let phc = PasswordHash::new(hash).map_err(|e| format!("is not a PHC string ({})", text(e)))?;
    let algorithm = Algorithm::try_from(phc.algorithm).map_err(|_| {
        format!(
            "uses {:?}, not argon2id, argon2i or argon2d",
            phc.algorithm.as_str()
        )
    })?;
    let version = phc
        .version
        .map_or(Ok(Version::default()), Version::try_from)
        .map_err(|_| "has an argon2 version other than 16 or 19 (v=19)".to_owned())?;
    let params = Params::try_from(&phc)
        .map_err(|e| format!("has invalid argon2 parameters ({})", text(e)))?;
    let cost = u64::from(params.m_cost()) * u64::from(params.t_cost());
    if cost > MAX_HASH_COST {
        return Err(format!(
            "asks each login for m x t = {} x {} = {cost} KiB-passes of argon2, over the \
             {MAX_HASH_COST} allowed (the default m=19456,t=2 is 38912)",
            params.m_cost(),
            params.t_cost()
        ));
    }
    let (Some(salt), Some(expected)) = (phc.salt, phc.hash) else {
        return Err("has no salt or no hash value".to_owned());
    };
    let salt = salt
        .decode_b64(salt_buf)
        .map_err(|e| format!("has a salt that does not decode ({})", text(e)))?;
    // The PHC form takes 4 characters; argon2 refuses fewer than 8 bytes at every check.
    if salt.len() < argon2::MIN_SALT_LEN {
        return Err(format!(
            "has a salt of {} bytes, fewer than argon2's {}",
            salt.len(),
            argon2::MIN_SALT_LEN
        ));
    }
    Ok(Phc {
        algorithm,
        version,
        params,
        salt,
        expected,
    })
}

impl std::fmt::Debug for PasswordCheck {
    // Never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordCheck")
            .field("known_user", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl PasswordCheck {
    /// Runs argon2 (milliseconds): the login's result.
    pub fn run(&self) -> Result<Arc<Identity>, LoginError> {
        let ok = self.memory.verify(&self.hash, &self.secret);
        match &self.identity {
            Some(id) if ok => Ok(id.clone()),
            _ => Err(LoginError::BadPassword),
        }
    }
}

/// An argon2id hash of a random password nobody knows (made with `hash_password`).
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$dGlja3dpcmUtZHVtbXk$Ugnm8C0fwPUNkEhAJf5kNXCEzU4c5g7fdm1ZJwm0fzM";

/// Hashes `password` with argon2id (the crate's defaults: OWASP's m=19 MiB, t=2, p=1)
/// and a random salt, in PHC form for `password_hash`.
pub fn hash_password(password: &[u8]) -> Result<String, String> {
    let salt = SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
    Argon2::default()
        .hash_password(password, &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("hashing the password: {e}"))
}

/// A new random token (32 bytes, hex) and its SHA-256 in hex (for `token_sha256`).
pub fn new_token() -> (String, String) {
    use argon2::password_hash::rand_core::RngCore;
    let mut bytes = [0u8; 32];
    argon2::password_hash::rand_core::OsRng.fill_bytes(&mut bytes);
    let token = hex(&bytes);
    let digest = token_sha256(token.as_bytes());
    (token, digest)
}

/// The `token_sha256` value of a token.
pub fn token_sha256(token: &[u8]) -> String {
    hex(&Sha256::digest(token))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// How long after a request was handed to a responder allowed `allow_responses` its
/// one reply may be published: 60 s.
pub const RESPONSE_WINDOW_NS: u64 = 60_000_000_000;

/// Most reply topics one connection may owe replies to at once under
/// `allow_responses`; past it (or past [`MAX_RESPONSE_BYTES`]) a further request is
/// not handed to it until grants are used or expire.
pub const MAX_PENDING_RESPONSES: usize = 1024;

/// What one reply topic owed costs beyond its text: its place in the table (the key's
/// box, the count, the expiry and the requesters) and the box's allocation rounding.
pub const RESPONSE_ENTRY_BYTES: usize = 144;

/// Most bytes one connection's grants may take, each reply topic counted as its length
/// plus [`RESPONSE_ENTRY_BYTES`]: 1,024 reply topics of up to 32 bytes (an inbox such
/// as `_reply/<client id>/<n>`), about 460 of 250. Counted in topics alone, 1,024 long
/// reply topics held ~380 KB per responder connection for 60 s (hostile-input pass: one
/// requester's 1,024 requests with 240-byte reply topics, handed to 1,000 responders,
/// +393 MB of router memory).
pub const MAX_RESPONSE_BYTES: usize = MAX_PENDING_RESPONSES * (32 + RESPONSE_ENTRY_BYTES);

/// What a reply topic owed counts against [`MAX_RESPONSE_BYTES`].
fn response_cost(reply_to: &str) -> usize {
    reply_to.len() + RESPONSE_ENTRY_BYTES
}

/// Most replies owed on one reply topic (requests of one requester share its reply
/// topic, told apart by correlation id).
const MAX_REPLIES_PER_TOPIC: u32 = 1024;

/// Most requesters one reply topic's owed replies go to at once: a reply topic is a
/// requester's inbox; a request from a further requester on a topic owed to this many
/// is not granted (its reply is refused) until their replies are published or expire.
pub const MAX_REQUESTERS_PER_TOPIC: usize = 4;

/// The requesters owed a reply on one topic: client ids (0: an empty place) and the
/// slots they had when their requests were handed over (a slot is reused after its
/// client leaves: an id is checked against the slot's client before use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requesters {
    ids: [u64; MAX_REQUESTERS_PER_TOPIC],
    slots: [u32; MAX_REQUESTERS_PER_TOPIC],
}

impl Requesters {
    /// Whether client `id` is one of them.
    pub fn contains(&self, id: u64) -> bool {
        id != 0 && self.ids.contains(&id)
    }

    /// The requesters, as (client id, slot).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.ids
            .iter()
            .zip(&self.slots)
            .filter(|(id, _)| **id != 0)
            .map(|(&id, &slot)| (id, slot))
    }

    /// Whether `id` is one of them or a place is free.
    fn has_room_for(&self, id: u64) -> bool {
        self.contains(id) || self.ids.contains(&0)
    }

    /// Adds `id` (at `slot`) unless there; false when every place is taken.
    fn add(&mut self, id: u64, slot: u32) -> bool {
        if self.contains(id) {
            return true;
        }
        match self.ids.iter().position(|&r| r == 0) {
            Some(i) => {
                self.ids[i] = id;
                self.slots[i] = slot;
                true
            }
            None => false,
        }
    }
}

/// The replies a connection allowed `allow_responses` may still publish: per reply
/// topic of a request handed to it, how many replies (one per request) until when, and
/// to whom: a reply the grant allows goes to the requesters only (hostile-input pass: a
/// user requesting to itself, or through any responder, with a reply topic it may only
/// read, had the reply published there to every subscriber: a publish right taken from
/// a subscribe right). Bounded by [`MAX_PENDING_RESPONSES`] topics taking at most
/// [`MAX_RESPONSE_BYTES`], [`MAX_REPLIES_PER_TOPIC`] replies and
/// [`MAX_REQUESTERS_PER_TOPIC`] requesters each; expired grants are swept when the
/// table is full, at most once per expiry time.
#[derive(Debug, Default)]
pub struct Responses {
    /// Reply topic → (replies owed, expiry in the core's monotonic ns, requesters).
    owed: HashMap<Box<str>, (u32, u64, Requesters), ahash::RandomState>,
    /// No grant expires before this (a sweep before it would free nothing; `take`
    /// removes entries without raising it, so a sweep that frees nothing makes it true
    /// again and a full table is not walked on every request).
    earliest_expiry: u64,
    /// The last grant was refused (the table is full): the next refusal is not news.
    refusing: bool,
    /// What `owed` holds, counted as [`MAX_RESPONSE_BYTES`] says.
    bytes: usize,
}

/// What [`Responses::grant`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The reply is owed.
    Recorded,
    /// The table is full of live grants: not recorded. `first`: the first refusal
    /// since the last recorded grant (worth one log line).
    Refused {
        /// The first of a run of refusals.
        first: bool,
    },
}

impl Responses {
    /// A request of client `requester` (its id, not 0) with reply topic `reply_to`
    /// (validated) was handed over at `now_ns`.
    pub fn grant(&mut self, reply_to: &str, requester: u64, slot: u32, now_ns: u64) -> Grant {
        let expiry = now_ns.saturating_add(RESPONSE_WINDOW_NS);
        if let Some((n, until, to)) = self.owed.get_mut(reply_to) {
            if *until <= now_ns {
                // Expired: its requesters are owed nothing any more (review: four of
                // them kept the topic refused past the window until a sweep).
                *n = 0;
                *to = Requesters::default();
            }
            // A topic owed MAX_REPLIES_PER_TOPIC replies takes no further request: it
            // was counted no further and handed over all the same, so its reply was
            // refused and nobody told (hostile-input pass: 1,500 pipelined requests,
            // 476 replies PERMISSION_DENIED, no BUSY).
            if *n >= MAX_REPLIES_PER_TOPIC || !to.add(requester, slot) {
                let first = !self.refusing;
                self.refusing = true;
                return Grant::Refused { first };
            }
            *n += 1;
            *until = expiry;
            self.refusing = false;
            return Grant::Recorded;
        }
        let cost = response_cost(reply_to);
        if self.full_for(cost) {
            self.sweep(now_ns);
            if self.full_for(cost) {
                let first = !self.refusing;
                self.refusing = true;
                return Grant::Refused { first };
            }
        }
        if self.owed.is_empty() || expiry < self.earliest_expiry {
            self.earliest_expiry = expiry;
        }
        let mut to = Requesters::default();
        to.add(requester, slot);
        self.owed.insert(reply_to.into(), (1, expiry, to));
        self.bytes += cost;
        self.refusing = false;
        Grant::Recorded
    }

    /// Whether [`Responses::grant`] would record this grant now: a shared group passes
    /// over a member that could not take a request's reply. A full table is swept of
    /// expired grants first (what `grant` would do), so the two always agree (review:
    /// an expired short reply topic made this say yes to a long one that the byte
    /// bound then refused, and the member took the group's turn for nothing).
    pub fn can_grant(&mut self, reply_to: &str, requester: u64, now_ns: u64) -> bool {
        if let Some((n, until, to)) = self.owed.get(reply_to) {
            return *until <= now_ns || (*n < MAX_REPLIES_PER_TOPIC && to.has_room_for(requester));
        }
        let cost = response_cost(reply_to);
        if self.full_for(cost) {
            self.sweep(now_ns);
        }
        !self.full_for(cost)
    }

    /// Whether a new reply topic of `cost` bytes finds the table full.
    fn full_for(&self, cost: usize) -> bool {
        self.owed.len() >= MAX_PENDING_RESPONSES || self.bytes + cost > MAX_RESPONSE_BYTES
    }

    /// Drops the grants expired at `now_ns`, unless none can have (one walk at most per
    /// expiry time: the walk makes the bound true again; review: a full member was
    /// walked, 1,024 entries, on every request for up to 60 s).
    fn sweep(&mut self, now_ns: u64) {
        if now_ns < self.earliest_expiry {
            return;
        }
        let mut freed = 0;
        self.owed.retain(|topic, (_, until, _)| {
            let live = *until > now_ns;
            if !live {
                freed += response_cost(topic);
            }
            live
        });
        self.bytes -= freed;
        self.earliest_expiry = self.owed.values().map(|(_, u, _)| *u).min().unwrap_or(0);
    }

    /// Uses one reply owed on `topic` at `now_ns`: the requesters it may go to, `None`
    /// when none is owed (or it expired).
    pub fn take(&mut self, topic: &str, now_ns: u64) -> Option<Requesters> {
        let (n, until, to) = self.owed.get_mut(topic)?;
        let live = now_ns < *until;
        let to = *to;
        if live {
            *n -= 1;
        }
        if !live || *n == 0 {
            self.owed.remove(topic);
            self.bytes -= response_cost(topic);
        }
        live.then_some(to)
    }

    /// Reply topics with replies owed.
    pub fn pending(&self) -> usize {
        self.owed.len()
    }
}

/// Most topics one connection's publish decisions are remembered for; beyond it (or
/// beyond [`PUBLISH_CACHE_BYTES`]) the memory starts over (a client cycling through
/// more topics pays a rule scan per new topic, still never more than one per topic
/// until the next reset).
pub const PUBLISH_CACHE_TOPICS: usize = 4096;

/// Most bytes one connection's publish decisions may take, each topic counted as its
/// length plus [`PUBLISH_CACHE_ENTRY_BYTES`]: 4,096 topics of up to 16 bytes, or about
/// 880 of 250. Counted in topics alone, 4,096 long topics held ~1.3 MB per connection
/// outside every router-wide bound (hostile-input pass: 190 connections of one user,
/// 240 MB).
pub const PUBLISH_CACHE_BYTES: usize = 4096 * (16 + PUBLISH_CACHE_ENTRY_BYTES);

/// What a remembered topic costs beyond its text: its box's allocation rounding and
/// its place in the table.
pub const PUBLISH_CACHE_ENTRY_BYTES: usize = 48;

/// One connection's publish decisions, by topic: the rules are scanned once per topic.
/// Looked up once per PUBLISH, so keyed with ahash (keyed at random per map, as the
/// subscription index's maps: no peer can aim collisions at it) rather than SipHash:
/// a lookup of a short topic costs a few dozen instructions, not hundreds
/// (BENCHMARKS.md, "Issue 20: permissions in instructions").
#[derive(Debug, Default)]
pub struct PublishCache {
    decided: HashMap<Box<str>, bool, ahash::RandomState>,
    /// What `decided` holds, counted as [`PUBLISH_CACHE_BYTES`] says.
    bytes: usize,
}

impl PublishCache {
    /// Whether `perms` allow publishing to `topic` (validated), from memory when this
    /// topic was decided before.
    #[inline]
    pub fn may_publish(&mut self, perms: &Perms, topic: &str) -> bool {
        if let Some(&ok) = self.decided.get(topic) {
            return ok;
        }
        let ok = perms.may_publish(topic);
        let cost = topic.len() + PUBLISH_CACHE_ENTRY_BYTES;
        if self.decided.len() >= PUBLISH_CACHE_TOPICS || self.bytes + cost > PUBLISH_CACHE_BYTES {
            self.decided.clear();
            self.bytes = 0;
        }
        self.decided.insert(topic.into(), ok);
        self.bytes += cost;
        ok
    }

    /// Topics remembered now.
    pub fn len(&self) -> usize {
        self.decided.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.decided.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// USER_KEYS names every key a user entry takes: each one given is read, not left
    /// over as unknown, and a user with every field set serializes to those keys.
    #[test]
    fn user_keys_are_every_key_of_a_user_entry() {
        for key in USER_KEYS {
            let mut t = serde_json::Map::new();
            t.insert((*key).to_owned(), serde_json::Value::Bool(true));
            // A wrong type is an error, not an unknown key: either way it was read.
            if let Ok(u) = UserConfig::deserialize(serde_json::Value::Object(t)) {
                assert!(u.unknown.is_empty(), "{key} left unknown");
            }
        }
        let full = UserConfig {
            name: "u".into(),
            password_hash: Some("h".into()),
            token_sha256: Some("t".into()),
            cert_name: Some("c".into()),
            groups: vec!["g".into()],
            max_connections: Some(1),
            rules: Rules {
                admin: true,
                publish: ad(Some(&["a"]), &[]),
                subscribe: ad(Some(&["a"]), &[]),
                queues: ad(Some(&["a"]), &[]),
                allow_responses: true,
            },
            unknown: BTreeMap::new(),
        };
        let v = serde_json::to_value(&full).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = USER_KEYS.to_vec();
        keys.sort_unstable();
        expected.sort_unstable();
        assert_eq!(keys, expected);
    }

    fn ad(allow: Option<&[&str]>, deny: &[&str]) -> AllowDeny {
        AllowDeny {
            allow: allow.map(|a| a.iter().map(|s| s.to_string()).collect()),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn config() -> AuthConfig {
        let mut groups = BTreeMap::new();
        groups.insert(
            "md-readers".to_owned(),
            Rules {
                subscribe: ad(Some(&["md/>"]), &["md/secret/>"]),
                ..Rules::default()
            },
        );
        AuthConfig {
            users: vec![
                UserConfig {
                    name: "alice".into(),
                    password_hash: Some(hash_password(b"pw").unwrap()),
                    groups: vec!["md-readers".into()],
                    rules: Rules {
                        publish: ad(Some(&["orders/alice/>"]), &[]),
                        ..Rules::default()
                    },
                    ..UserConfig::default()
                },
                UserConfig {
                    name: "ops".into(),
                    token_sha256: Some(token_sha256(b"tok")),
                    rules: Rules {
                        admin: true,
                        ..Rules::default()
                    },
                    ..UserConfig::default()
                },
            ],
            groups,
            ..AuthConfig::default()
        }
    }

    #[test]
    fn passwords_and_tokens_log_in_and_nothing_else_does() {
        let a = Authenticator::new(&config(), true, 10).unwrap();
        let alice = a.login(AuthMethod::Password, "alice", b"pw").unwrap();
        assert_eq!(alice.name(), "alice");
        assert!(!alice.perms.is_admin());
        assert_eq!(
            a.login(AuthMethod::Password, "alice", b"wrong")
                .unwrap_err(),
            LoginError::BadPassword
        );
        assert_eq!(
            a.login(AuthMethod::Password, "nobody", b"pw").unwrap_err(),
            LoginError::BadPassword
        );
        // ops has a token and no password.
        assert_eq!(
            a.login(AuthMethod::Password, "ops", b"tok").unwrap_err(),
            LoginError::BadPassword
        );
        let ops = a.login(AuthMethod::Token, "", b"tok").unwrap();
        assert!(ops.perms.is_admin());
        assert!(a.login(AuthMethod::Token, "ops", b"tok").is_ok());
        assert_eq!(
            a.login(AuthMethod::Token, "alice", b"tok").unwrap_err(),
            LoginError::BadToken
        );
        assert_eq!(
            a.login(AuthMethod::Token, "", b"tak").unwrap_err(),
            LoginError::BadToken
        );
        // The messages never carry the secret.
        assert!(!LoginError::BadPassword.to_string().contains("pw"));
    }

    #[test]
    fn deny_wins_and_subscriptions_must_lie_inside_an_allow() {
        let a = Authenticator::new(&config(), true, 10).unwrap();
        let p = &a.login(AuthMethod::Password, "alice", b"pw").unwrap().perms;
        assert!(p.may_subscribe("md/NASDAQ/*").is_ok());
        assert!(p.may_subscribe("md/>").unwrap_err().contains("md/secret/>"));
        assert!(p.may_subscribe(">").is_err());
        assert!(p.may_subscribe("fx/EURUSD").is_err());
        assert!(p.may_subscribe("md/secret/x").is_err());
        assert!(p.may_publish("orders/alice/1"));
        assert!(!p.may_publish("orders/bob/1"));
        // No queue rules: any queue.
        assert!(p.may_use_queue("orders").is_ok());
        // Binding one also takes the subscribe rights of its subscriptions.
        let subs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(p
            .may_bind("ticks", Some(&subs(&["md/NASDAQ/>"])), false)
            .is_ok());
        let e = p.may_bind("orders", Some(&subs(&["md/NASDAQ/>", "orders/>"])), false);
        assert!(e.unwrap_err().contains("\"orders/>\""));
        assert!(p.may_bind("all-md", Some(&subs(&["md/>"])), false).is_err());
        let e = p.may_bind("dlq", Some(&[]), false).unwrap_err();
        assert!(e.contains("dead-lettered messages of any topic"), "{e}");
        // Review: a queue of her own patterns that takes another's dead letters holds
        // any topic all the same.
        let e = p.may_bind("orders-dlq", Some(&subs(&["md/NASDAQ/>"])), true);
        assert!(e.unwrap_err().contains("dead-lettered"));
        // No such queue: the bind reports that.
        assert!(p.may_bind("nowhere", None, false).is_ok());
        // No rules at all: everything.
        let ops = &a.login(AuthMethod::Token, "", b"tok").unwrap().perms;
        assert!(ops.may_subscribe(">").is_ok() && ops.may_publish("x") && ops.publishes_anywhere());
    }

    #[test]
    fn anonymous_follows_the_listener_and_the_policy() {
        let cfg = config();
        assert!(Authenticator::new(&cfg, true, 10)
            .unwrap()
            .anonymous()
            .is_ok());
        assert_eq!(
            Authenticator::new(&cfg, false, 10)
                .unwrap()
                .anonymous()
                .unwrap_err(),
            LoginError::Required
        );
        let open = AuthConfig {
            anonymous: Anonymous::Allow,
            ..AuthConfig::default()
        };
        assert!(Authenticator::new(&open, false, 10)
            .unwrap()
            .anonymous()
            .is_ok());
        // Non-loopback, no users, anonymous not opened: refused at start.
        let e = Authenticator::new(&AuthConfig::default(), false, 10).unwrap_err();
        assert!(e.0.contains("anonymous = \"allow\""), "{e}");
        // The default: loopback, everything.
        let a = Authenticator::new(&AuthConfig::default(), true, 10).unwrap();
        assert_eq!(a.anonymous().unwrap().perms, Perms::everything());
    }

    #[test]
    fn bad_configurations_are_refused_with_the_user_named() {
        let mut cfg = config();
        cfg.users[0].groups.push("nope".into());
        assert!(Authenticator::new(&cfg, true, 1)
            .unwrap_err()
            .0
            .contains("nope"));
        let mut cfg = config();
        cfg.users[0].rules.publish.deny.push("a//b".into());
        assert!(Authenticator::new(&cfg, true, 1)
            .unwrap_err()
            .0
            .contains("alice"));
        let mut cfg = config();
        cfg.users[1].token_sha256 = Some("xyz".into());
        assert!(Authenticator::new(&cfg, true, 1)
            .unwrap_err()
            .0
            .contains("64 hex"));
        let mut cfg = config();
        cfg.users[0]
            .unknown
            .insert("publsh".into(), serde_json::Value::Null);
        assert!(Authenticator::new(&cfg, true, 1)
            .unwrap_err()
            .0
            .contains("unknown key \"publsh\""));
        let mut cfg = config();
        cfg.users[0].password_hash = Some("plaintext".into());
        assert!(Authenticator::new(&cfg, true, 1)
            .unwrap_err()
            .0
            .contains("PHC"));
        // Hashes that parse as PHC strings but that no check could use, each named;
        // the crate's "value to short" spelt right.
        let salt = "dGlja3dpcmUtZHVtbXk";
        let out = "Ugnm8C0fwPUNkEhAJf5kNXCEzU4c5g7fdm1ZJwm0fzM";
        for (hash, says) in [
            (
                format!("$scrypt$ln=16,r=8,p=1${salt}${out}"),
                "not argon2id",
            ),
            (
                format!("$argon2id$v=18$m=19456,t=2,p=1${salt}${out}"),
                "version",
            ),
            (
                format!("$argon2id$v=19$m=1,t=2,p=1${salt}${out}"),
                "parameters",
            ),
            (
                format!("$argon2id$v=19$m=19456000,t=2,p=1${salt}${out}"),
                "KiB-passes",
            ),
            (
                format!("$argon2id$v=19$m=19456,t=2,p=1$abcdefg${out}"),
                "fewer than argon2's 8",
            ),
            (
                format!("$argon2id$v=19$m=19456,t=2,p=1${salt}"),
                "no salt or no hash",
            ),
            (
                format!("$argon2id$v=19$m=19456,t=2,p=1$ab${out}"),
                "too short",
            ),
        ] {
            let mut cfg = config();
            cfg.users[0].password_hash = Some(hash.clone());
            let e = Authenticator::new(&cfg, true, 1).unwrap_err().0;
            assert!(e.contains("alice") && e.contains(says), "{hash}: {e}");
            assert!(!e.contains("to short"), "{e}");
        }
        // The cost bound lets the default hash and RFC 9106's first recommendation
        // (t=1, 2 GiB) through.
        for m_t in ["m=19456,t=2", "m=2097152,t=1", "m=65536,t=32"] {
            let mut cfg = config();
            cfg.users[0].password_hash = Some(format!("$argon2id$v=19${m_t},p=1${salt}${out}"));
            assert!(Authenticator::new(&cfg, true, 1).is_ok(), "{m_t}");
        }
        // A control character (C0 or C1) in a name: it keys publisher identities.
        for name in ["ali\nce", "ali\u{1f}ce", "ali\u{9b}ce"] {
            let mut cfg = config();
            cfg.users[0].name = name.into();
            assert!(Authenticator::new(&cfg, true, 1)
                .unwrap_err()
                .0
                .contains("control characters"));
        }
    }

    #[test]
    fn responses_owe_one_reply_per_request_until_the_window_ends_and_stay_bounded() {
        let mut r = Responses::default();
        let t = 1_000;
        let only = |id| {
            let mut to = Requesters::default();
            to.add(id, 0);
            Some(to)
        };
        assert_eq!(r.take("_reply/1/a", t), None, "nothing granted yet");
        assert_eq!(r.grant("_reply/1/a", 1, 0, t), Grant::Recorded);
        assert_eq!(r.grant("_reply/1/a", 1, 0, t + 1), Grant::Recorded);
        assert_eq!(r.take("_reply/1/b", t + 2), None, "another topic");
        assert_eq!(r.take("_reply/1/a", t + 2), only(1), "to its requester");
        assert_eq!(
            r.take("_reply/1/a", t + 3),
            only(1),
            "two requests, two replies"
        );
        assert_eq!(r.take("_reply/1/a", t + 4), None, "no third");
        assert_eq!(r.pending(), 0);
        // The window counts from the latest request on the topic.
        assert_eq!(r.grant("_reply/1/a", 1, 0, t), Grant::Recorded);
        assert_eq!(
            r.take("_reply/1/a", t + RESPONSE_WINDOW_NS),
            None,
            "expired"
        );
        assert_eq!(r.pending(), 0, "an expired grant is dropped when tried");
        // A topic shared by requesters: each is a recipient, up to the bound.
        for id in 1..=MAX_REQUESTERS_PER_TOPIC as u64 {
            assert_eq!(r.grant("_reply/shared", id, 0, t), Grant::Recorded);
        }
        assert_eq!(
            r.grant("_reply/shared", 99, 0, t),
            Grant::Refused { first: true }
        );
        assert_eq!(
            r.grant("_reply/shared", 2, 0, t),
            Grant::Recorded,
            "a known requester"
        );
        let to = r.take("_reply/shared", t + 1).unwrap();
        assert_eq!(
            to.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        while r.take("_reply/shared", t + 1).is_some() {}
        // Full of live grants: refused, and only the first refusal of a run says so.
        for i in 0..MAX_PENDING_RESPONSES {
            assert_eq!(r.grant(&format!("_reply/{i}"), 1, 0, t), Grant::Recorded);
        }
        assert_eq!(
            r.grant("_reply/x", 1, 0, t + 1),
            Grant::Refused { first: true }
        );
        assert_eq!(
            r.grant("_reply/y", 1, 0, t + 1),
            Grant::Refused { first: false }
        );
        assert_eq!(r.pending(), MAX_PENDING_RESPONSES);
        assert_eq!(r.take("_reply/x", t + 2), None);
        // A topic already owed still counts up while full.
        assert_eq!(r.grant("_reply/7", 1, 0, t + 1), Grant::Recorded);
        // Once the grants expire, the sweep makes room.
        let later = t + RESPONSE_WINDOW_NS + 2;
        assert_eq!(r.grant("_reply/z", 1, 0, later), Grant::Recorded);
        assert_eq!(r.pending(), 1);
        assert_eq!(r.take("_reply/z", later), only(1));
    }

    /// Hostile-input pass: 1,024 reply topics of 240 bytes held ~380 KB per responder.
    #[test]
    fn grants_are_bounded_in_bytes_and_give_them_back() {
        let mut r = Responses::default();
        let t = 1_000;
        let long = |i: usize| format!("_reply/{i:0>243}");
        assert_eq!(long(0).len(), 250);
        let fits = MAX_RESPONSE_BYTES / response_cost(&long(0));
        for i in 0..fits {
            assert_eq!(r.grant(&long(i), 1, 0, t), Grant::Recorded);
        }
        assert!(r.bytes <= MAX_RESPONSE_BYTES);
        assert!(!r.can_grant(&long(fits), 1, t));
        assert_eq!(
            r.grant(&long(fits), 1, 0, t),
            Grant::Refused { first: true }
        );
        assert_eq!(r.pending(), fits);
        // Short inboxes still get the full count once room is made.
        assert!(r.take(&long(0), t).is_some());
        assert!(r.can_grant("_reply/1/a", 1, t));
        assert_eq!(r.grant("_reply/1/a", 1, 0, t), Grant::Recorded);
        // Used or expired, the grants give their bytes back.
        for i in 1..fits {
            assert!(r.take(&long(i), t).is_some());
        }
        assert!(r.take("_reply/1/a", t).is_some());
        assert_eq!((r.pending(), r.bytes), (0, 0));
        for i in 0..fits {
            assert_eq!(r.grant(&long(i), 1, 0, t), Grant::Recorded);
        }
        let later = t + RESPONSE_WINDOW_NS;
        assert!(
            !r.can_grant(&long(fits), 1, later - 1),
            "full until they expire"
        );
        assert_eq!(r.grant(&long(fits), 1, 0, later), Grant::Recorded);
        assert_eq!((r.pending(), r.bytes), (1, response_cost(&long(fits))));
        // 1,024 short inboxes, the documented count, fit.
        let mut r = Responses::default();
        for i in 0..MAX_PENDING_RESPONSES {
            let topic = format!("_reply/{i:0>25}");
            assert_eq!(topic.len(), 32);
            assert_eq!(r.grant(&topic, 1, 0, t), Grant::Recorded);
        }
    }

    /// Review: an expired short reply topic made `can_grant` say yes to a long one that
    /// the byte bound then refused.
    #[test]
    fn can_grant_agrees_with_grant_at_the_byte_bound() {
        let mut r = Responses::default();
        let long = |i: usize| format!("_reply/{i:0>243}");
        assert_eq!(r.grant("_reply/s", 1, 0, 0), Grant::Recorded);
        let mut k = 0;
        while r.bytes + response_cost(&long(k)) <= MAX_RESPONSE_BYTES {
            assert_eq!(r.grant(&long(k), 1, 0, 10), Grant::Recorded);
            k += 1;
        }
        let now = RESPONSE_WINDOW_NS + 1;
        assert!(
            !r.can_grant(&long(k), 1, now),
            "the short one frees too few bytes"
        );
        assert_eq!(r.grant(&long(k), 1, 0, now), Grant::Refused { first: true });
        assert!(
            r.can_grant("_reply/t", 1, now),
            "a short one fits where it was"
        );
        assert_eq!(r.grant("_reply/t", 1, 0, now), Grant::Recorded);
    }

    #[test]
    fn a_reply_topic_owed_its_most_replies_takes_no_further_request() {
        let mut r = Responses::default();
        let t = 1_000;
        for _ in 0..MAX_REPLIES_PER_TOPIC {
            assert_eq!(r.grant("_reply/1/p", 1, 0, t), Grant::Recorded);
        }
        assert!(!r.can_grant("_reply/1/p", 1, t), "at the bound");
        assert_eq!(
            r.grant("_reply/1/p", 1, 0, t),
            Grant::Refused { first: true },
            "request 1,025 is not handed over: its reply could not be published"
        );
        assert!(r.take("_reply/1/p", t).is_some());
        assert!(
            r.can_grant("_reply/1/p", 1, t),
            "one reply used: room again"
        );
        assert_eq!(r.grant("_reply/1/p", 1, 0, t), Grant::Recorded);
        let mut replies = 0;
        while r.take("_reply/1/p", t).is_some() {
            replies += 1;
        }
        assert_eq!(
            replies, MAX_REPLIES_PER_TOPIC,
            "every grant recorded is a reply"
        );
    }

    #[test]
    fn allow_responses_is_read_from_a_user_or_its_groups() {
        let open = Perms::from_rules([&Rules::default()]);
        assert!(!open.allows_responses());
        let r = Rules {
            allow_responses: true,
            ..Rules::default()
        };
        assert!(Perms::from_rules([&Rules::default(), &r]).allows_responses());
        let parsed: AuthConfig = serde_json::from_str(
            r#"{"users": [{"name": "svc", "token_sha256": "00", "allow_responses": true}],
                "groups": {"g": {"allow_responses": true}}}"#,
        )
        .unwrap();
        assert!(parsed.users[0].rules.allow_responses);
        assert!(parsed.groups["g"].allow_responses);
    }

    /// The one-buffer check agrees with the argon2 crate's own verifier on right and
    /// wrong passwords, non-default parameters (a smaller and then a larger memory, so
    /// the buffer is reused and grown) and hashes that do not parse.
    #[test]
    fn checks_on_one_reused_memory_agree_with_the_crate_verifier() {
        use argon2::password_hash::PasswordVerifier;
        let memory = ArgonMemory::default();
        let small = Argon2::new(
            Algorithm::Argon2id,
            Version::V0x13,
            Params::new(64, 1, 1, Some(16)).unwrap(),
        );
        let salt = SaltString::encode_b64(b"sixteen byte sal").unwrap();
        let small_hash = small.hash_password(b"s3cret", &salt).unwrap().to_string();
        let big_hash = hash_password(b"hunter2").unwrap();
        let v13 = Argon2::new(
            Algorithm::Argon2i,
            Version::V0x10,
            Params::new(128, 2, 2, None).unwrap(),
        )
        .hash_password(b"old", &salt)
        .unwrap()
        .to_string();
        for (hash, password, right) in [
            (small_hash.as_str(), &b"s3cret"[..], true),
            (&small_hash, b"s3creT", false),
            (&big_hash, b"hunter2", true),
            (&big_hash, b"hunter3", false),
            (&big_hash, b"", false),
            (&small_hash, b"s3cret", true),
            (&v13, b"old", true),
            (&v13, b"new", false),
            (DUMMY_HASH, b"anything", false),
        ] {
            assert_eq!(memory.verify(hash, password), right, "{hash}");
            let crate_says = Argon2::default()
                .verify_password(password, &PasswordHash::new(hash).unwrap())
                .is_ok();
            assert_eq!(crate_says, right, "{hash}");
        }
        // Grown to the default m=19456 blocks once, and kept.
        assert_eq!(memory.0.lock().unwrap().len(), 19456);
        for bad in [
            "",
            "$argon2id$",
            "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ",
            "$md5$x",
        ] {
            assert!(!memory.verify(bad, b"x"), "{bad}");
        }
    }

    #[test]
    fn the_dummy_hash_parses_and_the_publish_cache_is_bounded() {
        assert!(PasswordHash::new(DUMMY_HASH).is_ok());
        let p = Perms::from_rules([&Rules {
            publish: ad(Some(&["a/>"]), &[]),
            ..Rules::default()
        }]);
        let mut c = PublishCache::default();
        for i in 0..PUBLISH_CACHE_TOPICS + 10 {
            assert!(c.may_publish(&p, &format!("a/{i}")));
            assert!(c.decided.len() <= PUBLISH_CACHE_TOPICS);
        }
        assert!(!c.may_publish(&p, "b"));
    }

    /// Review: an expired reply topic still listing four requesters refused a fifth
    /// until a sweep; and a full table whose bound went stale (`take` removes entries
    /// without raising it) was walked by `can_grant` on every request.
    #[test]
    fn expired_grants_give_way_and_the_expiry_bound_is_made_true() {
        let w = RESPONSE_WINDOW_NS;
        let mut r = Responses::default();
        for id in 1..=4 {
            assert_eq!(r.grant("t", id, 0, 0), Grant::Recorded);
        }
        assert!(!r.can_grant("t", 5, 1));
        assert_eq!(r.grant("t", 5, 0, 1), Grant::Refused { first: true });
        assert!(r.can_grant("t", 5, w));
        assert_eq!(r.grant("t", 5, 0, w), Grant::Recorded);
        let to = r.take("t", w + 1).map(|to| to.iter().collect::<Vec<_>>());
        assert_eq!(to, Some(vec![(5, 0)]));

        let mut r = Responses::default();
        assert_eq!(r.grant("first", 1, 0, 0), Grant::Recorded);
        for i in 1..MAX_PENDING_RESPONSES {
            assert_eq!(r.grant(&format!("t{i}"), 1, 0, 10), Grant::Recorded);
        }
        assert!(r.take("first", 5).is_some());
        assert_eq!(r.grant("refill", 1, 0, 11), Grant::Recorded);
        assert_eq!(r.earliest_expiry, w, "stale: the entry that set it is gone");
        assert!(!r.can_grant("more", 1, w + 1));
        assert_eq!(r.earliest_expiry, 10 + w, "made true by the walk");
        assert!(r.can_grant("more", 1, 10 + w));
    }

    /// Hostile-input pass: 4,096 topics of 250 bytes held ~1.3 MB per connection; the
    /// memory is bounded in bytes too, and decisions stay right across resets.
    #[test]
    fn the_publish_cache_is_bounded_in_bytes() {
        let p = Perms::from_rules([&Rules {
            publish: ad(Some(&["a/>"]), &["a/x/>"]),
            ..Rules::default()
        }]);
        let mut c = PublishCache::default();
        let long = "y".repeat(246);
        let mut most = 0;
        for i in 0..3 * PUBLISH_CACHE_TOPICS {
            let topic = format!("a/{}/{i:08}{long}", if i % 3 == 0 { "x" } else { "ok" });
            assert_eq!(c.may_publish(&p, &topic), i % 3 != 0, "{topic}");
            assert!(c.bytes <= PUBLISH_CACHE_BYTES);
            let text: usize = c.decided.keys().map(|k| k.len()).sum();
            assert!(text + c.len() * PUBLISH_CACHE_ENTRY_BYTES <= PUBLISH_CACHE_BYTES);
            most = most.max(c.len());
        }
        // Topics of 258-259 bytes: about 850 at once, not 4,096.
        let each = |len: usize| PUBLISH_CACHE_BYTES / (len + PUBLISH_CACHE_ENTRY_BYTES);
        assert!((each(259)..=each(258)).contains(&most), "{most}");
        // Short topics still get all 4,096 places.
        let mut c = PublishCache::default();
        for i in 0..PUBLISH_CACHE_TOPICS {
            assert!(c.may_publish(&p, &format!("a/{i:014}")));
        }
        assert_eq!(c.len(), PUBLISH_CACHE_TOPICS);
    }
}
