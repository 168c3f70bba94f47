//! Lease names, backend keys, bag item names and store URLs (file://,
//! tenure://): never a panic; a name that passes never leaves the store's root.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use tenure_core::{LeaseName, OpenOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if tenure_core::backend::check_key(text).is_ok() || LeaseName::new(text).is_ok() {
        let joined = Path::new("/root").join(text);
        assert!(joined.components().skip(2).all(|c| matches!(c, Component::Normal(_))), "{text:?}");
    }
    if tenure_bag::frame::is_item_name(text, ".data") {
        assert!(!text.contains('/') && !text.starts_with('.'));
    }
    let _ = tenure_file::DirUrl::parse(text, &BTreeMap::new());
    let _ = tenure_bag::fs::open(text);
    if !text.contains("auth_token_file") {
        let _ = tenure_server::TenureStore::new(text, &OpenOptions::default());
    }
});
