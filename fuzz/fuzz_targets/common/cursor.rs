//! The byte cursor the structured fuzz targets (`router_input`, `fix_session`) read their
//! operations from: each read takes what is left and never panics on a short input.

pub struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    pub fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
}
