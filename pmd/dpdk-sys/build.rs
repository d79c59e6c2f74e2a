//! Binds the system DPDK (Debian 12: 22.11) found by pkg-config: bindgen over
//! csrc/wrapper.h, plus csrc/shim.c for DPDK's static-inline fast path.
use std::env;
use std::path::PathBuf;
use std::process::Command;

const MISSING: &str = "DPDK development files not found via pkg-config.\n\
     Install them with `apt-get install -y libdpdk-dev dpdk-dev pkg-config` \
     (or run `scripts/setup.sh`).";

fn main() {
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // Every cflag pkg-config reports (include dirs, `-include rte_config.h`, -march=corei7):
    // the headers do not compile without them.
    let out = Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| panic!("running pkg-config: {e}\n{MISSING}"));
    if !out.status.success() {
        panic!("{}\n{MISSING}", String::from_utf8_lossy(&out.stderr));
    }
    let flags = String::from_utf8_lossy(&out.stdout).to_string();
    let mut clang_args: Vec<String> = Vec::new();
    let mut it = flags.split_whitespace();
    while let Some(f) = it.next() {
        clang_args.push(f.into());
        if f == "-include"
            && let Some(h) = it.next()
        {
            clang_args.push(h.into());
        }
    }
    clang_args.push("-DALLOW_EXPERIMENTAL_API".into());

    // The shim first, so that the linker sees its references before the DPDK libraries.
    let mut build = cc::Build::new();
    build
        .file("csrc/shim.c")
        .include("csrc")
        .opt_level(2)
        .warnings(false);
    for a in &clang_args {
        build.flag(a);
    }
    build.compile("tigon_dpdk_shim");

    // Shared linking: the distro's EAL then dlopen()s the PMDs from its pmds-23.0 directory.
    if let Err(e) = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
    {
        panic!("{e}\n{MISSING}");
    }
    // rte_vdev_init() lives in librte_bus_vdev, which pkg-config's list omits.
    println!("cargo:rustc-link-lib=dylib=rte_bus_vdev");

    let bindings = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_args(&clang_args)
        .allowlist_function("rte_.*|tigon_.*")
        .allowlist_type("rte_.*|tigon_.*")
        .allowlist_var("RTE_.*|TIGON_.*")
        // Packed-and-aligned types in rte_flow.h that Rust cannot represent.
        .opaque_type("rte_l2tpv2_.*")
        .opaque_type("rte_gtp_psc_.*")
        .derive_default(true)
        .layout_tests(false)
        .wrap_unsafe_ops(true)
        .generate_comments(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen over the DPDK headers failed");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings
        .write_to_file(out)
        .expect("writing bindings.rs failed");
}
