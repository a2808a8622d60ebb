//! [`SessionSpec`]: everything the engine needs to run one session (the session core's
//! configuration plus the driver's: sockets, store, dictionaries, message log), built
//! from a QuickFIX `[SESSION]` or in code.
//!
//! # QuickFIX keys used by the engine (beyond `SessionConfig::from_settings`)
//!
//! | key | effect |
//! |---|---|
//! | `ConnectionType` | acceptor: listen; initiator: connect |
//! | `SocketAcceptPort`, `SocketAcceptHost` | acceptor's listening address (all interfaces by default); sessions with the same address share one listener |
//! | `SocketConnectHost`/`Port`, `SocketConnectHost1`/`Port1`, ... | initiator's address and failover addresses, tried in turn, one per connection attempt (`ReconnectInterval` apart) |
//! | `SocketNodelay` | `TCP_NODELAY` (default Y in tickwire) |
//! | `FileStorePath` | file store directory (memory store when absent); `TickwireStoreSync`/`TickwireStoreSyncBatch` pick its sync policy |
//! | `PersistMessages` | passed to the session (resends become gap fills when N) |
//! | `UseDataDictionary`, `DataDictionary`, `TransportDataDictionary`, `AppDataDictionary`, `Validate*`, `AllowUnknownMsgFields` | validation of received messages |
//! | `FileLogPath` | message and event log files written off the engine thread ([`crate::MessageLog`]) |
//! | `TickwireIdleStrategy` | `block` or `spin`; the engine spins if any session asks for it |
//! | `AllowedRemoteAddresses` | acceptor: only these peer IP addresses may log on to the session; a connection from elsewhere is closed at accept when no session of the listener admits it, else at its Logon, without a reply |
//! | `TickwireMaxLogonLength`, `TickwireMaxPendingConnections` | the acceptor's bounds before Logon ([`crate::EngineOptions::max_logon_len`], [`crate::EngineOptions::max_pending`]); engine-wide: the largest / smallest of the sessions' values |

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tickwire_fix::dict::Dictionary;
use tickwire_fix::session::{Role, SessionConfig, Validation};
use tickwire_fix::settings::{ConnectionType, SessionId, SessionSettings};
use tickwire_fix::store::SyncPolicy;
use tickwire_fix::validate::ValidationOptions;

use crate::Error;

/// Which message store a session uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// In memory: sequence numbers restart at 1 with every process.
    Memory,
    /// The durable file store: the session's directory under `path`
    /// (QuickFIX's `FileStorePath`), with this sync policy.
    File {
        /// `FileStorePath`.
        path: PathBuf,
        /// When `flush` syncs (`TickwireStoreSync`).
        sync: SyncPolicy,
    },
}

/// One session as the engine runs it.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Identity (BeginString, CompIDs, qualifier); printed as QuickFIX prints it.
    pub id: SessionId,
    /// The session core's configuration.
    pub config: SessionConfig,
    /// Message store.
    pub store: StoreSpec,
    /// Dictionary validation of received messages (None: session-level checks only).
    pub validation: Option<Validation>,
    /// Acceptor: the address to listen on (port 0: any free port, see
    /// [`crate::Engine::listen_addrs`]).
    pub accept: Option<SocketAddr>,
    /// Initiator: the address and failover addresses, tried in turn.
    pub connect: Vec<(String, u16)>,
    /// Set `TCP_NODELAY` on the session's connections.
    pub nodelay: bool,
    /// `FileLogPath`: write this session's messages and events there.
    pub file_log_path: Option<PathBuf>,
    /// Acceptor: `AllowedRemoteAddresses`, the peers that may log on to this session
    /// (empty: any). A Logon for this session from another address closes the
    /// connection without a reply.
    pub allowed_remote_addresses: Vec<IpAddr>,
}

impl SessionSpec {
    /// A session with a memory store, no validation, no log: set `accept` (acceptor)
    /// or `connect` (initiator) before giving it to [`crate::Engine::new`].
    pub fn new(config: SessionConfig) -> SessionSpec {
        let id = SessionId {
            begin_string: config.begin_string.clone(),
            sender_comp_id: config.sender_comp_id.clone(),
            sender_sub_id: config.sender_sub_id.clone().unwrap_or_default(),
            sender_location_id: config.sender_location_id.clone().unwrap_or_default(),
            target_comp_id: config.target_comp_id.clone(),
            target_sub_id: config.target_sub_id.clone().unwrap_or_default(),
            target_location_id: config.target_location_id.clone().unwrap_or_default(),
            qualifier: String::new(),
        };
        SessionSpec {
            id,
            config,
            store: StoreSpec::Memory,
            validation: None,
            accept: None,
            connect: Vec::new(),
            nodelay: true,
            file_log_path: None,
            allowed_remote_addresses: Vec::new(),
        }
    }

