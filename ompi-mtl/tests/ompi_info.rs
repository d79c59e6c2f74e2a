//! `ompi_info` lists the component and documents its MCA parameters.

mod common;

use std::process::Command;

fn ompi_info(args: &[&str]) -> String {
    // ompi_info takes the component path only from the environment.
    let out = Command::new("ompi_info")
        .args(args)
        .env("OMPI_MCA_mca_base_component_path", common::component_path())
        .output()
        .expect("running ompi_info (apt-get install openmpi-bin)");
    assert!(
        out.status.success(),
        "ompi_info failed: {}",
        common::text(&out)
    );
    common::text(&out)
}

#[test]
fn ompi_info_lists_the_component() {
    let all = ompi_info(&[]);
    assert!(
        all.lines()
            .any(|l| l.contains("MCA mtl: tigon (MCA v2.1.0, API v2.0.0, Component v0.1.0)")),
        "tigon missing from ompi_info:\n{all}"
    );
}

#[test]
fn ompi_info_documents_the_parameters() {
    let p = ompi_info(&["--param", "mtl", "tigon", "--level", "9"]);
    for name in [
        "mtl_tigon_priority",
        "mtl_tigon_socket",
        "mtl_tigon_eager_limit",
        "mtl_tigon_channel_threshold",
        "mtl_tigon_verbose",
        "mtl_tigon_finalize_timeout_ms",
        "mtl_tigon_nap_after_us",
        "mtl_tigon_spin_after_send_ns",
    ] {
        assert!(p.contains(&format!("\"{name}\"")), "{name} missing:\n{p}");
    }
    assert!(
        p.contains("current value: \"30\""),
        "default priority 30:\n{p}"
    );
    assert!(
        p.contains("tigon agent"),
        "descriptions should say what to do:\n{p}"
    );
}
