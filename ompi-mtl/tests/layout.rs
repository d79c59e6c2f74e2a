//! The Rust view of Open MPI's structs (bindgen) must match the C compiler's byte for byte:
//! a small C program compiled against the same devel headers prints every `sizeof` and
//! `offsetof`, and this test compares them with `size_of` / `offset_of!`.

use mca_mtl_tigon::ffi;
use std::collections::HashMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::process::Command;

/// (C struct, Rust size, Rust alignment, [(field, Rust offset)])
type Layout = (&'static str, usize, usize, Vec<(&'static str, usize)>);

macro_rules! layout {
    ($c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
        ($c, size_of::<$t>(), align_of::<$t>(), vec![$((stringify!($f), offset_of!($t, $f))),*])
    };
}

fn rust_layouts() -> Vec<Layout> {
    vec![
        layout!(
            "mca_base_component_t",
            ffi::mca_base_component_t,
            [
                mca_major_version,
                mca_minor_version,
                mca_release_version,
                mca_project_name,
                mca_project_major_version,
                mca_project_minor_version,
                mca_project_release_version,
                mca_type_name,
                mca_type_major_version,
                mca_type_minor_version,
                mca_type_release_version,
                mca_component_name,
                mca_component_major_version,
                mca_component_minor_version,
                mca_component_release_version,
                mca_open_component,
                mca_close_component,
                mca_query_component,
                mca_register_component_params,
                mca_component_flags,
                reserved,
            ]
        ),
        layout!(
            "mca_base_component_data_t",
            ffi::mca_base_component_data_t,
            [param_field, reserved]
        ),
        layout!(
            "mca_mtl_base_component_2_0_0_t",
            ffi::mca_mtl_base_component_2_0_0_t,
            [mtl_version, mtl_data, mtl_init]
        ),
        layout!(
            "mca_mtl_base_module_t",
            ffi::mca_mtl_base_module_t,
            [
                mtl_max_contextid,
                mtl_max_tag,
                mtl_request_size,
                mtl_flags,
                mtl_add_procs,
                mtl_del_procs,
                mtl_finalize,
                mtl_send,
                mtl_isend,
                mtl_irecv,
                mtl_iprobe,
                mtl_imrecv,
                mtl_improbe,
                mtl_cancel,
                mtl_add_comm,
                mtl_del_comm,
            ]
        ),
        layout!(
            "mca_mtl_request_t",
            ffi::mca_mtl_request_t,
            [ompi_req, completion_callback]
        ),
        layout!(
            "ompi_status_public_t",
            ffi::ompi_status_public_t,
            [MPI_SOURCE, MPI_TAG, MPI_ERROR, _cancelled, _ucount]
        ),
        layout!("mca_base_module_t", ffi::mca_base_module_t, [dummy_value]),
    ]
}

/// Compiles and runs the C side; returns "struct" -> size/align and "struct.field" -> offset.
fn c_layouts(layouts: &[Layout]) -> HashMap<String, usize> {
    let mut src = String::from(
        "#include \"ompi_config.h\"\n#include \"mpi.h\"\n#include \"ompi/mca/mtl/mtl.h\"\n\
         #include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    for (c, _, _, fields) in layouts {
        src += &format!("printf(\"{c} %zu\\n\", sizeof({c}));\n");
        src += &format!("printf(\"{c}@align %zu\\n\", _Alignof({c}));\n");
        for (f, _) in fields {
            src += &format!("printf(\"{c}.{f} %zu\\n\", offsetof({c}, {f}));\n");
        }
    }
    src += "return 0; }\n";
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layout");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let c = dir.join("layout.c");
    let exe = dir.join(format!("layout-{}", std::process::id()));
    std::fs::write(&c, src).expect("write layout.c");
    // mpicc adds Open MPI's include directories; the internal headers live in
    // <include>/openmpi, which build.rs found.
    let mut cmd = Command::new("mpicc");
    cmd.arg("-mcx16");
    for d in env!("TIGON_OMPI_INCLUDE").split(':') {
        cmd.arg(format!("-I{d}"));
    }
    let st = cmd
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .status()
        .expect("running mpicc");
    assert!(st.success(), "compiling {}", c.display());
    let out = Command::new(&exe)
        .output()
        .expect("running the layout program");
    let _ = std::fs::remove_file(&exe);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("key value");
            (k.to_string(), v.parse().expect("number"))
        })
        .collect()
}

#[test]
fn bindgen_layouts_match_the_c_compiler() {
    let rust = rust_layouts();
    let c = c_layouts(&rust);
    let mut checked = 0;
    for (name, size, align, fields) in &rust {
        assert_eq!(c[*name], *size, "sizeof({name})");
        assert_eq!(c[&format!("{name}@align")], *align, "_Alignof({name})");
        for (f, off) in fields {
            assert_eq!(c[&format!("{name}.{f}")], *off, "offsetof({name}, {f})");
            checked += 1;
        }
    }
    assert!(checked >= 50, "only {checked} fields checked");
}

#[test]
fn the_exported_component_names_itself() {
    let p = mca_mtl_tigon::mca_mtl_tigon_component.get();
    // SAFETY: reading our own static, which nothing else uses in this test process.
    let v = unsafe { &(*p).mtl_version };
    let s = |a: &[std::os::raw::c_char]| {
        a.iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect::<String>()
    };
    assert_eq!(s(&v.mca_project_name), "ompi");
    assert_eq!(s(&v.mca_type_name), "mtl");
    assert_eq!(s(&v.mca_component_name), "tigon");
    assert_eq!(
        (
            v.mca_major_version,
            v.mca_minor_version,
            v.mca_release_version
        ),
        (2, 1, 0),
        "MCA base version 2.1.0"
    );
    assert_eq!(
        (
            v.mca_type_major_version,
            v.mca_type_minor_version,
            v.mca_type_release_version
        ),
        (2, 0, 0),
        "MTL framework version 2.0.0"
    );
    assert!(v.mca_query_component.is_some() && v.mca_register_component_params.is_some());
    // The PML allocates `mtl_request_size` bytes at pointer alignment behind its request.
    assert!(align_of::<mca_mtl_tigon::Request>() <= 8);
}
