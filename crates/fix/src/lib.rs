//! tickwire FIX engine core. Pure protocol parts (codec, dictionary, validation,
//! session state machine; time is always a parameter) plus the message stores.

/// A test-only work counter (a module `$name` with `add(n)` and `take()`, one count per
/// thread): the tests that pin down linear costs count work instead of timing it. One
/// per thing counted, so that one test's parse does not count in another's walk.
#[cfg(test)]
macro_rules! work_counter {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        mod $name {
            use std::cell::Cell;

            thread_local! {
                static STEPS: Cell<usize> = const { Cell::new(0) };
            }

            pub(super) fn add(n: usize) {
                STEPS.with(|s| s.set(s.get() + n));
            }

            /// The steps counted on this thread since the last call.
            pub(super) fn take() -> usize {
                STEPS.with(|s| s.replace(0))
            }
        }
    };
}

pub mod codec;
pub mod dict;
pub mod order;
pub mod session;
pub mod settings;
pub mod store;
pub mod validate;