    /// The engine's view of a QuickFIX `[SESSION]` (see the module docs for the keys).
    /// `dicts` caches loaded dictionaries by path so that sessions share them.
    pub fn from_settings(
        s: &SessionSettings,
        dicts: &mut DictionaryCache,
    ) -> Result<SessionSpec, Error> {
        let name = s.id.to_string();
        let config = SessionConfig::from_settings(s).map_err(|source| Error::SessionConfig {
            session: name.clone(),
            source,
        })?;
        let mut spec = SessionSpec::new(config);
        spec.id = s.id.clone();
        spec.nodelay = s.socket_nodelay;
        spec.file_log_path = s.file_log_path.clone();
        spec.allowed_remote_addresses = s.allowed_remote_addresses.clone();
        spec.store = match &s.file_store_path {
            Some(p) => StoreSpec::File {
                path: p.clone(),
                sync: s.store_sync,
            },
            None => StoreSpec::Memory,
        };
        match s.connection_type {
            ConnectionType::Acceptor => {
                let port = s.socket_accept_port.ok_or_else(|| Error::Config {
                    session: name.clone(),
                    reason: "acceptor without SocketAcceptPort".into(),
                })?;
                let host = s.socket_accept_host.as_deref().unwrap_or("0.0.0.0");
                let addr = (host, port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| Error::Config {
                        session: name.clone(),
                        reason: format!("cannot resolve SocketAcceptHost {host:?}"),
                    })?;
                spec.accept = Some(addr);
            }
            ConnectionType::Initiator => {
                if s.socket_connect.is_empty() {
                    return Err(Error::Config {
                        session: name,
                        reason: "initiator without SocketConnectHost/SocketConnectPort".into(),
                    });
                }
                spec.connect = s.socket_connect.clone();
            }
        }
        spec.validation = validation(s, &name, dicts)?;
        Ok(spec)
    }

    /// Acceptor or initiator.
    pub fn role(&self) -> Role {
        self.config.role
    }
}

/// Loaded dictionaries by path, shared between sessions.
#[derive(Debug, Default)]
pub struct DictionaryCache {
    loaded: HashMap<PathBuf, Arc<Dictionary>>,
}

impl DictionaryCache {
    /// An empty cache.
    pub fn new() -> DictionaryCache {
        DictionaryCache::default()
    }

    /// The dictionary at `path`, loaded once. A relative `path` is taken as QuickFIX
    /// takes it, from the current directory; one that is not there is looked for where
    /// the standard dictionaries are ([`resolve_dictionary`]).
    pub fn load(&mut self, path: &Path, session: &str) -> Result<Arc<Dictionary>, Error> {
        let env = tickwire_rt::paths::Environment::current();
        let found = resolve_dictionary(path, &env).map_err(|reason| Error::Config {
            session: session.to_string(),
            reason,
        })?;
        let path = found.as_path();
        if let Some(d) = self.loaded.get(path) {
            return Ok(d.clone());
        }
        let d = Arc::new(
            Dictionary::from_file(path).map_err(|source| Error::Dictionary {
                session: session.to_string(),
                path: path.to_path_buf(),
                source,
            })?,
        );
        self.loaded.insert(path.to_path_buf(), d.clone());
        Ok(d)
    }
}

/// Where the dictionary a `DataDictionary` setting names is: `path` itself when it is
/// absolute or there (relative to the current directory, as QuickFIX reads it), else
/// the first of the places the standard dictionaries are looked for
/// (`TICKWIRE_FIX_SPEC`, `target/fix-spec` in the current directory, the per-user data
/// directory, beside the binary: [`tickwire_rt::paths::places`]) that holds it. Nowhere:
/// the text says every place looked and how to get the dictionaries.
pub fn resolve_dictionary(
    path: &Path,
    env: &tickwire_rt::paths::Environment,
) -> Result<PathBuf, String> {
    use tickwire_rt::paths::{places, FIX_SPEC};
    match path.try_exists() {
        // Or it cannot be told (a directory we may not search): reading it says why.
        Ok(true) | Err(_) => return Ok(path.to_path_buf()),
        Ok(false) if path.is_absolute() => {
            return Err(format!(
                "data dictionary {} not found (no such file)\n{}",
                path.display(),
                tickwire_rt::paths::FIX_SPEC.hint
            ))
        }
        Ok(false) => {}
    }
    let spec_dirs = places(&FIX_SPEC, None, env);
    if let Some(found) = spec_dirs
        .iter()
        .map(|p| p.path.join(path))
        .find(|p| p.exists())
    {
        return Ok(found);
    }
    let mut reason = format!(
        "data dictionary {} not found; looked in:\n  {} (as the setting names it)",
        path.display(),
        path.display()
    );
    for p in &spec_dirs {
        reason.push_str(&format!(
            "\n  {} ({})",
            p.path.join(path).display(),
            p.source
        ));
    }
    reason.push('\n');
    reason.push_str(FIX_SPEC.hint);
    Err(reason)
}

