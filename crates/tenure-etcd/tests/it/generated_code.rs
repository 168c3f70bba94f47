//! The committed gRPC code in `src/proto` is what `tonic-prost-build` makes of
//! the protos in `proto/`, so building tenure needs no protoc. This test
//! regenerates it with a vendored protoc and compares; to update the committed
//! copy after changing the protos or the generator's version, run
//!
//! ```text
//! TENURE_REGENERATE=1 cargo test -p tenure-etcd --test it generated_code
//! ```

use std::path::{Path, PathBuf};

/// The protos tenure uses; their imports come along.
const PROTOS: [&str; 4] = [
    "etcd/api/authpb/auth.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
];

/// The generated files tenure keeps (the rest are options of imported protos).
const KEPT: [&str; 4] = ["authpb.rs", "mvccpb.rs", "etcdserverpb.rs", "v3lockpb.rs"];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(out: &Path) {
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("a vendored protoc for this platform");
    let include = protoc_bin_vendored::include_path().expect("the vendored protoc's includes");
    let proto = crate_dir().join("proto");
    let protos: Vec<PathBuf> = PROTOS.iter().map(|p| proto.join(p)).collect();
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_server(false)
        .out_dir(out)
        .compile_with_config(config, &protos, &[proto, include])
        .expect("generate etcd's gRPC code");
}

#[test]
fn committed_grpc_code_is_what_the_protos_generate() {
    let fresh = tempfile::tempdir().expect("tempdir");
    generate(fresh.path());
    let committed = crate_dir().join("src/proto");
    let regenerate = std::env::var_os("TENURE_REGENERATE").is_some();
    for name in KEPT {
        let want = std::fs::read_to_string(fresh.path().join(name)).expect("generated file");
        if regenerate {
            std::fs::write(committed.join(name), &want).expect("write the committed copy");
            continue;
        }
        let have = std::fs::read_to_string(committed.join(name)).unwrap_or_default();
        assert!(
            have == want,
            "src/proto/{name} differs from what proto/ generates: run \
             TENURE_REGENERATE=1 cargo test -p tenure-etcd --test it generated_code"
        );
    }
}
