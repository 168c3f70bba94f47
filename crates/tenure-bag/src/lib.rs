//! Not implemented yet: this crate is being written.