fn validation(
    s: &SessionSettings,
    name: &str,
    dicts: &mut DictionaryCache,
) -> Result<Option<Validation>, Error> {
    if !s.use_data_dictionary {
        return Ok(None);
    }
    let options = ValidationOptions {
        use_data_dictionary: true,
        validate_fields_out_of_order: s.validate_fields_out_of_order,
        validate_fields_have_values: s.validate_fields_have_values,
        validate_user_defined_fields: s.validate_user_defined_fields,
        allow_unknown_msg_fields: s.allow_unknown_msg_fields,
        validate_length_and_checksum: s.validate_length_and_checksum,
        check_comp_id: s.check_comp_id,
        check_latency: s.check_latency,
        max_latency: s.max_latency,
        ..ValidationOptions::default()
    };
    if s.id.begin_string == "FIXT.1.1" {
        let (Some(t), Some((_, a))) = (
            s.transport_data_dictionary.as_ref(),
            s.app_data_dictionaries
                .iter()
                .find(|(suffix, _)| suffix.is_empty())
                .or_else(|| s.app_data_dictionaries.first()),
        ) else {
            // QuickFIX validates only when the dictionaries are given.
            return Ok(None);
        };
        let t = dicts.load(t, name)?;
        let a = dicts.load(a, name)?;
        // Every application dictionary under its ApplVerID, as QuickFIX's provider:
        // the plain key under the session's DefaultApplVerID, `.<version>` under that
        // version (a later one for the same version replaces an earlier one).
        let mut v = Validation::fixt(t, a, options);
        for (suffix, path) in &s.app_data_dictionaries {
            let version = match suffix.as_str() {
                "" => s.default_appl_ver_id.as_deref().unwrap_or("FIX.5.0"),
                sfx => sfx,
            };
            v = v.with_app_for(version, dicts.load(path, name)?);
        }
        return Ok(Some(v));
    }
    match s.data_dictionary.as_ref() {
        Some(p) => Ok(Some(Validation::single(dicts.load(p, name)?, options))),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_rt::paths::Environment;

    /// New-user pass: `DataDictionary=FIX44.xml` with `TICKWIRE_FIX_SPEC` pointing at
    /// the directory holding it failed with "FIX44.xml: cannot read data dictionary: No
    /// such file or directory", naming no place looked.
    #[test]
    fn a_relative_dictionary_not_in_the_current_directory_is_looked_for_with_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let name = "TW-resolve-test-dictionary.xml";
        std::fs::write(dir.path().join(name), "<fix/>").unwrap();
        let spec = dir.path().to_str().unwrap();
        let env = Environment::new(&[("TICKWIRE_FIX_SPEC", spec)], None, None);
        assert_eq!(
            resolve_dictionary(Path::new(name), &env).unwrap(),
            dir.path().join(name)
        );
        // An absolute path is taken as it is; a missing one is said to be missing, with
        // how to get the dictionaries (new-user pass: it said "PATH: PATH: cannot read
        // data dictionary", no hint).
        let abs = dir.path().join(name);
        assert_eq!(resolve_dictionary(&abs, &env).unwrap(), abs);
        let absent = dir.path().join("absent.xml");
        let e = resolve_dictionary(&absent, &env).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "data dictionary {} not found (no such file)",
                absent.display()
            )) && e.contains("scripts/fetch-fix-spec.sh"),
            "{e}"
        );
        // Nowhere: every place looked, and how to get the dictionaries.
        let e = resolve_dictionary(Path::new("TW-nowhere.xml"), &env).unwrap_err();
        assert!(
            e.starts_with("data dictionary TW-nowhere.xml not found; looked in:"),
            "{e}"
        );
        assert!(e.contains("(as the setting names it)"), "{e}");
        assert!(
            e.contains(&format!(
                "{} ($TICKWIRE_FIX_SPEC)",
                dir.path().join("TW-nowhere.xml").display()
            )),
            "{e}"
        );
        assert!(e.contains("fetch-fix-spec.sh"), "{e}");
    }
}
