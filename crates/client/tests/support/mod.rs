//! Shared by the client's test binaries: the real router (`tickwire_router::Router`)
//! running in a thread of this process, on 127.0.0.1.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::thread::{self, JoinHandle};

use tickwire_router::core::Totals;
use tickwire_router::driver::Error;
use tickwire_router::{Config, Router, RouterHandle};

/// A router running in a thread of this process until [`InProcessRouter::stop`].
pub struct InProcessRouter {
    pub addr: SocketAddr,
    handle: RouterHandle,
    thread: JoinHandle<Result<Totals, Error>>,
}

impl InProcessRouter {
    /// Binds a router with `cfg` and runs it.
    pub fn start(cfg: Config) -> InProcessRouter {
        InProcessRouter::run(Router::bind(cfg).expect("router binds"))
    }

    /// Runs a bound router in a new thread.
    pub fn run(router: Router) -> InProcessRouter {
        let addr = router.local_addr();
        let handle = router.handle();
        let thread = thread::spawn(move || router.run());
        InProcessRouter {
            addr,
            handle,
            thread,
        }
    }

    /// Shuts the router down gracefully, waits for its thread and returns its totals;
    /// panics if it failed.
    pub fn stop(self) -> Totals {
        self.handle.shutdown();
        self.thread
            .join()
            .expect("router thread")
            .expect("router ran")
    }
}
