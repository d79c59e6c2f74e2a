//! Builds the Open MPI side of the MTL: bindgen over Open MPI 4.1's devel headers (the
//! component, module and request structs the component must match byte for byte) and the C
//! shim (csrc/shim.c) for Open MPI's static inlines and macros.
//!
//! Headers and libraries are found with pkg-config (`ompi.pc` from libopenmpi-dev), else with
//! `mpicc --showme`, else in Debian's default place; `TIGON_OMPI_INCLUDE` (colon-separated)
//! and `TIGON_OMPI_LIBDIR` override.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const MISSING: &str = "Open MPI's development files were not found.\n\
     Install them with `apt-get install -y libopenmpi-dev openmpi-bin pkg-config` \
     (or run `scripts/setup.sh`), or set TIGON_OMPI_INCLUDE and TIGON_OMPI_LIBDIR.";
const DEBIAN: &str = "/usr/lib/x86_64-linux-gnu/openmpi";

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn words(s: &str, prefix: &str) -> Vec<PathBuf> {
    s.split_whitespace()
        .filter_map(|w| w.strip_prefix(prefix))
        .map(PathBuf::from)
        .collect()
}

/// (include dirs, library dir)
fn locate() -> (Vec<PathBuf>, PathBuf) {
    let env_inc = env::var("TIGON_OMPI_INCLUDE").ok();
    let env_lib = env::var("TIGON_OMPI_LIBDIR").ok();
    let mut inc: Vec<PathBuf> = env_inc
        .map(|s| env::split_paths(&s).collect())
        .unwrap_or_default();
    let mut lib = env_lib.map(PathBuf::from);
    if inc.is_empty()
        && let Some(s) = run("pkg-config", &["--cflags-only-I", "ompi"])
    {
        inc = words(&s, "-I");
        if lib.is_none() {
            lib = run("pkg-config", &["--libs-only-L", "ompi"])
                .and_then(|s| words(&s, "-L").into_iter().next());
        }
    }
    if inc.is_empty()
        && let Some(s) = run("mpicc", &["--showme:incdirs"])
    {
        inc = s.split_whitespace().map(PathBuf::from).collect();
        if lib.is_none() {
            lib = run("mpicc", &["--showme:libdirs"])
                .and_then(|s| s.split_whitespace().next().map(PathBuf::from));
        }
    }
    if inc.is_empty() {
        inc = vec![
            Path::new(DEBIAN).join("include"),
            Path::new(DEBIAN).join("include/openmpi"),
        ];
    }
    // The internal headers (ompi/mca/mtl/mtl.h ...) live in <include>/openmpi.
    if !inc.iter().any(|d| d.join("ompi/mca/mtl/mtl.h").exists()) {
        let extra: Vec<PathBuf> = inc
            .iter()
            .map(|d| d.join("openmpi"))
            .filter(|d| d.join("ompi/mca/mtl/mtl.h").exists())
            .collect();
        inc.extend(extra);
    }
    if !inc.iter().any(|d| d.join("ompi/mca/mtl/mtl.h").exists()) {
        panic!(
            "ompi/mca/mtl/mtl.h not found under {:?}.\n{MISSING}",
            inc.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        );
    }
    let lib = lib.unwrap_or_else(|| Path::new(DEBIAN).join("lib"));
    if !lib.join("libmpi.so").exists() {
        panic!("libmpi.so not found in {}.\n{MISSING}", lib.display());
    }
    (inc, lib)
}

fn main() {
    for f in ["csrc/shim.c", "csrc/shim.h", "csrc/wrapper.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    for v in ["TIGON_OMPI_INCLUDE", "TIGON_OMPI_LIBDIR", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let (inc, lib) = locate();

    // The shim: -mcx16 because Open MPI's headers inline 16-byte compare-and-swap (without it
    // the code calls a libatomic helper nothing provides, and crashes at the first call).
    let mut build = cc::Build::new();
    build
        .file("csrc/shim.c")
        .include("csrc")
        .flag("-mcx16")
        .flag("-Wno-unused-parameter")
        .opt_level(2)
        .warnings(true);
    for d in &inc {
        build.include(d);
    }
    build.compile("tigon_mtl_shim");

    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["mpi", "open-rte", "open-pal"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    // Every symbol resolved at link time: an unresolved one would only show up as a crash
    // inside MPI_Init.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-undefined");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-env=TIGON_OMPI_LIBDIR={}", lib.display());
    println!(
        "cargo:rustc-env=TIGON_OMPI_INCLUDE={}",
        env::join_paths(&inc).expect("paths").to_string_lossy()
    );

    let mut b = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_arg("-Icsrc")
        .allowlist_type("mca_mtl_base_component_2_0_0_t|mca_mtl_base_module_t|mca_mtl_request_t")
        .allowlist_type("ompi_status_public_t|mca_base_module_t|tigon_params")
        .allowlist_function("tigon_.*")
        .allowlist_item(
            "OMPI_SUCCESS|OMPI_ERROR|OMPI_ERR_(OUT_OF_RESOURCE|NOT_AVAILABLE|UNREACH|BAD_PARAM|NOT_FOUND)",
        )
        .allowlist_item("MPI_SUCCESS|MPI_ERR_(TRUNCATE|OTHER|INTERN)|MPI_ANY_SOURCE|MPI_ANY_TAG")
        .allowlist_item("MCA_PML_BASE_SEND_.*|MCA_BASE_VERSION_(MAJOR|MINOR|RELEASE)")
        .allowlist_item("OMPI_(MAJOR|MINOR|RELEASE)_VERSION|MCA_BASE_METADATA_PARAM_NONE")
        .allowlist_item("MCA_BASE_MAX_.*_LEN")
        // Open MPI objects the Rust side only passes around.
        .opaque_type("ompi_request_t|ompi_communicator_t|ompi_proc_t|opal_convertor_t")
        .opaque_type("ompi_message_t")
        .derive_default(true)
        .layout_tests(false)
        .wrap_unsafe_ops(true)
        .generate_comments(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for d in &inc {
        b = b.clang_arg(format!("-I{}", d.display()));
    }
    let bindings = b
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over Open MPI's headers failed: {e}\n{MISSING}"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("ompi.rs");
    bindings.write_to_file(out).expect("writing ompi.rs");
}
