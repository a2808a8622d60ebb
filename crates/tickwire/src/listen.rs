//! Listen addresses on the command line: an IP address or a host name, and what a
//! failed bind tells the user.
//!
//! Clients take `HOST:PORT` (`--router localhost:7420`); the listeners take the same,
//! resolved once at start-up. A name may resolve to several addresses (`localhost` to
//! 127.0.0.1 and ::1): a listener binds one, the first the resolver gives, and the log
//! says which.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

/// What a listen flag says, as the usage line shows it.
const EXPECTED: &str = "expected IP:PORT or HOST:PORT (e.g. 127.0.0.1:7420, [::1]:7420, \
                        localhost:7420)";

/// Checks the form of a listen address for clap (`HOST:PORT`, IPv6 in brackets, a
/// port number): a typo is a usage error before anything starts. The name is
/// resolved later, by [`resolve`].
pub fn parse(s: &str) -> Result<String, String> {
    if s.parse::<SocketAddr>().is_ok() {
        return Ok(s.to_owned());
    }
    if let Ok(port) = s.parse::<u16>() {
        return Err(format!(
            "{s:?} is a port without an address: give both, {}",
            listen_for(&port.to_string())
        ));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{s:?} is not a port number (at most 65535): {EXPECTED}"
        ));
    }
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("no port in {s:?}: {EXPECTED}"))?;
    if host.is_empty() || host.contains(':') || host.contains('[') || host.contains(']') {
        return Err(format!("{s:?} is not an address: {EXPECTED}"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("{port:?} is not a port number: {EXPECTED}"))?;
    Ok(s.to_owned())
}

/// The router's hidden `--port`: always a usage error, saying what to type instead.
pub fn no_port_flag(s: &str) -> Result<String, String> {
    let port = match s.parse::<u16>() {
        Ok(p) => p.to_string(),
        Err(_) => "PORT".to_owned(),
    };
    Err(format!(
        "the router has no --port: use --listen ADDR:PORT, {}",
        listen_for(&port)
    ))
}

/// Addresses to listen on `port`, for the messages of a port given alone.
fn listen_for(port: &str) -> String {
    format!("e.g. 127.0.0.1:{port} (this host only) or 0.0.0.0:{port} (every interface)")
}

/// The address to bind for `text` (given with `flag`): an IP address as is; a host
/// name resolved, its first address taken. A name that resolves to several
/// addresses is logged with all of them, so the one bound is no surprise.
pub fn resolve(flag: &str, text: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    // The form first, as the flags' parser checks it (new-user pass: `listen = "7420"`
    // in a config file said "cannot resolve the host name").
    parse(text).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
    let all: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| {
            anyhow::anyhow!(
                "{flag} {text}: cannot resolve the host name ({e}); \
                 use an IP address such as 127.0.0.1"
            )
        })?
        .collect();
    let Some(&first) = all.first() else {
        anyhow::bail!(
            "{flag} {text}: the host name has no address; use an IP address such as 127.0.0.1"
        );
    };
    if all.len() > 1 {
        let list: Vec<String> = all.iter().map(ToString::to_string).collect();
        tracing::info!(
            "{flag} {text} resolves to {}: listening on the first, {first}",
            list.join(", ")
        );
    } else {
        tracing::info!("{flag} {text} resolves to {first}");
    }
    Ok(first)
}

/// `e` with `hint` after it when its cause is an address already in use ("is another
/// tickwire router running? pick another port with --listen"); any other error as is.
pub fn hint_in_use(e: anyhow::Error, hint: &str) -> anyhow::Error {
    let in_use = e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::AddrInUse)
    });
    if in_use {
        anyhow::anyhow!("{}: {hint}", crate::units::error_text(&e))
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_and_host_names_with_a_port_are_accepted() {
        for ok in [
            "127.0.0.1:7420",
            "0.0.0.0:0",
            "[::1]:7420",
            "localhost:7420",
            "router-1.example:1",
        ] {
            assert_eq!(parse(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "localhost",
            "7420",
            ":7420",
            "localhost:port",
            "::1:7420",
            "[::1]",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse("99999").unwrap_err();
        assert!(e.contains("not a port number (at most 65535)"), "{e}");
    }

    #[test]
    fn an_ip_address_is_not_resolved_and_localhost_is() {
        let ip = resolve("--listen", "127.0.0.1:7420").unwrap();
        assert_eq!(ip, "127.0.0.1:7420".parse().unwrap());
        let name = resolve("--listen", "localhost:7420").unwrap();
        assert!(name.ip().is_loopback(), "{name}");
        assert_eq!(name.port(), 7420);
    }

    #[test]
    fn only_a_port_in_use_gets_the_hint() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = std::net::TcpListener::bind(taken.local_addr().unwrap()).unwrap_err();
        let e = anyhow::Error::from(e).context("binding");
        let hint = "is another tickwire router running? pick another port with --listen";
        let text = hint_in_use(e, hint).to_string();
        assert!(
            text.starts_with("binding: ") && text.ends_with(&format!(": {hint}")),
            "{text}"
        );
        let other = anyhow::anyhow!("no such file");
        let text = hint_in_use(other, hint).to_string();
        assert_eq!(text, "no such file");
    }
}
