//! Deterministic, seeded loss injection (`--loss P --seed S`) for tests and demos.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Error;

/// Drops datagrams with probability `p`, the same ones for the same seed.
#[derive(Debug, Clone)]
pub struct Loss {
    p: f64,
    rng: ChaCha8Rng,
    dropped: u64,
}

impl Loss {
    /// `p` in `0.0..1.0` (a fraction: 0.05 is 5%).
    pub fn new(p: f64, seed: u64) -> Result<Loss, Error> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Config(format!(
                "loss {p} is not a fraction in 0..1 (0.05 is 5%)"
            )));
        }
        Ok(Loss {
            p,
            rng: ChaCha8Rng::seed_from_u64(seed),
            dropped: 0,
        })
    }

    /// No loss.
    pub fn none() -> Loss {
        Loss {
            p: 0.0,
            rng: ChaCha8Rng::seed_from_u64(0),
            dropped: 0,
        }
    }

    /// Whether to drop the next datagram.
    pub fn drop_next(&mut self) -> bool {
        if self.p == 0.0 {
            return false;
        }
        let d = self.rng.gen_bool(self.p);
        self.dropped += u64::from(d);
        d
    }

    /// Datagrams dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
